"""MatMulInteger's product of a long K on the cpu target (engine/schedule/plan.py `chunk_axis`): the byte
weight widened to i32 in the product, its reduction walked in chunks, not a kernel of its own writing the
weight's i32 copy on every call."""

from __future__ import annotations

import pytest
from stitch.engine.schedule.target import load_target

CPU = load_target("cpu")


@pytest.mark.parametrize("weight, widened", [("i8", "cast(w, dtype=i32)"), ("u8", "sub(cast(w, dtype=i32), 134)")])
def test_a_byte_weight_widened_in_the_product_walks_its_reduction_in_chunks(weight, widened):
    """The widening (less its literal zero point for a u8 weight) reads one element where it is, as an
    index map does, so the product walks K in chunks staging the weight's bytes: one kernel. Without
    chunks the widening's pack held all of K and the tile shrank; the search wrote the weight's i32 copy
    in a kernel of its own instead (4x its bytes, on every call)."""
    from stitch_testing import compile_text

    text = f"func f(a: i32[128, 3072], w: {weight}[3072, 768]) -> i32[128, 768] {{ return matmul(a, {widened}) }}"
    (kernel,) = compile_text(text, CPU).cost.kernels
    assert kernel.plan.chunked and kernel.plan.tile[kernel.plan.chunked] < 3072
