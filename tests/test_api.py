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
