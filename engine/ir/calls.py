"""Calls between the funcs of one file, inlined by the checker.

`g(a, b)`, where `g` is a func of the same file (and not an op), is checked as g's body with g's
parameters bound to the values of `a` and `b`: the call's value is g's one result, and the graph
holds g's ops in place of the call. Every stage after the checker sees one func, so saturation
sees through the call as through any other expression.

A call must give g exactly its parameters' types (no broadcasting, no promotion; a literal takes
its parameter's dtype). A func called from itself, directly or through others, is an error that
names the cycle, each call at its file:line:col.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import dims
from .program import Call, Func, Pos, Program


@dataclass(frozen=True)
class CallSite:
    """One call being inlined: `caller` calls `callee` at `pos`."""

    caller: str
    callee: str
    pos: Pos


def funcs_of(program: Program) -> dict[str, Func]:
    return {f.name: f for f in program.funcs}


def cycle_message(stack: list[CallSite], root: str, site: CallSite) -> str | None:
    """What is wrong when `site` is entered with `stack` open under the func `root`, or None when
    `site` closes no cycle."""
    open_funcs = [root] + [s.callee for s in stack]
    if site.callee not in open_funcs:
        return None
    chain = (stack + [site])[open_funcs.index(site.callee):]
    calls = ", ".join(f"'{s.caller}' calls '{s.callee}' ({s.pos})" for s in chain)
    return f"recursive call: {calls}; a func may call other funcs, but not itself, directly or through others"


def inline(checker, e: Call, callee: Func) -> int:
    """Check the call `e` to `callee` inside `checker` (engine/ir/check.py's _Checker): its node."""
    c = checker
    site = CallSite(c.func.name, callee.name, e.pos)
    problem = cycle_message(c.calls, c.root, site)
    if problem:
        raise c.error(problem, e.pos)
    _check_signature(c, e, callee)
    args = [c.expr(a, p.type.dtype) for a, p in zip(e.args, callee.params)]
    for k, (a, p, nid) in enumerate(zip(e.args, callee.params, args)):
        got = c.nodes[nid].type
        if got != p.type:
            raise c.error(f"argument {k} of the call to '{callee.name}' is {got}, but its parameter '{p.name}' is "
                          f"{p.type}", a.pos, "a call passes exactly its parameters' types: add a cast, "
                                              "broadcast_to or reshape")
    saved = c.env, c.defined_at, c.func
    c.env, c.defined_at, c.func = {}, {}, callee
    c.calls.append(site)
    try:
        for p, nid in zip(callee.params, args):
            c.bind(p.name, p.pos)
            c.env[p.name] = nid
        for a in callee.body:
            c.bind(a.name, a.pos)
            c.env[a.name] = c.expr(a.expr, None)
        if len(callee.returns) != 1:
            raise c.error(f"func '{callee.name}' returns {len(callee.returns)} value(s) but its signature declares "
                          f"{len(callee.results)}", callee.return_pos)
        out = c.expr(callee.returns[0], None)
        if c.nodes[out].type != callee.results[0]:
            raise c.error(f"return value 0 has type {c.nodes[out].type} but the signature of '{callee.name}' declares "
                          f"{callee.results[0]}", callee.returns[0].pos)
    finally:
        c.calls.pop()
        c.env, c.defined_at, c.func = saved
    return out


def _check_signature(c, e: Call, callee: Func) -> None:
    """What a call to `callee` must be before its arguments are checked."""
    if e.attrs:
        raise c.error(f"a call to func '{callee.name}' takes no attributes", e.attrs[0].pos)
    if len(callee.results) != 1:
        raise c.error(f"func '{callee.name}' returns {len(callee.results)} values: only a func of one result can be "
                      "called", e.pos, "split it into funcs of one result each")
    if callee.symbols or not all(dims.is_static(t.shape) for t in (*(p.type for p in callee.params),
                                                                     *callee.results)):
        raise c.error(f"func '{callee.name}' has symbolic dimensions: calling it is not supported yet", e.pos)
    if len(e.args) != len(callee.params):
        shown = ", ".join(f"{p.name}: {p.type}" for p in callee.params)
        raise c.error(f"func '{callee.name}' takes {len(callee.params)} argument(s), got {len(e.args)}", e.pos,
                      f"its parameters: ({shown})")
