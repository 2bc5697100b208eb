"""f16 sums accumulate in f32: every target, because the LoopProgram says so.

An f16 sum or mean accumulates in f32 and rounds once (docs/explanation/floating-point.md;
numpy does that along a contiguous axis but accumulates in f16
along any other, where 4,096 ones sum to 2,048). Loop-nest formation writes a
reduction as an accumulator temporary: initialized, accumulated into
(`Accumulate(op="sum")`), divided in place for a mean, then read. This pass
makes every f16 temporary that a vector sum accumulates into an f32 buffer:
its initialization and the mean's division compute in f32, and every other
read is cast back to f16, the one rounding, except a plain copy into a buffer lowering declared
f32: the partials of a sum split across tiles (lowering/lower.py's `split_across_tiles`), which
carry each tile's f32 sum to the f32 combination. The backends (C, the numpy
executor, the simulator) then need no rule of their own. An f16 matmul's accumulator is widened
too: a product whose reduction is walked in chunks accumulates each chunk in one statement, and
its f16 accumulator rounded between chunks, so that partial sums past 65504 gave inf where the
whole product does not. (Its products are float too, which the backends see from the f16
multiply it accumulates: `loops.accumulates_in_float`.)
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.schedule.machine import sum_accumulator
from .loops import Accumulate, Buffer, For, Lit, Load, LoopProgram, Op, Store

WIDE = sum_accumulator("f16")  # the one rule, which the cost model counts in an accumulator's bytes


def widen_f16_accumulators(program: LoopProgram) -> LoopProgram:
    """A new program with f16 sum accumulators in f32; `program` is left as it was."""
    temporaries = {name for k in program.kernels for name in k.forwardable}
    wide = {s.buffer for k in program.kernels for s in _leaves(k.body)
            if isinstance(s, Accumulate) and s.op == "sum" and s.buffer in temporaries
            and _dtype(program, s.buffer) == "f16"}
    if not wide:
        return program

    def buffer(b: Buffer) -> Buffer:
        return replace(b, dtype=WIDE) if b.name in wide else b

    partials = {b.name for b in program.intermediates if b.dtype == WIDE}
    kernels = [replace(k, allocs=[buffer(b) for b in k.allocs], body=[_stmt(s, wide, partials) for s in k.body])
               for k in program.kernels]
    return replace(program, kernels=kernels, intermediates=[buffer(b) for b in program.intermediates])


def _dtype(program: LoopProgram, name: str) -> str | None:
    try:
        return program.buffer(name).dtype
    except KeyError:
        return None


def _leaves(stmts):
    for s in stmts:
        if isinstance(s, For):
            yield from _leaves(s.body)
        else:
            yield s


def _stmt(s, wide: set[str], partials: set[str]):
    if isinstance(s, For):
        return replace(s, body=[_stmt(b, wide, partials) for b in s.body])
    if isinstance(s, Accumulate):
        return replace(s, value=_narrow(s.value, wide))
    if s.buffer in wide:  # the initialization, or a mean's division: in f32
        return Store(s.buffer, s.index, _in_wide(s.value, wide))
    if s.buffer in partials and isinstance(s.value, Load) and s.value.buffer in wide:
        return s  # a tile's f32 sum into its f32 partial (before this pass only lowering writes f16 into f32 so)
    return replace(s, value=_narrow(s.value, wide))


def _narrow(e, wide: set[str]):
    """`e` with every read of a widened buffer rounded back to f16."""
    if isinstance(e, Load):
        return Op("cast", (e,), "f16") if e.buffer in wide else e
    if isinstance(e, Op):
        return replace(e, args=tuple(_narrow(a, wide) for a in e.args))
    return e


def _in_wide(e, wide: set[str]):
    """The value stored into a widened buffer, computed in f32 where it reads only widened buffers and
    literals (an initialization, a mean's division), else rounded as written and then widened."""
    if _wide_only(e, wide):
        return _retype(e)
    return Op("cast", (_narrow(e, wide),), WIDE)


def _wide_only(e, wide: set[str]) -> bool:
    if isinstance(e, Load):
        return e.buffer in wide
    if isinstance(e, Op):
        return e.op in ("add", "sub", "mul", "div") and all(_wide_only(a, wide) for a in e.args)
    return isinstance(e, Lit)


def _retype(e):
    if isinstance(e, Lit):
        return Lit(e.value, WIDE)
    if isinstance(e, Op):
        return Op(e.op, tuple(_retype(a) for a in e.args), WIDE)
    return e
