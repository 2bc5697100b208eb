"""The `run --check` tolerance (`engine/ir/tolerance.py`): it grows with the terms summed into each output."""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.cli import main
from stitch.engine.ir.check import check_program
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.parse import parse_program
from stitch.engine.ir.tolerance import compare, differences, summed_terms
from stitch.targets import cpu

# A GPT-2 attention block, 12 heads of 64 over a model width of 768, at sequence length SEQ.
BLOCK = """
func block(x: f32[SEQ, 768], wq: f32[768, 768], wk: f32[768, 768], wv: f32[768, 768], wo: f32[768, 768])
    -> f32[SEQ, 768] {
  q = transpose(reshape(matmul(x, wq), shape=[SEQ, 12, 64]), perm=[1, 0, 2])
  k = transpose(reshape(matmul(x, wk), shape=[SEQ, 12, 64]), perm=[1, 2, 0])
  v = transpose(reshape(matmul(x, wv), shape=[SEQ, 12, 64]), perm=[1, 0, 2])
  s = mul(matmul(q, k), 0.125)
  m = max(s, axes=[-1], keepdims=true)
  e = exp(sub(s, m))
  p = div(e, sum(e, axes=[-1], keepdims=true))
  o = reshape(transpose(matmul(p, v), perm=[1, 0, 2]), shape=[SEQ, 768])
  return matmul(o, wo)
}
"""


def graph_of(text: str):
    (graph,) = check_program(parse_program(text)).values()
    return graph


def block_inputs(seq: int, scale: float = 4.0) -> dict[str, np.ndarray]:
    """Activations ~ N(0, 1), weights ~ N(0, scale^2 / 768): logits large enough to make softmax sharp."""
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((seq, 768)).astype(np.float32)}
    for w in ("wq", "wk", "wv", "wo"):
        inputs[w] = (rng.standard_normal((768, 768)) * scale / np.sqrt(768)).astype(np.float32)
    return inputs


def test_terms_add_up_over_every_sum_mean_and_matmul_an_output_depends_on():
    graph = graph_of("""
func f(x: f32[4, 30], w: f32[30, 5], y: f32[6, 7, 8]) -> (f32[4, 5], f32[6], f32[4, 30], f32[4]) {
  h = matmul(x, w)
  return div(h, sum(h, axes=[1], keepdims=true)), mean(y, axes=[1, 2]), exp(x), max(x, axes=[1])
}""")
    assert summed_terms(graph) == [30 + 5, 7 * 8, 1, 1]  # max and min round nothing
    assert summed_terms(graph_of(BLOCK.replace("SEQ", "256"))) == [3 * 768 + 64 + 256 + 256 + 768]


def test_the_most_accurate_f32_answer_of_an_attention_block_passes_the_check():
    """Regression: the check refused a GPT-2 block whose error against float64 was smaller than the f32
    reference interpreter's own. Here `got` is the float64 answer rounded to f32: no compiled code can do
    better, and the unscaled tolerance (one term) refuses it."""
    text = BLOCK.replace("SEQ", "256")
    graph, wide = graph_of(text), graph_of(text.replace("f32", "f64"))
    inputs = block_inputs(256)
    want = evaluate(graph, inputs)
    best = [evaluate(wide, {k: v.astype(np.float64) for k, v in inputs.items()})[0].astype(np.float32)]
    assert compare(best[0], want[0], terms=1) != ""
    assert differences(best, want, graph) == []


def test_one_missing_term_of_a_long_sum_still_fails():
    graph = graph_of("func f(x: f32[256, 768], w: f32[768, 768]) -> f32[256, 768] { return matmul(x, w) }")
    inputs = {k: v for k, v in block_inputs(256).items() if k in ("x", "wq")}
    x, w = inputs.pop("x"), inputs.pop("wq")
    (want,) = evaluate(graph, {"x": x, "w": w})
    dropped = x[:, 1:] @ w[1:]  # the first of 768 terms left out
    problems = differences([dropped], [want], graph)
    assert problems and "rtol 0.0001 x sqrt(768) terms summed" in problems[0]


@pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")
def test_run_check_of_an_attention_block_passes(tmp_path, capsys):
    program, inputs = tmp_path / "block.ir", tmp_path / "in.npz"
    program.write_text(BLOCK.replace("SEQ", "256"))
    np.savez(inputs, **block_inputs(256))
    assert main(["run", str(program), "--inputs", str(inputs), "--check", "--cache-dir", str(tmp_path / "c")]) == 0
    assert "check: outputs equal the reference within tolerance" in capsys.readouterr().out


# -- sums that cancel (issue 52, item 3): the tolerance follows the magnitude of the terms -----------

CANCELLING = np.array([1e8, 1, -1e8, 1, 1, 1, 1, 0.2], np.float32)


@pytest.mark.parametrize("target", ["cpu", "accel"])
@pytest.mark.parametrize("dtype, scale", [("f32", 1.0), ("f64", 1e9)])
def test_run_check_accepts_a_correct_sum_that_cancels(target, dtype, scale, tmp_path, capsys):
    program, inputs = tmp_path / "s.ir", tmp_path / "in.npz"
    program.write_text(f"func f(x: {dtype}[8]) -> {dtype}[] {{\n  return sum(x)\n}}\n")
    np.savez(inputs, x=CANCELLING.astype(np.float64 if dtype == "f64" else np.float32) * scale)
    for rules in ([], ["--no-builtin-rules"]):
        assert main(["run", str(program), "--inputs", str(inputs), "--check", "--target", target, "--cache-dir",
                     str(tmp_path / "c"), *rules]) == 0, capsys.readouterr().err


def test_a_cancelling_sum_is_checked_against_its_terms_and_a_wrong_one_still_fails():
    graph = graph_of("func f(x: f32[8]) -> f32[] { return sum(x) }")
    inputs = {"x": CANCELLING}
    (want,) = evaluate(graph, inputs)
    in_another_order = np.float32(sum(CANCELLING[[0, 2, 1, 3, 4, 5, 6, 7]].astype(np.float32)))
    assert compare(np.asarray(in_another_order), want, terms=8) != ""  # the result alone is too small a scale
    assert differences([np.asarray(in_another_order)], [want], graph, inputs) == []
    assert differences([np.asarray(want + np.float32(1e5))], [want], graph, inputs) != []  # off by far more
    # a sum that does not cancel keeps the tolerance of its result
    ones = {"x": np.ones(8, np.float32)}
    assert differences([np.asarray(np.float32(8.01))], evaluate(graph, ones), graph, ones) != []


@st.composite
def cancelling_sums(draw):
    """A sum or mean over some axes of a tensor of huge values that cancel and small ones."""
    shape = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    axes = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    op = draw(st.sampled_from(["sum", "mean"]))
    out = [d for i, d in enumerate(shape) if i not in axes]
    text = (f"func f(x: f32[{', '.join(map(str, shape))}]) -> f32[{', '.join(map(str, out))}] {{\n"
            f"  return {op}(x, axes={sorted(axes)})\n}}\n")
    x = draw(hnp.arrays(np.float32, tuple(shape), elements=st.sampled_from([1e8, -1e8, 3e7, -3e7, 1.0, 0.25, -2.0])))
    return text, x


@pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")
@settings(max_examples=12, deadline=None)
@given(case=cancelling_sums(), target=st.sampled_from(["cpu", "accel"]))
def test_compiled_sums_that_cancel_pass_the_check(case, target, tmp_path_factory):
    text, x = case
    program = stitch.compile(text, target=target, cache_dir=tmp_path_factory.getbasetemp() / "cache")
    inputs = {"x": x}
    assert differences(program(**inputs), evaluate(program.graph, inputs), program.graph, inputs) == [], text
