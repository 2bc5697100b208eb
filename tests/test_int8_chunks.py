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


@pytest.mark.parametrize("weight, widened, zero", [("i8", "cast(w, dtype=i32)", 0),
                                                   ("u8", "sub(cast(w, dtype=i32), 134)", 134)])
def test_a_bound_byte_weight_laid_out_in_pairs_is_priced_without_its_pack(weight, widened, zero):
    """Bound, the weight's bytes are laid out in pairs of k at binding and the product reads them there
    (lowering/pairs.py): no pack of the widened weight on chip. The cost model prices that (facts.py
    `paired`), so the tile holds more columns than the same product whose weight is a call's input (its
    pack priced and made), the lowered kernel holds no more on chip than was priced, and the product is
    exact."""
    import numpy as np
    import stitch
    from stitch.lowering.verify import onchip_bytes

    text = f"func f(a: i32[128, 768], w: {weight}[768, 3072]) -> i32[128, 3072] {{ return matmul(a, {widened}) }}"
    rng = np.random.default_rng(0)
    w = rng.integers(*((-128, 128) if weight == "i8" else (0, 256)), (768, 3072))
    w = w.astype(np.int8 if weight == "i8" else np.uint8)
    a = rng.integers(0, 256, (128, 768)).astype(np.int32)
    bound, given = stitch.compile(text, weights={"w": w}), stitch.compile(text)
    assert any(b.name.startswith("w_") and "pairs" in b.name for b in bound.loops.params)
    (laid_out,), (packed,) = bound.compiled.extracted.cost.kernels, given.compiled.extracted.cost.kernels
    assert laid_out.plan.tile["p1"] > packed.plan.tile["p1"]
    assert sum(onchip_bytes(bound.loops.kernels[0])) <= laid_out.price.footprint
    assert (bound(a=a) == a.astype(np.int64) @ (w.astype(np.int64) - zero)).all()
