"""What a rule says about its instances, for the soundness checker.

`op_instances` turns a rule with op variables into rules with none: one per op each variable can
stand for (and per operand position, for a call written with `..`), so that every op a rule can
match is checked on instances of its own. `InstanceConstraints` then reads what the rule's left
side and conditions pin: shared shapes, ranks, dims, dtypes, literals.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field, replace

from ...ir.ops import OPS, REDUCE, OpSpec
from ...ir.program import DTypeName
from ..placement import PLACEMENT_NAMES
from ..rules import OP_CLASS_TESTS, CFun, Cond, Pattern, PAttr, PCall, PLit, PVar, Rule, operand_offsets

MAX_RANK = 3
CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
OP_CLASSES = OP_CLASS_TESTS


# ---------------------------------------------------------------------------
# Op variables: one rule per op they can stand for.


@dataclass(frozen=True)
class OpInstance:
    """A rule with its op variables replaced by ops: `ops` says which op each stood for. An attribute
    the variable's calls do not write becomes the variable `?f.NAME`, an operand `..` leaves out the
    tensor variable `?f.K` (K its position), both drawn as the rule's own are."""

    rule: Rule
    ops: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return ", ".join(f"{v} = {op}" for v, op in self.ops.items())


def op_instances(rule: Rule) -> list[OpInstance]:
    """The rule once per way its op variables can match (the same ways the rule compiler expands
    them), leaving out the ops their class and operand-count conditions exclude."""
    calls = _op_variable_calls(rule.lhs, {})
    if not calls:
        return [OpInstance(rule)]
    names = sorted(calls)
    options = [[(spec, offset) for spec in OPS.values() for offset in operand_offsets(spec, calls[v])
                if _conditions_admit(rule.conds, v, spec)] for v in names]
    out = []
    for combo in itertools.product(*options):
        chosen = dict(zip(names, combo))
        conds = tuple(c for c in rule.conds if not _on_op_variable(c, chosen))
        lhs, rhs = (_name_ops(side, chosen) for side in (rule.lhs, rule.rhs))
        out.append(OpInstance(replace(rule, lhs=lhs, rhs=rhs, conds=conds),
                              {v: spec.name for v, (spec, _) in chosen.items()}))
    return out


def _op_variable_calls(p: Pattern, acc: dict[str, PCall]) -> dict[str, PCall]:
    if isinstance(p, PCall):
        if p.op_is_var:
            acc.setdefault(p.op, p)
        for a in p.args:
            _op_variable_calls(a, acc)
    return acc


def _operands(spec: OpSpec) -> int:
    return 2 if spec.variadic else spec.arity  # as the e-graph holds concat


def _on_op_variable(c: Cond, chosen: dict) -> bool:
    return any(a.name == "var" and a.args[0] in chosen or a.name == "operands" for a in c.args)


def _conditions_admit(conds: tuple[Cond, ...], var: str, spec: OpSpec) -> bool:
    for c in conds:
        if c.name in OP_CLASSES and c.args[0].args[0] == var and not OP_CLASSES[c.name](spec):
            return False
        counts = [a for a in c.args if a.name == "operands" and a.args[0].args[0] == var]
        if counts:
            left, right = (_operands(spec) if a.name == "operands" else a.args[0] for a in c.args)
            if not CMP[c.name](left, right):
                return False
    return True


def _name_ops(p: Pattern, chosen: dict[str, tuple[OpSpec, int]]) -> Pattern:
    if not isinstance(p, PCall):
        return p
    args = tuple(_name_ops(a, chosen) for a in p.args)
    if not p.op_is_var:
        return replace(p, args=args)
    spec, offset = chosen[p.op]
    if p.has_rest:
        left_out = [PVar(f"{p.op}.{k}", p.pos) for k in range(_operands(spec))]
        args = tuple(left_out[:offset]) + args + tuple(left_out[offset + len(args):])
    written = {a.name for a in p.attrs}
    attrs = p.attrs + tuple(PAttr(n, PVar(f"{p.op}.{n}", p.pos), p.pos) for n in spec.attrs if n not in written)
    return PCall(spec.name, args, attrs, p.pos)


# ---------------------------------------------------------------------------
# What the rule pins.


@dataclass
class ShapeClass:
    """Tensor variables that must share one shape, and what the conditions pin."""

    names: list[str]
    ranks: list[int]
    fixed: tuple[int, ...] | None = None
    dims: dict[int, int] = field(default_factory=dict)


class InstanceConstraints:
    """What a rule's text says about its instances, worked out once per rule: which tensor variables
    share a shape, which ranks, dtypes and dims the conditions pin, which variables are literals. The
    rule has no op variable left (see `op_instances`)."""

    def __init__(self, rule: Rule, ops: dict[str, str] | None = None):
        self.rule = rule
        self.ops = ops or {}  # the op each op variable of the rule as written stood for (OpInstance.ops)
        self.impossible = ""
        self.tensors: list[str] = []  # in order of first use on the left
        self.bool_vars: set[str] = set()  # where(?c, ...): only a bool fits
        self.index_vars: set[str] = set()  # gather(?x, ?i, ...): only i32 or i64 fits
        self.lhs_specs: list[OpSpec] = []
        self.rank_tests: dict[str, list[tuple[str, int]]] = {}  # what the left side itself implies
        self._walk(rule.lhs)
        self.dtypes: dict[str, str] = {}
        self.floats: set[str] = set()
        self.attr_fixed: dict[str, object] = {}
        self.attr_lens: dict[str, list[tuple[str, int]]] = {}
        # literal(?c) and value(?c) comparisons: ?c is a scalar input whose values meet the tests
        self.literals: dict[str, list[tuple[str, float]]] = {}
        self.has_matmul = any(s.name == "matmul" for s in self.lhs_specs)
        self.has_cast = any(s.name == "cast" for s in self.lhs_specs)  # only then can dtypes differ
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
        if p.op in OPS:
            self.lhs_specs.append(OPS[p.op])
        for k, a in enumerate(p.args):
            self._walk(a, p if p.op not in PLACEMENT_NAMES else parent, k if p.op not in PLACEMENT_NAMES else index)

    def _shape_classes(self) -> list[ShapeClass]:
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
            elif c.name in CMP:
                self._comparison(c, parent, root, rank_tests, fixed, dims)
        groups: dict[str, list[str]] = {}
        for v in self.tensors:
            groups.setdefault(root(v), []).append(v)
        classes = []
        for names in groups.values():
            tests = [t for v in names for t in rank_tests[v]]
            pinned = {k: n for v in names for k, n in dims[v].items()}
            ranks = [r for r in range(MAX_RANK + 1) if ranks_ok(r, tests, pinned)]
            ranks = ranks or [r for r in range(MAX_RANK + 1, MAX_RANK + 4) if ranks_ok(r, tests, pinned)]
            shape = next((fixed[v] for v in names if v in fixed), None)
            if not ranks and shape is None:
                self.impossible = f"no rank satisfies the conditions on {', '.join(names)}"
            classes.append(ShapeClass(names, ranks, shape, pinned))
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
        value = literal_value(right)
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


def ranks_ok(rank: int, tests, pinned: dict[int, int]) -> bool:
    return all(CMP[op](rank, v) for op, v in tests) and all(-rank <= k < rank for k in pinned)




def literal_value(t: CFun):
    # The rule grammar reads `true` and `false` in a condition as names (DTypeName).
    v = t.args[0]
    return v.name == "true" if isinstance(v, DTypeName) and v.name in ("true", "false") else v
