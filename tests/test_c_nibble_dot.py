"""A one-row product of a quantized weight dequantized where it is read (targets/c/nibble_dot.py):
4-bit nibbles and 8-bit bytes, with and without a zero point, blocks of 32 and coarser, K with and
without a partial block, columns that do and do not fill the recognizer's groups: the C with the
recognizer in computes what the plain loops compute and what the reference does, and the weight is
read packed (no f32 copy of it, no unpacked byte copy, in the program or its prologue). The same on
AVX2's layout (lowering/nibbles.py: 8 columns a 32-byte word, taken where the machine's vectors are
32 bytes; the suite pins AVX-512's 64, tests/conftest.py), whose C runs on any machine with AVX2,
including A's infinities, NaNs and magnitudes far from 1, and compiles for AVX-512 too."""

from __future__ import annotations

import ctypes
import re
import subprocess

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.tolerance import differences
from stitch.engine.schedule import target as machine
from stitch.lowering.loops import print_loops
from stitch.targets import cc, cpu, runtime
from stitch.targets.c import recognizers
from stitch.targets.c.source import c_source
from stitch_testing import compiles_for_avx512

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


@pytest.mark.parametrize("case", ["nibbles", "nibbles, zero points", "u8"])
def test_an_infinity_alone_reaches_the_result(case, tmp_path):
    """An infinity in the activation and no NaN: the reference's infinities, where the zero point
    folded as sum(Q * A) - Z * sum(A) would give inf - inf (the form runs the loops as written)."""
    text = CASES[case]
    values = weights(stitch.compile(text, cache_dir=tmp_path).graph, 6)
    x = values.pop("x")
    x[0, 40] = np.inf
    program = stitch.compile(text, weights=values, cache_dir=tmp_path)
    got, reference = program(x=x), evaluate(program.graph, {"x": x} | values)
    assert np.isinf(reference[0]).any()
    assert differences(got, reference, program.graph) == [], case


LAID_OUT = "_mm256_castsi256_ps(_mm256_and_si256(st_q0, st_m0))"  # the laid-out form's nibble
LAID_OUT_CASES = {  # (text, whether lowering/nibbles.py lays it out)
    "nibbles, 8-column tiles": (nibbles(256, 40, 32, "literal"), True),
    "nibbles, zero points": (nibbles(256, 40, 32, "tensor"), True),
    "nibbles, blocks of 64 (scales read one a lane)": (nibbles(192, 48, 64, "none"), True),
    "nibbles, tiles of 4 groups of 8 a block": (nibbles(128, 256, 32, "literal"), True),
    "nibbles, tiles of 9 groups (one a block)": (nibbles(128, 360, 32, "literal"), True),
    "nibbles, a partial block": (nibbles(80, 12, 32, "literal"), False),
    "nibbles, 37 columns": (nibbles(256, 37, 32, "literal"), False),
}


@pytest.fixture
def avx2_layout(monkeypatch):
    """lowering/nibbles.py's layout taken, as on an AMD machine whose vectors are 32 bytes."""
    monkeypatch.setattr(machine, "machine_vector_bytes", lambda cpuinfo=None: 32)
    monkeypatch.setattr(machine, "machine_vendor", lambda cpuinfo=None: "AuthenticAMD")


@pytest.mark.skipif(VECTOR_BYTES < 32, reason="the recognizer writes 8 lanes and more")
def test_an_intel_machine_keeps_the_weight_as_given(tmp_path, monkeypatch, avx2_layout):
    """The laid-out form reads weights as subnormal floats, at full speed on AMD's cores only: an
    Intel core (a microcode assist per subnormal operand) keeps the weight's layout and the 8-lane
    form, which computes the same values."""
    text, _ = LAID_OUT_CASES["nibbles, zero points"]
    monkeypatch.setattr(machine, "machine_vendor", lambda cpuinfo=None: "GenuineIntel")
    program, x, values = bound(text, 7, tmp_path)
    assert LAID_OUT not in program.native.source_path.read_text()
    assert differences(program(x=x), evaluate(program.graph, {"x": x} | values), program.graph) == []


def bound(text: str, seed: int, tmp_path):
    values = weights(stitch.compile(text, cache_dir=tmp_path).graph, seed)
    x = values.pop("x")
    return stitch.compile(text, weights=values, cache_dir=tmp_path), x, values


@pytest.mark.skipif(VECTOR_BYTES < 32, reason="the recognizer writes 8 lanes and more")
@pytest.mark.parametrize("case", sorted(LAID_OUT_CASES))
def test_the_laid_out_form_computes_what_the_plain_loops_compute(case, tmp_path, monkeypatch, avx2_layout):
    text, laid_out = LAID_OUT_CASES[case]
    taken, x, values = bound(text, 7, tmp_path)
    assert (LAID_OUT in taken.native.source_path.read_text()) == laid_out, case
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("nibble_dot"))
    plain = stitch.compile(text, weights=values, cache_dir=tmp_path)
    assert "st_q0" not in plain.native.source_path.read_text()
    reference = evaluate(taken.graph, {"x": x} | values)
    for program in (taken, plain):
        assert differences(program(x=x), reference, taken.graph) == [], case


@pytest.mark.skipif(VECTOR_BYTES < 32, reason="the recognizer writes 8 lanes and more")
@pytest.mark.parametrize("case", ["nibbles, 8-column tiles", "nibbles, zero points"])
@pytest.mark.parametrize("a", ["an infinity", "a NaN and an infinity", "1e30", "1e-30", "1e-30 and one 1e30",
                               "1e35", "subnormal"])
def test_the_laid_out_form_over_any_activation(case, a, tmp_path, avx2_layout):
    """The scale D of A's copy is chosen per call from A's largest magnitude: A from subnormal to
    near the largest float gives the reference's values; an infinity (no NaN) gives its
    infinities, where the block's zero-point fold would give NaN (the loops as written run)."""
    text, _ = LAID_OUT_CASES[case]
    program, x, values = bound(text, 5, tmp_path)
    assert LAID_OUT in program.native.source_path.read_text()
    if a == "an infinity":
        x[0, 40] = np.inf
    elif a == "a NaN and an infinity":
        x[0, 3], x[0, 40] = np.nan, -np.inf
    elif a == "1e-30 and one 1e30":
        x = x * np.float32(1e-30)
        x[0, 100] = 1e30
    elif a == "subnormal":
        x = x * np.float32(1e-39)
    else:
        x = x / np.abs(x).max() * np.float32(float(a))
    got, reference = program(x=x), evaluate(program.graph, {"x": x} | values)
    assert differences(got, reference, program.graph, {"x": x} | values) == [], a
    if a == "an infinity":
        assert np.isinf(reference[0]).any() and np.array_equal(np.isinf(got[0]), np.isinf(reference[0]))


@pytest.mark.skipif(VECTOR_BYTES < 32, reason="the recognizer writes 8 lanes and more")
def test_the_laid_out_form_under_denormals_are_zero(tmp_path, avx2_layout):
    """The laid-out form reads the weights as subnormal floats: a caller that set MXCSR's
    denormals-are-zero bit (for its own speed) still gets the reference's values (the form clears
    the bit for its sums, on the thread that runs them), and finds the bit set again after."""
    helper = tmp_path / "mxcsr.c"
    helper.write_text("#include <xmmintrin.h>\nunsigned get(void) { return _mm_getcsr(); }\n"
                      "void put(unsigned v) { _mm_setcsr(v); }\n")
    subprocess.run([cpu.compiler(), "-O1", "-fPIC", "-shared", str(helper), "-o", str(tmp_path / "mxcsr.so")],
                   check=True)
    mxcsr = ctypes.CDLL(str(tmp_path / "mxcsr.so"))
    mxcsr.get.restype, mxcsr.put.argtypes = ctypes.c_uint, [ctypes.c_uint]
    program, x, values = bound(LAID_OUT_CASES["nibbles, 8-column tiles"][0], 3, tmp_path)
    threads, csr = runtime.threads(), mxcsr.get()
    runtime.set_threads(1)  # (every tile on the calling thread, whose MXCSR is set here)
    try:
        mxcsr.put(csr | 0x40)
        got = program(x=x)
        after = mxcsr.get()
    finally:
        mxcsr.put(csr)
        runtime.set_threads(threads)
    assert after & 0x40
    assert differences(got, evaluate(program.graph, {"x": x} | values), program.graph) == []


def test_the_laid_out_form_compiles_for_avx512(tmp_path, avx2_layout):
    """The laid-out form is 8-lane C; with AVX-512's vectors (A's copy made 16 lanes at a time) it
    compiles too (not run: this machine may have no AVX-512)."""
    program, _, _ = bound(LAID_OUT_CASES["nibbles, zero points"][0], 1, tmp_path)
    source = c_source(program.loops, 64)[0]
    assert LAID_OUT in source
    assert not compiles_for_avx512(source, tmp_path)
