"""The Python API (`stitch.compile`, calling a CompiledProgram): what it accepts and refuses."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import evaluate
from stitch.targets import cpu

TRANSPOSE = "func f(x: f32[8, 8]) -> f32[8, 8] { return transpose(x) }"
TWO = "func f(x: f32[8, 8]) -> (f32[8, 8], f32[8]) { return exp(x), sum(x, axes=[1]) }"


@pytest.fixture(params=["c", "numpy", "simulator"])
def compiled(request, tmp_path, monkeypatch):
    """A compiler of .ir text for each executor: compiled C, the numpy fallback, the accel simulator."""
    if request.param == "c" and cpu.compiler() is None:
        pytest.skip("no C compiler on this machine")
    if request.param == "numpy":
        monkeypatch.setattr(cpu, "compiler", lambda: None)
    target = "accel" if request.param == "simulator" else "cpu"

    def make(text):
        program = stitch.compile(text, target=target, cache_dir=tmp_path / "cache")
        assert program.executor == request.param
        return program

    return make


def _x():
    return np.random.default_rng(0).random((8, 8), dtype=np.float32)


def _read_only(shape, dtype=np.float32):
    arr = np.zeros(shape, dtype)
    arr.flags.writeable = False
    return arr


@pytest.mark.parametrize("make_out, message", [
    (lambda x: [_read_only((8, 8))], "out[0] is read-only"),
    (lambda x: [np.zeros((8, 8), np.int32)], "out[0] is int32[8, 8], the output is f32[8, 8]"),
    (lambda x: [np.zeros((8, 9), np.float32)], "out[0] is float32[8, 9], the output is f32[8, 8]"),
    (lambda x: [np.zeros((8, 16), np.float32)[:, ::2]], "out[0] is not C-contiguous"),
    (lambda x: [np.frombuffer(bytearray(8 * 8 * 4 + 1), np.float32, 64, 1).reshape(8, 8)],
     "out[0] is not aligned to its 4-byte elements"),
    (lambda x: [x], "out[0] shares memory with input 'x'"),
    (lambda x: [x.T], "out[0] shares memory with input 'x'"),
    (lambda x: [np.zeros((8, 8), np.float32)] * 2, "out= must be a list of 1 array(s)"),
    (lambda x: np.zeros((8, 8), np.float32), "out= must be a list of 1 array(s)"),
    (lambda x: [[[0.0] * 8] * 8], "out[0] is a list, not a numpy array"),
])
def test_unwritable_outputs_are_one_clear_error_on_every_target(compiled, make_out, message):
    f = compiled(TRANSPOSE)
    x = _x()
    before = x.copy()
    out = make_out(x)
    with pytest.raises(StitchError, match="out=") as err:
        f(x=x, out=out)
    assert message in str(err.value)
    np.testing.assert_array_equal(x, before)  # nothing was written


def test_a_read_only_memmap_output_is_refused_not_a_crash(compiled, tmp_path):
    f = compiled(TRANSPOSE)
    path = tmp_path / "out.bin"
    np.zeros((8, 8), np.float32).tofile(path)
    with pytest.raises(StitchError, match=r"out\[0\] is read-only"):
        f(x=_x(), out=[np.memmap(path, np.float32, mode="r", shape=(8, 8))])


def test_outputs_overlapping_each_other_are_refused(compiled):
    f = compiled("func f(x: f32[8]) -> (f32[8], f32[8]) { return exp(x), neg(x) }")
    block = np.zeros(12, np.float32)
    with pytest.raises(StitchError, match=r"out\[1\] shares memory with out\[0\]"):
        f(x=np.ones(8, np.float32), out=[block[:8], block[4:]])


def test_good_outputs_are_written_in_place(compiled):
    f = compiled(TWO)
    x = _x()
    out = [np.empty((8, 8), np.float32), np.empty(8, np.float32)]
    got = f(x=x, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    for g, w in zip(out, evaluate(f.graph, {"x": x})):
        np.testing.assert_allclose(g, w, rtol=1e-5)


# -- Python values for parameters (P18) --------------------------------------------------------------

SCALE = "func f(x: f32[], n: i32[2, 3], b: bool[2]) -> (f32[], i32[2, 3], bool[2]) { return mul(x, 2.0), add(n, 1), b }"
GOOD = {"x": np.float32(3.0), "n": np.arange(6, dtype=np.int32).reshape(2, 3), "b": np.array([True, False])}


@pytest.mark.parametrize("name, value, as_array", [
    ("x", 3.0, np.float32(3.0)),
    ("x", 3, np.float32(3.0)),
    ("x", 0.1, np.float32(0.1)),  # rounded to f32, as the literal 0.1 is in an f32 program
    ("x", float("-inf"), np.float32(-np.inf)),
    ("n", [[0, 1, 2], [3, 4, 5]], GOOD["n"]),
    ("n", ((0, 1, 2.0), [3, 4, 5]), GOOD["n"]),  # an integral float, as a literal 2.0 in an i32 program
    ("b", [True, False], GOOD["b"]),
])
def test_a_python_value_converts_to_its_parameters_dtype_P18(compiled, name, value, as_array):
    """P18: `f(x=3.0)` for an f32[] parameter was refused (`has dtype float64`); a Python scalar or
    nested list converts as a literal of the parameter's dtype would."""
    f = compiled(SCALE)
    got = f(**{**GOOD, name: value})
    want = f(**{**GOOD, name: np.asarray(as_array)})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name, value, message", [
    ("x", True, "input 'x' holds True, a bool, not a number of f32; the parameter is f32[]"),
    ("x", 1e40, "input 'x' holds 1e+40, beyond the range of f32; the parameter is f32[]"),
    ("x", "3.0", "input 'x' is a str ('3.0'), not an array or a number; the parameter is f32[]"),
    ("x", None, "input 'x' is a NoneType (None), not an array or a number"),
    ("x", [3.0], "input 'x' has shape [1] but the parameter is f32[]"),
    ("x", np.float64(3.0), "input 'x' has dtype float64 but the parameter is f32[]"),  # numpy values keep their dtype
    ("n", [[0, 1, 2], [3, 4]], "input 'n' is a nested list whose rows differ in length; the parameter is i32[2, 3]"),
    ("n", [[0, 1, 2], [3, 4, 5.5]], "input 'n' holds 5.5, not an integer, which i32 needs"),
    ("n", [[0, 1, 2], [3, 4, 2**31]], "input 'n' holds 2147483648, which does not fit in i32"),
    ("n", [[0, 1, 2], [3, 4, "5"]], "input 'n' holds a str ('5'), but the parameter is i32[2, 3]"),
    ("b", [1, 0], "input 'b' holds 1, not a bool; the parameter is bool[2]"),
])
def test_a_python_value_that_does_not_convert_is_refused_with_the_type_expected_P18(compiled, name, value, message):
    f = compiled(SCALE)
    with pytest.raises(StitchError) as err:
        f(**{**GOOD, name: value})
    assert message in str(err.value), str(err.value)
    if not isinstance(value, np.generic) and "shape" not in message:
        assert "hint: pass " in str(err.value) and "or a numpy array of dtype " in str(err.value)


def test_weights_take_python_values_too_P18(tmp_path):
    f = stitch.compile("func f(x: f32[2], w: f32[2]) -> f32[2] { return mul(x, w) }", weights={"w": [0.5, 2.0]},
                       cache_dir=tmp_path / "cache")
    (y,) = f(x=[2.0, 3.0])
    np.testing.assert_array_equal(y, np.array([1.0, 6.0], np.float32))
