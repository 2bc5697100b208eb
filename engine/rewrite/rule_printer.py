"""Rules back to `.rules` text: `parse_rules(print_rules(rf)) == rf`.

What the soundness checker shows of a rule it expanded, and the round-trip test of the rule
language, read this.
"""

from __future__ import annotations

from ..ir.program import DTypeName
from .rules import CFun, Cond, Pattern, PCall, PLit, PVar, Rule, RuleFile

_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


def print_rules(rf: RuleFile) -> str:
    return "".join(print_rule(r) + "\n" for r in rf.rules)


def print_rule(rule: Rule) -> str:
    tags = f" [{', '.join(rule.tags)}]" if rule.tags else ""
    text = f"rule {rule.name}{tags}: {print_pattern(rule.lhs)} => {print_pattern(rule.rhs)}"
    if rule.conds:
        text += " where " + ", ".join(_condition(c) for c in rule.conds)
    return text


def print_pattern(p: Pattern) -> str:
    if isinstance(p, PVar):
        return p.name
    if isinstance(p, PLit):
        return _value(p.value)
    return _call(p)


def _call(p: PCall) -> str:
    parts = [".."] * p.rest_before + [print_pattern(a) for a in p.args] + [".."] * p.rest_after
    parts += [f"{a.name}={a.value.name if isinstance(a.value, PVar) else _value(a.value)}" for a in p.attrs]
    return f"{p.op}({', '.join(parts)})"


def _condition(c: Cond) -> str:
    if c.name in _COMPARISONS:
        left, right = c.args
        return f"{_term(left)} {c.name} {_term(right)}"
    return f"{c.name}({', '.join(_term(a) for a in c.args)})"


def _term(t: CFun) -> str:
    if t.name == "var":
        return t.args[0]
    if t.name == "lit":
        return _value(t.args[0])
    return f"{t.name}({', '.join(_term(a) for a in t.args)})"


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, DTypeName):
        return v.name
    if isinstance(v, tuple):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return repr(v)
