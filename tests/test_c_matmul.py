"""The matmul micro-kernel (targets/c/matmul.py, micro_kernel.py) and the f16 matmul (f16_matmul.py):
register blocks, their order and shape, chunks of k, prefetching the next block of a weight, and
every form equal to the reference."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch.targets import cc, cpu
from stitch_testing import needs_cc

MATMULS = [
    "func f(a: {t}[{i}, {k}], b: {t}[{k}, {j}]) -> {t}[{i}, {j}] {{ return matmul(a, b) }}",
    "func f(a: {t}[3, {i}, {k}], b: {t}[3, {k}, {j}]) -> {t}[3, {i}, {j}] {{ return relu(matmul(exp(a), b)) }}",
    "func f(a: {t}[{k}, {i}], b: {t}[{j}, {k}]) -> {t}[{j}, {i}] {{ return matmul(b, a) }}",
]


@needs_cc
@pytest.mark.parametrize("vector_bytes", [16, 32, 64])
@pytest.mark.parametrize("template", MATMULS)
@pytest.mark.parametrize("t, i, k, j", [("f32", 7, 5, 37), ("f64", 13, 3, 70), ("f32", 1, 9, 16),
                                        ("f32", 33, 17, 130), ("f64", 2, 1, 9)])
def test_register_blocked_matmul_equals_the_reference(template, t, i, k, j, vector_bytes, cache, monkeypatch):
    """Odd row counts, vector leftovers and scalar leftover columns, at every vector width."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: vector_bytes)
    f = stitch.compile(template.format(t=t, i=i, k=k, j=j), cache_dir=cache)
    if j >= 70 and template == MATMULS[0]:
        assert f"st_vf{t[1:]} c0_0" in f.native.source_path.read_text()  # the micro-kernel is what ran
    inputs = random_inputs(f.graph, 3)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize("t, k", [("f32", 2100), ("f64", 1100), ("f32", 5000)])
def test_a_computed_a_too_long_for_the_stack_is_precomputed_one_chunk_of_k_at_a_time(t, k, vector_bytes, cache,
                                                                                      monkeypatch):
    """8 rows of exp(a) over all of k would pass A_SCRATCH_BYTES (a grouped Conv's windows: 6,144
    k): the micro-kernel still runs, precomputing A for one chunk of k after the other (the last
    chunk short), the sums carried in the accumulator between chunks. (16 rows: two tiles of a full
    register block each; 9 rows in tiles of 5 and 4 are priced short blocks, `price.row_block_fill`,
    and the f64 product then took exp(a) from a kernel of its own.)"""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: vector_bytes)
    f = stitch.compile(f"func f(a: {t}[16, {k}], b: {t}[{k}, 24]) -> {t}[16, 24] {{ "
                       f"return matmul(exp(mul(a, 0.01)), b) }}", cache_dir=cache)
    source = f.native.source_path.read_text()
    assert f"st_vf{t[1:]} c0_0" in source and "st_k0 += " in source
    inputs = random_inputs(f.graph, 5)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("cols, rows, vectors", [(144, 8, 3), (128, 8, 3), (64, 6, 4), (112, 6, 4), (256, 6, 4)])
def test_a_products_register_blocks_are_8_by_3_unless_a_lone_vector_is_left(cols, rows, vectors, cache,
                                                                               monkeypatch):
    """With 32 registers (16-lane vectors) a block is 8 rows x 3 vectors (B's panel read once per 8
    rows) unless 3 leaves one vector over where 4 does not: 9 and 8 vectors take 3, 4, 7 and 16 take
    4 (6 rows). The values are the reference's either way."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: 64)
    f = stitch.compile(f"func f(a: f32[48, 96], b: f32[96, {cols}]) -> f32[48, {cols}] {{ return matmul(a, b) }}",
                       cache_dir=cache)
    source = f.native.source_path.read_text()
    assert f"c{rows - 1}_{vectors - 1} = st_fma_f32" in source and f"c{rows}_0 = st_fma_f32" not in source
    assert f"c0_{vectors} = st_fma_f32" not in source
    inputs = random_inputs(f.graph, 1)
    assert compare(f(**inputs)[0], evaluate(f.graph, inputs)[0]) == ""


@needs_cc
def test_a_plain_a_is_walked_panel_by_panel_and_a_computed_one_block_of_rows_by_block(cache, monkeypatch):
    """A read where it is: for each panel of B's columns every block of rows (the panel stays in the
    nearest cache); computed (made once per block of rows): for each block of rows every panel.
    Leftover rows, vectors and columns (13 rows, 83 columns: 48 + 2 vectors + 3) give the reference's values."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: 64)
    for a, rows_first in (("a", False), ("exp(a)", True)):
        f = stitch.compile(f"func f(a: f32[13, 37], b: f32[37, 83]) -> f32[13, 83] {{ return matmul({a}, b) }}",
                           cache_dir=cache)
        source = f.native.source_path.read_text()
        rows, cols = source.index("; p0 += "), source.index("; p1 += 48)")
        assert (rows < cols) == rows_first, a
        inputs = random_inputs(f.graph, 2)
        assert compare(f(**inputs)[0], evaluate(f.graph, inputs)[0]) == ""


@needs_cc
def test_a_product_whose_columns_span_two_loops_runs_in_vectors(cache, tmp_path):
    """A product stored transposed by heads keeps its columns as two loops (4 heads x 16); every
    access walks them as one span of 64, which the micro-kernel takes as one loop (it ran the two
    loops one element at a time: a GPT-2 projection so tiled took 9.4 ms instead of 1.4)."""
    from stitch_testing import target_text

    target = tmp_path / "small.toml"
    target.write_text(target_text(onchip_bytes=32768, name='"small"'))
    text = ("func f(x: f32[32, 64], w: f32[64, 64]) -> f32[4, 16, 32] {\n"
            "  return transpose(reshape(matmul(x, w), shape=[32, 4, 16]), perm=[1, 2, 0])\n}\n")
    f = stitch.compile(text, target=str(target), cache_dir=cache)
    source = f.native.source_path.read_text()
    assert "for (int64_t p0_p1 = 0; p0_p1 < 64;" in source and "st_vf32 c0_0" in source
    inputs = random_inputs(f.graph, 4)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("j, vector", [(8, "st_vf32_32 c0_0"), (4, "st_vf32_16 c0_0"), (12, "st_vf32_32 c0_0")])
def test_a_product_narrower_than_a_vector_runs_in_narrower_vectors(j, vector, cache, monkeypatch):
    """Fewer columns than a 64-byte vector holds: the widest vectors that fit (not every column
    one by one, at a tenth of the speed); 12 columns are one 8-lane vector and 4 scalar columns."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: 64)
    f = stitch.compile(MATMULS[0].format(t="f32", i=13, k=40, j=j), cache_dir=cache)
    assert vector in f.native.source_path.read_text()
    inputs = random_inputs(f.graph, 3)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_f16_matmul_rounds_once_per_element_as_numpy_does(target, cache):
    """numpy's f16 matmul multiplies and sums in float and rounds each output once; so do the C
    micro-nest and the numpy executor (rounding at every step drifted by several ulp)."""
    text = "func f(a: f16[4, 3, 96], b: f16[4, 96, 40]) -> f16[4, 3, 40] { return matmul(a, b) }"
    compiled = stitch.compile(text, target=target, cache_dir=cache)
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((4, 3, 96), (4, 96, 40)))
    np.testing.assert_array_equal(compiled(a=a, b=b)[0], a @ b)


@needs_cc
@pytest.mark.parametrize("k, j, bound", [(1024, 256, True), (1024, 256, False)])
def test_a_product_prefetches_the_next_block_of_a_weight_laid_out_at_bind(k, j, bound, cache, tmp_path):
    """Read from a block bind.py laid out (tiles, or chunks of K, one after the other), each register
    block prefetches its share of the region after its own; read from a staged copy, nothing."""
    from stitch_testing import target_text

    target = tmp_path / "small.toml"
    target.write_text(target_text(onchip_bytes=65536, name='"small"'))  # 4 tiles of 64 columns, 8 chunks of K
    text = (f"func f(a: f32[24, {k}], b: f32[{k}, {j}], r: f32[24, {j}]) -> f32[24, {j}] {{ "
            f"return add(matmul(a, b), r) }}")
    inputs = random_inputs(stitch.compile(text, target=str(target), cache_dir=cache).graph, 5)
    weights = {"b": inputs.pop("b")} if bound else {}
    f = stitch.compile(text, target=str(target), cache_dir=cache, weights=weights)
    source = f.native.source_path.read_text()
    assert ("__builtin_prefetch(st_ahead" in source) == bound
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs | weights)):
        assert compare(got, want) == ""


@needs_cc
def test_two_products_of_bound_weights_in_one_tile_each_prefetch_their_own(cache):
    """Attention's scores from x's two projections (Whisper's encoder layer): one kernel holds both
    products, each reading its weight laid out at bind and prefetching the block after its own, each
    pointer in a block of its own (the C once declared both in one scope and did not compile). At
    hidden 384: at 768 a tile of three heads' columns has panels past half of a 1 MiB L2, and the
    plan stores the projections apart."""
    text = """func m(x: f32[1, 128, 384], wq: f32[384, 384], wk: f32[384, 384]) -> f32[1, 6, 128, 128] {
      q = transpose(reshape(matmul(x, wq), shape=[1, 128, 6, 64]), perm=[0, 2, 1, 3])
      k = transpose(reshape(matmul(x, wk), shape=[1, 128, 6, 64]), perm=[0, 2, 3, 1])
      return matmul(q, k)
    }"""
    rng = np.random.default_rng(0)
    weights = {n: (rng.standard_normal((384, 384)) / 19.6).astype(np.float32) for n in ("wq", "wk")}
    x = rng.standard_normal((1, 128, 384)).astype(np.float32)
    f = stitch.compile(text, target="cpu", cache_dir=cache, weights=weights)
    assert len(f.compiled.schedule.kernels) == 1
    assert f.native.source_path.read_text().count("const char *st_ahead =") == 2
    (got,) = f(x=x)
    assert compare(got, evaluate(f.graph, {"x": x} | weights)[0]) == ""


@needs_cc
@pytest.mark.parametrize("t", ["f32", "f64"])
def test_a_matmul_walked_in_chunks_equals_the_reference(t, cache, tmp_path):
    """A 32 KB target forces K = 1024 into chunks; the epilogue (bias, residual, relu) runs once
    after the last chunk, the accumulator is set once before the first."""
    from stitch_testing import loops_of, target_text

    target = tmp_path / "small.toml"
    target.write_text(target_text(onchip_bytes=32768, name='"small"'))
    text = (f"func f(a: {t}[24, 1024], b: {t}[1024, 48], bias: {t}[48], r: {t}[24, 48]) -> {t}[24, 48] {{ "
            "return relu(add(add(matmul(a, b), bias), r)) }")
    f = stitch.compile(text, target=str(target), cache_dir=cache)
    kc = next(plan for plan in f.compiled.cost.plans if plan.chunked)
    assert f"{kc.chunked}o in 0..{1024 // kc.tile[kc.chunked]} serial" in loops_of(text, f.compiled.target)
    inputs = random_inputs(f.graph, 7)
    inputs["a"] = inputs["a"] - 1.25  # both signs, so relu and the sums' order both matter
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
def test_a_packed_right_operand_walked_in_chunks_packs_one_chunk_at_a_time(cache, tmp_path):
    """A weight read through a transpose (OPT's fc2, exported as Linear's [out, in] weight) is packed
    before the product; where the plan walks K in chunks, each chunk's rows are packed in the chunk
    loop, so the pack is the chunk's size, as the cost model counted it (it once held all of K, and
    the kernel failed the verifier's capacity check)."""
    from stitch_testing import loops_of, target_text

    target = tmp_path / "small.toml"
    target.write_text(target_text(onchip_bytes=131072, name='"small"'))
    text = ("func f(a: f32[32, 1024], w: f32[128, 1024], r: f32[32, 128]) -> f32[32, 128] { "
            "return add(matmul(a, transpose(w, perm=[1, 0])), r) }")
    f = stitch.compile(text, target=str(target), cache_dir=cache)
    kc, price = next((k.plan, k.price) for k in f.compiled.cost.kernels if k.plan.chunked)
    assert kc.packed and price.footprint <= 131072
    loops = loops_of(text, f.compiled.target)
    assert f"{kc.chunked}o in 0..{1024 // kc.tile[kc.chunked]} serial" in loops
    pack = next(line for line in loops.splitlines() if "alloc local" in line and "_pack" in line)
    assert f"[{kc.tile[kc.chunked]}, " in pack, pack  # one chunk of K
    inputs = random_inputs(f.graph, 3)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize("i, k, j", [(7, 5, 37), (33, 64, 130), (1, 96, 72)])
def test_an_integer_product_runs_the_micro_kernel_and_wraps_as_the_reference(i, k, j, vector_bytes, cache,
                                                                           monkeypatch):
    """u8 activations less their zero point times i8 weights, in i32 (ONNX's MatMulInteger): the
    micro-kernel's blocks give the reference's values bit for bit, and an i32 sum that overflows
    wraps the same (the order of an integer sum does not change it)."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: vector_bytes)
    text = (f"func f(a: u8[{i}, {k}], b: i8[{k}, {j}], za: u8[], big: i32[{i}, {k}]) -> (i32[{i}, {j}], i32[{i}, {j}]) "
            f"{{\n  return matmul(sub(cast(a, dtype=i32), cast(za, dtype=i32)), cast(b, dtype=i32)), "
            f"matmul(big, cast(b, dtype=i32))\n}}\n")
    f = stitch.compile(text, cache_dir=cache)
    if i > 1 and j >= 70:
        assert "st_vi32 c0_0" in f.native.source_path.read_text()
    rng = np.random.default_rng(5)
    inputs = {"a": rng.integers(0, 256, (i, k), dtype=np.uint8), "b": rng.integers(-128, 128, (k, j), dtype=np.int8),
              "za": np.array(131, np.uint8), "big": rng.integers(2**24, 2**31 - 1, (i, k), dtype=np.int32)}
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert got.dtype == np.int32 and np.array_equal(got, want)


@needs_cc
def test_a_computed_as_leftover_columns_read_it_precomputed(cache, monkeypatch):
    """24 columns (a vector and 8 left over; 12 with AVX2's 8 lanes) of a ReLU6'd A, MobileNetV2's projection: the
    leftover columns
    read the block's precomputed A (a_pre) instead of computing A again per column (its NaN-aware max and
    min branching on random signs); each such column adds the same products in the same order as the plain
    loops, so to the bit (the vector columns fuse them)."""
    from stitch.targets.c import recognizers

    lanes = cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) // 4
    j = lanes + lanes // 2
    text = (f"func f(x: f32[64, 144], b: f32[144], w: f32[144, {j}]) -> f32[64, {j}] {{\n"
            "  return matmul(minimum(maximum(add(x, b), 0.0), 6.0), w)\n}\n")
    taken = stitch.compile(text, cache_dir=cache)
    leftover = [ln for ln in taken.native.source_path.read_text().splitlines() if "+= ((float)(" in ln]
    assert leftover and all("a_pre[" in ln and "st_max_f32" not in ln for ln in leftover), leftover
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("matmul"))
    plain = stitch.compile(text, cache_dir=cache)
    inputs = random_inputs(taken.graph, 3)
    (got,), (want,) = taken(**inputs), plain(**inputs)
    assert got[:, 16:].tobytes() == want[:, 16:].tobytes()
    assert compare(got, evaluate(taken.graph, inputs)[0]) == ""


@needs_cc
@pytest.mark.parametrize("vector_bytes, rows", [(32, 6), (64, 8)])
def test_a_computed_along_k_is_made_by_one_loop_over_a_blocks_rows(vector_bytes, rows, cache, monkeypatch):
    """A computed A read along k (MobileNetV2's ReLU6'd projection input) is made for a block of rows
    by one loop over the rows around its vector loop along k, not a copy of that loop per row (each
    copy vectorized by the compiler again); the rows left over the full blocks (64 = 10 x 6 + 4 with
    AVX2's blocks, 8 x 8 with AVX-512's) the same way. The values are the reference's."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc_, flags: vector_bytes)
    text = ("func f(x: f32[64, 144], b: f32[144], w: f32[144, 32]) -> f32[64, 32] {\n"
            "  return matmul(minimum(maximum(add(x, b), 0.0), 6.0), w)\n}\n")
    f = stitch.compile(text, cache_dir=cache)
    source = f.native.source_path.read_text()
    loops = [ln.strip().split(";")[1].strip() for ln in source.splitlines() if "for (int64_t st_r = 0;" in ln]
    assert loops == [f"st_r < {rows}"] + ([f"st_r < {64 % rows}"] if 64 % rows else []), loops
    made = [ln for ln in source.splitlines() if "a_pre[" in ln and "] = " in ln and "float a" not in ln]
    assert made and all("a_pre[st_r][" in ln for ln in made), made
    if vector_bytes > cc.vector_bytes(cpu.compiler(), cc.compiler_flags()):
        return  # (AVX-512's C on a machine without it: the form is checked, not run)
    inputs = random_inputs(f.graph, 5)
    assert compare(f(**inputs)[0], evaluate(f.graph, inputs)[0]) == ""


@needs_cc
@pytest.mark.parametrize("vector_bytes, vectors", [(16, 12), (32, 6), (64, 3)])
@pytest.mark.parametrize("bound", [True, False])
def test_a_product_of_one_row_reads_a_whole_panel_per_k(vector_bytes, vectors, bound, cache, monkeypatch):
    """A product of one row (a decoder step's) holds one sum per vector and nothing else: at every
    vector width its register block spans one panel of the widest vectors (48 f32, lowering/panels.py),
    so a weight laid out in panels streams in one contiguous pass, not one pass per narrower block
    reading every third cache line. The values are the reference's, the weight bound or an input."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: vector_bytes)
    rng = np.random.default_rng(vectors)
    w = rng.standard_normal((96, 192)).astype(np.float32)
    text = "func f(x: f32[1, 96], w: f32[96, 192]) -> f32[1, 192] { return matmul(x, w) }"
    f = stitch.compile(text, cache_dir=cache, weights={"w": w} if bound else None)
    source = f.native.source_path.read_text()
    assert f"c0_{vectors - 1} = st_fma_f32" in source and f"c0_{vectors} = st_fma_f32" not in source
    x = rng.standard_normal((1, 96)).astype(np.float32)
    inputs = {"x": x} if bound else {"x": x, "w": w}
    (got,), (want,) = f(**inputs), evaluate(f.graph, {"x": x, "w": w})
    assert compare(got, want) == ""
