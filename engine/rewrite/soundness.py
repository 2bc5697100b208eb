"""Soundness checking for rewrite rules: what `stitch rules check FILE.rules` runs.

For each rule, hypothesis draws *instances* of its left side: a type for every
tensor variable, a value for every attribute variable, an op for every op
variable, then inputs. Both sides become one `ir.Func` returning (left, right);
the checker types it and the reference interpreter runs it. A rule is unsound
if some instance whose left side type-checks and satisfies the rule's
conditions has a right side that does not type-check, has another type, or
computes other values. Hypothesis shrinks the first such instance, and that
small counterexample is what the report shows.

What a variable stands for in an instance (the contract the egglog side also
implements):

- `?x` in tensor position: a parameter of the instance (f32 mostly, also f64;
  ints when every op on the left accepts them; bool where only a bool fits).
  Shapes have rank 0..3 and dims 1..5, drawn from a small pool of extents so
  that variables share dims, with size-1 dims, and often one shared base shape
  so that broadcasting and matmul line up. A variable used twice is one tensor.
- `axes=?ax`, `perm=?p`, `shape=?s`, `keepdims=?k`, `dtype=?d`, `axis=?a`: a
  value valid for the operand at the variable's first use on the left, in the
  normal form the e-graph holds (axes ascending, axis non-negative). A slice's
  attributes are drawn together: ascending axes and, per axis,
  0 <= start < end <= dim and a step of 1-3.
- gather's indices `?i`: an i32 or i64 parameter whose values are in range for
  every gather of the left side (negative ones too); a right side that then
  reads out of range is a counterexample.
- `?f(...)`: an op of `ops.OPS` with that arity and at least the attributes
  given, narrowed by op-class conditions. Attributes the pattern does not
  mention are drawn once, at its first use on the left, and travel with it.
- Literals are `Const`s (their dtype comes from the other operands); the
  placements `global shared local inline` are the identity and are stripped.
- Op-class predicates on a *tensor* variable (`elementwise(?p)`) hold for every
  instance: the variable stays a parameter, whose value is arbitrary, so a rule
  must be sound whichever op produced it. Other conditions are evaluated on the
  drawn types and values; the drawing aims at the common ones (scalar,
  same_shape, rank/dim/shape/dtype comparisons with literals) directly.

Inputs and domain: floats are drawn in [-3, 3], ints in [-8, 8]. An input for
which either side yields nan or inf anywhere (in its result or any intermediate
value) is outside that side's domain; the instance then draws positive inputs
([1/16, 3], [1, 8]) once more, and is skipped if they fail too. An integer
instance whose arithmetic overflows is skipped as well.

Tolerance. Integer and bool results must be equal. Float results agree when,
elementwise,

    |left - right| <= 64 * eps * (max(|left|, |right|) + n * M)

where eps is the machine epsilon of the result dtype, M the largest finite
magnitude of any value in the instance (inputs, literals and every intermediate
of both sides), and n the number of terms a side's reductions and matmuls fold
into one element (the product of their extents; 1 without any). Why: each
rounding is off by at most eps relative to the value it rounds, every value is
at most M, and a sum of n terms each at most M accumulates at most about
log2(n) * eps * n * M, so two evaluations of the same real function stay within
a small multiple of eps * (|result| + n * M) of each other, whatever the order
of operations. 64 covers the chains of a few ops in a rule and the slightly
amplified errors of exp, log and rsqrt on the drawn inputs. A rule that is
wrong differs by O(M): far more.
"""

from __future__ import annotations

import dataclasses
import operator
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from math import prod

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, assume, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.errors import Unsatisfiable

from ..ir.check import check_func
from ..ir.errors import StitchError
from ..ir.floats import edge_values
from ..ir.graph import Graph
from ..ir.interp import apply_op, evaluate, index_bounds, np_dtype
from ..ir.ops import ANY, FLOAT, INDEX_DTYPES, OPS, REDUCE, OpSpec
from ..ir.printer import print_attr, print_expr
from ..ir.program import (
    FLOAT_DTYPES,
    INT_DTYPES,
    Assign,
    Attr,
    Call,
    Const,
    DTypeName,
    Expr,
    Func,
    Param,
    TensorType,
    Var,
)
from .placement import PLACEMENT_NAMES
from .rules import CFun, Cond, Pattern, PCall, PLit, PVar, Rule, RuleFile, op_variable_fits

ULPS = 64
TOLERANCE = f"|left - right| <= {ULPS}*eps*(max(|left|, |right|) + n*M)"
MAX_RANK = 3
MAX_DIM = 5

_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_OP_CLASSES = {
    "elementwise": lambda s: s.elementwise,
    "unary": lambda s: s.group == "unary",
    "binary": lambda s: s.group in ("binary", "compare"),
    "reduction": lambda s: s.group == "reduce",
    "matmul": lambda s: s.group == "matmul",
    "layout": lambda s: s.group == "layout",
    "movement": lambda s: s.group == "movement",
    "injective": lambda s: s.injective,
}
_ATTR_KINDS = {name: a.kind for spec in OPS.values() for name, a in spec.attrs.items()}
_CAST_TARGETS = ("f32", "f64", "i32", "i64", "bool", "f16")


@dataclass(frozen=True)
class Verdict:
    rule: Rule
    # "ok": holds (an [unsafe-fp] rule: on ordinary values); "edge": holds on ordinary values but not
    # at edge values, and is not tagged [unsafe-fp]; "unsound"; "skipped"
    status: str
    detail: str = ""  # the counterexample, or why the rule was skipped
    instances: int = 0  # instances tested (for "ok")
    edge: str = ""  # a counterexample at edge values, if one was found
    edge_instances: int = 0

    @property
    def failed(self) -> bool:
        return self.status in ("unsound", "edge")

    def render(self) -> str:
        where = f"{self.rule.pos.file}:{self.rule.pos.line}"
        counts = f"{self.instances} instances, {self.edge_instances} at edge values"
        if self.status == "ok" and self.rule.unsafe_fp:
            if not self.edge:
                return (f"{where}: {self.rule.name}: ok ({counts}); tagged unsafe-fp, but it held at every "
                        "edge value tried")
            return f"{where}: {self.rule.name}: ok away from edge values, as its unsafe-fp tag says ({counts})\n" \
                   f"{self.edge}"
        if self.status == "ok":
            return f"{where}: {self.rule.name}: ok ({counts})"
        if self.status == "edge":
            return (f"{where}: {self.rule.name}: HOLDS ONLY AWAY FROM EDGE VALUES ({self.instances} ordinary "
                    f"instances passed): tag it [unsafe-fp] or narrow its conditions\n{self.edge}")
        if self.status == "skipped":
            return f"{where}: {self.rule.name}: skipped: {self.detail}"
        return f"{where}: {self.rule.name}: UNSOUND\n{self.detail}"


def check_rule_file(rf: RuleFile, max_examples: int = 100) -> list[Verdict]:
    # Hypothesis caches what it learns under ./.hypothesis; a rule check should
    # not leave that in the user's directory.
    with tempfile.TemporaryDirectory(prefix="stitch-hypothesis-") as scratch:
        set_hypothesis_home_dir(scratch)
        try:
            return [check_rule(r, max_examples) for r in rf.rules]
        finally:
            set_hypothesis_home_dir(None)


def report(rf: RuleFile, verdicts: list[Verdict], max_examples: int) -> str:
    """The text `stitch rules check` prints: a header, one entry per rule, a summary."""
    counts = Counter(v.status for v in verdicts)
    lines = [f"checking {rf.filename}: {len(verdicts)} rule(s), up to {max_examples} instances each on ordinary "
             "values and as many on edge values",
             f"  float tolerance: {TOLERANCE}",
             "    (eps: machine epsilon of the result dtype; n: terms summed per element; M: largest magnitude)",
             f"  edge values: {EDGE_VALUES}"]
    lines += [v.render() for v in verdicts]
    lines.append(f"{counts['unsound']} unsound, {counts['edge']} only away from edge values, {counts['ok']} ok, "
                 f"{counts['skipped']} skipped")
    return "\n".join(lines)


class _Counterexample(Exception):
    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def check_rule(rule: Rule, max_examples: int = 100) -> Verdict:
    """Search for a counterexample to `rule` on ordinary values, then at edge values; the verdict
    carries the shrunk one."""
    facts = _Facts(rule)
    if facts.impossible:
        return Verdict(rule, "skipped", facts.impossible)
    found, tested, rejected = _search(facts, max_examples, edge=False)
    if found:
        return Verdict(rule, "unsound", found)
    if not tested:
        reason = rejected.most_common(1)[0][0] if rejected else "no instance satisfies the conditions"
        return Verdict(rule, "skipped", reason)
    edge, edge_tested, _ = _search(facts, max_examples, edge=True)
    status = "edge" if edge and not rule.unsafe_fp else "ok"
    return Verdict(rule, status, instances=tested, edge=edge, edge_instances=edge_tested)


def _search(facts: "_Facts", max_examples: int, edge: bool) -> tuple[str, int, Counter]:
    """(the shrunk counterexample or '', instances tested, why instances were rejected)."""
    rejected: Counter[str] = Counter()
    tested = [0]

    def reject(reason: str) -> None:
        rejected[reason] += 1
        assume(False)

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def probe(data):
        _probe(data.draw, facts, reject, edge)
        tested[0] += 1

    try:
        probe()
    except _Counterexample as cx:
        return cx.text, tested[0], rejected
    except Unsatisfiable:
        pass
    return "", tested[0], rejected


# ---------------------------------------------------------------------------
# What a rule's text says about its instances, worked out once per rule.


@dataclass
class _ShapeClass:
    """Tensor variables that must share one shape, and what the conditions pin."""

    names: list[str]
    ranks: list[int]
    fixed: tuple[int, ...] | None = None
    dims: dict[int, int] = field(default_factory=dict)


class _Facts:
    def __init__(self, rule: Rule):
        self.rule = rule
        self.impossible = ""
        self.tensors: list[str] = []  # in order of first use on the left
        self.bool_vars: set[str] = set()  # where(?c, ...): only a bool fits
        self.index_vars: set[str] = set()  # gather(?x, ?i, ...): only i32 or i64 fits
        self.op_vars: dict[str, PCall] = {}
        self.lhs_specs: list[OpSpec] = []
        self.rank_tests: dict[str, list[tuple[str, int]]] = {}  # what the left side itself implies
        self._walk(rule.lhs)
        self.dtypes: dict[str, str] = {}
        self.floats: set[str] = set()
        self.attr_fixed: dict[str, object] = {}
        self.attr_lens: dict[str, list[tuple[str, int]]] = {}
        # literal(?c) and value(?c) comparisons: ?c is a scalar input whose values meet the tests
        self.literals: dict[str, list[tuple[str, float]]] = {}
        self.op_choices = {name: self._op_candidates(name, p) for name, p in self.op_vars.items()}
        maybe = self.lhs_specs + [s for choices in self.op_choices.values() for s in choices]
        self.has_matmul = any(s.name == "matmul" for s in maybe)
        self.has_cast = any(s.name == "cast" for s in maybe)  # only then can dtypes differ
        for name, choices in self.op_choices.items():
            if not choices:
                self.impossible = f"no op fits {name} and its conditions"
        self.classes = self._shape_classes()

    def _walk(self, p: Pattern, parent: PCall | None = None, index: int = 0) -> None:
        if isinstance(p, PVar):
            if p.name not in self.tensors:
                self.tensors.append(p.name)
            if parent is not None and parent.op == "where" and index == 0:
                self.bool_vars.add(p.name)
            if parent is not None and parent.op == "gather" and index == 1:
                self.index_vars.add(p.name)
            if parent is not None:
                self.rank_tests.setdefault(p.name, []).extend(_implied_ranks(parent, index))
            return
        if isinstance(p, PLit):
            return
        if p.op_is_var:
            self.op_vars.setdefault(p.op, p)
        elif p.op in OPS:
            self.lhs_specs.append(OPS[p.op])
        for k, a in enumerate(p.args):
            self._walk(a, p if p.op not in PLACEMENT_NAMES else parent, k if p.op not in PLACEMENT_NAMES else index)

    def _op_candidates(self, name: str, p: PCall) -> list[OpSpec]:
        tests = [_OP_CLASSES[c.name] for c in self.rule.conds
                 if c.name in _OP_CLASSES and c.args[0].args[0] == name]
        given_attrs = {a.name for a in p.attrs}
        return [s for s in OPS.values()
                if op_variable_fits(s, len(p.args)) and given_attrs <= set(s.attrs) and all(t(s) for t in tests)]

    def _shape_classes(self) -> list[_ShapeClass]:
        parent = {v: v for v in self.tensors}

        def root(v: str) -> str:
            while parent[v] != v:
                v = parent[v]
            return v

        rank_tests: dict[str, list] = {v: list(self.rank_tests.get(v, ())) for v in self.tensors}
        fixed: dict[str, tuple] = {}
        dims: dict[str, dict[int, int]] = {v: {} for v in self.tensors}
        for c in self.rule.conds:
            if c.name in ("scalar", "literal"):
                rank_tests[c.args[0].args[0]].append(("==", 0))
                if c.name == "literal":
                    self.literals.setdefault(c.args[0].args[0], [])
            elif c.name == "same_shape":
                parent[root(c.args[0].args[0])] = root(c.args[1].args[0])
            elif c.name == "float":
                self.floats.add(c.args[0].args[0])
            elif c.name in _CMP:
                self._comparison(c, parent, root, rank_tests, fixed, dims)
        groups: dict[str, list[str]] = {}
        for v in self.tensors:
            groups.setdefault(root(v), []).append(v)
        classes = []
        for names in groups.values():
            tests = [t for v in names for t in rank_tests[v]]
            pinned = {k: n for v in names for k, n in dims[v].items()}
            ranks = [r for r in range(MAX_RANK + 1) if _ranks_ok(r, tests, pinned)]
            ranks = ranks or [r for r in range(MAX_RANK + 1, MAX_RANK + 4) if _ranks_ok(r, tests, pinned)]
            shape = next((fixed[v] for v in names if v in fixed), None)
            if not ranks and shape is None:
                self.impossible = f"no rank satisfies the conditions on {', '.join(names)}"
            classes.append(_ShapeClass(names, ranks, shape, pinned))
        return classes

    def _comparison(self, c: Cond, parent, root, rank_tests, fixed, dims) -> None:
        left, right = c.args
        op = c.name
        if left.name == "lit" and right.name != "lit":
            left, right, op = right, left, _FLIP[op]
        if right.name != "lit":
            if op == "==" and left.name == right.name == "shape":
                parent[root(left.args[0].args[0])] = root(right.args[0].args[0])
            return
        value = _literal(right)
        if left.name == "value":
            rank_tests[left.args[0].args[0]].append(("==", 0))
            self.literals.setdefault(left.args[0].args[0], []).append((op, value))
            return
        if left.name == "var":  # an attribute variable
            if op == "==":
                self.attr_fixed[left.args[0]] = value
            return
        subject = left.args[0].args[0]
        if left.name == "len" and isinstance(value, int):
            self.attr_lens.setdefault(subject, []).append((op, value))
        elif left.name == "rank" and isinstance(value, int) and not isinstance(value, bool):
            rank_tests[subject].append((op, value))
        elif left.name == "dtype" and op == "==" and isinstance(value, DTypeName):
            self.dtypes[subject] = value.name
        elif left.name == "shape" and op == "==" and isinstance(value, tuple):
            fixed[subject] = value
        elif left.name == "dim" and op == "==" and isinstance(value, int) and value >= 1:
            dims[subject][left.args[1].args[0]] = value


def _implied_ranks(call: PCall, index: int) -> list[tuple[str, int]]:
    """What a call with literal attributes says about the rank of its operand at `index`."""
    perm, axes, axis = call.attr("perm"), call.attr("axes"), call.attr("axis")
    if call.op == "transpose" and perm is not None and isinstance(perm.value, tuple):
        return [("==", len(perm.value))]
    if call.op in REDUCE + ("slice",) and axes is not None and isinstance(axes.value, tuple) and axes.value:
        return [(">", max(axes.value))]
    if call.op == "concat" or (call.op == "gather" and index == 0):
        return [(">", axis.value if axis is not None and isinstance(axis.value, int) else 0)]
    if call.op == "matmul":
        return [(">=", 1)]
    return []


def _ranks_ok(rank: int, tests, pinned: dict[int, int]) -> bool:
    return all(_CMP[op](rank, v) for op, v in tests) and all(-rank <= k < rank for k in pinned)


# ---------------------------------------------------------------------------
# One instance: draw it, type it, run it, compare.


@dataclass
class _Instance:
    types: dict[str, TensorType] = field(default_factory=dict)  # tensor variable -> type
    attrs: dict[str, object] = field(default_factory=dict)  # attribute variable -> value
    ops: dict[str, tuple[str, tuple[Attr, ...]]] = field(default_factory=dict)  # op variable -> op, its other attrs

    def params(self) -> tuple[Param, ...]:
        return tuple(Param(v[1:], t) for v, t in self.types.items())

    def describe(self) -> list[str]:
        out = [f"    {v}: {t}" for v, t in self.types.items()]
        out += [f"    {v} = {_show_attr(x)}" for v, x in self.attrs.items()]
        for v, (op, attrs) in self.ops.items():
            shown = f"{op}({', '.join(print_attr(a) for a in attrs)})" if attrs else op
            out.append(f"    {v} = {shown}")
        return out


def _probe(draw, facts: _Facts, reject, edge: bool = False) -> None:
    """Draw one instance of the rule and test it; raise _Counterexample if it fails. With `edge`,
    inputs mix edge values in (see EDGE_VALUES) and every result counts: NaN, inf and wrapped
    integers too."""
    rule = facts.rule
    inst, lhs, left_type = _Drawer(draw, facts, reject).instance()
    params = inst.params()
    rhs = _build(rule.rhs, inst)
    try:
        right_type = infer_type(params, rhs)
    except StitchError as err:
        raise _Counterexample(_explain(inst, lhs, rhs, f"the right side does not type-check: {err.message}",
                                       left_type=left_type))
    if right_type != left_type:
        raise _Counterexample(_explain(inst, lhs, rhs, "the two sides have different types",
                                       left_type=left_type, right_type=right_type))
    graph = check_func(Func("instance", params, (left_type, right_type), (), (lhs, rhs)))
    everything = dataclasses.replace(graph, outputs=[n.id for n in graph.nodes])
    # gather's indices: in range for the left side (what the e-graph matched); the right side must cope.
    left_graph = check_func(Func("left", params, (left_type,), (), (lhs,)))
    bounds = index_bounds(left_graph)
    # Inputs anywhere in [-3, 3] first; if a side leaves its domain, positive ones. At edge values
    # every result counts, NaN and wrapped integers too.
    for positive in (False,) if edge else (False, True):
        inputs = _draw_inputs(draw, params, positive, bounds, edge, facts.literals)
        try:
            values = evaluate(everything, inputs)
        except StitchError as err:  # an index out of range
            try:
                evaluate(left_graph, inputs)
            except StitchError:
                reject("the left side reads out of range")
            raise _Counterexample(_explain(inst, lhs, rhs, f"the right side fails: {err.message}",
                                           left_type, right_type, inputs))
        if edge or all(np.isfinite(v).all() for v in values if v.dtype.kind == "f"):
            break
    else:
        reject("the inputs drawn were outside a side's domain (nan or inf)")
    if not edge and _overflows(graph, values):
        reject("the integer arithmetic overflowed")
    mismatch = _compare(graph, values, edge)
    if mismatch:
        left, right = values[graph.outputs[0]], values[graph.outputs[1]]
        raise _Counterexample(_explain(inst, lhs, rhs, mismatch, left_type, right_type, inputs, left, right))


class _Drawer:
    def __init__(self, draw, facts: _Facts, reject):
        self.draw = draw
        self.facts = facts
        self.reject = reject
        self.inst = _Instance()
        self.pool: list[int] = []
        self.drawn_ops: set[str] = set()  # op variables whose other attributes are drawn

    def instance(self) -> tuple[_Instance, Expr, TensorType]:
        """An instance whose left side type-checks and meets the conditions; that side and its type."""
        facts, inst = self.facts, self.inst
        for name, choices in facts.op_choices.items():
            inst.ops[name] = (self.pick(choices).name, ())
        dtypes = self.dtypes()
        self.pool = [1] + self.draw(st.lists(st.integers(2, MAX_DIM), min_size=1, max_size=2))
        shapes = self.shapes()
        for v in facts.tensors:
            inst.types[v] = TensorType(dtypes[v], shapes[v])
        lhs = self.build_left(facts.rule.lhs)
        try:
            left_type = infer_type(inst.params(), lhs)
        except StitchError:
            self.reject("the left side does not type-check")
        if not all(_holds(c, inst) for c in facts.rule.conds):
            self.reject("no instance satisfies the conditions")
        return inst, lhs, left_type

    def dtypes(self) -> dict[str, str]:
        specs = self.facts.lhs_specs + [OPS[op] for op, _ in self.inst.ops.values()]
        choices = ["f32", "f64"]
        if all(s.dtypes != FLOAT for s in specs):
            choices += ["i32", "i64"]
        if all(s.dtypes == ANY for s in specs):
            choices.append("bool")
        common = self.pick(choices)
        out = {}
        for v in self.facts.tensors:
            if v in self.facts.dtypes:
                dt = self.facts.dtypes[v]
            elif v in self.facts.bool_vars:
                dt = "bool"
            elif v in self.facts.index_vars:
                dt = self.pick(INDEX_DTYPES)
            elif self.facts.has_cast and self.draw(st.integers(0, 4)) == 4:  # now and then, a dtype of its own
                dt = self.pick(_CAST_TARGETS)
            else:
                dt = common
            if v in self.facts.floats and dt not in FLOAT_DTYPES:
                dt = "f32"
            out[v] = dt
        return out

    # Dynamic choices go through integer draws: hypothesis caches the strategies
    # for those, not for sampled_from over a fresh list, which is slow to build.
    def pick(self, items):
        items = list(items)
        return items[self.draw(st.integers(0, len(items) - 1))]

    def shuffled(self, items) -> list:
        """A permutation of `items`; shrinks towards their order."""
        rest, out = list(items), []
        while rest:
            out.append(rest.pop(self.draw(st.integers(0, len(rest) - 1))))
        return out

    def dim(self) -> int:
        return self.pick(self.pool)

    def fresh_shape(self, rank: int) -> tuple[int, ...]:
        return tuple(self.dim() for _ in range(rank))

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Mostly one base shape, or a part of it that broadcasts to it, or a shape of its
        own; for matmul, also one whose rows continue the previous shape's columns."""
        base = self.fresh_shape(self.draw(st.integers(0, MAX_RANK)))
        previous = base
        out = {}
        for c in self.facts.classes:
            if c.fixed is not None:
                shape = c.fixed
            else:
                mode = self.draw(st.integers(0, 5 if self.facts.has_matmul else 3))
                if mode <= 1:
                    shape = base
                elif mode == 2:
                    part = base[len(base) - self.draw(st.integers(0, len(base))):]
                    shape = tuple(1 if self.draw(st.booleans()) else d for d in part)
                elif mode == 3 or not previous:
                    shape = self.fresh_shape(self.draw(st.integers(0, MAX_RANK)))
                else:
                    shape = previous[:-2] + (previous[-1], self.dim())
                if len(shape) not in c.ranks:  # keep the trailing dims, which broadcasting aligns
                    rank = self.pick(c.ranks)
                    shape = self.fresh_shape(rank - len(shape)) + shape[max(len(shape) - rank, 0):] if rank else ()
                shape = list(shape)
                for k, n in c.dims.items():
                    shape[k] = n
                shape = tuple(shape)
            previous = shape
            for v in c.names:
                out[v] = shape
        return out

    def build_left(self, p: Pattern) -> Expr:
        """Like _build, drawing attribute and op-variable values at their first use."""
        if not isinstance(p, PCall):
            return _build(p, self.inst)
        if p.op in PLACEMENT_NAMES:
            return self.build_left(p.args[0])
        args = tuple(self.build_left(a) for a in p.args)
        op = self.inst.ops[p.op][0] if p.op_is_var else p.op
        unbound_attrs = [a for a in p.attrs if isinstance(a.value, PVar) and a.value.name not in self.inst.attrs]
        first_use = p.op_is_var and p.op not in self.drawn_ops
        if unbound_attrs or first_use:
            operand = self.operand_type(args[0])
            drawn = self.slice_attrs(p, operand) if op == "slice" else {}
            for a in unbound_attrs:
                value = drawn[a.name] if op == "slice" else self.attr_value(a.name, op, operand, a.value.name)
                self.inst.attrs[a.value.name] = value
            if first_use:
                given_attrs = {a.name for a in p.attrs}
                hidden = tuple(Attr(n, drawn[n] if op == "slice" else self.attr_value(n, op, operand))
                               for n in OPS[op].attrs if n not in given_attrs)
                self.inst.ops[p.op] = (op, hidden)
                self.drawn_ops.add(p.op)
        return _call(p, args, self.inst)

    def operand_type(self, e: Expr) -> TensorType:
        try:
            return infer_type(self.inst.params(), e)
        except StitchError:
            self.reject("the left side does not type-check")

    def slice_attrs(self, p: PCall, t: TensorType) -> dict[str, tuple[int, ...]]:
        """All four attributes of a slice of `t` in normal form, keeping the ones the pattern fixes."""
        known = {}
        for a in p.attrs:
            value = a.value
            if isinstance(value, PVar):
                value = self.inst.attrs.get(value.name, self.facts.attr_fixed.get(value.name))
            if value is not None:
                known[a.name] = value
        if "axes" in known:
            axes = tuple(known["axes"])
        else:
            given = [len(v) for v in known.values() if isinstance(v, tuple)]
            var = p.attr("axes").value.name if p.attr("axes") is not None else ""
            lens = [n for n in range(t.rank + 1) if all(_CMP[c](n, v) for c, v in self.facts.attr_lens.get(var, ()))]
            lens = [n for n in lens if not given or n == given[0]]
            if not lens:
                self.reject("no instance satisfies the conditions")
            axes = tuple(sorted(self.shuffled(range(t.rank))[: self.pick(lens)]))
        if any(not 0 <= a < t.rank for a in axes):
            self.reject("the left side does not type-check")
        out: dict[str, list[int]] = {"starts": [], "ends": [], "steps": []}
        for k, a in enumerate(axes):
            dim = t.shape[a]
            start = known["starts"][k] if "starts" in known else self.draw(st.integers(0, dim - 1))
            end = known["ends"][k] if "ends" in known else self.draw(st.integers(min(start + 1, dim), dim))
            step = known["steps"][k] if "steps" in known else self.draw(st.integers(1, 3))
            out["starts"].append(start)
            out["ends"].append(end)
            out["steps"].append(step)
        return {"axes": axes, **{k: tuple(v) for k, v in out.items()}}

    def attr_value(self, name: str, op: str, t: TensorType, var: str = ""):
        if var in self.facts.attr_fixed:
            return self.facts.attr_fixed[var]
        kind = _ATTR_KINDS[name]
        if kind == "int":  # an axis, non-negative as the e-graph holds it
            if not t.rank:
                self.reject("the left side does not type-check")
            return self.draw(st.integers(0, t.rank - 1))
        if kind == "axes":
            lens = [n for n in range(t.rank + 1) if all(_CMP[c](n, v) for c, v in self.facts.attr_lens.get(var, ()))]
            if not lens:
                self.reject("no instance satisfies the conditions")
            n = self.pick(lens)
            return tuple(sorted(self.shuffled(range(t.rank))[:n]))
        if kind == "bool":
            return self.draw(st.booleans())
        if kind == "perm":
            return tuple(self.shuffled(range(t.rank)))
        if kind == "dtype":
            return DTypeName(self.pick(_CAST_TARGETS))
        if op == "broadcast_to":
            lead = self.draw(st.integers(0, max(MAX_RANK - t.rank, 0)))
            return self.fresh_shape(lead) + tuple(self.dim() if d == 1 else d for d in t.shape)
        return self.factorize(t.size)

    def factorize(self, size: int) -> tuple[int, ...]:
        """A shape with `size` elements, for reshape."""
        rank = self.draw(st.integers(0 if size == 1 else 1, MAX_RANK))
        dims = []
        for _ in range(rank - 1):
            d = self.pick([q for q in range(1, size + 1) if size % q == 0])
            dims.append(d)
            size //= d
        return tuple(dims + [size]) if rank else ()


def _build(p: Pattern, inst: _Instance) -> Expr:
    """The instance's expression for a pattern whose variables are all bound."""
    if isinstance(p, PVar):
        return Var(p.name[1:])
    if isinstance(p, PLit):
        return Const(p.value)
    if p.op in PLACEMENT_NAMES:
        return _build(p.args[0], inst)
    return _call(p, tuple(_build(a, inst) for a in p.args), inst)


def _call(p: PCall, args: tuple[Expr, ...], inst: _Instance) -> Call:
    op, hidden = inst.ops[p.op] if p.op_is_var else (p.op, ())
    attrs = [Attr(a.name, inst.attrs[a.value.name] if isinstance(a.value, PVar) else a.value) for a in p.attrs]
    order = list(OPS[op].attrs)
    return Call(op, args, tuple(sorted(attrs + list(hidden), key=lambda a: order.index(a.name))))


def infer_type(params: tuple[Param, ...], e: Expr) -> TensorType:
    """The type the checker gives `e` over `params`; raises StitchError if `e` does not check."""
    if isinstance(e, Var):
        for p in params:
            if p.name == e.name:
                return p.type
    # "?" keeps the name apart from the parameters, which are rule variables without it.
    graph = check_func(Func("infer", params, (), (Assign("?value", e),), ()))
    return graph.nodes[-1].type  # the node `e` added last (a Var added none, handled above)


def _holds(c: Cond, inst: _Instance) -> bool:
    if c.name == "input":
        return True  # every tensor variable of an instance is drawn as an input of the program
    if c.name in _OP_CLASSES:
        # On an op variable the drawing already chose an op of the class; on a
        # tensor variable it holds for every instance (see the module docstring).
        return True
    if c.name == "literal" or any(a.name == "value" for a in c.args):
        return True  # the variable is a scalar input drawn with values that meet the tests
    names = [a.args[0] for a in c.args if a.name == "var"]
    if c.name == "scalar":
        return inst.types[names[0]].rank == 0
    if c.name == "float":
        return inst.types[names[0]].dtype in FLOAT_DTYPES
    if c.name == "same_shape":
        return inst.types[names[0]].shape == inst.types[names[1]].shape
    left, right = (_term(t, inst) for t in c.args)
    if left is None or right is None:
        return False
    try:
        return bool(_CMP[c.name](left, right))
    except TypeError:  # e.g. a shape ordered against a number
        return False


def _literal(t: CFun):
    # The rule grammar reads `true` and `false` in a condition as names (DTypeName).
    v = t.args[0]
    return v.name == "true" if isinstance(v, DTypeName) and v.name in ("true", "false") else v


def _term(t: CFun, inst: _Instance):
    if t.name == "lit":
        return _literal(t)
    if t.name == "var":
        return inst.attrs[t.args[0]]
    subject = t.args[0].args[0]
    if t.name == "len":
        value = inst.attrs[subject]
        return len(value) if isinstance(value, tuple) else None
    typ = inst.types[subject]
    if t.name == "dim":
        k = t.args[1].args[0]
        return typ.shape[k] if -typ.rank <= k < typ.rank else None
    # A variable is a parameter of the instance; a parameter's iteration space is its shape.
    return {"rank": typ.rank, "size": typ.size, "dtype": DTypeName(typ.dtype), "shape": typ.shape,
            "space": typ.shape}[t.name]


EDGE_VALUES = ("0, -0.0, 1, -1, +-inf, nan, +-max, +-max/2, +-sqrt(max)*2, +-(log(max) + 1), +-100, "
               "+-tiny (smallest normal), +-smallest subnormal of the float dtype; 0, 1, -1, min, max, min + 1 of "
               "the integer dtype; mixed with ordinary values")


def _draw_inputs(draw, params: tuple[Param, ...], positive: bool, bounds: dict[str, int],
                 edge: bool = False, literals: dict[str, list] | None = None) -> dict[str, np.ndarray]:
    out = {}
    literals = literals or {}
    for p in params:
        dt = p.type.dtype
        if f"?{p.name}" in literals:
            value = draw(_literal_values(dt, literals[f"?{p.name}"], positive, edge))
            out[p.name] = np.array(value, dtype=np_dtype(dt))
            continue
        if p.name in bounds:  # gather's indices, negative ones too
            elements = st.integers(-bounds[p.name], bounds[p.name] - 1)
        elif dt in FLOAT_DTYPES:
            width = {"f16": 16, "f32": 32, "f64": 64}[dt]
            elements = st.floats(1 / 16 if positive else -3.0, 3.0, width=width, allow_subnormal=False)
        elif dt == "bool":
            elements = st.booleans()
        else:
            elements = st.integers(1 if positive else -8, 8)
        if edge and dt != "bool" and p.name not in bounds:
            elements = st.one_of(st.sampled_from(edge_values(dt)), elements)
        # A flat list is much cheaper to draw than hypothesis.extra.numpy.arrays, and shrinks as well.
        flat = draw(st.lists(elements, min_size=p.type.size, max_size=p.type.size))
        out[p.name] = np.array(flat, dtype=np_dtype(dt)).reshape(p.type.shape)
    return out


def _literal_values(dt: str, tests: list[tuple[str, float]], positive: bool, edge: bool):
    """Values of a literal that meet its value() tests: ordinary ones in the inputs' range where the
    tests allow, else in the tests' own range; with `edge`, the finite edge values that meet them
    too. Never -0.0, nan or inf, which no literal of the e-graph holds (egraph.const_term)."""
    def ok(v) -> bool:
        return bool(np.isfinite(v)) and not (v == 0 and np.signbit(v)) and all(_CMP[op](v, n) for op, n in tests)

    lo, hi = (1 / 16 if positive else -3.0), 3.0
    floor = max((n for op, n in tests if op in (">", ">=", "==")), default=-np.inf)
    ceiling = min((n for op, n in tests if op in ("<", "<=", "==")), default=np.inf)
    if max(lo, floor) > min(hi, ceiling):  # the tests leave the ordinary range: draw in theirs
        lo, hi = -np.inf, np.inf
    lo, hi = max(lo, floor), min(hi, ceiling)
    if dt in FLOAT_DTYPES:
        width = {"f16": 16, "f32": 32, "f64": 64}[dt]
        t = np_dtype(dt).type
        big = np.finfo(t).max
        low, high = t(max(lo, -big)), t(min(hi, big))  # the bounds in the dtype, inside the range
        low = low if low >= lo else np.nextafter(low, t(np.inf))
        high = high if high <= hi else np.nextafter(high, t(-np.inf))
        elements = st.floats(float(low), float(high), width=width, allow_subnormal=False)
    else:
        info = np.iinfo(np_dtype(dt))
        elements = st.integers(int(max(np.ceil(lo), info.min)), int(min(np.floor(hi), info.max)))
    if edge:
        extremes = [v for v in edge_values(dt) if ok(v)]
        if extremes:
            elements = st.one_of(st.sampled_from(extremes), elements)
    return elements.filter(ok)


def _overflows(graph: Graph, values: list[np.ndarray]) -> bool:
    """Did an integer op wrap around? Recompute each one in float64 from its operands."""
    for n in graph.nodes:
        if n.type.dtype not in INT_DTYPES or n.op in ("param", "const", "cast") or OPS[n.op].group in ("layout",
                                                                                                      "movement"):
            continue
        wide = dataclasses.replace(n, type=TensorType("f64", n.type.shape))
        args = [v if v.dtype == np.bool_ else v.astype(np.float64) for v in (values[i] for i in n.inputs)]
        with np.errstate(all="ignore"):
            if not np.array_equal(apply_op(wide, args), values[n.id].astype(np.float64)):
                return True
    return False


def _compare(graph: Graph, values: list[np.ndarray], edge: bool = False) -> str:
    """'' if the two results agree (see the module docstring), else how they differ."""
    left, right = values[graph.outputs[0]], values[graph.outputs[1]]
    dtype = graph.nodes[graph.outputs[0]].type.dtype
    if dtype not in FLOAT_DTYPES:
        bad = left != right
        if not np.any(bad):
            return ""
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        return f"they differ at index {list(at)}: {left[at].item()!r} vs {right[at].item()!r}"
    eps = float(np.finfo(np_dtype(dtype)).eps)
    magnitude = max((float(np.max(np.abs(v[np.isfinite(v)]), initial=0.0))
                     for v in values if v.dtype != np.bool_ and v.size), default=0.0)
    terms = _terms_per_element(graph)
    l64, r64 = left.astype(np.float64), right.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # an infinite tolerance at the edge of the range is fine
        tol = ULPS * eps * (np.maximum(np.abs(l64), np.abs(r64)) + terms * magnitude)
        bad = np.abs(l64 - r64) > tol
        if edge:
            bad = _edge_mismatches(l64, r64, tol, float(np.finfo(np_dtype(dtype)).max), eps)
    if not np.any(bad):
        return ""
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"they differ at index {list(at)}: {l64[at].item()!r} vs {r64[at].item()!r} "
            f"(by {abs(l64[at] - r64[at]):.3g}; "
            f"tolerance {tol[at]:.3g} with eps={eps:.3g}, n={terms}, M={magnitude:.3g})")


def _edge_mismatches(left: np.ndarray, right: np.ndarray, tol: np.ndarray, big: float, eps: float) -> np.ndarray:
    """Where two results disagree when NaN, inf and signed zeros count: NaN only against NaN; an
    infinity only against one of its sign or a finite value rounding could have carried past the
    largest finite one; finite values within `tol`, and two zeros only of one sign."""
    nan_l, nan_r = np.isnan(left), np.isnan(right)
    finite = np.isfinite(left) & np.isfinite(right)
    band = big * (1 - ULPS * eps)
    overflowed = lambda v: np.where(np.abs(v) >= band, np.sign(v), 0.0)  # noqa: E731
    infinite = ~finite & ~nan_l & ~nan_r
    zeros = (left == 0) & (right == 0) & (np.signbit(left) != np.signbit(right))
    return ((nan_l != nan_r) | (infinite & ((overflowed(left) != overflowed(right)) | (overflowed(left) == 0)))
            | (finite & ((np.abs(left - right) > tol) | zeros)))


def _terms_per_element(graph: Graph) -> int:
    """n of the tolerance: per side, the product of its reductions' and matmuls' extents."""
    sides = []
    for out in graph.outputs:
        n, stack, seen = 1, [out], set()
        while stack:
            node = graph.nodes[stack.pop()]
            if node.id in seen:
                continue
            seen.add(node.id)
            operand = graph.nodes[node.inputs[0]].type.shape if node.inputs else ()
            if node.op in REDUCE:
                n *= prod(operand[a] for a in node.attr("axes"))
            elif node.op == "matmul":
                n *= operand[-1]
            stack.extend(node.inputs)
        sides.append(n)
    return max(sides)


# ---------------------------------------------------------------------------
# Showing a counterexample.


def _explain(inst: _Instance, lhs: Expr, rhs: Expr, why: str, left_type=None, right_type=None,
             inputs=None, left=None, right=None) -> str:
    lines = ["  counterexample:", *inst.describe()]
    if inputs:
        lines.append("  inputs:")
        lines += [f"    {name} = {_show_array(v, len(name) + 7)}" for name, v in inputs.items()]
    for side, e, t, v in (("left: ", lhs, left_type, left), ("right:", rhs, right_type, right)):
        text = f"  {side} {print_expr(e)}"
        if t is not None:
            text += f" : {t}"
        if v is not None:
            text += f" = {_show_array(v, len(text) + 3)}"
        lines.append(text)
    lines.append(f"  {why}")
    return "\n".join(lines)


def _show_array(v: np.ndarray, indent: int) -> str:
    if v.ndim == 0:
        return repr(v.item())
    text = np.array2string(v, separator=", ", threshold=40, max_line_width=100, precision=8)
    return text.replace("\n", "\n" + " " * indent)


def _show_attr(v) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(map(str, v)) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
