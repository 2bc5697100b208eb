"""The loop shapes the C printer writes in forms of their own, in the order it tries them.

The printer (emit.py) first offers each statement to the REWRITE recognizers, then to the
STATEMENTS ones in this order, the first whose `match` gives a plan writing it; a statement none
takes is written plainly, and a plain loop gets what the BEFORE_LOOP ones put ahead of it. Each
recognizer's module says what it matches and why its form pays; each is tested against its
plain-loop twin (tests/test_c_*.py: the same program with it left out of the table computes the
same values). `without` gives the table less some of them.
"""

from __future__ import annotations

from . import (
    column_sums,
    dot,
    extremum,
    f16_matmul,
    int_dot,
    int_pairs,
    int_rows,
    long_sum,
    matmul,
    nibble_dot,
    pipelined_passes,
    pipelined_rows,
    prefetch,
    read_order,
    row_segments,
    simd_reduce,
    split,
    split_outer,
    stream,
    strided_row,
    summed_row,
    transpose,
    transpose_middle,
    vector_loop,
    vector_sum,
)
from .emit import Recognizer, Stage

RECOGNIZERS: tuple[Recognizer, ...] = (
    Recognizer("read_order", Stage.REWRITE, read_order.match, read_order.emit),
    Recognizer("transpose_middle", Stage.REWRITE, transpose_middle.match, transpose_middle.emit),
    Recognizer("summed_row", Stage.STATEMENTS, summed_row.match, summed_row.emit),
    Recognizer("split", Stage.STATEMENTS, split.match, split.emit),
    Recognizer("split_outer", Stage.STATEMENTS, split_outer.match, split_outer.emit),
    Recognizer("row_segments", Stage.STATEMENTS, row_segments.match, row_segments.emit),
    Recognizer("int_pairs", Stage.STATEMENTS, int_pairs.match, int_pairs.emit),
    Recognizer("int_rows", Stage.STATEMENTS, int_rows.match, int_rows.emit),
    Recognizer("matmul", Stage.STATEMENTS, matmul.match, matmul.emit),
    Recognizer("nibble_dot", Stage.STATEMENTS, nibble_dot.match, nibble_dot.emit),
    Recognizer("dot", Stage.STATEMENTS, dot.match, dot.emit),
    Recognizer("int_dot", Stage.STATEMENTS, int_dot.match, int_dot.emit),
    Recognizer("f16_matmul", Stage.STATEMENTS, f16_matmul.match, f16_matmul.emit),
    Recognizer("column_sums", Stage.STATEMENTS, column_sums.match, column_sums.emit),
    Recognizer("vector_sum", Stage.STATEMENTS, vector_sum.match, vector_sum.emit),
    Recognizer("float_extremum", Stage.STATEMENTS, extremum.match, extremum.emit),
    Recognizer("long_sum", Stage.STATEMENTS, long_sum.match, long_sum.emit),
    Recognizer("simd_reduce", Stage.STATEMENTS, simd_reduce.match, simd_reduce.emit),
    Recognizer("transpose", Stage.STATEMENTS, transpose.match, transpose.emit),
    Recognizer("vector_loop", Stage.STATEMENTS, vector_loop.match, vector_loop.emit),
    Recognizer("stream", Stage.STATEMENTS, stream.match, stream.emit),
    Recognizer("pipelined_rows", Stage.STATEMENTS, pipelined_rows.match, pipelined_rows.emit),
    Recognizer("pipelined_passes", Stage.STATEMENTS, pipelined_passes.match, pipelined_passes.emit),
    Recognizer("strided_row", Stage.STATEMENTS, strided_row.match, strided_row.emit),
    Recognizer("prefetch", Stage.BEFORE_LOOP, prefetch.match, prefetch.emit),
)
NAMES = tuple(r.name for r in RECOGNIZERS)


def without(*names: str) -> tuple[Recognizer, ...]:
    """RECOGNIZERS less those named (each must be one)."""
    unknown = set(names) - set(NAMES)
    if unknown:
        raise ValueError(f"no recognizer {', '.join(sorted(unknown))} (there are {', '.join(NAMES)})")
    return tuple(r for r in RECOGNIZERS if r.name not in names)
