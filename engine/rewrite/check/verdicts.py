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
- `?f(...)`: every op it can stand for, one at a time (`constraints.op_instances`):
  the ops the rule compiler matches it with (that arity, those attributes;
  with `..`, that many operands or more and any attributes), narrowed by
  op-class and `operands(?f)` conditions, each op checked on instances of its
  own (at each operand position, for a call with `..` on both sides). The
  attributes its calls do not write are drawn once, as `?f.NAME`, at its first
  use on the left, and travel with it; the operands `..` leaves out are tensor
  variables `?f.K` like any other.
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
import tempfile
from collections import Counter
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, assume, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.errors import Unsatisfiable

from ...ir.check import check_func
from ...ir.errors import StitchError
from ...ir.interp import evaluate, index_bounds
from ...ir.program import Func
from ..rules import Rule, RuleFile
from .compare import TOLERANCE, compare, explain, overflows
from .constraints import InstanceConstraints, op_instances
from .draw import EDGE_VALUES, Drawer, build, draw_inputs, infer_type

# Instances per op at the least, for a rule whose op variables stand for many ops.
MIN_PER_OP = 5


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
             f"values (at least {MIN_PER_OP} per op an op variable stands for) and as many on edge values",
             f"  float tolerance: {TOLERANCE}",
             "    (eps: machine epsilon of the result dtype; n: terms summed per element; M: largest magnitude)",
             f"  edge values: {EDGE_VALUES}"]
    lines += [v.render() for v in verdicts]
    lines.append(f"{counts['unsound']} unsound, {counts['edge']} only away from edge values, {counts['ok']} ok, "
                 f"{counts['skipped']} skipped")
    return "\n".join(lines)


class Counterexample(Exception):
    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def check_rule(rule: Rule, max_examples: int = 100) -> Verdict:
    """Search for a counterexample to `rule` on ordinary values, then at edge values; the verdict
    carries the shrunk one. A rule with op variables is searched once per op they can stand for,
    each with a share of the instances (at least MIN_PER_OP)."""
    variants = op_instances(rule)
    if not variants:
        return Verdict(rule, "skipped", "no op fits its op variables and their conditions")
    per_op = max(max_examples // len(variants), min(max_examples, MIN_PER_OP))
    tested = edge_tested = 0
    edge = ""
    rejected: Counter[str] = Counter()
    impossible = []
    for variant in variants:
        facts = InstanceConstraints(variant.rule, variant.ops)
        if facts.impossible:
            impossible.append(facts.impossible)
            continue
        found, n, why = _search(facts, per_op, edge=False)
        if found:
            return Verdict(rule, "unsound", found)
        tested += n
        rejected += why
        if n and not edge:  # one counterexample at edge values is enough
            edge, m, _ = _search(facts, per_op, edge=True)
            edge_tested += m
    if not tested:
        reasons = [r for r, _ in rejected.most_common(1)] + impossible + ["no instance satisfies the conditions"]
        return Verdict(rule, "skipped", reasons[0])
    status = "edge" if edge and not rule.unsafe_fp else "ok"
    return Verdict(rule, status, instances=tested, edge=edge, edge_instances=edge_tested)


def _search(facts: InstanceConstraints, max_examples: int, edge: bool) -> tuple[str, int, Counter]:
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
    except Counterexample as cx:
        return cx.text, tested[0], rejected
    except Unsatisfiable:
        pass
    return "", tested[0], rejected




def _probe(draw, facts: InstanceConstraints, reject, edge: bool = False) -> None:
    """Draw one instance of the rule and test it; raise _Counterexample if it fails. With `edge`,
    inputs mix edge values in (see EDGE_VALUES) and every result counts: NaN, inf and wrapped
    integers too."""
    rule = facts.rule
    inst, lhs, left_type = Drawer(draw, facts, reject).instance()
    params = inst.params()
    rhs = build(rule.rhs, inst)
    try:
        right_type = infer_type(params, rhs)
    except StitchError as err:
        raise Counterexample(explain(inst, lhs, rhs, f"the right side does not type-check: {err.message}",
                                       left_type=left_type))
    if right_type != left_type:
        raise Counterexample(explain(inst, lhs, rhs, "the two sides have different types",
                                       left_type=left_type, right_type=right_type))
    graph = check_func(Func("instance", params, (left_type, right_type), (), (lhs, rhs)))
    everything = dataclasses.replace(graph, outputs=[n.id for n in graph.nodes])
    # gather's indices: in range for the left side (what the e-graph matched); the right side must cope.
    left_graph = check_func(Func("left", params, (left_type,), (), (lhs,)))
    bounds = index_bounds(left_graph)
    # Inputs anywhere in [-3, 3] first; if a side leaves its domain, positive ones. At edge values
    # every result counts, NaN and wrapped integers too.
    for positive in (False,) if edge else (False, True):
        inputs = draw_inputs(draw, params, positive, bounds, edge, facts.literals)
        try:
            values = evaluate(everything, inputs)
        except StitchError as err:  # an index out of range
            try:
                evaluate(left_graph, inputs)
            except StitchError:
                reject("the left side reads out of range")
            raise Counterexample(explain(inst, lhs, rhs, f"the right side fails: {err.message}",
                                           left_type, right_type, inputs))
        if edge or all(np.isfinite(v).all() for v in values if v.dtype.kind == "f"):
            break
    else:
        reject("the inputs drawn were outside a side's domain (nan or inf)")
    if not edge and overflows(graph, values):
        reject("the integer arithmetic overflowed")
    mismatch = compare(graph, values, edge)
    if mismatch:
        left, right = values[graph.outputs[0]], values[graph.outputs[1]]
        raise Counterexample(explain(inst, lhs, rhs, mismatch, left_type, right_type, inputs, left, right))


