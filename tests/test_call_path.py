"""A compiled program's call path (issue 45 item 4): the checks worked out once (CallBinder) take
the same decisions, and say the same words, as `bind_call`; the reused argument vector of the C
program gives each call its own inputs, outputs and temporaries at every size."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from hypothesis import given
from hypothesis import strategies as st
from stitch.engine.ir.check import check_func
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import CallBinder, bind_call
from stitch.engine.ir.parse import parse_program

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
