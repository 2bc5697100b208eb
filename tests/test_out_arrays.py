"""One contract for a compiled program's outputs on every target (issue 52): each output is an array
of its own, and every `out=` array given holds its output, also when a program returns an input or
one value twice."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import evaluate, np_dtype, random_inputs
from stitch.engine.ir.printer import print_func
from stitch.engine.ir.program import Var
from stitch.engine.ir.tolerance import compare
from stitch_testing import programs

TARGETS = ["cpu", "accel"]
TWICE = "func f(x: f32[4]) -> (f32[4], f32[4]) {\n  y = exp(x)\n  return y, y\n}"
AN_INPUT = "func f(x: f32[4]) -> f32[4] {\n  return cast(x, dtype=f32)\n}"


def empties(program) -> list[np.ndarray]:
    return [np.full(t.shape, 7, np_dtype(t.dtype)) for t in program.graph.output_types]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("text", [TWICE, AN_INPUT], ids=["twice", "an-input"])
def test_every_out_array_is_filled_and_every_output_is_its_own(text, target, cache):  # noqa: F811
    program = stitch.compile(text, target=target, cache_dir=cache)
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    want = evaluate(program.graph, {"x": x})
    out = empties(program)
    got = program(x=x, out=out)
    assert all(g is o for g, o in zip(got, out))
    assert all(compare(g, w) == "" for g, w in zip(got, want))
    fresh = program(x=x)
    assert len({id(a) for a in fresh}) == len(fresh) and not any(np.shares_memory(a, x) for a in fresh)
    fresh[0][...] = 0  # writing one output leaves the others and the input alone
    assert all(compare(a, w) == "" for a, w in zip(fresh[1:], want[1:]))
    assert np.array_equal(x, np.linspace(-1, 1, 4, dtype=np.float32))


@st.composite
def returning_twice_and_an_input(draw):
    """A generated func whose returns also hold its first result again and its first parameter."""
    func = draw(programs(max_ops=5, max_rank=2, max_dim=4, max_results=2)).funcs[0]
    param = func.params[0]
    return replace(func, returns=func.returns + (func.returns[0], Var(param.name)),
                   results=func.results + (func.results[0], param.type))


@settings(max_examples=15, deadline=None)
@given(func=returning_twice_and_an_input(), target=st.sampled_from(TARGETS), seed=st.integers(0, 99))
def test_out_arrays_of_generated_programs_equal_the_reference(func, target, seed, tmp_path_factory):
    text = print_func(func)
    program = stitch.compile(text, target=target, cache_dir=tmp_path_factory.getbasetemp() / "cache")
    inputs = random_inputs(program.graph, seed)
    want = evaluate(program.graph, inputs)
    out = empties(program)
    got = program(out=out, **inputs)
    assert all(g is o for g, o in zip(got, out)), text
    for g, w in zip(got, want):
        assert compare(g, w) == "", text
    fresh = program(**inputs)
    assert len({id(a) for a in fresh}) == len(fresh), text
    assert not any(np.shares_memory(a, v) for a in fresh for v in inputs.values()), text


@pytest.mark.parametrize("target", TARGETS)
def test_out_arrays_of_a_symbolic_program_are_checked_at_the_call_sizes(target, cache):  # noqa: F811
    """A symbolic output's out= array has the output's shape at this call's sizes (it was compared with
    the unevaluated `n + 1` and every such array was refused); one of another size is refused, naming both."""
    text = ("func f[n: 1..64](x: f32[n, 4]) -> f32[n + 1, 4] {\n"
            "  return concat(exp(x), slice(x, axes=[0], starts=[0], ends=[1], steps=[1]), axis=0)\n}")
    program = stitch.compile(text, target=target, cache_dir=cache)
    for n in (1, 5, 64):
        x = np.linspace(-1, 1, 4 * n, dtype=np.float32).reshape(n, 4)
        out = [np.full((n + 1, 4), 7, np.float32)]
        got = program(x=x, out=out)
        assert got[0] is out[0] and compare(out[0], evaluate(program.graph, {"x": x})[0]) == ""
    with pytest.raises(StitchError, match=r"out\[0\] is float32\[5, 4\], the output is f32\[n \+ 1, 4\] "
                                                 r"\(\[6, 4\] at n=5\)"):
        program(x=np.zeros((5, 4), np.float32), out=[np.zeros((5, 4), np.float32)])
