"""A compiled program's call path (issue 45 item 4): the checks worked out once (CallBinder) take
the same decisions, and say the same words, as `bind_call`; the reused argument vector of the C
program gives each call its own inputs, outputs and temporaries at every size."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from hypothesis import given
from hypothesis import strategies as st
from stitch.engine.compiled_program import check_outputs
from stitch.engine.ir.check import check_func
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import CallBinder, bind_call, outputs_fit
from stitch.engine.ir.parse import parse_program
from stitch.targets.cpu import data_address

SOURCE = """
func f[n: 1..10, p: 1..20](x: f32[n, 4], c: f32[2, p], d: f32[2, p + 1], w: f32[4, 4], k: i64[n]) -> f32[n, 4] {
  return matmul(x, w)
}
"""


def _graph():
    return check_func(parse_program(SOURCE).funcs[0], SOURCE)


def _arrays(n: int, p: int, q: int) -> dict:
    return {"x": np.ones((n, 4), np.float32), "c": np.ones((2, p), np.float32),
            "d": np.ones((2, q), np.float32), "k": np.zeros(n, np.int64)}


def _outcome(fn, inputs):
    try:
        arrays, sizes = fn(inputs)
    except StitchError as err:
        return "error", str(err)
    return {k: (id(v), v.shape, v.dtype) for k, v in arrays.items()}, sizes


MISTAKES = ["none", "dtype", "rank", "list", "missing", "extra", "bound", "scalar", "noncontiguous"]


@given(n=st.integers(0, 12), p=st.integers(0, 22), q=st.integers(0, 23), mistake=st.sampled_from(MISTAKES))
def test_the_binder_decides_and_words_as_bind_call_does(n, p, q, mistake):
    graph = _graph()
    inputs = _arrays(max(n, 0), p, q)
    if mistake == "dtype":
        inputs["x"] = inputs["x"].astype(np.float64)
    elif mistake == "rank":
        inputs["c"] = inputs["c"][None]
    elif mistake == "list":
        inputs["x"] = inputs["x"].tolist()
    elif mistake == "missing":
        del inputs["k"]
    elif mistake == "extra":
        inputs["y"] = inputs["x"]
    elif mistake == "bound":
        inputs["w"] = np.ones((4, 4), np.float32)
    elif mistake == "scalar":
        inputs["k"] = 3
    elif mistake == "noncontiguous":
        inputs["d"] = np.ones((q, 2), np.float32).T
    binder = CallBinder(graph, ("w",))
    want = _outcome(lambda a: bind_call(graph, a, ("w",)), inputs)
    got = _outcome(binder, inputs)
    if want[0] == "error" or mistake in ("list", "scalar"):  # (converted arrays are new objects)
        assert got[0] == want[0] if want[0] == "error" else got[1] == want[1]
        assert got[1] == want[1]
    else:
        assert got == want


def test_the_binder_refuses_what_bind_call_refuses_in_its_words():
    binder = CallBinder(_graph(), ("w",))
    good = _arrays(3, 5, 6)
    assert binder(good)[1] == {"n": 3, "p": 5}
    with pytest.raises(StitchError, match=r"symbol 'n' is 3 in input 'x' \(axis 0\) but 4 in input 'k'"):
        binder(good | {"k": np.zeros(4, np.int64)})
    with pytest.raises(StitchError, match=r"symbol 'p' is 21 in input 'c' \(axis 1\), outside its range 1..20"):
        binder(_arrays(3, 21, 22))
    with pytest.raises(StitchError, match=r"input 'd' has shape \[2, 5\] but the parameter is f32\[2, p \+ 1\]"):
        binder(_arrays(3, 5, 5))


def test_calls_at_growing_and_shrinking_sizes_each_get_their_own_buffers():
    """One program, one reused argument vector: each call's inputs, outputs and (symbolic)
    temporaries, at sizes that grow the temporaries and then use their front."""
    program = stitch.compile("""
func f[n: 1..64](x: f32[n, 16], w: f32[16, 16]) -> (f32[n, 16], f32[n]) {
  h = exp(matmul(x, w))
  s = sum(h, axes=[1])
  return div(h, reshape(s, shape=[n, 1])), s
}
""", weights={"w": np.eye(16, dtype=np.float32) * 0.5})
    rng = np.random.default_rng(0)
    kept = []
    for n in [3, 40, 2, 64, 17]:
        x = rng.standard_normal((n, 16)).astype(np.float32)
        h = np.exp(x * 0.5)
        s = h.sum(axis=1)
        out = program(x=x)
        kept.append((out, h / s[:, None], s))
    for (got_h, got_s), want_h, want_s in kept:  # (earlier outputs are not overwritten by later calls)
        np.testing.assert_allclose(got_h, want_h, rtol=1e-5)
        np.testing.assert_allclose(got_s, want_s, rtol=1e-5)


OUT_MISTAKES = ["none", "dtype", "shape", "readonly", "strided", "unaligned", "input", "each_other", "subclass",
                "tuple", "short", "not_array"]


def _out_arrays(mistake: str, x: np.ndarray) -> object:
    """Two out= arrays for TWO_OUTPUTS, with one mistake (or none: a tuple is no mistake)."""
    a, b = np.empty((3, 4), np.float32), np.empty(3, np.float32)
    if mistake == "dtype":
        a = a.astype(np.float64)
    elif mistake == "shape":
        b = np.empty(4, np.float32)
    elif mistake == "readonly":
        a.flags.writeable = False
    elif mistake == "strided":
        a = np.empty((4, 3), np.float32).T
    elif mistake == "unaligned":
        b = np.empty(13, np.uint8)[1:].view(np.float32)
    elif mistake == "input":
        b = x.reshape(-1)[:3]
    elif mistake == "each_other":
        b = a.reshape(-1)[4:7]
    elif mistake == "subclass":
        a = a.view(np.matrix)
    elif mistake == "short":
        return [a]
    elif mistake == "not_array":
        return [a, [0.0, 0.0, 0.0]]
    return (a, b) if mistake == "tuple" else [a, b]


TWO_OUTPUTS = "func f(x: f32[3, 4]) -> (f32[3, 4], f32[3]) {\n  y = exp(x)\n  return y, sum(y, axes=[1])\n}"


@pytest.mark.parametrize("mistake", OUT_MISTAKES)
def test_the_quick_out_check_passes_only_what_check_outputs_passes(mistake):
    """`outputs_fit` (a call's common path) says yes only where `check_outputs` accepts the arrays, and
    a call with them runs or refuses as before: its no sends the call to check_outputs' decision and
    words."""
    program = stitch.compile(TWO_OUTPUTS)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    out = _out_arrays(mistake, x)
    try:
        check_outputs(program.graph, out, {"x": x})
        refusal = ""
    except StitchError as err:
        refusal = str(err)
    accepted = not refusal
    fits = outputs_fit(program._output_specs, out, {"x": x})
    assert fits == (mistake in ("none", "tuple"))
    assert accepted or not fits
    if accepted:
        got = program(x=x, out=out)
        assert got[0] is out[0] and np.allclose(got[1], np.exp(x).sum(axis=1), rtol=1e-5)
    else:
        with pytest.raises(StitchError) as err:
            program(x=x, out=out)
        assert str(err.value) == refusal


def test_a_symbolic_program_checks_its_out_arrays_in_full():
    program = stitch.compile("func f[n: 1..8](x: f32[n]) -> f32[n] {\n  return exp(x)\n}")
    assert program._output_specs is None
    x = np.zeros(3, np.float32)
    assert program(x=x, out=[np.empty(3, np.float32)])[0].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(StitchError, match="cannot be written"):
        program(x=x, out=[np.empty(4, np.float32)])


@pytest.mark.parametrize("make", [
    lambda: np.arange(10, dtype=np.float32)[3:],
    lambda: np.ones((3, 4), np.float16),
    lambda: np.zeros(5, bool),
    lambda: np.zeros((2, 0), np.float32),
    lambda: np.frombuffer(b"abcd1234", np.float32),
], ids=["view", "f16", "bool", "empty", "read-only"])
def test_an_arrays_address_is_its_first_element(make):
    a = make()
    assert data_address(a, a.flags) == a.ctypes.data


IN_MISTAKES = ["none", "dtype", "shape", "strided", "unaligned", "list", "missing", "extra"]


def _input(mistake: str) -> dict:
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    if mistake == "dtype":
        x = x.astype(np.float64)
    elif mistake == "shape":
        x = x.reshape(4, 3)
    elif mistake == "strided":
        x = np.ascontiguousarray(x.T).T
    elif mistake == "unaligned":
        x = np.empty(49, np.uint8)[1:].view(np.float32).reshape(3, 4)
        x[...] = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    elif mistake == "list":
        return {"x": x.tolist()}
    elif mistake == "missing":
        return {}
    elif mistake == "extra":
        return {"x": x, "y": x}
    return {"x": x}


@pytest.mark.parametrize("out_mistake", ["none", "fresh"] + OUT_MISTAKES[1:])
@pytest.mark.parametrize("in_mistake", IN_MISTAKES)
def test_the_quick_call_runs_the_common_call_and_leaves_every_other_to_the_general_path(in_mistake, out_mistake):
    """`Native.quick_call`: a call of plain arrays of the parameters' dtypes and shapes, with out= as
    `check_outputs` accepts it or none, runs in one function; any other call gets None from it, having
    done nothing, and the general path runs or refuses it as it did."""
    program = stitch.compile(TWO_OUTPUTS)
    inputs = _input(in_mistake)
    x = np.asarray(inputs.get("x", np.zeros((3, 4), np.float32)), dtype=np.float32)
    out = None if out_mistake == "fresh" else _out_arrays(out_mistake, x if in_mistake != "list" else
                                                          np.zeros((3, 4), np.float32))
    common = in_mistake == "none" and out_mistake in ("none", "fresh", "tuple")
    before = [np.copy(a) for a in out] if isinstance(out, (list, tuple)) and all(
        isinstance(a, np.ndarray) for a in out) else None
    got = program._quick(inputs, out)
    assert (got is not None) == common
    if got is None and before is not None:  # (nothing written)
        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(out, before))
    try:
        given, sizes, _ = program._called(inputs)
        if out is not None:
            check_outputs(program.graph, out, given, sizes)
        want = program.native.run(given, out, sizes)
    except StitchError as err:
        with pytest.raises(StitchError) as mine:
            program(out=out, **inputs)
        assert str(mine.value) == str(err)
        return
    called = program(out=out, **inputs)
    assert [a.shape for a in called] == [a.shape for a in want]
    assert all(np.array_equal(a, b) for a, b in zip(called, want))
    if out is not None:
        assert all(a is b for a, b in zip(called, out))


def test_the_quick_call_raises_a_gathers_error_as_the_general_path_does():
    program = stitch.compile("func f(x: f32[4], i: i64[2]) -> f32[2] {\n  return gather(x, i, axis=0)\n}")
    x = np.arange(4, dtype=np.float32)
    assert program._quick is not None
    np.testing.assert_array_equal(program(x=x, i=np.array([3, -1]))[0], [3, 3])
    with pytest.raises(StitchError, match="out of range") as quick:
        program(x=x, i=np.array([0, 9]))
    with pytest.raises(StitchError) as general:
        program.native.run({"x": x, "i": np.array([0, 9])})
    assert str(quick.value) == str(general.value)


def test_programs_with_symbols_or_an_input_returned_take_the_general_path():
    assert stitch.compile("func f[n: 1..8](x: f32[n]) -> f32[n] {\n  return exp(x)\n}")._quick is None
    returned = stitch.compile("func f(x: f32[4]) -> (f32[4], f32[4]) {\n  return exp(x), x\n}")
    assert returned._quick is None
    x = np.ones(4, np.float32)
    _, b = returned(x=x)
    assert b is not x and np.array_equal(b, x)
