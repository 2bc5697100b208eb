"""The `run --check` tolerance (`engine/ir/tolerance.py`): it grows with the terms summed into each output."""

from __future__ import annotations

import numpy as np
import pytest
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
