"""Each recognizer of the C backend (targets/c/recognizers.py) against its plain-loop twin: the same
program compiled with the recognizer left out of the table computes the same outputs (bit for bit
where the recognizer keeps each element's operations and their order, else both within the
reference's tolerance), and the C with it in holds its form. Each family is tested further in a
file of its own (tests/test_c_<family>.py: summed_row, column_sums, pipelined_rows, pipelined_passes,
stream, prefetch, matmul, reductions, read_order, transpose, nibble_dot, int_dot, int_rows,
int_pairs)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import differences
from stitch.targets import cc, cpu
from stitch.targets.c import recognizers, tuning
from stitch_testing import EXAMPLES

pytestmark = pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")

AVX512 = cpu.compiler() is not None and cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) == 64
WIDE = cpu.compiler() is not None and cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) in (32, 64)
EIGHT_LANES = cpu.compiler() is not None and cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) == 32


@dataclass(frozen=True)
class Twin:
    recognizer: str
    text: str
    form: str  # a pattern (re) the C matches with the recognizer in, and not without it
    bitwise: bool  # whether the twin computes the same bits
    avx512: bool = False  # written only where the machine has AVX-512
    streamed: bool = False  # with every output streamed (tuning.STREAM_BYTES: 64)
    wide: bool = False  # written only where the machine's vectors are 32 or 64 bytes
    bound: tuple[str, ...] = ()  # parameters bound at compile time (weights), drawn with the inputs


SOFTMAX = ("func f(x: f32[24, 256]) -> f32[24, 256] {\n  e = exp(sub(x, max(x, axes=[1], keepdims=true)))\n"
           "  return div(e, sum(e, axes=[1], keepdims=true))\n}\n")
LAYERNORM_LAST = ("func f(x: f32[64, 40], r: f32[64, 40]) -> (f32[64, 40], f32[64, 40]) {\n  h = add(x, r)\n"
                  "  m = mean(h, axes=[-1], keepdims=true)\n  d = sub(h, m)\n"
                  "  v = mean(mul(d, d), axes=[-1], keepdims=true)\n  return h, mul(d, rsqrt(add(v, 1e-5)))\n}\n")
LAYERNORM_FIRST = ("func f(x: f32[40, 4, 48], g: f32[4, 48]) -> f32[40, 4, 48] {\n  m = mean(x, axes=[0])\n"
                   "  d = sub(x, m)\n  v = mean(mul(d, d), axes=[0])\n"
                   "  return mul(mul(d, rsqrt(add(v, 1e-5))), g)\n}\n")
LOG_SUM_EXP = ("func f(x: f32[16, 256]) -> f32[16] {\n  m = max(x, axes=[1], keepdims=true)\n"
               "  return reshape(add(log(sum(exp(sub(x, m)), axes=[1], keepdims=true)), m), shape=[-1])\n}\n")
# MobileNetV2's padded expansion, small: a transposed product's output, ReLU6, zero borders on both spatial axes
PADDED = ("func f(y: f32[1, 400, 32], b: f32[32, 1, 1], z1: f32[1, 32, 1, 20], z2: f32[1, 32, 22, 1]) -> "
          "f32[1, 32, 22, 22] {\n  x = reshape(transpose(y, perm=[0, 2, 1]), shape=[1, 32, 20, 20])\n"
          "  p = concat(z1, minimum(maximum(add(x, b), 0.0), 6.0), z1, axis=2)\n"
          "  return concat(z2, p, z2, axis=3)\n}\n")

# a depthwise 3x3 conv over a padded 40 x 40 plane, as the ONNX importer writes it: its rows of positions
DEPTHWISE = ("func f(x: f32[1, 8, 42, 42], w: f32[8, 1, 3, 1, 3]) -> f32[1, 8, 40, 40] {\n  r = concat("
             + ", ".join(f"reshape(slice(x, axes=[2], starts=[{i}], ends=[{40 + i}]), shape=[1, 8, 40, 1, 42])"
                         for i in range(3))
             + ", axis=3)\n  return sum(mul(concat("
             + ", ".join(f"reshape(slice(r, axes=[4], starts=[{i}], ends=[{40 + i}]), shape=[1, 8, 40, 3, 40, 1])"
                         for i in range(3))
             + ", axis=5), w), axes=[3, 5])\n}\n")

TWINS = [
    Twin("read_order", "func t(x: f32[1, 40, 48], b: f32[1, 48, 1]) -> f32[1, 48, 40] {\n"
         "  return erf(add(mul(transpose(x, perm=[0, 2, 1]), 0.5), b))\n}\n",
         r"for \(int64_t p1 = 0; p1 < \d+; \+\+p1\) \{\n *b_out0\[", True),  # (p1: along x's rows)
    Twin("transpose", "func t(x: f32[2, 40, 48]) -> f32[2, 48, 40] {\n"
         "  return mul(transpose(x, perm=[0, 2, 1]), 0.5)\n}\n", re.escape("st_bi < 16"), True),
    Twin("summed_row", LAYERNORM_LAST, re.escape("st_acc += st_e;"), False, avx512=True),
    Twin("split", "func f(a: f32[8, 16], b: f32[8, 24]) -> f32[8, 40] { return exp(concat(a, b, axis=1)) }",
         re.escape("int64_t cut_"), True),
    Twin("matmul", "func f(a: f32[32, 64], b: f32[64, 48]) -> f32[32, 48] { return matmul(a, b) }",
         re.escape("(a0, b0, c0_0)"), False),
    Twin("dot", "func f(q: f32[4, 1, 64], k: f32[4, 40, 64]) -> f32[4, 1, 40] {\n"
         "  return matmul(q, transpose(k, perm=[0, 2, 1]))\n}\n", re.escape("st_hsum_f32(s0)"), False),
    Twin("nibble_dot", "func f(x: f32[1, 64], b: u8[24, 64], s: f32[24, 2]) -> f32[1, 24] {\n"
         "  sc = reshape(broadcast_to(reshape(s, shape=[24, 2, 1]), shape=[24, 2, 32]), shape=[24, 64])\n"
         "  return matmul(x, transpose(mul(sub(cast(b, dtype=f32), 128.0), sc), perm=[1, 0]))\n}\n",
         re.escape("st_k += 32"), False, avx512=True),
    Twin("int_dot", "func f(a: u8[1, 48], za: u8[], b: i8[48, 256]) -> i32[1, 256] {\n"
         "  return matmul(sub(cast(a, dtype=i32), cast(za, dtype=i32)), cast(b, dtype=i32))\n}\n",
         re.escape("_mm512_dpwssd_epi32("), True, avx512=True),
    Twin("int_rows", "func f(a: u8[256, 64], za: u8[], b: i8[64, 48]) -> i32[256, 48] {\n"
         "  return matmul(sub(cast(a, dtype=i32), cast(za, dtype=i32)), cast(b, dtype=i32))\n}\n",
         re.escape("_madd_epi16(a, b0)"), True, wide=True),
    Twin("int_pairs", "func f(a: u8[256, 64], za: u8[], w: i8[64, 64]) -> i32[256, 64] {\n"
         "  return matmul(sub(cast(a, dtype=i32), cast(za, dtype=i32)), cast(w, dtype=i32))\n}\n",
         re.escape('"vpaddd %1, %0, %0"'), True, wide=True, bound=("w",)),
    Twin("f16_matmul", "func f(a: f16[16, 32], b: f16[32, 16]) -> f16[16, 16] { return matmul(a, b) }",
         re.escape("acc_f["), False),
    Twin("column_sums", LAYERNORM_FIRST, re.escape("st_c0"), True, avx512=True),
    Twin("vector_sum", "func f(x: f32[16, 256]) -> f32[16] { return sum(exp(x), axes=[1]) }",
         re.escape("st_acc += st_expv_f32("), False, avx512=True),
    Twin("float_extremum", "func f(x: f32[16, 256]) -> f32[16] { return max(x, axes=[1]) }",
         re.escape("int zero = 0;"), True),
    Twin("long_sum", "func f(x: f32[4, 2050], m: f32[4, 1]) -> f32[4] {\n  d = sub(x, m)\n"
         "  return sum(mul(d, d), axes=[1])\n}\n", re.escape("st_a3 += ST_TERM(("), False, wide=True),
    Twin("simd_reduce", "func f(x: f32[16, 256]) -> f32[16] { return sum(x, axes=[1]) }",
         re.escape("#pragma omp simd reduction(+:acc)"), False),
    Twin("simd_reduce", "func f(x: i32[16, 256]) -> i32[16] { return min(x, axes=[1]) }",
         re.escape("#pragma omp simd reduction(min:acc)"), True),
    Twin("vector_loop", "func f(x: f32[16, 250]) -> f32[16, 250] { return tanh(x) }",
         re.escape("+= 16) *(st_vf32 *)&"), True, avx512=True),
    Twin("vector_loop", "func f(x: f32[6, 300], b: f32[300]) -> f32[6, 300] { return tanh(add(mul(x, x), b)) }",
         re.escape("_mm512_stream_ps(st_o"), True, avx512=True, streamed=True),
    # SiLU of a value made of several ops: in groups of 4 vectors, the shared value of each first, then
    # their 4 sigmoids step by step (250 columns: groups, then single vectors, then the last 2 one by
    # one); the same bits but on 8 lanes, whose sigmoid takes its own steps (within the tolerance:
    # test_c_math), and each group prefetches the next tile's lines of x
    Twin("vector_loop", "func f(x: f32[8, 250], g: f32[250]) -> f32[8, 250] {\n  h = add(mul(x, 1.5), g)\n"
         "  return mul(h, sigmoid(h))\n}\n",
         re.escape("st_s3 = ST_FIRST(") + ".*" + re.escape("st_sigmoidv4_f32(st_g);"), not EIGHT_LANES, wide=True),
    # the same SiLU written into a padded row (a conv's input: zero columns either side), which split.py
    # cuts at the concat's pieces: the SiLU's piece in groups of vectors all the same
    Twin("vector_loop", "func f(x: f32[8, 64], g: f32[64], z: f32[8, 1]) -> f32[8, 66] {\n"
         "  h = add(mul(x, 1.5), g)\n  return concat(z, mul(h, sigmoid(h)), z, axis=1)\n}\n",
         "(?s)" + re.escape("int64_t cut_") + ".*" + re.escape("st_sigmoidv4_f32(st_g);"), not EIGHT_LANES, wide=True),
    Twin("stream", "func f(x: f64[4, 1024]) -> f64[4, 1024] { return mul(x, x) }", re.escape("st_stream_f64(&"), True,
         streamed=True),
    Twin("pipelined_rows", SOFTMAX, re.escape("st_sum = "), True, avx512=True),
    Twin("pipelined_passes", LOG_SUM_EXP, re.escape("const int st_on0"), True, avx512=True),
    Twin("split_outer", PADDED, r"for \(int64_t (p\d) = cut_\1_\d+; \1 < cut_\1_\d+; \+\+\1\) \{", True),
    Twin("transpose_middle", PADDED, r"for \(int64_t p2 = [^\n]*\{\n *for \(int64_t p1 = 0", True),
    Twin("strided_row", PADDED, re.escape("st_gatherv_f32(&"), True),
    Twin("row_segments", DEPTHWISE, re.escape("st_s = st_e"), True),
    Twin("prefetch", (EXAMPLES / "layernorm_large.ir").read_text().replace("64, 256]", "8, 256]"),
         re.escape("3); __builtin_prefetch(&b_x["), True),
]


def test_every_recognizer_has_a_twin():
    assert {t.recognizer for t in TWINS} == set(recognizers.NAMES)


@pytest.mark.parametrize("twin", TWINS, ids=lambda t: t.recognizer)
def test_a_recognizer_computes_what_its_plain_loop_twin_does(twin, tmp_path, monkeypatch):
    if twin.streamed:
        monkeypatch.setattr(tuning, "STREAM_BYTES", 64)  # (outputs of 8 MiB and more, at full size)
    inputs = random_inputs(stitch.compile(twin.text, cache_dir=tmp_path).graph, 3)
    weights = {name: inputs.pop(name) for name in twin.bound}
    taken = stitch.compile(twin.text, weights=weights, cache_dir=tmp_path)
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without(twin.recognizer))
    plain = stitch.compile(twin.text, weights=weights, cache_dir=tmp_path)
    if (AVX512 or not twin.avx512) and (WIDE or not twin.wide):
        assert re.search(twin.form, taken.native.source_path.read_text())
    assert not re.search(twin.form, plain.native.source_path.read_text())
    got, want = taken(**inputs), plain(**inputs)
    if twin.bitwise:
        assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))
    reference = evaluate(taken.graph, inputs | weights)
    assert differences(got, reference, taken.graph) == []
    assert differences(want, reference, taken.graph) == []


def test_without_names_only_recognizers():
    assert recognizers.without() == recognizers.RECOGNIZERS
    assert "column_sums" not in {r.name for r in recognizers.without("column_sums")}
    with pytest.raises(ValueError, match="no recognizer fast_path"):
        recognizers.without("fast_path")
