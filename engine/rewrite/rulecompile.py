"""Rules -> egglog text. A rule file becomes one egglog ruleset named after the file.

Every operand of an op in a pattern is an edge: unless the pattern names a
placement there (`global(...)`, `inline(...)`, ...), it is compiled as
`(Global ...)`, the canonical form every program enters with. So algebra rules
(which mention no placement) match and build all-global terms, and schedule
rules rewrite the placement of the edges they name.

An op variable `?f(...)` is expanded over the constructor families it can
match (one egglog rule each, named `rule-name@Family`); op-class conditions on
it (`elementwise(?f)`) are decided per family at compile time. A call written
with `..` on both sides of its operands, `?f(.., global(?p), ..)`, is expanded
over the operand positions too (`rule-name@Bin.1`: the written operand second);
the operands it leaves out are edges, matched at whatever placement they have
and rebuilt as they were, and its attributes travel to the right side.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field

from ..ir.errors import StitchError
from ..ir.ops import OPS
from ..ir.program import DTypeName
from .egraph import FAMILIES, NAMED_FAMILIES, PLACEMENT_CTORS, const_term, f64, family_arity, family_of, literal, quote
from .rules import PCall, PLit, PVar, Rule, RuleFile, operand_offsets, root_operand

FAMILY_CLASSES = {
    "elementwise": ("Un", "Bin", "Where", "Cast"),
    "unary": ("Un",),
    "binary": ("Bin",),
    "reduction": ("Red",),
    "matmul": ("MatMul",),
    "layout": ("Transpose", "Reshape", "Bcast", "Cast"),
    "movement": ("Slice", "Concat", "Gather"),
    "injective": ("Un", "Bin", "Where", "Cast", "Transpose", "Reshape", "Bcast", "Slice", "Concat", "Gather",
                  "Iota"),
}
TENSOR_CLASS_RELATIONS = {
    "elementwise": "is-elementwise",
    "unary": "is-unary",
    "binary": "is-binary",
    "reduction": "is-reduction",
    "matmul": "is-matmul",
    "layout": "is-layout",
    "movement": "is-movement",
    "injective": "is-injective",
    "input": "is-input",
}
_CMP = {"==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


def compile_rule_file(rf: RuleFile) -> str:
    """The egglog text declaring ruleset `rf.name` and all its rules."""
    out = [f"(ruleset {rf.name})"]
    for rule in rf.rules:
        out.extend(compile_rule(rule, rf.name, rf.source))
    return "\n".join(out)


def egglog_rule_name(rule_name: str, families: dict[str, "_Match"]) -> str:
    if not families:
        return rule_name
    return rule_name + "@" + ",".join(families[k].label for k in sorted(families))


def base_rule_name(egglog_name: str) -> str:
    """The user's rule name for an egglog rule name (drops the @Family suffix)."""
    return egglog_name.split("@", 1)[0]


def compile_rule(rule: Rule, ruleset: str, source: str = "") -> list[str]:
    return [f"(rule ({query})\n      ((union ?__root {rhs}))\n      :ruleset {ruleset} :name {quote(name)})"
            for name, query, rhs in rule_variants(rule, source)]


def rule_variants(rule: Rule, source: str = "") -> list[tuple[str, str, str]]:
    """The egglog rules one rule compiles to, one per family its op variables stand for: (egglog
    name, query, right side), the query binding the matched e-class to `?__root`."""
    out = []
    for matches in _family_choices(rule):
        families = {v: m.family for v, m in matches.items()}
        if not _op_classes_hold(rule, families):
            continue
        ctx = _Ctx(rule, families, source, {v: m.offset for v, m in matches.items()})
        root = ctx.lhs(rule.lhs, operand=False)
        ctx.query.insert(0, f"(= ?__root {root})")
        for cond in rule.conds:
            ctx.condition(cond)
        rhs = ctx.rhs(rule.rhs, operand=False, root=True)
        out.append((egglog_rule_name(rule.name, matches), " ".join(ctx.query), rhs))
    return out


def _op_vars(p, acc: dict[str, PCall]) -> dict[str, PCall]:
    if isinstance(p, PCall):
        if p.op_is_var and p.op not in acc:
            acc[p.op] = p
        for a in p.args:
            _op_vars(a, acc)
    return acc


@dataclass(frozen=True)
class _Match:
    """One way an op variable matches: a constructor family, and where its written operands sit."""

    family: str
    offset: int  # the index of the first written operand among the family's operands
    positions: bool  # the call has `..` on both sides: the offset is part of the rule's name

    @property
    def label(self) -> str:
        return f"{self.family}.{self.offset}" if self.positions else self.family


def _families_for(call: PCall) -> list[_Match]:
    """The ways an op variable can match, one per family and offset (rules.operand_offsets)."""
    both = call.rest_before and call.rest_after
    out = []
    for fam, (ops, _) in FAMILIES.items():
        for offset in operand_offsets(OPS[ops[0]], call):
            out.append(_Match(fam, offset, both))
    return out


def _family_choices(rule: Rule):
    calls = _op_vars(rule.lhs, {})
    names = sorted(calls)
    options = [_families_for(calls[n]) for n in names]
    for combo in itertools.product(*options):
        yield dict(zip(names, combo))


def _op_classes_hold(rule: Rule, families: dict[str, str]) -> bool:
    """Whether the conditions on op variables (their class, their number of operands) hold for a choice of
    families: decided here, at compile time."""
    for c in rule.conds:
        if c.name in FAMILY_CLASSES and c.args and c.args[0].name == "var":
            var = c.args[0].args[0]
            if var in families and families[var] not in FAMILY_CLASSES[c.name]:
                return False
        if _counts_operands(c):
            left, right = (family_arity(families[a.args[0].args[0]]) if a.name == "operands" else a.args[0]
                           for a in c.args)
            if not _COMPARE[c.name](left, right):
                return False
    return True


def _counts_operands(c) -> bool:
    return c.name in _COMPARE and any(a.name == "operands" for a in c.args)


@dataclass
class _Ctx:
    rule: Rule
    families: dict[str, str]
    source: str
    offsets: dict[str, int] = field(default_factory=dict)  # op variable -> where its written operands sit
    query: list[str] = field(default_factory=list)
    fresh: itertools.count = field(default_factory=itertools.count)
    bound: dict[str, str] = field(default_factory=dict)  # cache of (kind, var) -> egglog var
    wild_attrs: dict[tuple[str, str], str] = field(default_factory=dict)
    edge_vars: set[str] = field(default_factory=set)

    def error(self, message: str, pos) -> StitchError:
        return StitchError(f"rule '{self.rule.name}': {message}", pos, self.source)

    def new(self, prefix: str) -> str:
        return f"?__{prefix}{next(self.fresh)}"

    @staticmethod
    def var(name: str) -> str:
        return name  # egglog pattern variables are spelled `?x` too

    # -- patterns ------------------------------------------------------------

    def lhs(self, p, operand: bool) -> str:
        return self._term(p, operand, side="lhs")

    def rhs(self, p, operand: bool, root: bool = False) -> str:
        if root and isinstance(p, PCall) and p.op in PLACEMENT_CTORS:
            raise self.error(
                "the right side cannot be a bare placement: that would make a value and its placement one e-class",
                p.pos,
            )
        return self._term(p, operand, side="rhs")

    def _term(self, p, operand: bool, side: str, dtype_from=None) -> str:
        if isinstance(p, PVar):
            if side == "rhs" and p.name in self.edge_vars:
                raise self.error(f"{p.name} stands for an edge on the left; use it only as an operand of a call "
                                 "that names a placement", p.pos)
            t = self.var(p.name)
        elif isinstance(p, PLit):
            t = self._literal(p, side, dtype_from)
        elif p.op in PLACEMENT_CTORS:
            inner = self._term(p.args[0], False, side, dtype_from)
            return f"({PLACEMENT_CTORS[p.op]} {inner})"
        elif p.op == "concat" and len(p.args) > 2:
            # concat(a, b, c) is (Concat (Global (Concat a b)) c): as programs enter the e-graph
            inner = PCall("concat", p.args[:-1], p.attrs, p.pos)
            t = self._call(PCall("concat", (inner, p.args[-1]), p.attrs, p.pos), side)
        else:
            t = self._call(p, side)
        return f"(Global {t})" if operand else t

    def _literal(self, p: PLit, side: str, dtype_from) -> str:
        if side == "lhs":
            return const_term(p.value, self.new("d"))
        dt = self._dtype_of(dtype_from) if dtype_from is not None else None
        if dt is None:
            dt = self._dtype_expr_var("?__root")
        return const_term(p.value, dt)

    def _lookup(self, function: str, term_var: str) -> str:
        """A query variable bound to `(function term_var)`, bound once per rule."""
        key = f"{function}:{term_var}"
        if key not in self.bound:
            v = self.new(function[:2])
            self.query.append(f"(= {v} ({function} {term_var}))")
            self.bound[key] = v
        return self.bound[key]

    def _dtype_expr_var(self, term_var: str) -> str:
        return self._lookup("dtype", term_var)

    def _dtype_of(self, p) -> str | None:
        """An egglog expression for the dtype of pattern `p`, from variables the left side binds."""
        if isinstance(p, PVar):
            return self._dtype_expr_var(self.var(p.name))
        if isinstance(p, PCall):
            if p.op in PLACEMENT_CTORS:
                return self._dtype_of(p.args[0])
            fam = self.families.get(p.op) if p.op_is_var else None
            if p.op in ("less", "greater", "equal"):
                return '"bool"'
            if p.op == "cast" or fam == "Cast":
                a = p.attr("dtype")
                if a is not None and isinstance(a.value, DTypeName):
                    return quote(a.value.name)
                if a is not None:
                    return self.var(a.value.name)
                return None
            if p.op_is_var and fam == "Bin":
                return None  # a comparison would be bool
            operands = self._operands(p)
            if p.op == "gather" or fam == "Gather":
                candidates = operands[:1]  # the indices have their own dtype
            else:
                candidates = operands[1:] if p.op == "where" or fam == "Where" else operands
            for a in candidates:
                d = self._dtype_of(a)
                if d is not None:
                    return d
        return None

    def _operands(self, p: PCall) -> tuple:
        """All operands of a call: those written and, for a call with `..`, an edge variable for each one
        it leaves out (named after the op variable and the position, so both sides share it)."""
        if not p.has_rest:
            return p.args
        fam, offset = self.families[p.op], self.offsets[p.op]
        left_out = [PVar(f"?__{p.op[1:]}_{i}", p.pos) for i in range(family_arity(fam))]
        return tuple(left_out[:offset]) + p.args + tuple(left_out[offset + len(p.args):])

    def _call(self, p: PCall, side: str) -> str:
        fam = self.families.get(p.op) if p.op_is_var else None
        if p.op_is_var and fam is None:
            raise self.error(f"op variable {p.op} is not bound by the left side", p.pos)
        if fam is None:
            fam = family_of(p.op)
        _, attr_names = FAMILIES[fam]
        operands = self._operands(p)
        if p.op_is_var and len(operands) != family_arity(fam):
            raise self.error(f"{p.op} is used with {len(p.args)} argument(s) here but matched a different arity", p.pos)
        fields = []
        if fam in NAMED_FAMILIES:
            fields.append(self.var(p.op) if p.op_is_var else quote(p.op))
        # In a call that names a placement for an operand, its other bare
        # variables stand for edges: they match whatever placement is there.
        # The operands `..` leaves out are edges always.
        places = any(isinstance(a, PCall) and a.op in PLACEMENT_CTORS for a in p.args)
        written = {id(a) for a in p.args}
        args = []
        for i, a in enumerate(operands):
            if id(a) not in written:
                args.append(self.var(a.name))
                continue
            if places and isinstance(a, PVar):
                if side == "lhs":
                    self.edge_vars.add(a.name)
                elif a.name not in self.edge_vars:
                    raise self.error(f"{a.name} is a value on the left but stands for an edge here", a.pos)
                args.append(self.var(a.name))
                continue
            if fam == "Gather" and i == 1 and isinstance(a, PLit) and side == "rhs":
                args.append(f"(Global (Const {f64(a.value)} \"i32\"))")  # a literal index is i32, as in programs
                continue
            siblings = [b for j, b in enumerate(operands) if j != i and not isinstance(b, PLit)]
            if fam == "Gather":
                siblings = siblings[:1] if i == 0 else []
            args.append(self._term(a, True, side, dtype_from=_first(siblings) if isinstance(a, PLit) else None))
        fields.extend(args)
        for name in attr_names:
            fields.append(self._attr(p, name, side))
        return f"({fam} {' '.join(fields)})"

    def _attr(self, p: PCall, name: str, side: str) -> str:
        a = p.attr(name)
        if a is None:
            if p.op_is_var:
                key = (p.op, name)
                if key not in self.wild_attrs:
                    if side == "rhs":
                        raise self.error(f"{p.op} on the right needs its '{name}' (the left side leaves it open)", p.pos)
                    self.wild_attrs[key] = self.new("a")
                return self.wild_attrs[key]
            if name == "keepdims":
                return "false"
            axes = p.attr("axes")
            if name == "steps" and axes is not None and isinstance(axes.value, tuple):
                return literal((1,) * len(axes.value))
            raise self.error(f"{p.op} needs its '{name}' attribute in a rule", p.pos)
        v = a.value
        if isinstance(v, PVar):
            return self.var(v.name)
        if isinstance(v, (DTypeName, bool, tuple, int)):
            return literal(v)
        raise self.error(f"attribute '{name}' cannot be {v!r}", a.pos)

    # -- conditions ----------------------------------------------------------

    def _shape(self, var: str) -> str:
        return self._lookup("shape", var)

    def _value(self, term_var: str) -> str:
        """A query variable bound to the value of the finite literal in `term_var`'s e-class (the
        match fails where the class holds none, or only inf, -inf or NaN: `rules check` draws a
        literal's value finite, so a rule is checked only where it can match)."""
        key = f"value:{term_var}"
        if key not in self.bound:
            v = self.new("va")
            self.query.append(f"(= {term_var} (Const {v} {self.new('vd')}))")
            self.query.append(f"(< (abs {v}) inf)")
            self.bound[key] = v
        return self.bound[key]

    def condition(self, c) -> None:
        if _counts_operands(c):
            return  # decided per family at compile time
        if c.name in ("==", "!=", "<", "<=", ">", ">=") and any(a.name == "value" for a in c.args):
            # (+ 0.0: -0.0 compares as 0.0 does, and egglog's f64 cannot tell them apart anyway)
            left, right = (self._value(self.var(a.args[0].args[0])) if a.name == "value" else f64(a.args[0] + 0.0)
                           for a in c.args)
            self.query.append(f"({_CMP[c.name]} {left} {right})")
            return
        if c.name in ("==", "!=", "<", "<=", ">", ">="):
            left, right = (self.cterm(a) for a in c.args)
            self.query.append(f"({_CMP[c.name]} {left} {right})")
            return
        args = [a.args[0] for a in c.args]
        if c.name in FAMILY_CLASSES and args[0] in self.families:
            return  # decided per family at compile time
        v = self.var(args[0])
        if c.name == "scalar":
            self.query.append(f"(= (vec-length {self._shape(v)}) 0)")
        elif c.name == "literal":
            self._value(v)
        elif c.name == "float":
            self.query.append(f"(float-dtype {self._dtype_expr_var(v)})")
        elif c.name == "same_shape":
            self.query.append(f"(= {self._shape(v)} {self._shape(self.var(args[1]))})")
        elif c.name == "not_broadcast":
            self._not_broadcast(args[0], c)
        elif c.name in TENSOR_CLASS_RELATIONS:
            self.query.append(f"({TENSOR_CLASS_RELATIONS[c.name]} {v})")
        else:  # pragma: no cover - validate() rejects unknown conditions
            raise self.error(f"unknown condition '{c.name}'", c.pos)

    def _not_broadcast(self, name: str, c) -> None:
        """The outer call reads operand `name` at every element of its result: the two shapes are equal
        where the call's operand map can broadcast (elementwise ops and broadcast_to, gather's indices);
        every other op reads its operands whole (reductions and matmul accumulate over what they read)."""
        lhs = self.rule.lhs
        fam = self.families[lhs.op] if lhs.op_is_var else family_of(lhs.op)
        position = root_operand(lhs, name) + (self.offsets.get(lhs.op, 0) if lhs.op_is_var else 0)
        if fam in ("Bin", "Where", "Bcast") or (fam == "Gather" and position == 1):
            self.query.append(f"(= {self._shape(self.var(name))} {self._shape('?__root')})")

    def cterm(self, t) -> str:
        if t.name == "lit":
            v = t.args[0]
            if isinstance(v, float):
                raise self.error("conditions compare integers; write the number without a decimal point", t.pos)
            return literal(v)
        if t.name == "var":
            return self.var(t.args[0])
        v = self.var(t.args[0].args[0])
        if t.name == "rank":
            return f"(vec-length {self._shape(v)})"
        if t.name == "shape":
            return self._shape(v)
        if t.name == "space":
            sp = self.new("sp")
            self.query.append(f"(has-space {v} {sp})")
            return sp
        if t.name == "dtype":
            return self._dtype_expr_var(v)
        if t.name == "len":
            return f"(vec-length {v})"
        if t.name == "size":
            n = self.new("n")
            self.query.append(f"(= {n} (numel {v}))")
            return n
        assert t.name == "dim"
        s = self._shape(v)
        k = int(t.args[1].args[0])
        if k >= 0:
            self.query.append(f"(> (vec-length {s}) {k})")
            return f"(vec-get {s} {k})"
        self.query.append(f"(>= (+ (vec-length {s}) {k}) 0)")
        return f"(vec-get {s} (+ (vec-length {s}) {k}))"


def _first(items):
    return items[0] if items else None
