"""Real exports: PyTorch and HuggingFace transformer blocks import and compute what onnxruntime computed.

The fixtures (tests/fixtures/models/NAME-EXPORTER.onnx, .npz with the inputs and
onnxruntime's outputs) come from tools/export_models.py: nn.TransformerEncoderLayer,
GPT2Block, GPT2Model (with and without attention_mask), BertLayer, BertModel,
LlamaDecoderLayer (rotary embedding given and computed inside), LlamaModel, each
exported by torch.onnx's TorchScript exporter (opset 17) and its dynamo exporter
(opset 20), hidden 64, sequence 16. These tests need only onnx.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")

import stitch  # noqa: E402
from stitch.engine.ir.check import check_program  # noqa: E402
from stitch.engine.ir.interp import evaluate  # noqa: E402
from stitch.engine.ir.ops import OPS, OpGroup  # noqa: E402
from stitch.frontends.onnx_conformance import not_lowered  # noqa: E402
from stitch.frontends.onnx_import import import_onnx  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.onnx"))
RTOL, ATOL = 1e-3, 1e-4  # onnxruntime's float32 kernels against stitch's


def load(name: str):
    """(the import, the graph, the program's inputs, onnxruntime's outputs in return order)."""
    imported = import_onnx(FIXTURES / f"{name}.onnx")
    with np.load(FIXTURES / f"{name}.npz") as data:
        feeds = {imported.inputs[k]: data[k] for k in data.files if k in imported.inputs}
        want = [data[f"output:{o}"] for o in imported.outputs]
    assert imported.program == imported.checked  # the text parses back to the program the import checked
    graph = next(iter(check_program(imported.program).values()))
    return imported, graph, feeds | imported.weights, want


def test_every_model_and_exporter_is_there():
    models = {n.rsplit("-", 1)[0] for n in NAMES}
    assert models == {"transformer_encoder_layer", "gpt2_block", "gpt2_model", "gpt2_model_masked", "bert_layer",
                      "bert_model", "llama_layer_rotary_given", "llama_layer_rotary_inside", "llama_model",
                      "opt_layer", "vit_model", "whisper_encoder"}
    assert len(NAMES) == 2 * len(models)  # torchscript and dynamo each


@pytest.mark.parametrize("name", NAMES)
def test_export_imports_and_matches_onnxruntime_on_the_interpreter(name):
    imported, graph, inputs, want = load(name)
    with np.errstate(all="ignore"):
        got = evaluate(graph, inputs)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("target", ["cpu", "accel"])
@pytest.mark.parametrize("name", NAMES)
def test_export_compiles_and_matches_onnxruntime(name, target):
    imported, graph, inputs, want = load(name)
    reason = not_lowered(graph, target)
    if reason:
        pytest.skip(reason)
    program = stitch.compile(imported.text, target=target)
    with np.errstate(all="ignore"):
        got = program(**inputs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    # no copy kernel: every kernel computes something besides moving data
    moves = {OpGroup.LAYOUT, OpGroup.MOVEMENT}
    copies = [sorted(ops) for kernel in program.compiled.schedule.kernels
              for ops in [{i.node.op for i in kernel.instances if i.node.op not in ("param", "const")}]
              if all(OPS[op].group in moves for op in ops)]
    assert copies == [], (name, copies)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_shape_plumbing_folds_and_only_token_lookups_gather_at_run_time(exporter):
    """The mask and position arithmetic disappears at import time: what is left reads the inputs.
    GPT-2 with an attention mask: one run-time gather (the token embedding), the position embedding a
    weight of the sequence's rows, the padding mask read from the input through known positions."""
    imported, graph, _, _ = load(f"gpt2_model_masked-{exporter}")
    ops = [n.op for n in graph.nodes]
    token_lookups = [n for n in graph.nodes if n.op == "gather" and graph.nodes[n.inputs[1]].name == "input_ids"]
    assert len(token_lookups) == 1
    assert set(imported.inputs) == {"input_ids", "attention_mask"}
    assert not {"Shape", "Range", "ConstantOfShape"} & set(ops)
    # The position table (64 positions) is read at the sequence's 16: a smaller weight (the dynamo
    # exporter's optimizer already folds that Gather; the TorchScript export leaves it to the import).
    assert not any("wpe" in k and w.shape[0] == 64 for k, w in imported.weights.items())
    assert any(w.shape[-2:] == (16, 64) and w.size == 16 * 64 for w in imported.weights.values())


def test_a_padded_token_changes_nothing_but_its_own_row():
    """The attention mask is really read: padding the last tokens of row 1 leaves row 1's other tokens
    unchanged when those tokens' ids change (they are masked out of every attention)."""
    imported, graph, inputs, _ = load("gpt2_model_masked-dynamo")
    ids = inputs[imported.inputs["input_ids"]]
    mask = inputs[imported.inputs["attention_mask"]]
    padded = np.flatnonzero(mask[1] == 0)
    assert len(padded) > 0
    changed = ids.copy()
    changed[1, padded] = (changed[1, padded] + 1) % 128
    base = evaluate(graph, inputs)[0]
    other = evaluate(graph, inputs | {imported.inputs["input_ids"]: changed})[0]
    keep = mask[1] == 1
    np.testing.assert_allclose(other[1, keep], base[1, keep], rtol=1e-6, atol=1e-6)
    assert not np.allclose(other[1, ~keep], base[1, ~keep])
