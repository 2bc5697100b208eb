"""A one-row product of a quantized weight dequantized where it is read (targets/c/nibble_dot.py):
4-bit nibbles and 8-bit bytes, with and without a zero point, blocks of 32 and coarser, K with and
without a partial block, columns that do and do not fill the recognizer's groups: the C with the
recognizer in computes what the plain loops compute and what the reference does, and the weight is
read packed (no f32 copy of it, no unpacked byte copy, in the program or its prologue)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.tolerance import differences
from stitch.lowering.loops import print_loops
from stitch.targets import cc, cpu
from stitch.targets.c import recognizers

pytestmark = pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")
VECTOR_BYTES = cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) if cpu.compiler() is not None else 0
AVX512 = VECTOR_BYTES == 64


def nibbles(k: int, n: int, block: int, zero: str) -> str:
    """y = x @ W^T with W[n, k] = (nibble(n, k) - zero) * s[n, k // block], two nibbles a byte, the low first."""
    blocks = -(-k // block)
    z = {"literal": "8.0", "tensor": f"cast(reshape(broadcast_to(reshape(z, shape=[{n}, {blocks}, 1]), "
                                     f"shape=[{n}, {blocks}, {block}]), shape=[{n}, {blocks * block}]), dtype=f32)"}
    zp = z[zero] if zero in z else None
    zparam = f", z: u8[{n}, {blocks}]" if zero == "tensor" else ""
    full = blocks * block
    zsliced = f"slice({zp}, axes=[1], starts=[0], ends=[{k}])" if zero == "tensor" else zp
    deq = f"sub(cast(q, dtype=f32), {zsliced})" if zp else "cast(q, dtype=f32)"
    return f"""func f(x: f32[1, {k}], b: u8[{n}, {k // 2}], s: f32[{n}, {blocks}]{zparam}) -> f32[1, {n}] {{
  wide = reshape(broadcast_to(reshape(b, shape=[{n}, {k // 2}, 1]), shape=[{n}, {k // 2}, 2]), shape=[{n}, {k}])
  shift = cast(mul(bitand(iota(shape=[{n}, {k}], axis=1), 1), 4), dtype=u8)
  q = bitand(shr(wide, shift), 15)
  sc = slice(reshape(broadcast_to(reshape(s, shape=[{n}, {blocks}, 1]), shape=[{n}, {blocks}, {block}]),
             shape=[{n}, {full}]), axes=[1], starts=[0], ends=[{k}])
  return matmul(x, transpose(mul({deq}, sc), perm=[1, 0]))
}}
"""


def bytes_weight(k: int, n: int, block: int, dtype: str) -> str:
    blocks = k // block
    return f"""func f(x: f32[1, {k}], b: {dtype}[{n}, {k}], s: f32[{n}, {blocks}]) -> f32[1, {n}] {{
  sc = reshape(broadcast_to(reshape(s, shape=[{n}, {blocks}, 1]), shape=[{n}, {blocks}, {block}]), shape=[{n}, {k}])
  return matmul(x, transpose(mul(cast(b, dtype=f32), sc), perm=[1, 0]))
}}
"""


CASES = {
    "nibbles": nibbles(256, 40, 32, "literal"),
    "nibbles, zero points": nibbles(256, 37, 32, "tensor"),
    "nibbles, no zero point, blocks of 64": nibbles(192, 9, 64, "none"),
    "nibbles, a partial block": nibbles(80, 12, 32, "literal"),
    "u8": bytes_weight(128, 21, 32, "u8"),
    "i8": bytes_weight(96, 8, 32, "i8"),
}


def weights(graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in zip(graph.param_names, graph.param_types):
        if t.dtype == "f32":
            out[name] = rng.standard_normal(t.shape).astype(np.float32)
        else:
            info = np.iinfo(t.dtype.replace("u", "uint") if t.dtype == "u8" else "int8")
            out[name] = rng.integers(info.min, info.max + 1, t.shape).astype(info.dtype)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_recognizer_computes_what_the_plain_loops_compute(case, tmp_path, monkeypatch):
    text = CASES[case]
    probe = stitch.compile(text, cache_dir=tmp_path)
    values = weights(probe.graph, 7)
    x = {"x": values.pop("x")}
    taken = stitch.compile(text, weights=values, cache_dir=tmp_path)
    source = taken.native.source_path.read_text()
    if VECTOR_BYTES >= 32:  # AVX-512's table lookups; AVX2's (8 lanes) conversions, nibbles split by a mask
        assert re.search(r"st_k \+= 32", source), source
        nibble_op = "_mm512_permutexvar_ps(q, tab)" if AVX512 else "_mm256_and_si256(q0, m)"
        assert (nibble_op in source) == case.startswith("nibbles")
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("nibble_dot"))
    plain = stitch.compile(text, weights=values, cache_dir=tmp_path)
    assert not re.search(r"st_k \+= 32", plain.native.source_path.read_text())
    reference = evaluate(taken.graph, x | values)
    for program in (taken, plain):
        assert differences(program(**x), reference, taken.graph) == [], case


def test_the_weight_is_read_packed(tmp_path):
    """No f32 and no unpacked byte copy of the 4-bit weight: the kernel reads the packed bytes and the
    scales as bound, and no prologue makes a block of them."""
    text = CASES["nibbles"]
    values = weights(stitch.compile(text, cache_dir=tmp_path).graph, 1)
    values.pop("x")
    loops = print_loops(stitch.compile(text, weights=values, cache_dir=tmp_path).loops)
    assert loops.startswith("program f(x: f32[1, 256], b: u8[40, 128], s: f32[40, 8]) -> out0\n  bound b, s\n"), loops
    assert "f_bind" not in loops and "pack" not in loops, loops


def two_products(k: int, n1: int, n2: int) -> str:
    """Two 4-bit products of the same K, each with its weight's own nibble shift: the e-graph makes the
    two shifts (an iota's cone) one value."""
    body = []
    for name, n in (("a", n1), ("b", n2)):
        body.append(f"""  {name}w = reshape(broadcast_to(reshape({name}, shape=[{n}, {k // 2}, 1]),
                            shape=[{n}, {k // 2}, 2]), shape=[{n}, {k}])
  {name}q = bitand(shr({name}w, cast(mul(bitand(iota(shape=[1, {k}], axis=1), 1), 4), dtype=u8)), 15)
  {name}s = reshape(broadcast_to(reshape({name}s_, shape=[{n}, {k // 32}, 1]), shape=[{n}, {k // 32}, 32]),
               shape=[{n}, {k}])
  {name}y = matmul(x, transpose(mul(sub(cast({name}q, dtype=f32), 8.0), {name}s), perm=[1, 0]))""")
    return (f"func f(x: f32[1, {k}], a: u8[{n1}, {k // 2}], as_: f32[{n1}, {k // 32}], b: u8[{n2}, {k // 2}], "
            f"bs_: f32[{n2}, {k // 32}]) -> (f32[1, {n1}], f32[1, {n2}]) {{\n" + "\n".join(body)
            + "\n  return ay, by\n}\n")


def test_a_shift_two_products_share_stays_in_each(tmp_path):
    """The schedule neither stores nor holds a value computed from indices alone (space.py's
    INDEX_ONLY_INLINE): held once for both products (the cost model's marginally cheaper answer),
    neither would take the recognizer, which reads the shift as an expression of k."""
    text = two_products(256, 48, 20)
    program = stitch.compile(text, cache_dir=tmp_path)
    graph = program.graph
    for kernel in program.compiled.schedule.kernels:
        for inst in kernel.instances:
            if inst.key in kernel.index_only:
                assert inst.hold.value == "inline", (inst.node.op, inst.hold)
    values = weights(graph, 3)
    x = {"x": values.pop("x")}
    bound = stitch.compile(text, weights=values, cache_dir=tmp_path)
    if VECTOR_BYTES >= 32:
        source = bound.native.source_path.read_text()
        assert len(re.findall(r"st_k \+= 32", source)) >= 4, source  # each product's groups of columns and its last
    assert differences(bound(**x), evaluate(graph, x | values), graph) == []


@pytest.mark.parametrize("case", ["nibbles", "nibbles, zero points", "u8"])
def test_zeros_nans_and_infinities_reach_the_result(case, tmp_path):
    """A NaN and an infinity in the activation, a block of zero scales and an infinite scale: the
    recognizer's block sums (zero point folded as sum(Q * A) - Z * sum(A) on AVX2) give the
    reference's NaNs and infinities where it has them, and its values elsewhere."""
    text = CASES[case]
    values = weights(stitch.compile(text, cache_dir=tmp_path).graph, 5)
    x = values.pop("x")
    x[0, 3], x[0, 40], x[0, 70:102] = np.nan, np.inf, 0.0
    values["s"][2, :] = 0.0
    values["s"][5, 1] = np.inf
    program = stitch.compile(text, weights=values, cache_dir=tmp_path)
    got, reference = program(x=x), evaluate(program.graph, {"x": x} | values)
    assert differences(got, reference, program.graph) == [], case
