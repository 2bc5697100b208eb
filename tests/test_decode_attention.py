"""A decoder step's attention reads its key cache where it is (engine/schedule/kernel.py,
`read_along_sum`; targets/c/dot.py): the query against every key as dot products along each key's
contiguous run, no transposed copy of the cache, at every cache length of one compile, on both targets."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.tolerance import compare
from stitch.engine.schedule.target import load_target
from stitch.lowering.loops import print_loops
from stitch.lowering.lower import lower
from stitch_testing import compile_text, needs_cc, schedule_of

STEP = """func attend[p: 1..300](q: f32[1, 12, 1, 64], past: f32[1, 12, p, 64], k: f32[1, 12, 1, 64],
                            v: f32[1, 12, p + 1, 64]) -> (f32[1, 12, 1, 64], f32[1, 12, p + 1, 64]) {
  keys = concat(past, k, axis=2)
  s = matmul(mul(q, 0.125), transpose(keys, perm=[0, 1, 3, 2]))
  e = exp(sub(s, max(s, axes=[3], keepdims=true)))
  w = div(e, sum(e, axes=[3], keepdims=true))
  return matmul(w, v), keys
}
"""


def test_the_keys_are_read_where_they_are():
    cpu = load_target("cpu")
    text = schedule_of(STEP, cpu)
    # no kernel writes a transposed copy of the keys, and the product packs none per tile
    roots = [line for line in text.splitlines() if line.rstrip().endswith(" root")]
    assert not any("transpose(" in line for line in roots), text
    loops = print_loops(lower(compile_text(STEP, cpu)))
    assert "pack" not in loops
    assert "+= mul(mul(q[0, 3*p1o + p1, 0, r1], 0.125:f32), (r0 < p ? past[" in loops, loops


@needs_cc
@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_every_cache_length_computes_what_the_reference_computes(target, tmp_path):
    compiled = stitch.compile(STEP, target=target, cache_dir=tmp_path)
    if target == "cpu":  # the keys' two sides (the cache, the new key) each summed as dot products
        assert compiled.native.source_path.read_text().count("st_hsum_f32(s0)") == 4
    rng = np.random.default_rng(0)
    for p in (1, 3, 4, 17, 64, 300):
        inputs = {"q": rng.standard_normal((1, 12, 1, 64)), "past": rng.standard_normal((1, 12, p, 64)),
                  "k": rng.standard_normal((1, 12, 1, 64)), "v": rng.standard_normal((1, 12, p + 1, 64))}
        inputs = {n: a.astype(np.float32) for n, a in inputs.items()}
        for got, want in zip(compiled(**inputs), evaluate(compiled.graph, inputs)):
            assert compare(got, want) == "", (target, p)


@needs_cc
def test_keys_of_three_pieces_are_summed_piece_by_piece(tmp_path):
    """A concat of three pieces along the keys: each piece's columns read their own operand (a
    select within a select is cut again, not taken for the outer one's side)."""
    text = """func f[p: 1..100](q: f32[2, 1, 64], a: f32[2, p, 64], b: f32[2, 3, 64], c: f32[2, 1, 64]) -> f32[2, 1, p + 4] {
  keys = concat(concat(a, b, axis=1), c, axis=1)
  return matmul(q, transpose(keys, perm=[0, 2, 1]))
}
"""
    compiled = stitch.compile(text, cache_dir=tmp_path)
    assert "st_hsum_f32(s0)" in compiled.native.source_path.read_text()
    rng = np.random.default_rng(3)
    for p in (1, 5, 100):
        inputs = {"q": rng.standard_normal((2, 1, 64)), "a": rng.standard_normal((2, p, 64)),
                  "b": rng.standard_normal((2, 3, 64)), "c": rng.standard_normal((2, 1, 64))}
        inputs = {n: x.astype(np.float32) for n, x in inputs.items()}
        (got,) = compiled(**inputs)
        assert compare(got, evaluate(compiled.graph, inputs)[0]) == "", p


def _decoder_layer(i: int) -> str:
    """One pre-layer-norm GPT-2 layer (hidden 768, 12 heads, MLP 3072, tanh GELU) of a decode step."""
    return f"""
  c{i} = sub(x{i}, mean(x{i}, axes=[1], keepdims=true))
  h{i} = add(mul(mul(c{i}, rsqrt(add(mean(mul(c{i}, c{i}), axes=[1], keepdims=true), 1e-5))), g{i}), b{i})
  qkv{i} = add(matmul(h{i}, wqkv{i}), bqkv{i})
  q{i} = transpose(reshape(slice(qkv{i}, axes=[1], starts=[0], ends=[768]), shape=[1, 12, 64]), perm=[1, 0, 2])
  k{i} = transpose(reshape(slice(qkv{i}, axes=[1], starts=[768], ends=[1536]), shape=[1, 12, 64]), perm=[1, 0, 2])
  v{i} = transpose(reshape(slice(qkv{i}, axes=[1], starts=[1536], ends=[2304]), shape=[1, 12, 64]), perm=[1, 0, 2])
  keys{i} = concat(pk{i}, k{i}, axis=1)
  vals{i} = concat(pv{i}, v{i}, axis=1)
  s{i} = matmul(mul(q{i}, 0.125), transpose(keys{i}, perm=[0, 2, 1]))
  e{i} = exp(sub(s{i}, max(s{i}, axes=[2], keepdims=true)))
  a{i} = matmul(div(e{i}, sum(e{i}, axes=[2], keepdims=true)), vals{i})
  y{i} = add(x{i}, add(matmul(reshape(transpose(a{i}, perm=[1, 0, 2]), shape=[1, 768]), wo{i}), bo{i}))
  n{i} = sub(y{i}, mean(y{i}, axes=[1], keepdims=true))
  u{i} = add(matmul(mul(n{i}, rsqrt(add(mean(mul(n{i}, n{i}), axes=[1], keepdims=true), 1e-5))), w1{i}), b1{i})
  t{i} = mul(mul(u{i}, 0.5), add(tanh(mul(add(u{i}, mul(mul(mul(u{i}, u{i}), u{i}), 0.044715)), 0.7978845608)), 1.0))
  x{i + 1} = add(y{i}, add(matmul(t{i}, w2{i}), b2{i}))"""


def _decoder_step(layers: int, caches_out: bool = True) -> str:
    """`layers` layers; each layer's keys and values returned (present caches) or, without
    `caches_out`, read only through their concat (the dynamo export's later layers)."""
    params = ", ".join(f"pk{i}: f32[12, p, 64], pv{i}: f32[12, p, 64], g{i}: f32[768], b{i}: f32[768], "
                       f"wqkv{i}: f32[768, 2304], bqkv{i}: f32[2304], wo{i}: f32[768, 768], bo{i}: f32[768], "
                       f"w1{i}: f32[768, 3072], b1{i}: f32[3072], w2{i}: f32[3072, 768], b2{i}: f32[768]"
                       for i in range(layers))
    caches = [f"{c}{i}" for i in range(layers) for c in ("keys", "vals")] if caches_out else []
    results = ", ".join(["f32[1, 768]"] + ["f32[12, p + 1, 64]"] * len(caches))
    returned = ", ".join([f"x{layers}"] + caches)
    body = "".join(_decoder_layer(i) for i in range(layers))
    return f"func step[p: 1..2047](x0: f32[1, 768], {params}) -> ({results}) {{{body}\n  return {returned}\n}}\n"


@pytest.mark.parametrize("caches_out", [True, False])
def test_a_decoder_steps_attention_is_one_kernel_per_layer(caches_out):
    """Issue 45 item 2: at GPT-2's sizes (planned at p = 2047, above the exhaustive search's limit)
    each layer's new query against its p + 1 keys, the softmax and the values are one kernel: the
    scores never reach memory. (The greedy search fused the softmax's exp into its sum and its
    division one reader at a time, each move alone dearer, and tried no fusing after the pass that
    holds fused values another way: search.py's `diamond` and `near`.) With the caches read only
    through their concat, the values' product alone was planned in chunks of the keys' axis and
    its concat priced for one chunk (price.py prices a tile's work over every chunk now)."""
    text = schedule_of(_decoder_step(2, caches_out), load_target("cpu"))
    kernels = text.split("\nkernel ")[1:]
    attention = [k for k in kernels if " = exp(" in k and "axes=[2]" in k and "matmul(" in k]
    assert len(attention) == 2, text
    for k in attention:
        assert " = sum(" in k and " = div(" in k and k.count(" = matmul(") == 2, k
    # no kernel writes the scores, their exponentials or their sums
    assert not any(k.split(":", 1)[1].lstrip().startswith(("f32[12, 1, p + 1]", "f32[12, 1, 1]"))
                   for k in kernels), text
