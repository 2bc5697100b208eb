"""The rule language: `.rules` text -> validated Rule dataclasses.

    rule NAME [TAG, ...]: PATTERN => PATTERN [where CONDITION, ...]

Patterns use the program call syntax. `?x` matches a tensor (or, in an
attribute position, an attribute value); `?f(...)` in op position matches any
op of that arity (an extension; narrow it with a condition such as
`elementwise(?f)` or `operands(?f) == 2`), and `?f(.., global(?p), ..)` any op
reading global(?p) at any operand, `..` standing for the operands and
attributes not written; the placement functions `global shared local inline`
describe the schedule (docs/reference/rules.md). The one tag, `unsafe-fp`,
marks a rule that holds on ordinary values but not at NaN, inf, -0.0 or near
overflow: compile leaves such rules out unless asked (`--unsafe-fp`). All
errors point into the user's `.rules` file.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Union

from lark import Lark, v_args
from lark.exceptions import UnexpectedInput, VisitError

from ..ir.errors import StitchError
from ..ir.ops import LIST_KINDS, OPS, OpSpec
from ..ir.parse import GRAMMAR_DIR, LiteralTransformer, read_source, syntax_error
from ..ir.program import NOPOS, DTypeName, Pos
from .placement import PLACEMENT_NAMES, Placement

RULES_DIR = Path(__file__).resolve().parents[2] / "rules"


def _pos() -> Pos:
    return field(default=NOPOS, compare=False, repr=False)


@dataclass(frozen=True)
class PVar:
    name: str  # with its leading '?'
    pos: Pos = _pos()


@dataclass(frozen=True)
class PLit:
    value: Union[int, float, bool]
    pos: Pos = _pos()


@dataclass(frozen=True)
class PAttr:
    name: str
    value: object  # PVar, or a literal attribute value (tuple, bool, number, DTypeName)
    pos: Pos = _pos()


@dataclass(frozen=True)
class PCall:
    op: str  # an op name, a placement, or an op variable ("?f")
    args: tuple["Pattern", ...]  # the operands written
    attrs: tuple[PAttr, ...] = ()
    pos: Pos = _pos()
    # `..` before the first / after the last written operand (an op variable's call only): the
    # operands and attributes the call does not write, matched whatever they are and carried unchanged
    rest_before: bool = False
    rest_after: bool = False

    @property
    def op_is_var(self) -> bool:
        return self.op.startswith("?")

    @property
    def has_rest(self) -> bool:
        return self.rest_before or self.rest_after

    def attr(self, name: str) -> PAttr | None:
        return next((a for a in self.attrs if a.name == name), None)


Pattern = Union[PVar, PLit, PCall]


@dataclass(frozen=True)
class CFun:
    """A property of a matched tensor, such as rank(?x), or a literal."""

    name: str  # "var", "lit", or a property name
    args: tuple = ()
    pos: Pos = _pos()


@dataclass(frozen=True)
class Cond:
    """A predicate (`scalar(?c)`) or a comparison (`rank(?x) <= 3`)."""

    name: str  # a predicate name, or a comparison operator
    args: tuple[CFun, ...]
    pos: Pos = _pos()


@dataclass(frozen=True)
class Rule:
    name: str
    lhs: Pattern
    rhs: Pattern
    conds: tuple[Cond, ...] = ()
    pos: Pos = _pos()
    tags: tuple[str, ...] = ()  # TAGS below

    @property
    def unsafe_fp(self) -> bool:
        return UNSAFE_FP in self.tags


# Tags a rule may carry: `rule NAME [unsafe-fp]: ...`.
UNSAFE_FP = "unsafe-fp"  # equal on ordinary values, not at NaN, inf, -0.0 or near overflow (like -ffast-math)
TAGS = (UNSAFE_FP,)


@dataclass(frozen=True)
class _Tags:
    names: tuple[tuple[str, Pos], ...]


@dataclass(frozen=True)
class _Rest:
    """A `..` among a call's arguments, while the call is parsed."""

    pos: Pos


@dataclass(frozen=True)
class RuleFile:
    name: str  # the ruleset name: the file's stem
    rules: tuple[Rule, ...]
    source: str = field(default="", compare=False, repr=False)
    filename: str = field(default="<string>", compare=False, repr=False)


# Predicates take tensors (or op variables, for the op-class ones) and hold or not.
PREDICATES = {
    "scalar": 1,  # rank 0
    "elementwise": 1,  # an elementwise op (unary, binary, compare, where, cast)
    "unary": 1,
    "binary": 1,
    "reduction": 1,
    "matmul": 1,
    "layout": 1,
    "movement": 1,  # slice, concat, gather
    "injective": 1,  # elementwise, layout or movement: each output element reads one element of each operand
    "input": 1,  # a parameter of the program (read from global memory, computed by no kernel)
    "float": 1,  # a float dtype
    "same_shape": 2,
    "literal": 1,  # a constant written in the program or by a rule: its value is known at compile time
    # ?p, an operand of the left side's outer call, is read there once per element of that call's
    # iteration: not broadcast by it (an elementwise op or broadcast_to whose result has ?p's shape,
    # gather's indices where they have the result's shape; any other op reads its operands whole)
    "not_broadcast": 1,
}
# Properties are compared with == != < <= > >=.
PROPERTIES = {
    "rank": 1,  # number of dimensions
    "dim": 2,  # dim(?x, k): extent of axis k (negative k counts from the end)
    "size": 1,  # number of elements
    "dtype": 1,  # compared with a dtype name: dtype(?x) == f32
    "shape": 1,  # compared with shape(?y) or a list
    "space": 1,  # an iteration space of the value: a reduction's input shape, a matmul's [..., m, n, k], else its shape
    "len": 1,  # len(?ax): the length of a list attribute
    "value": 1,  # value(?c): a literal's value, compared with a number (holds only where ?c is a literal)
    "operands": 1,  # operands(?f): how many operands the op of an op variable reads (concat: 2, as in the e-graph)
}
# The op classes, as tests of an op: what `elementwise(?f)` and the others say of the op ?f stands for.
OP_CLASS_TESTS = {
    "elementwise": lambda s: s.elementwise,
    "unary": lambda s: s.group == "unary",
    "binary": lambda s: s.group in ("binary", "compare"),
    "reduction": lambda s: s.group == "reduce",
    "matmul": lambda s: s.group == "matmul",
    "layout": lambda s: s.group == "layout",
    "movement": lambda s: s.group == "movement",
    "injective": lambda s: s.injective,
}
OP_CLASS_PREDICATES = tuple(OP_CLASS_TESTS)


# Attributes an op variable's call without `..` may leave out and still match; they travel with
# the op to the right side: ?f(global(?p), ?b) also matches concat and gather, whatever their axis.
OPTIONAL_ATTRS = frozenset({"keepdims", "axis"})


def operand_offsets(spec: OpSpec, call: PCall) -> tuple[int, ...]:
    """Where the operands an op variable's call writes can sit among the operands of `spec`'s op: the
    index of the first written one, for each way the call matches the op; () where it cannot stand
    for the op. In the e-graph concat is binary. Without `..` the call matches ops of exactly its
    arity whose attributes it writes (but OPTIONAL_ATTRS); with `..`, ops of that arity or more, any
    attributes besides the ones written."""
    arity = 2 if spec.variadic else spec.arity
    n = len(call.args)
    given = {a.name for a in call.attrs}
    if not given <= set(spec.attrs):
        return ()
    if not call.has_rest:
        return (0,) if arity == n and set(spec.attrs) - given <= OPTIONAL_ATTRS else ()
    if arity < n:
        return ()
    if call.rest_before and call.rest_after:
        return tuple(range(arity - n + 1))
    return (arity - n,) if call.rest_before else (0,)


@cache
def rules_parser() -> Lark:
    return Lark.open(
        str(GRAMMAR_DIR / "rules.lark"), parser="lalr", propagate_positions=True, maybe_placeholders=False,
        cache=True,  # (as engine/ir/parse.py's ir_parser)
    )


def parse_rules(text: str, filename: str = "<string>") -> RuleFile:
    """Parse and validate a `.rules` file. Raises StitchError pointing into it."""
    try:
        tree = rules_parser().parse(text)
    except UnexpectedInput as err:
        raise syntax_error(err, text, filename, rules_parser()) from None
    try:
        rules = _ToRules(filename, text).transform(tree)
    except VisitError as err:  # lark wraps what the transformer raises
        if isinstance(err.orig_exc, StitchError):
            e = err.orig_exc
            raise StitchError(e.message, e.pos, text, e.hint) from None
        raise
    name = Path(filename).stem if filename != "<string>" else "user"
    rf = RuleFile(name.replace("-", "_"), tuple(rules), source=text, filename=filename)
    validate(rf)
    return rf


def load_rules(path: str | Path) -> RuleFile:
    return _parsed(read_source(path), str(path))


@lru_cache(maxsize=64)
def _parsed(text: str, filename: str) -> RuleFile:
    """parse_rules, once per file text: every compile loads the built-in files, and parsing them took
    0.2 s of a small program's 0.6 s compile. A RuleFile is frozen, so the one parse can be shared;
    an error is raised again each time (lru_cache keeps no exceptions)."""
    return parse_rules(text, filename)


def builtin_rule_files() -> list[RuleFile]:
    return [load_rules(p) for p in sorted(RULES_DIR.glob("*.rules"))]


class _ToRules(LiteralTransformer):

    def start(self, rules):
        return list(rules)

    def rule(self, items):
        kw, name, *rest = items
        tags = rest.pop(0).names if isinstance(rest[0], _Tags) else ()
        lhs, rhs, *rest = rest
        conds = tuple(c for c in rest if isinstance(c, Cond))
        for tag, pos in tags:
            if tag not in TAGS:
                close = difflib.get_close_matches(tag, TAGS, n=1)
                raise StitchError(f"rule '{name}': unknown tag '{tag}' (tags: {', '.join(TAGS)})", pos,
                                  hint=f"did you mean '{close[0]}'?" if close else "")
        return Rule(str(name), lhs, rhs, conds, self._pos(kw), tuple(dict.fromkeys(t for t, _ in tags)))

    def tags(self, items):
        return _Tags(tuple((str(t), self._pos(t)) for t in items))

    def pvar(self, items):
        return PVar(str(items[0]), self._pos(items[0]))

    def pnumber(self, items):
        return PLit(self._number(items[0]), self._pos(items[0]))

    def ptrue(self, items):
        return PLit(True, self._pos(items[0]))

    def pfalse(self, items):
        return PLit(False, self._pos(items[0]))

    def pcall(self, items):
        return self._call(items)

    def pcall_var(self, items):
        return self._call(items)

    def _call(self, items):
        name, *args = items
        pos = self._pos(name)
        positional, attrs, rests = [], [], []
        for a in args:
            if isinstance(a, _Rest):
                if attrs:
                    raise StitchError("`..` goes before the keyword attributes", a.pos)
                rests.append((len(positional), a.pos))
            elif isinstance(a, PAttr):
                if any(b.name == a.name for b in attrs):
                    raise StitchError(f"attribute '{a.name}' is given twice", a.pos)
                attrs.append(a)
            elif attrs:
                raise StitchError("positional argument after a keyword attribute", a.pos)
            else:
                positional.append(a)
        before, after = self._rests(str(name), rests, len(positional))
        return PCall(str(name), tuple(positional), tuple(attrs), pos, before, after)

    @staticmethod
    def _rests(op: str, rests: list[tuple[int, Pos]], n: int) -> tuple[bool, bool]:
        """Where the `..`s of a call stand: (before the operands, after them)."""
        if not rests:
            return False, False
        where = rests[0][1]
        if not op.startswith("?"):
            raise StitchError(f"`..` stands for the operands and attributes an op variable does not name; "
                              f"{op}(...) writes all of its own", where,
                              hint="write ?f(.., global(?p), ..) and narrow ?f with a condition such as layout(?f)")
        if n == 0:
            raise StitchError("`..` needs an operand beside it: ?f(.., global(?p), ..)", where)
        for k, pos in rests:
            if 0 < k < n:
                raise StitchError("`..` goes first or last among the operands", pos)
        ends = [k for k, _ in rests]
        for (k, pos), earlier in zip(rests[1:], ends):
            if k == earlier:
                raise StitchError("`..` is written twice in a row", pos)
        return 0 in ends, n in ends

    def prest(self, items):
        return _Rest(self._pos(items[0]))

    def pkwarg(self, items):
        name, value = items
        return PAttr(str(name), value, self._pos(name))

    def attr_var(self, items):
        return PVar(str(items[0]), self._pos(items[0]))

    def cpred(self, items):
        name, *args = items
        return Cond(str(name), tuple(args), self._pos(name))

    def ccompare(self, items):
        left, op, right = items
        return Cond(str(op), (left, right), left.pos)

    def cvar(self, items):
        return CFun("var", (str(items[0]),), self._pos(items[0]))

    def cnumber(self, items):
        return CFun("lit", (self._number(items[0]),), self._pos(items[0]))

    def ctrue(self, items):
        return CFun("lit", (True,), self._pos(items[0]))

    def cfalse(self, items):
        return CFun("lit", (False,), self._pos(items[0]))

    def cname(self, items):
        return CFun("lit", (DTypeName(str(items[0])),), self._pos(items[0]))

    @v_args(meta=True)
    def clist(self, meta, items):
        return CFun("lit", (tuple(self._int(t) for t in items),), Pos(self.filename, meta.line, meta.column))

    def cfun(self, items):
        name, *args = items
        return CFun(str(name), tuple(args), self._pos(name))


# ---------------------------------------------------------------------------
# Validation: everything egglog would reject, reported in the user's file.


def validate(rf: RuleFile) -> None:
    seen: dict[str, Rule] = {}
    for r in rf.rules:
        if r.name in seen:
            raise StitchError(f"rule '{r.name}' is defined twice (first at line {seen[r.name].pos.line})", r.pos, rf.source)
        seen[r.name] = r
        _Validator(r, rf.source).run()


class _Validator:
    def __init__(self, rule: Rule, source: str):
        self.rule = rule
        self.source = source
        self.attr_kinds: dict[str, str | None] = {}
        self.op_calls: dict[str, tuple[PCall, str]] = {}  # op variable -> its first call (left side first)

    def error(self, message: str, pos: Pos, hint: str = "") -> StitchError:
        return StitchError(f"rule '{self.rule.name}': {message}", pos, self.source, hint)

    def run(self) -> None:
        r = self.rule
        if not isinstance(r.lhs, PCall):
            raise self.error("the left side must be an op call, not a bare variable or literal", r.lhs.pos)
        if r.lhs.op in PLACEMENT_NAMES:
            raise self.error(
                f"the left side cannot be a bare placement '{r.lhs.op}(...)': rewrite the consumer that reads it",
                r.lhs.pos,
            )
        if isinstance(r.rhs, PCall) and r.rhs.op in PLACEMENT_NAMES:
            raise self.error(
                f"the right side cannot be a bare placement '{r.rhs.op}(...)': a value and its placement "
                "must stay distinct e-classes",
                r.rhs.pos,
            )
        bound: dict[str, str] = {}
        self.pattern(r.lhs, bound, side="left")
        rhs_vars: dict[str, str] = {}
        self.pattern(r.rhs, rhs_vars, side="right")
        for name, kind in rhs_vars.items():
            if name not in bound:
                pos = _find_var(r.rhs, name) or r.rhs.pos
                raise self.error(f"variable {name} on the right side is not bound by the left side", pos)
            if bound[name] != kind:
                raise self.error(f"variable {name} is a {bound[name]} on the left but a {kind} on the right",
                                 _find_var(r.rhs, name) or r.pos)
        for c in r.conds:
            self.condition(c, bound)
        self.forwarded()

    def forwarded(self) -> None:
        """A `local` edge is read once per element of its consumer's tile, so a rule that makes one where
        the consumer could broadcast the value says not_broadcast: the legality is the rule's, in the
        rule file, not a refusal after the fact. So the right side's new `local(?p)` is an operand of its
        outer call (which not_broadcast tests)."""
        r = self.rule
        carried = {p.args[0] for p in _placements(r.lhs, "local")}
        stated = {c.args[0].args[0] for c in r.conds if c.name == "not_broadcast"}
        for call, k, edge in _placed_operands(r.rhs, "local"):
            if edge.args[0] in carried:
                continue
            inner = edge.args[0]
            if call is not r.rhs or not isinstance(inner, PVar):
                raise self.error("a new local(...) edge is a variable operand of the right side's outer call, "
                                 "where not_broadcast can test it", edge.pos)
            if inner.name not in stated and _may_broadcast(call, k, r.conds):
                raise self.error(f"{call.op} may broadcast {inner.name}, which a local edge cannot be: "
                                 f"add the condition not_broadcast({inner.name})", edge.pos,
                                 hint=f"or hold it on chip for the tile: shared({inner.name})")

    def pattern(self, p: Pattern, bound: dict[str, str], side: str) -> None:
        if isinstance(p, PVar):
            self.bind(bound, p.name, "tensor", p.pos)
            return
        if isinstance(p, PLit):
            if isinstance(p.value, bool):
                raise self.error("a bool literal cannot stand for a tensor", p.pos)
            return
        if p.op_is_var:
            self.bind(bound, p.op, "op", p.pos)
            self.op_variable(p, side)
        elif p.op in PLACEMENT_NAMES:
            if len(p.args) != 1 or p.attrs:
                raise self.error(f"placement {p.op} takes exactly one argument", p.pos)
            inner = p.args[0]
            if isinstance(inner, PCall) and inner.op in PLACEMENT_NAMES:
                raise self.error("a placement cannot wrap another placement", inner.pos)
        else:
            spec = OPS.get(p.op)
            if spec is None:
                close = difflib.get_close_matches(p.op, list(OPS) + [p.value for p in Placement], n=1)
                raise self.error(f"unknown op '{p.op}'", p.pos, f"did you mean '{close[0]}'?" if close else "")
            if spec.variadic and len(p.args) < 2:
                raise self.error(f"{p.op} in a rule takes 2 or more operands, got {len(p.args)}", p.pos)
            if not spec.takes(len(p.args)):
                raise self.error(f"{p.op} takes {spec.arity} argument(s), got {len(p.args)}", p.pos)
            for a in p.attrs:
                if a.name not in spec.attrs:
                    allowed = ", ".join(spec.attrs) or "none"
                    raise self.error(f"{p.op} has no attribute '{a.name}' (its attributes: {allowed})", a.pos)
            self.rule_attrs(p, spec)
        for a in p.attrs:
            if isinstance(a.value, PVar):
                self.bind(bound, a.value.name, "attribute", a.value.pos)
                kind = self._attr_kind(p, a.name)
                first = self.attr_kinds.setdefault(a.value.name, kind)
                if kind and first and first != kind:
                    raise self.error(f"variable {a.value.name} is used both as {first} and as {kind}", a.value.pos)
        for arg in p.args:
            self.pattern(arg, bound, side)

    def op_variable(self, p: PCall, side: str) -> None:
        """An op variable stands for some op; one written with `..` is written so on both sides, with the
        same operands around it, and once on the left (what it leaves out is matched there)."""
        if not any(operand_offsets(spec, p) for spec in OPS.values()):
            more = " or more" if p.has_rest else ""
            raise self.error(f"no op takes {len(p.args)}{more} argument(s) with attributes "
                             f"{', '.join(a.name for a in p.attrs) or '(none)'}", p.pos)
        first = self.op_calls.setdefault(p.op, (p, side))[0]
        if first is p:
            return
        shape = lambda c: (c.rest_before, len(c.args), c.rest_after)  # noqa: E731
        if first.has_rest and side == "left":
            raise self.error(f"{p.op} is written with `..` on the left: it may appear there once", p.pos)
        if (first.has_rest or p.has_rest) and shape(first) != shape(p):
            first_text = _call_outline(first)
            raise self.error(f"{p.op} is written {_call_outline(p)} here but {first_text} at line {first.pos.line}: "
                             "write it the same way, so that `..` stands for the same operands", p.pos)

    def rule_attrs(self, p: PCall, spec) -> None:
        """Attributes whose default depends on the operand's rank must be spelled out in rules."""
        for name, kind in (("axes", "reduce"), ("perm", "layout")):
            if name in spec.attrs and p.attr(name) is None:
                raise self.error(f"{p.op} in a rule must name its {name} ({name}=?v or {name}=[...])", p.pos)
        for name, aspec in spec.attrs.items():
            a = p.attr(name)
            if a is None or isinstance(a.value, PVar):
                if a is None and aspec.required:
                    raise self.error(f"{p.op} needs the attribute '{name}='", p.pos)
                continue
            v = a.value
            want = {"bool": bool, "dtype": DTypeName, "int": int}.get(aspec.kind, tuple)
            if not isinstance(v, want) or (want is not bool and isinstance(v, bool)):
                raise self.error(f"{p.op}: attribute '{name}' has the wrong kind of value", a.pos)
            if aspec.kind == "axes" and (any(x < 0 for x in v) or len(set(v)) != len(v)):
                raise self.error("axes in a rule must be distinct and non-negative", a.pos)
            if aspec.kind == "int" and v < 0:
                raise self.error(f"{name} in a rule must be non-negative (the e-graph holds it normalized)", a.pos)
        if p.op == "slice":
            self.slice_attrs(p)

    def slice_attrs(self, p: PCall) -> None:
        """A slice in a rule matches the e-graph's normal form, so its literal bounds must be in that form."""
        lists = {a.name: a for a in p.attrs if isinstance(a.value, tuple)}
        if p.attr("steps") is None and "axes" not in lists:
            raise self.error("slice in a rule must name its steps when its axes are a variable", p.pos)
        lengths = {len(a.value) for a in lists.values()}
        if len(lengths) > 1:
            raise self.error("slice: axes, starts, ends and steps must have one entry per sliced axis", p.pos)
        axes = lists.get("axes")
        if axes is not None and list(axes.value) != sorted(axes.value):
            raise self.error("axes of a slice in a rule must be ascending (the normal form)", axes.pos)
        normal = "0 <= start < end, step >= 1 (the normal form: negative bounds are resolved against the dimension)"
        starts, ends, steps = (lists.get(k) for k in ("starts", "ends", "steps"))
        for a in (starts, ends):
            if a is not None and any(x < 0 for x in a.value):
                raise self.error(f"{a.name} of a slice in a rule must be non-negative: {normal}", a.pos)
        if steps is not None and any(x < 1 for x in steps.value):
            raise self.error(f"steps of a slice in a rule must be positive: {normal}", steps.pos)
        if starts is not None and ends is not None and any(b >= e for b, e in zip(starts.value, ends.value)):
            raise self.error(f"each start of a slice in a rule must be below its end: {normal}", ends.pos)

    @staticmethod
    def _attr_kind(p: PCall, name: str) -> str | None:
        """What an attribute holds (axes, a bool, a perm, a shape, a dtype), whatever op it is on."""
        if p.op_is_var or p.op in PLACEMENT_NAMES:
            kinds = {s.attrs[name].kind for s in OPS.values() if name in s.attrs}
            return next(iter(kinds)) if len(kinds) == 1 else None
        return OPS[p.op].attrs[name].kind

    def bind(self, bound: dict[str, str], name: str, kind: str, pos: Pos) -> None:
        if name in bound and bound[name] != kind:
            raise self.error(f"variable {name} is used both as a {bound[name]} and as a {kind}", pos)
        bound[name] = kind

    def condition(self, c: Cond, bound: dict[str, str]) -> None:
        if c.name in PREDICATES:
            if len(c.args) != PREDICATES[c.name]:
                raise self.error(f"{c.name} takes {PREDICATES[c.name]} argument(s)", c.pos)
            for a in c.args:
                if a.name != "var":
                    raise self.error(f"{c.name} takes variables", a.pos)
                kind = self.var(a, bound)
                if kind == "op" and c.name not in OP_CLASS_PREDICATES:
                    raise self.error(f"{c.name} tests a tensor, but {a.args[0]} is an op variable", a.pos)
                if kind == "attribute":
                    raise self.error(f"{c.name} tests a tensor, but {a.args[0]} is an attribute", a.pos)
                if c.name == "not_broadcast" and root_operand(self.rule.lhs, a.args[0]) is None:
                    raise self.error(f"not_broadcast({a.args[0]}) tests an operand of the left side's outer call",
                                     a.pos)
            return
        if c.name in ("==", "!=", "<", "<=", ">", ">="):
            values = [a for a in c.args if a.name == "value"]
            for a in c.args:
                self.term(a, bound, numbers=bool(values))
            if values and not all(a.name == "value" or _is_number(a) for a in c.args):
                raise self.error("value(?c) compares with a number: value(?c) > 0", values[0].pos)
            counts = [a for a in c.args if a.name == "operands"]
            if counts and not all(a.name == "operands" or (_is_number(a) and isinstance(a.args[0], int))
                                  for a in c.args) or len(counts) > 1:
                raise self.error("operands(?f) compares with an integer: operands(?f) == 2", counts[0].pos)
            return
        close = difflib.get_close_matches(c.name, list(PREDICATES) + list(PROPERTIES), n=1)
        raise self.error(f"unknown condition '{c.name}'", c.pos, f"did you mean '{close[0]}'?" if close else "")

    def var(self, a: CFun, bound: dict[str, str]) -> str:
        name = a.args[0]
        if name not in bound:
            raise self.error(f"condition uses {name}, which the left side does not bind", a.pos)
        return bound[name]

    def term(self, t: CFun, bound: dict[str, str], numbers: bool = False) -> None:
        if t.name == "lit":
            if isinstance(t.args[0], float) and not numbers:
                raise self.error("conditions compare integers; write the number without a decimal point "
                                 "(a literal's value(?c) compares with any number)", t.pos)
            return
        if t.name == "var":
            kind = self.var(t, bound)
            if kind == "op":
                raise self.error(f"compare a property of {t.args[0]} (operands), not the op", t.pos)
            if kind != "attribute":
                raise self.error(f"compare a property of {t.args[0]} (rank, dim, size, dtype, shape, space, "
                                 "value), not the tensor", t.pos)
            return
        if t.name not in PROPERTIES:
            close = difflib.get_close_matches(t.name, list(PROPERTIES), n=1)
            raise self.error(f"unknown property '{t.name}'", t.pos, f"did you mean '{close[0]}'?" if close else "")
        if len(t.args) != PROPERTIES[t.name]:
            raise self.error(f"{t.name} takes {PROPERTIES[t.name]} argument(s)", t.pos)
        first = t.args[0]
        if first.name != "var":
            raise self.error(f"{t.name} takes a variable first", first.pos)
        kind = self.var(first, bound)
        want = {"len": "attribute", "operands": "op"}.get(t.name, "tensor")
        if kind != want:
            raise self.error(f"{t.name} takes {_a(want)} variable, but {first.args[0]} is {_a(kind)}", first.pos)
        if t.name == "len" and self.attr_kinds.get(first.args[0]) not in (None,) + LIST_KINDS:
            what = {"int": "one integer", "bool": "true or false", "dtype": "a dtype"}[self.attr_kinds[first.args[0]]]
            raise self.error(f"len takes a list attribute, but {first.args[0]} holds {what}", first.pos)
        if t.name == "dim" and (t.args[1].name != "lit" or not isinstance(t.args[1].args[0], int)):
            raise self.error("dim takes an integer axis: dim(?x, 0)", t.args[1].pos)


def _placed_operands(p: Pattern, placement: str):
    """(call, position among its written operands, the placement call) for each operand so placed."""
    if isinstance(p, PCall):
        for k, a in enumerate(p.args):
            if isinstance(a, PCall) and a.op == placement:
                yield p, k, a
            yield from _placed_operands(a, placement)


def _placements(p: Pattern, placement: str) -> list[PCall]:
    return [edge for _, _, edge in _placed_operands(p, placement)]


def _may_broadcast(call: PCall, k: int, conds: tuple[Cond, ...]) -> bool:
    """Whether the op of `call` (any it may stand for, under the rule's class conditions) can broadcast
    its written operand `k`: elementwise ops of two or three operands, broadcast_to, gather's indices."""
    if call.op_is_var:
        tests = [OP_CLASS_TESTS[c.name] for c in conds if c.name in OP_CLASS_TESTS and c.args[0].args[0] == call.op]
        choices = [(s, offset) for s in OPS.values() if all(t(s) for t in tests)
                   for offset in operand_offsets(s, call)]
    else:
        choices = [(OPS[call.op], 0)]
    return any(s.group in ("binary", "compare", "select") or s.name == "broadcast_to"
               or (s.name == "gather" and offset + k == 1) for s, offset in choices)


def root_operand(lhs: Pattern, name: str) -> int | None:
    """The position among the written operands of `lhs` (an op call) of the tensor variable `name`,
    bare or inside a placement; None if it is not one of them."""
    for k, a in enumerate(lhs.args if isinstance(lhs, PCall) else ()):
        if isinstance(a, PCall) and a.op in PLACEMENT_NAMES:
            a = a.args[0]
        if isinstance(a, PVar) and a.name == name:
            return k
    return None


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _call_outline(c: PCall) -> str:
    """How a call's operands are written, `..` kept: ?f(.., _, ..)."""
    parts = [".."] * c.rest_before + ["_"] * len(c.args) + [".."] * c.rest_after
    return f"{c.op}({', '.join(parts)})"


def _is_number(t: CFun) -> bool:
    return t.name == "lit" and isinstance(t.args[0], (int, float)) and not isinstance(t.args[0], bool)


def _find_var(p: Pattern, name: str) -> Pos | None:
    if isinstance(p, PVar):
        return p.pos if p.name == name else None
    if isinstance(p, PCall):
        if p.op == name:
            return p.pos
        for a in p.attrs:
            if isinstance(a.value, PVar) and a.value.name == name:
                return a.value.pos
        for arg in p.args:
            found = _find_var(arg, name)
            if found:
                return found
    return None
