"""The math functions the generated C defines for itself (targets/c/prelude.h), against
numpy in double precision over a stride of every float and at the values that decide their
special cases."""

from __future__ import annotations

import ctypes
import math
import subprocess

import numpy as np
import pytest
from stitch.targets import cc, cpu
from stitch.targets.c.prelude import PRELUDE

pytestmark = pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")

CALLS = {"exp": "st_expf", "erf": "st_erff", "tanh": "st_tanhf"}


@pytest.fixture(scope="module", params=["fused", "unfused"])
def library(request, tmp_path_factory):
    """The helpers as the machine compiles them (a * b + c fused where it has FMA) and with
    ST_NO_MADD (what a machine without FMA runs): both must hold the bounds."""
    tmp = tmp_path_factory.mktemp("cmath")
    src = tmp / "cmath.c"
    body = "".join(f"void call_{op}(const float *x, float *y, long n) {{\n  #pragma omp simd\n"
                   f"  for (long i = 0; i < n; ++i) y[i] = {fn}(x[i]);\n}}\n" for op, fn in CALLS.items())
    src.write_text(PRELUDE + body)
    lib = tmp / "cmath.so"
    extra = ["-DST_NO_MADD"] if request.param == "unfused" else []
    subprocess.run([cpu.compiler(), *cc.compiler_flags(), *extra, str(src), "-o", str(lib), "-lm"], check=True)
    return ctypes.CDLL(str(lib))


def call(library, op: str, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.empty_like(x)
    pointer = ctypes.POINTER(ctypes.c_float)
    getattr(library, f"call_{op}")(x.ctypes.data_as(pointer), y.ctypes.data_as(pointer), ctypes.c_long(x.size))
    return y


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the last place of the float32 nearest `want` (a float64)."""
    nearest = want.astype(np.float32)
    ulp = np.spacing(np.abs(nearest)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / ulp


def every_float(stride: int) -> np.ndarray:
    return np.arange(0, 2**32, stride, dtype=np.uint64).astype(np.uint32).view(np.float32)


def test_exp_is_within_one_ulp_of_exp_over_a_stride_of_every_float(library):
    x = every_float(stride=1021)
    x = x[np.isfinite(x)]
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp(x.astype(np.float64))
        got = call(library, "exp", x)
    finite = want < np.finfo(np.float32).max
    assert np.max(ulps(got[finite], want[finite])) <= 1.0
    assert np.all(np.isinf(got[~finite]))


@pytest.mark.parametrize("x, want", [
    (np.nan, np.nan), (np.inf, np.inf), (-np.inf, 0.0), (0.0, 1.0), (-0.0, 1.0), (88.7229, np.inf), (1e30, np.inf),
    (-104.0, 0.0), (-1e30, 0.0)])
def test_exp_at_its_special_values(library, x, want):
    with np.errstate(over="ignore", under="ignore"):
        (got,) = call(library, "exp", np.array([x]))
    assert got == want or (np.isnan(want) and np.isnan(got))


@pytest.mark.parametrize("x", [88.72283, 88.7, -87.33654, -87.4, -100.0, -103.2789, -103.9])
def test_exp_near_overflow_and_in_the_subnormal_range(library, x):
    """The largest finite results, and results that are subnormal, to within one ulp."""
    x32 = np.array([x], np.float32)
    with np.errstate(over="ignore", under="ignore"):
        got = call(library, "exp", x32)
    assert ulps(got, np.exp(x32.astype(np.float64)))[0] <= 1.0


def test_erf_is_within_one_and_a_half_ulp_of_erf_over_a_stride_of_every_float(library):
    x = every_float(stride=4099)
    x = x[np.isfinite(x) & (np.abs(x) < 6)]  # beyond, erf is +-1 in float32 (checked below)
    want = np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64)
    assert np.max(ulps(call(library, "erf", x), want)) <= 1.5


@pytest.mark.parametrize("x, want", [(np.nan, np.nan), (np.inf, 1.0), (-np.inf, -1.0), (0.0, 0.0), (-0.0, -0.0),
                                     (6.0, 1.0), (-1e30, -1.0), (1.0, 0.8427008)])
def test_erf_at_its_special_values(library, x, want):
    (got,) = call(library, "erf", np.array([x]))
    assert (np.isnan(want) and np.isnan(got)) or (got == np.float32(want) and np.signbit(got) == np.signbit(want))


def test_tanh_is_within_two_and_a_half_ulp_of_tanh_over_a_stride_of_every_float(library):
    x = every_float(stride=1021)
    x = x[np.isfinite(x)]
    want = np.tanh(x.astype(np.float64))
    got = call(library, "tanh", x)
    tiny = np.abs(want) < np.finfo(np.float32).tiny  # (subnormal results: ulps of the subnormal spacing)
    assert np.max(ulps(got[~tiny], want[~tiny])) <= 2.5
    assert np.array_equal(got[tiny], x[tiny])


@pytest.mark.parametrize("x, want", [(np.nan, np.nan), (np.inf, 1.0), (-np.inf, -1.0), (0.0, 0.0), (-0.0, -0.0),
                                     (9.02, 1.0), (9.1, 1.0), (-20.0, -1.0), (1e30, 1.0), (1e-40, 1e-40),
                                     (-1e-40, -1e-40)])
def test_tanh_at_its_special_values(library, x, want):
    (got,) = call(library, "tanh", np.array([x]))
    assert (np.isnan(want) and np.isnan(got)) or (got == np.float32(want) and np.signbit(got) == np.signbit(want))


EXPONENTIAL_EDGES = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 89.0, -89.0, 88.72, 88.73, 89.5, -103.9,
                     -104.0, -104.5, -87.3, -88.0, -100.0, -149.0, 1e-40, -1e-40, 9.02, 9.1, -9.1, 20.0, -20.0, 1e30,
                     -1e30, 0.5, -0.5, 1.0, -1.0,
                     # the 8-lane sigmoid's: its clamp of x at 86 and the last n below it, 2^128 p;
                     # halved, for the SiLU of 2x
                     85.9, 86.0, 86.1, 86.4, 104.0, -88.37, -88.38, -88.722, -88.723, -89.1,
                     42.95, 43.0, 43.05, 43.2, 52.0, -44.185, -44.19, -44.361, -44.3615, -44.55]


# exp(x), sigmoid(x / 2), tanh(x), sigmoid(x), and a SiLU of a computed value (2x), whose sigmoids
# run four vectors at a time
VECTOR_OUTPUTS = "exp(x), sigmoid(mul(x, 0.5)), tanh(x), sigmoid(x), mul(h, sigmoid(h))"
SIGMOIDS = (1, 3, 4)  # (those outputs' places)


def vector_and_scalar_builds(tmp_path):
    """(x: a stride of every float and the edges, in rows of 1000; the outputs of VECTOR_OUTPUTS
    compiled for the machine's vectors; the same from the scalar loops (ST_NO_VECTOR_EXP)), where
    the machine has AVX-512 or AVX2 with FMA."""
    import stitch

    width = cc.vector_bytes(cpu.compiler(), cc.compiler_flags())
    if width not in (32, 64):
        pytest.skip("neither AVX-512 nor AVX2 here: the vector loops are not written")
    x = np.concatenate([every_float(stride=4099), np.array(EXPONENTIAL_EDGES * 7, dtype=np.float32)])
    n = x.size - x.size % 1000
    x = np.concatenate([np.array(EXPONENTIAL_EDGES, dtype=np.float32), x])[:n].reshape(-1, 1000)
    rows = f"f32[{x.shape[0]}, 1000]"
    text = (f"func f(x: {rows}) -> ({rows}, {rows}, {rows}, {rows}, {rows}) {{\n  h = mul(x, 2.0)\n"
            f"  return {VECTOR_OUTPUTS}\n}}\n")
    vector = stitch.compile(text, cache_dir=tmp_path)
    kernels = vector.native.source_path.read_text().split("kernel_k0", 1)[1]  # (the prelude defines each)
    assert all(f"{name}(" in kernels for name in ("st_expv_f32", "st_sigmoidv_f32", "st_sigmoidv4_f32", "st_tanhv_f32"))
    scalar = stitch.compile(text, cache_dir=tmp_path, cflags="-O3 -march=native -DST_NO_VECTOR_EXP")
    return x, width, vector(x=x), scalar(x=x)


def test_the_vector_exponentials_are_the_scalar_ones_bit_for_bit(tmp_path):
    """Where the machine has AVX-512 or AVX2 with FMA, loops of exp, sigmoid and tanh run in vectors
    of its width (st_expv_f32, st_sigmoidv_f32 and st_sigmoidv4_f32, st_tanhv_f32; 2^n by vscalefps on
    AVX-512, from its exponent bits in two halves on AVX2): over a stride of every float, +-inf,
    +-89, -104, the subnormal results and 0 included, they give exactly what the scalar st_expf,
    1 / (1 + st_expf(-x)) and st_tanhf loops give (ST_NO_VECTOR_EXP builds those), NaN where they
    give NaN; on 8 lanes the sigmoid's own steps are within the tolerance instead (the next test)."""
    _, width, got, want = vector_and_scalar_builds(tmp_path)
    for k, (a, b) in enumerate(zip(got, want)):  # (a NaN's sign and payload mean nothing)
        if width == 32 and k in SIGMOIDS:
            continue
        assert np.array_equal(np.isnan(a), np.isnan(b))
        same = ~np.isnan(b)
        assert np.array_equal(a[same].view(np.uint32), b[same].view(np.uint32))


def exact_sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def test_the_8_lane_sigmoid_is_within_a_few_ulp_of_the_sigmoid(tmp_path):
    """On AVX2 (8 lanes) st_sigmoidv_f32 and st_sigmoidv4_f32 take fewer steps than the scalar
    1 / (1 + st_expf(-x)) (vector_math.h): over a stride of every float and the edges (its clamps
    at 86 and -89, the denominator's overflow near -88.72, 0, +-inf, NaN) within 2.5 ulp of the
    exact sigmoid where the result is 2^-24 or more, 5.5 below it (its one constant for ln 2; over
    every float the worst were 2.24 and 5.38 ulp), NaN
    where x is NaN, 1 at +inf and 0 at -inf; the SiLU half an ulp more for its product. Within the
    reference's tolerance by far (1e-4 of 1 + |sigmoid|)."""
    x, width, got, _ = vector_and_scalar_builds(tmp_path)
    if width != 32:
        pytest.skip("not an 8-lane machine: the sigmoid there is the scalar one bit for bit (the test above)")
    h = x * np.float32(2)  # (exact where finite, as the C's mul(x, 2.0))
    for k, arg in ((1, x * np.float32(0.5)), (3, x), (4, h)):
        sigmoid = exact_sigmoid(arg)
        factor = np.abs(arg.astype(np.float64)) if k == 4 else 1.0
        want = sigmoid * (arg.astype(np.float64) if k == 4 else 1.0)
        a = got[k]
        nan = np.isnan(arg) | (k == 4) & np.isinf(arg) & (arg < 0)  # (-inf * 0 is NaN: the reference's too)
        assert np.array_equal(np.isnan(a), nan)
        finite = ~nan & np.isfinite(want) & (np.abs(want) < np.finfo(np.float32).max)
        # (where the sigmoid is subnormal, its error is absolute: the SiLU's is that times |x|)
        normal = finite & (sigmoid >= np.finfo(np.float32).tiny)
        bound = np.where(sigmoid >= 2.0**-24, 2.5, 5.5) + (0.5 if k == 4 else 0.0)
        assert np.all(ulps(a[normal], want[normal]) <= bound[normal])
        tiny = finite & ~normal
        assert np.all(np.abs(a[tiny] - want[tiny]) <= 2.0**-126 * (factor[tiny] if k == 4 else 1.0))
    edges = np.array([np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 86.0, -89.0], np.float32)
    at = {float(e): i for i, e in enumerate(x.reshape(-1)[:len(EXPONENTIAL_EDGES)])}
    sigmoid = got[3].reshape(-1)
    assert [sigmoid[at[float(e)]] for e in edges] == [1.0, 0.0, 0.5, 0.5, 1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("cols", [16, 40, 1000])
def test_a_sum_of_exponentials_runs_in_16_lane_vectors_and_equals_the_reference(tmp_path, cols):
    """A log-sum-exp's sum over a row: st_expv_f32's vectors summed lane by lane, the last iterations
    one by one (40 = 2 x 16 + 8), within the tolerance of the reference's sum; the scalar build
    (ST_NO_VECTOR_EXP) gives the same within it. Exponentials far apart (x times 20): a term lost
    or counted twice shows."""
    text = (f"func f(x: f32[64, {cols}]) -> f32[64] {{\n  m = max(x, axes=[1], keepdims=true)\n"
            "  return log(sum(exp(sub(x, m)), axes=[1]))\n}\n")
    builds_agree_with_the_reference(tmp_path, text, "st_acc += st_expv_f32(", seed=3, scale=20)


@pytest.mark.parametrize("cols", [16, 40])
def test_a_sum_of_tanh_runs_in_16_lane_vectors_and_equals_the_reference(tmp_path, cols):
    """A row sum of tanh takes the same 16-lane path (st_tanhv_f32's vectors summed lane by lane,
    the last iterations by st_tanhf), within the tolerance of the reference's sum, as does the
    scalar build."""
    text = f"func f(x: f32[64, {cols}]) -> f32[64] {{\n  return sum(tanh(mul(x, 3.0)), axes=[1])\n}}\n"
    builds_agree_with_the_reference(tmp_path, text, "st_acc += st_tanhv_f32(", seed=4)


@pytest.mark.parametrize("cols", [16, 40, 1000])
def test_a_softmax_row_is_summed_as_its_exponentials_are_stored(tmp_path, cols):
    """A softmax's row of exponentials, stored on chip in 16-lane vectors, is summed in the same loop
    (each vector added as it is stored, the last iterations one by one: 40 = 2 x 16 + 8) instead of
    loaded again by a loop of its own; the quotients equal the reference's within the tolerance, as
    do the scalar build's (ST_NO_VECTOR_EXP)."""
    text = (f"func f(x: f32[64, {cols}]) -> f32[64, {cols}] {{\n  m = max(x, axes=[1], keepdims=true)\n"
            "  e = exp(sub(x, m))\n  return div(e, sum(e, axes=[1], keepdims=true))\n}\n")
    builds_agree_with_the_reference(tmp_path, text, "st_acc += st_e;", seed=5, scale=20)


def builds_agree_with_the_reference(tmp_path, text: str, marker: str, seed: int, scale: float = 1.0) -> None:
    """`text` compiled as the machine runs it (where it has AVX-512, its C holds `marker`) and with
    ST_NO_VECTOR_EXP (the scalar loops): both within the tolerance of the reference on random
    inputs, `x` scaled by `scale`."""
    import stitch
    from stitch.engine.ir.interp import evaluate, random_inputs
    from stitch.engine.ir.tolerance import differences

    vector = stitch.compile(text, cache_dir=tmp_path)
    if cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) == 64:
        assert marker in vector.native.source_path.read_text()
    scalar = stitch.compile(text, cache_dir=tmp_path, cflags="-O3 -march=native -DST_NO_VECTOR_EXP")
    inputs = random_inputs(vector.graph, seed)
    inputs["x"] = inputs["x"] * np.float32(scale)
    want = evaluate(vector.graph, inputs)
    for program in (vector, scalar):
        assert differences(program(**inputs), want, vector.graph) == []
