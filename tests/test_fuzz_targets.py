"""Fuzz what is not a program text: target files, the Python API's arguments, and edge values.

- Target descriptions: the built-in ones with keys removed, added or given
  values of every kind (NaN, inf, 0, negative, huge, fractional, strings,
  lists). Loading one either fails with a StitchError naming the file, or the
  target compiles and runs a program, matching the reference, or refuses it
  with a StitchError. Never another exception.
- `stitch.compile`'s arguments and a compiled program's inputs: each drawn
  valid or of a wrong kind or value; the outcome is a result, a StitchError,
  or a TypeError naming the argument.
- Programs over every dtype on edge values (NaN, +-inf, +-0.0, the dtype's
  largest and smallest, integer min and max) on both targets, equal to the
  reference (docs/explanation/floating-point.md), with two preconditions: no
  reduction or matmul whose finite terms could overflow a partial sum (its
  order is unspecified, so then is its answer), and no matmul result that is a
  zero summed from products of nonzero values (fused or not, its sign is
  unspecified: 1 / such a zero is +inf or -inf).

Example counts follow the settings profile (`quick`, or `long` with `pytest --long`).
"""

from __future__ import annotations

import dataclasses
import math
import tomllib

import numpy as np
import pytest
import stitch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from stitch.engine.ir.check import check_func
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import evaluate, np_dtype, random_inputs
from stitch.engine.ir.ops import OPS, REDUCE
from stitch.engine.ir.parse import parse_program
from stitch.engine.ir.tolerance import compare
from stitch.engine.rewrite.saturate import Limits
from stitch.engine.schedule.target import TARGET_DIR, load_target
from stitch.targets import cpu
from stitch_testing import EXAMPLES, HAVE_CC, edge_inputs_for, programs

SMALL = ("func f(x: f32[4, 8], g: f32[8]) -> (f32[4, 8], f32[4]) {\n"
         "  m = mean(x, axes=[1], keepdims=true)\n  d = sub(x, m)\n"
         "  return mul(d, g), max(exp(d), axes=[1])\n}\n")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


# -- target descriptions --------------------------------------------------------------------

BASE = {name: tomllib.loads((TARGET_DIR / f"{name}.toml").read_text()) for name in ("cpu", "accel")}

ODD_VALUES = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 0.5, 1e-300, 1e300, 2**62, 2**63 - 1, math.nan, math.inf, -math.inf, True,
                     "cpu", "accel", "", [], [1, 2], {}]),
    st.integers(-10, 10**9),
    st.floats(allow_nan=True, allow_infinity=True),
)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def toml_text(data: dict) -> str:
    flat = [f"{k} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    tables = [f"\n[{k}]\n" + "\n".join(f"{kk} = {toml_value(vv)}" for kk, vv in v.items())
              for k, v in data.items() if isinstance(v, dict)]
    return "\n".join(flat) + "\n" + "\n".join(tables) + "\n"


@st.composite
def target_files(draw) -> str:
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in BASE[draw(st.sampled_from(["cpu", "accel"]))].items()}
    for _ in range(draw(st.integers(1, 3))):
        table = data
        tables = sorted(k for k, v in data.items() if isinstance(v, dict))
        if tables and draw(st.booleans()):  # (an earlier step may have deleted the only table)
            table = data[draw(st.sampled_from(tables))]
        keys = sorted(table)
        action = draw(st.integers(0, 9))
        if action == 0 and keys:
            del table[draw(st.sampled_from(keys))]
        elif action == 1:
            table[draw(st.sampled_from(["bogus", "tile_q", "cores", "exp", "lanes"]))] = draw(ODD_VALUES)
        elif keys:
            key = draw(st.sampled_from(keys))
            if not isinstance(table[key], dict):
                table[key] = draw(ODD_VALUES)
    return toml_text(data)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None)
@given(text=target_files())
def test_a_target_file_loads_and_runs_or_is_refused_clearly(text, tmp_path_factory):
    path = tmp_path_factory.mktemp("target") / "t.toml"
    path.write_text(text)
    try:
        target = load_target(str(path))
    except StitchError as err:
        assert str(path) in err.render()
        return
    program = None
    try:
        # accel targets run on the simulator; cpu ones on the numpy executor (a C build per example
        # would dominate the run time; the C follows the same LoopProgram)
        program = stitch.compile(SMALL, target=str(path), cache_dir=tmp_path_factory.getbasetemp() / "c",
                                 limits=Limits(seconds=0.5)) if target.kind == "accel" else None
        if program is None:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(cpu, "compiler", lambda: None)
                program = stitch.compile(SMALL, target=str(path), limits=Limits(seconds=0.5))
    except StitchError:
        return
    inputs = random_inputs(program.graph, 0)
    for got, want in zip(program(**inputs), evaluate(program.graph, inputs)):
        assert compare(got, want) == ""


# -- the Python API ----------------------------------------------------------------------------

ARGUMENTS = {
    "source": st.sampled_from([SMALL, str(EXAMPLES / "mlp.ir"), EXAMPLES / "mlp.ir", 0, None, b"func", 3.5, [SMALL],
                               "func f( {", "", "nowhere.ir"]),
    "target": st.sampled_from(["cpu", "accel", "gpu", 3, None, str(TARGET_DIR / "accel.toml"), ["cpu"]]),
    "rules": st.sampled_from([(), [], ["nowhere.rules"], "x.rules", [3], None, (EXAMPLES / "shared_stitch.rules",)]),
    "builtin_rules": st.sampled_from([True, False, None, 1, "yes"]),
    "entry": st.sampled_from([None, "f", "mlp", "nope", 5, ["f"]]),
    "limits": st.sampled_from([None, Limits(), Limits(iterations=1), Limits(nodes=0), Limits(seconds=-1.0),
                               Limits(memory=math.nan), "x", 5, {"nodes": 3}]),
    "without_rules": st.sampled_from([(), ["fusion"], ["stitch-*"], ["nope"], "algebra", [None]]),
    "unsafe_fp": st.sampled_from([False, True, None, "no"]),
}


@settings(deadline=None)
@given(kwargs=st.fixed_dictionaries({}, optional=ARGUMENTS))
def test_compile_arguments_give_a_result_or_a_clear_error(kwargs, cache):
    kwargs.setdefault("source", SMALL)
    kwargs["target"] = kwargs.get("target", "accel")  # the simulator: no C build per example
    try:
        program = stitch.compile(cache_dir=cache, **kwargs)
    except StitchError:
        return
    except TypeError as err:
        assert any(name in str(err) for name in kwargs), err
        return
    inputs = random_inputs(program.graph, 0)
    for got, want in zip(program(**inputs), evaluate(program.graph, inputs)):
        assert compare(got, want) == ""


@pytest.fixture(scope="module")
def small_program(cache):
    return stitch.compile(SMALL, target="accel", cache_dir=cache)


INPUT_VALUES = st.sampled_from([
    np.ones((4, 8), np.float32), np.ones((4, 8), np.float64), np.ones((8, 4), np.float32), np.ones(8, np.float32),
    np.ones((4, 8), np.int32), np.float32(1.0), 1.0, [[1.0] * 8] * 4, "x", None, np.ones((4, 8), np.float32).T,
    np.full((4, 8), np.nan, np.float32), np.ones((2, 4, 8), np.float32)[0],
])


@settings(deadline=None)
@given(inputs=st.fixed_dictionaries({}, optional={"x": INPUT_VALUES, "g": INPUT_VALUES, "y": INPUT_VALUES}))
def test_call_arguments_give_a_result_or_a_clear_error(inputs, small_program):
    try:
        outputs = small_program(**inputs)
    except StitchError:
        return
    for got, want in zip(outputs, evaluate(small_program.graph, inputs)):
        assert compare(got, want) == ""


# -- edge values on both targets -----------------------------------------------------------------


def partial_sums_may_overflow(graph, values: list[np.ndarray]) -> bool:
    """Some reduction or matmul whose finite terms could carry a partial sum past its dtype's largest value,
    in some order (f16 sums accumulate in f32)."""
    for n in graph.nodes:
        if n.op not in REDUCE and n.op != "matmul" or n.type.dtype not in ("f16", "f32", "f64"):
            continue
        operands = [values[i] for i in n.inputs]
        shape = graph.nodes[n.inputs[0]].type.shape
        if n.op == "matmul":
            terms = shape[-1]
            big = [float(np.max(np.abs(v[np.isfinite(v)]), initial=0.0)) for v in operands]
            bound = terms * big[0] * big[1]
        else:
            terms = math.prod(shape[a] for a in n.attr("axes"))
            finite = operands[0][np.isfinite(operands[0])]
            bound = terms * float(np.max(np.abs(finite), initial=0.0))
        limit = float(np.finfo(np.float32 if n.type.dtype == "f16" and n.op != "max" else np_dtype(n.type.dtype)).max)
        if bound >= limit / 4:
            return True
    return False


def matmul_zero_of_products(graph, values: list[np.ndarray]) -> bool:
    """Some float matmul result that is zero where a product of two nonzero values was summed into it:
    products that underflow give -0.0 or +0.0 as the multiply-add is fused or not (numpy's BLAS
    fuses them for k >= 2; the simulator and the C's small products do not)."""
    for n in graph.nodes:
        if n.op != "matmul" or n.type.dtype not in ("f16", "f32", "f64"):
            continue
        a, b = (np.where(np.isfinite(v) & (v != 0), 1.0, 0.0) for v in (values[i] for i in n.inputs))
        if np.any((np.matmul(a, b) > 0) & (values[n.id] == 0)):
            return True
    return False


@pytest.mark.parametrize("target", ["cpu", "accel"])
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
          deadline=None)
@given(data=st.data())
def test_edge_values_give_the_reference_answer_on_every_target(target, data, cache):
    if target == "cpu" and not HAVE_CC:
        pytest.skip("no C compiler on this machine")
    program = data.draw(programs(dtypes=("f32", "f16", "f64", "i8", "u8", "i32", "i64", "bool"), max_ops=6, max_rank=2,
                                 max_dim=5))
    graph = check_func(program.funcs[0])
    inputs = data.draw(edge_inputs_for(graph))
    with np.errstate(all="ignore"):
        values = evaluate(dataclasses.replace(graph, outputs=[n.id for n in graph.nodes]), inputs)
    assume(not partial_sums_may_overflow(graph, values) and not matmul_zero_of_products(graph, values))
    from stitch.engine.ir.printer import print_program

    compiled = stitch.compile(print_program(program), target=target, cache_dir=cache)
    want = [values[o] for o in graph.outputs]
    # drawn too: out= arrays (filled in place, each its own), and the pool's size on the cpu
    out = [np.full(t.shape, 7, np_dtype(t.dtype)) for t in graph.output_types] if data.draw(
        st.booleans(), label="out=") else None
    threads = data.draw(st.sampled_from([1, 2]), label="threads") if target == "cpu" else None
    before = stitch.num_threads()
    try:
        if threads:
            stitch.set_num_threads(threads)
        got_all = compiled(out=out, **inputs)
    finally:
        stitch.set_num_threads(before)
    if out is not None:
        assert all(g is o for g, o in zip(got_all, out))
    for k, (got, w) in enumerate(zip(got_all, want)):
        assert compare(got, w) == "", (k, print_program(program), inputs, got, w)


def test_a_zero_summed_from_underflowing_products_is_left_out():
    """1 / (tiny * -tiny + tiny * -tiny): numpy (BLAS, fused) gives -inf, the simulator +inf."""
    text = "func f(x: f32[1, 2], w: f32[2, 1]) -> f32[1, 1] {\n  return div(1.0, matmul(x, w))\n}\n"
    graph = check_func(parse_program(text).funcs[0])
    tiny = np.finfo(np.float32).tiny
    inputs = {"x": np.full((1, 2), tiny, np.float32), "w": np.full((2, 1), -tiny, np.float32)}
    with np.errstate(all="ignore"):
        values = evaluate(dataclasses.replace(graph, outputs=[n.id for n in graph.nodes]), inputs)
    assert matmul_zero_of_products(graph, values)
    inputs["w"][:] = -0.0  # products of a zero: +0.0 however they are summed from +0.0
    with np.errstate(all="ignore"):
        values = evaluate(dataclasses.replace(graph, outputs=[n.id for n in graph.nodes]), inputs)
    assert not matmul_zero_of_products(graph, values)


def test_every_op_is_drawn():
    assert {"maximum", "minimum", "relu", "cast", "pow", "max", "min", "sum", "mean", "matmul"} <= set(OPS)
