"""Weights bound at compile time (lowering/bind.py): the prologue that lays their tiles out once,
kernels reading those blocks in place (cpu) or copying them on chip (accel), and every executor
computing what the reference computes with the weights passed as ordinary inputs."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.cli import main
from stitch.engine.ir.check import check_program
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.parse import parse_file
from stitch.engine.ir.printer import print_func
from stitch.engine.ir.tolerance import compare
from stitch.engine.schedule.target import parse_target
from stitch.lowering.bind import bind
from stitch.lowering.loops import leaves, loads, print_loops
from stitch.lowering.lower import lower
from stitch_testing import EXAMPLES, compile_text, example_sizes, needs_cc, programs, target_text

PROJ = """
func proj(x: f32[16, 64], w: f32[64, 96], b: f32[96]) -> f32[16, 96] {
  return relu(add(matmul(x, w), b))
}
"""

PROLOGUE = """\
  program proj_bind(w: f32[64, 96], b: f32[96]) -> w_s1_k0
    alloc global w_s1_k0: f32[4, 64, 24]

  kernel bind_w_s1_k0 {
    for p1o in 0..4 serial {
      for r0 in 0..64 serial {
        for p1 in 0..24 serial {
          w_s1_k0[p1o, r0, p1] = w[r0, 24*p1o + p1]
        }
      }
    }
  }
"""


def small(kind: str):
    return parse_target(target_text(kind, onchip_bytes=16384))


def test_a_weights_tiles_are_laid_out_once_and_read_in_place_on_a_cpu():
    before = print_loops(lower(compile_text(PROJ, small("cpu"))))
    assert "w_s1[r0, p1] = w[r0, 24*p1o + p1]" in before  # each call copies each tile's columns
    after = print_loops(lower(compile_text(PROJ, small("cpu")), ("w", "b")))
    assert after.startswith("program proj(x: f32[16, 64], b: f32[96], w_s1_k0: f32[4, 64, 24]) -> out0\n"
                            "  bound w, b\n")
    assert PROLOGUE in after
    assert "k0_v2[p0, p1] += mul(x[p0, r0], w_s1_k0[p1o, r0, p1])" in after  # (x's rows follow one another: in place)
    assert "alloc shared w_s1" not in after and "= w[" not in after.split("kernel k0")[1]


HEADS = """
func heads(x: f32[32, 64], w: f32[64, 64], v: f32[64, 64], g: f32[64]) -> f32[4, 32, 32] {
  q = transpose(reshape(matmul(mul(x, g), w), shape=[32, 4, 16]), perm=[1, 0, 2])
  k = transpose(reshape(matmul(x, v), shape=[32, 4, 16]), perm=[1, 2, 0])
  return matmul(q, k)
}
"""


def test_a_weight_read_where_it_is_is_read_from_a_block_in_the_loops_order():
    """A head's products read 16 of each 64-wide row of w and v where they are (not staged): each
    gets a block holding every head's columns one head after the other, in the loops' order; g,
    read in its own order, is read as it is."""
    target = parse_target(target_text("cpu", onchip_bytes=65536))
    before = print_loops(lower(compile_text(HEADS, target)))
    assert "mul(mul(x_s[p1, r1], g_s[r1]), w[r1, 16*p0 + 16*p0o + r0])" in before
    loops = lower(compile_text(HEADS, target), ("w", "v", "g"))
    after = print_loops(loops)
    assert "w_k0_0[p0o, r1, p0, r0] = w[r1, 16*p0 + 16*p0o + r0]" in after
    assert "mul(mul(x_s[p1, r1], g[r1]), w_k0_0[p0o, r1, p0, r0])" in after
    rng = np.random.default_rng(3)
    weights = {"w": rng.random((64, 64), dtype=np.float32), "v": rng.random((64, 64), dtype=np.float32),
               "g": rng.random(64, dtype=np.float32)}
    x = rng.random((32, 64), dtype=np.float32)
    from stitch.lowering.execute import execute

    graph = compile_text(HEADS, target).graph
    (got,), _ = execute(loops, {"x": x} | bind(loops, weights))
    assert compare(got, evaluate(graph, {"x": x} | weights)[0]) == ""


def test_a_weight_read_on_one_side_of_a_concat_is_read_as_it_is():
    """Each side of concat(w, w) reads w only where the concat's select takes that side: a block
    over the loops whole would read past w's end (the prologue failed with an IndexError). (Adding
    x keeps the sum from being a value of w alone, which engine/ir/fold.py would compute at binding.)"""
    text = ("func f(x: f32[1, 4, 1], w: f32[1, 2, 1]) -> f32[] {\n"
            "  return sum(mul(x, neg(add(x, concat(w, w, axis=1)))), axes=[0, 1, 2])\n}\n")
    rng = np.random.default_rng(5)
    w, x = rng.random((1, 2, 1), dtype=np.float32), rng.random((1, 4, 1), dtype=np.float32)
    for target in ("cpu", "accel"):
        compiled = stitch.compile(text, target=target, weights={"w": w})
        assert compare(compiled(x=x)[0], evaluate(compiled.graph, {"x": x, "w": w})[0]) == ""


def test_on_a_scratchpad_the_block_is_copied_on_chip():
    after = print_loops(lower(compile_text(PROJ, small("accel")), ("w",)))
    assert "w_s1[r0, p1] = w_s1_k0[p1o, r0, p1]" in after  # one contiguous block per tile
    assert "alloc shared w_s1: f32[64, 32]" in after


def test_a_copy_of_a_whole_weight_in_its_layout_is_the_weight():
    text = """
    func f(x: f32[64, 32], g: f32[32]) -> f32[64, 32] {
      m = mean(x, axes=[1], keepdims=true)
      return mul(sub(x, m), g)
    }
    """
    loops = lower(compile_text(text, parse_target(target_text("cpu", onchip_bytes=65536, resident_share=0.5))),
                  ("g",))
    readers = {ld.buffer for k in loops.kernels for leaf in leaves(k.body) for ld in loads(leaf.value)}
    assert "g" in readers and loops.prologue is None
    assert not any(b.name.startswith("g_s") for k in loops.kernels for b in k.allocs)


def test_a_weight_is_read_in_place_where_the_target_says():
    """Reading a bound weight where it is (above) is the target's `weights_in_place` key, not its kind:
    a cpu target without it keeps the on-chip copy of the weight, as a scratchpad does."""
    text = """
    func f(x: f32[64, 32], g: f32[32]) -> f32[64, 32] {
      m = mean(x, axes=[1], keepdims=true)
      return mul(sub(x, m), g)
    }
    """
    target = parse_target(target_text("cpu", onchip_bytes=65536, resident_share=0.5, weights_in_place="false"))
    loops = lower(compile_text(text, target), ("g",))
    assert any(b.name.startswith("g_s") for k in loops.kernels for b in k.allocs), print_loops(loops)


def test_nothing_bound_changes_nothing():
    c = compile_text(PROJ, small("cpu"))
    assert print_loops(lower(c, ())) == print_loops(lower(c))
    assert lower(c).prologue is None


def test_bind_makes_the_blocks_from_the_weights():
    loops = lower(compile_text(PROJ, small("cpu")), ("w", "b"))
    rng = np.random.default_rng(0)
    w, b = rng.random((64, 96), dtype=np.float32), rng.random(96, dtype=np.float32)
    arrays = bind(loops, {"w": w, "b": b})
    assert set(arrays) == {"b", "w_s1_k0"}  # w is read only through its blocks
    np.testing.assert_array_equal(arrays["w_s1_k0"], w.reshape(64, 4, 24).transpose(1, 0, 2))
    assert arrays["b"] is not b and np.array_equal(arrays["b"], b)


def _split(graph, data) -> tuple[dict, dict]:
    inputs = random_inputs(graph, data.draw(st.integers(0, 99), label="seed"))
    names = sorted(inputs)
    bound = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)), label="bound") if names else []
    return {k: v for k, v in inputs.items() if k not in bound}, {k: inputs[k] for k in bound}


@needs_cc
@settings(max_examples=20)
@given(program=programs(dtypes=("f32", "f64", "i32", "bool"), max_ops=8, max_rank=3, max_dim=5, movement=True),
       data=st.data())
def test_bound_programs_compute_what_the_reference_computes(program, data, tmp_path_factory):
    text = print_func(program.funcs[0])
    cache = tmp_path_factory.getbasetemp() / "cache"
    graph = stitch.compile(text, cache_dir=cache).graph
    inputs, weights = _split(graph, data)
    want = evaluate(graph, inputs | weights)
    target = data.draw(st.sampled_from(["cpu", "accel"]), label="target")
    compiled = stitch.compile(text, target=target, cache_dir=cache, weights=weights)
    for got, w in zip(compiled(**inputs), want):
        assert compare(got, w) == "", text


@pytest.mark.parametrize("target", ["cpu", "accel"])
@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_every_example_with_its_weights_bound(path, target, tmp_path):
    graph = next(iter(check_program(parse_file(path)).values()))
    inputs = random_inputs(graph, 3, example_sizes(graph))
    first, *rest = graph.param_names
    weights = {k: inputs.pop(k) for k in rest}
    compiled = stitch.compile(path, target=target, cache_dir=tmp_path, weights=weights)
    for got, want in zip(compiled(**inputs), evaluate(graph, inputs | weights)):
        assert compare(got, want) == ""


@needs_cc
def test_the_weights_are_the_programs_own(tmp_path):
    rng = np.random.default_rng(1)
    x, w, b = (rng.random(s, dtype=np.float32) for s in ((16, 64), (64, 96), (96,)))
    compiled = stitch.compile(PROJ, cache_dir=tmp_path, weights={"w": w, "b": b})
    (first,) = compiled(x=x)
    w[...] = 0
    b[...] = 0
    (again,) = compiled(x=x)
    np.testing.assert_array_equal(first, again)


def test_binding_errors(tmp_path):
    w = np.zeros((64, 96), np.float32)
    with pytest.raises(StitchError, match="has no parameter.* named v"):
        stitch.compile(PROJ, cache_dir=tmp_path, weights={"v": w})
    with pytest.raises(StitchError, match=r"weight 'w' has shape \[96, 64\]"):
        stitch.compile(PROJ, cache_dir=tmp_path, weights={"w": w.T})
    with pytest.raises(StitchError, match="weight 'w' has dtype float64"):
        stitch.compile(PROJ, cache_dir=tmp_path, weights={"w": w.astype(np.float64)})
    with pytest.raises(TypeError, match="weights must be a dict"):
        stitch.compile(PROJ, cache_dir=tmp_path, weights=[w])
    compiled = stitch.compile(PROJ, cache_dir=tmp_path, weights={"w": w})
    x, b = np.zeros((16, 64), np.float32), np.zeros(96, np.float32)
    with pytest.raises(StitchError, match="w of 'proj' were bound at compile time"):
        compiled(x=x, b=b, w=w)
    with pytest.raises(StitchError, match="missing input for parameter.* b"):
        compiled(x=x)


@needs_cc
def test_the_command_line_binds_weights(tmp_path, capsys):
    ir = tmp_path / "proj.ir"
    ir.write_text(PROJ)
    rng = np.random.default_rng(2)
    np.savez(tmp_path / "w.npz", w=rng.random((64, 96), dtype=np.float32), b=rng.random(96, dtype=np.float32))
    np.savez(tmp_path / "x.npz", x=rng.random((16, 64), dtype=np.float32))
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert main(["run", str(ir), "--weights", str(tmp_path / "w.npz"), "--inputs", str(tmp_path / "x.npz"),
                 "--check"] + cache) == 0
    assert "check: outputs equal the reference" in capsys.readouterr().out
    assert main(["run", str(ir), "--weights", str(tmp_path / "w.npz"), "--seed", "4", "--check"] + cache) == 0
    capsys.readouterr()
    assert main(["compile", str(ir), "--weights", str(tmp_path / "w.npz"), "--emit", "loops"]) == 0
    assert "  bound w, b\n" in capsys.readouterr().out
    np.savez(tmp_path / "bad.npz", w=np.zeros((3, 3), np.float32))
    assert main(["run", str(ir), "--weights", str(tmp_path / "bad.npz")] + cache) == 1
    err = capsys.readouterr().err
    assert "bad.npz" in err and "weight 'w' has shape [3, 3]" in err
    np.savez(tmp_path / "xw.npz", x=rng.random((16, 64), dtype=np.float32), w=rng.random((64, 96), dtype=np.float32))
    assert main(["run", str(ir), "--weights", str(tmp_path / "w.npz"), "--inputs", str(tmp_path / "xw.npz")]
                + cache) == 1
    assert "were bound at compile time" in capsys.readouterr().err
