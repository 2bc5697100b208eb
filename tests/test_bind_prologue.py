"""The prologue's blocks (lowering/bind.py `run_prologue`): byte for byte what the numpy executor makes
running the prologue, a strided copy made as one view of its source (a chain of them too) and any
other nest run on the executor; each block an aligned, writable array of the program's own."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.check import check_program
from stitch.engine.ir.interp import ALIGNMENT, random_inputs
from stitch.engine.ir.parse import parse_file
from stitch.frontends.onnx_import import import_onnx
from stitch.lowering.bind import bind, run_prologue
from stitch.lowering.execute import execute
from stitch.lowering.loops import (
    Buffer,
    For,
    Ix,
    Load,
    LoopKernel,
    LoopProgram,
    Op,
    Store,
)
from stitch_testing import EXAMPLES, example_sizes

MODELS = EXAMPLES.parent / "tests" / "fixtures" / "models"


def assert_executors_bytes(prologue: LoopProgram, weights: dict[str, np.ndarray], blocks: dict[str, np.ndarray]):
    """`blocks` hold the bytes the numpy executor's run of `prologue` makes, as arrays of their own."""
    want, _ = execute(prologue, weights, count=False)
    assert list(blocks) == prologue.outputs
    for name, expected in zip(prologue.outputs, want):
        got = blocks[name]
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape), name
        assert got.tobytes() == expected.tobytes(), name
        assert got.flags.c_contiguous and got.flags.writeable and got.ctypes.data % ALIGNMENT == 0, name
        assert not any(np.shares_memory(got, w) for w in weights.values()), name


def assert_bound_as_executed(compiled, weights: dict[str, np.ndarray]):
    loops = compiled.loops
    assert loops.prologue is not None
    given = {name: weights[name] for name in loops.bound}
    assert_executors_bytes(loops.prologue, given, {name: compiled.bound[name] for name in loops.prologue.outputs})


@pytest.mark.parametrize("target", ["cpu", "accel"])
@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_every_examples_blocks_are_the_executors(path, target, tmp_path):
    graph = next(iter(check_program(parse_file(path)).values()))
    inputs = random_inputs(graph, 3, example_sizes(graph))
    weights = {k: inputs.pop(k) for k in graph.param_names[1:]}
    compiled = stitch.compile(path, target=target, cache_dir=tmp_path, weights=weights)
    if compiled.loops.prologue is None:
        pytest.skip("no block made from its weights")
    assert_bound_as_executed(compiled, weights)


# a one-row MLP at GPT-2's width: each weight's tile blocks, then those blocks in panels (a chain)
MLP_ROW = """
func mlp(x: f32[1, 768], w1: f32[768, 3072], b1: f32[3072], w2: f32[3072, 768], b2: f32[768]) -> f32[1, 768] {
  return add(matmul(relu(add(matmul(x, w1), b1)), w2), b2)
}
"""

# attention's scores: tiles of w, every head's columns of w and of b in the loops' order
HEADS = """
func heads(x: f32[16, 768], w: f32[768, 2304], b: f32[2304]) -> f32[12, 16, 16] {
  qkv = add(matmul(x, w), b)
  q = transpose(reshape(slice(qkv, starts=[0], ends=[768], axes=[1]), shape=[16, 12, 64]), perm=[1, 0, 2])
  k = transpose(reshape(slice(qkv, starts=[768], ends=[1536], axes=[1]), shape=[16, 12, 64]), perm=[1, 2, 0])
  return matmul(q, k)
}
"""


@pytest.mark.parametrize("text", [MLP_ROW, HEADS], ids=["mlp_row", "heads"])
def test_gpt2_widths_blocks_are_the_executors(text, tmp_path):
    graph = stitch.compile(text, cache_dir=tmp_path).graph
    rng = np.random.default_rng(4)
    weights = {name: rng.standard_normal(typ.shape).astype(np.float32)
               for name, typ in zip(graph.param_names[1:], graph.param_types[1:])}
    assert_bound_as_executed(stitch.compile(text, cache_dir=tmp_path, weights=weights), weights)


@pytest.mark.parametrize("model", ["gpt2_block-dynamo", "opt_layer-dynamo"])
def test_a_models_blocks_are_the_executors(model, tmp_path):
    """A GPT-2 block's heads' biases; an OPT layer's transposed packs."""
    imported = import_onnx(MODELS / f"{model}.onnx")
    compiled = stitch.compile(imported.text, cache_dir=tmp_path, weights=imported.weights)
    assert_bound_as_executed(compiled, imported.weights)


def _var(v: str) -> Ix:
    return Ix(((v, 1),), 0)


def _nest(loops: list[tuple[str, int]], leaf) -> For:
    for var, extent in reversed(loops):
        leaf = For(var, extent, "serial", [leaf])
    return leaf


def _kernel(name: str, loops: list[tuple[str, int]], leaf) -> LoopKernel:
    return LoopKernel(name, [], [_nest(loops, leaf)])


def test_nests_that_are_no_whole_strided_copy_run_on_the_executor():
    """Arithmetic, a block written in part (the rest stays zero) and a block written twice run on the
    executor; a view of a block the executor made, and a read backwards (a negative stride), do not
    change when that block is written again."""
    w = Buffer("w", "global", "f32", (8, 6))
    blocks = {"neg": (8, 6), "part": (8, 8), "twice": (6, 8), "back": (8, 6), "of_twice": (8, 6)}
    buffers = {name: Buffer(name, "global", "f32", shape) for name, shape in blocks.items()}
    i, j = _var("i"), _var("j")
    ij, ji = [("i", 8), ("j", 6)], [("j", 6), ("i", 8)]
    backwards = (Ix((("i", -1),), 7), Ix((("j", -1),), 5))
    kernels = [
        _kernel("neg", ij, Store("neg", (i, j), Op("neg", (Load("w", (i, j)),), "f32"))),
        _kernel("part", ij, Store("part", (i, j), Load("w", (i, j)))),
        _kernel("twice", ji, Store("twice", (j, i), Load("w", (i, j)))),
        _kernel("back", ij, Store("back", (i, j), Load("w", backwards))),
        _kernel("of_twice", ij, Store("of_twice", (i, j), Load("twice", (j, i)))),
        _kernel("again", [("j", 6), ("i", 4)], Store("twice", (j, i), Load("neg", (i, j)))),
    ]
    prologue = LoopProgram("p_bind", [w], list(blocks), [], kernels, list(buffers.values()))
    weights = {"w": np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)}
    made = run_prologue(prologue, weights)
    assert_executors_bytes(prologue, weights, made)
    np.testing.assert_array_equal(made["of_twice"], weights["w"])  # read before "again" wrote over it
    np.testing.assert_array_equal(made["back"], weights["w"][::-1, ::-1])


def test_a_weight_of_another_shape_or_dtype_is_refused():
    w = Buffer("w", "global", "f32", (4,))
    out = Buffer("b", "global", "f32", (4,))
    prologue = LoopProgram("p_bind", [w], ["b"], [], [_kernel("b", [("i", 4)], Store("b", (_var("i"),), Load(
        "w", (_var("i"),))))], [out])
    with pytest.raises(ValueError, match=r"input w: expected f32\[4\]"):
        run_prologue(prologue, {"w": np.zeros(4, np.float64)})
    loops = LoopProgram("p", [out], [], [], [], bound=("w",), prologue=prologue)
    assert set(bind(loops, {"w": np.arange(4, dtype=np.float32)})) == {"b"}
