"""The machine both the cost model and the C backend assume: one definition each side reads.

The vector unit runs a product's tile in register blocks of MICRO_ROWS rows of C by MICRO_VECTORS
vectors (targets/c/micro_kernel.py); the cost model prices a tile's panel reads
(`price.panel_bytes`) and its narrow products (`price.tile_work`) by the same shape. Whether the
micro-kernel reads a product's left operand where it is, or computes it block by block of rows, is
one rule (`reads_left_in_place`) that the cost model applies to a kernel and the backend to a loop
nest. An f16 sum accumulates in f32 on every target (`sum_accumulator`, lowering/widen.py), which
the cost model counts in the accumulator's bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

from .index import Ix, affine
from .target import Target, machine_vector_bytes

# Rows of C the micro-kernel holds in registers.
MICRO_ROWS = 8
# Vectors of C across one register block: the columns of one panel of B (with 32 vector registers).
MICRO_VECTORS = 3
# The narrowest vector the micro-kernel runs a product's columns in; fewer columns run a lane at a time.
NARROWEST_VECTOR_BYTES = 16
# The widest vector a panel of a bound weight is laid out for (lowering/panels.py): AVX-512's.
PANEL_VECTOR_BYTES = 64


def panel_vectors(vectors: int) -> int:
    """Vectors of C across one register block of a product `vectors` wide (with 32 vector registers):
    MICRO_VECTORS (8 rows: 24 sums, B's panel read once per 8 rows) unless that leaves a lone vector
    over that MICRO_VECTORS + 1 (6 rows) does not."""
    wide = MICRO_VECTORS
    if vectors < wide:
        return vectors
    return wide + 1 if vectors % wide == 1 and vectors % (wide + 1) != 1 else wide


def panel_columns(columns: int, element_bytes: int) -> int | None:
    """The columns of one panel of a product's right operand `columns` wide: one register block of
    the widest vectors, when the columns are two or more whole panels; else None (no panels)."""
    lanes = PANEL_VECTOR_BYTES // element_bytes
    if columns % lanes:
        return None
    width = panel_vectors(columns // lanes) * lanes
    return width if columns % width == 0 and columns > width else None


def pair_columns(target: Target) -> int | None:
    """The columns of one panel of a bound byte weight laid out in pairs of k (lowering/pairs.py), which
    targets/c/int_pairs.py widens to the 16-bit pairs `vpmaddwd` multiplies: two of the machine's vectors
    of 32-bit lanes, where the target reads weights in place and the vectors are 32 or 64 bytes (AVX2's
    and AVX-512's); None elsewhere (the product packs its widened weight per tile)."""
    width = machine_vector_bytes()
    return 2 * width // 4 if target.weights_in_place and width in (32, 64) else None


def reads_left_in_place(indices: Iterable[tuple[Ix, ...]] | None) -> bool:
    """Whether the micro-kernel reads a product's left operand A with plain loads where it is (it
    shifts their indices by rows, so each must be affine), given the indices of the loads A is
    made of; None for an A that is computed (anything but loads through index maps), which it
    makes once per block of rows instead."""
    return indices is not None and all(affine(ix) for index in indices for ix in index)


def sum_accumulator(dtype: str) -> str:
    """The dtype a sum, mean or matmul of `dtype` accumulates in: an f16 sum in f32, rounded once
    (docs/explanation/floating-point.md)."""
    return "f32" if dtype == "f16" else dtype
