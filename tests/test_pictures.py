"""Pictures (`--dot`): the schedule's kernels and global tensors, and the e-graph's values and placements."""

from __future__ import annotations

import re
import shutil

import pytest
from stitch.engine import pictures
from stitch.engine.cli import main
from stitch.engine.ir.check import check_program
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.parse import parse_program
from stitch.engine.pipeline import compile_graph, load_rule_files, saturate_program
from stitch.engine.schedule.target import load_target
from stitch_testing import EXAMPLES

HAVE_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAVE_DOT, reason="graphviz's dot is not installed (apt-get install graphviz)")
TWO_OPS = "func f(x: f32[8, 16], b: f32[16]) -> f32[8, 16] { return relu(add(x, b)) }"


def graph_of(text: str):
    (graph,) = check_program(parse_program(text)).values()
    return graph


def test_the_schedule_picture_boxes_kernels_with_their_ops_and_labels_global_tensors_with_bytes():
    compiled = compile_graph(graph_of((EXAMPLES / "attention_block.ir").read_text()), load_rule_files([]),
                             load_target("cpu"))
    dot = pictures.schedule_dot(compiled)
    kernels = re.findall(r'^  "k:\d+" \[label="(.*)", color=', dot, re.MULTILINE)
    # (the heads' attention with the projections, or a kernel of its own, as the cost model finds cheaper)
    n = len(compiled.schedule.kernels)
    assert len(kernels) == n >= 2
    assert "matmul(global x, global wv)" in kernels[0]
    assert any("max(" in k and "exp(" in k for k in kernels) and not any("softmax" in k for k in kernels)
    assert "global wo)" in kernels[-1] and kernels[-1].endswith("root\\l")
    edges = re.findall(r'^  "(\w+):(\w+)" -> "(\w+):(\w+)" \[label="(.*)"\];$', dot, re.MULTILINE)
    assert ("in", "x", "k", "0", "x: f32[128, 256], 131,072 B") in edges
    assert ("k", str(n - 1), "out", "0", "out0: f32[128, 256], 131,072 B") in edges
    between = [e for e in edges if e[0] == e[2] == "k"]  # the global intermediates, with their bytes
    assert between and all(re.fullmatch(r"t\d+: f32\[[\d, ]+\], [\d,]+ B", e[4]) for e in between)
    assert len(edges) == 5 + len(between) + 1  # x, wq, wk, wv, wo in; the intermediates; the output


def test_the_egraph_picture_draws_values_with_placements_on_the_arrows_and_a_legend():
    """Regression: egglog's picture of a 2-op program drew 135 clusters, mostly analysis tables. The
    placement e-classes are the arrows' labels (issue 51 item 6, P23), and the e-nodes of a value
    that differ only in their operands' placements are one box."""
    run, _ = saturate_program(graph_of(TWO_OPS), load_rule_files([]))
    data = run.data()
    dot = pictures.egraph_dot(data)
    values = [cid for cid, nodes in data.classes.items() if not all(n.is_placement for n in nodes)]
    clusters = re.findall(r"subgraph cluster_(\w+)", dot)
    assert len(clusters) == len(values) + 1 == 4 + 1 and "legend" in clusters
    assert len(run.serialize().to_dot().split("subgraph")) > 100  # what --dot drew before
    assert dot.count("(output)") == 1 and "param x" in dot and "legend" in dot
    labels = set(re.findall(r'-> "c\d+n:\d+" \[lhead=cluster_\d+, label="([^"]*)"', dot))
    assert "global|inline" in labels  # relu reads add either way
    boxes = re.findall(r'^    "c\d+n:\d+" \[label="([^"]*)"\];$', dot, re.MULTILINE)
    assert len(boxes) < data.enode_count and "relu\\n(2 placement alternatives)" in boxes
    for name in ("shape", "dtype", "Size", "rank"):  # the analysis tables
        assert f'"{name}' not in dot


def test_a_real_layer_is_drawn_in_few_boxes_and_focus_draws_one_value_and_its_neighbours():
    """P23: the encoder layer's e-graph (hundreds of e-nodes) drawn with each value's ways up to
    placements as one box; `focus` keeps the values an op computes, their operands and readers."""
    text = (EXAMPLES / "attention_block.ir").read_text()
    run, _ = saturate_program(graph_of(text), load_rule_files([]))
    data = run.data()
    whole = pictures.egraph_dot(data)
    boxes = len(re.findall(r'^    "c\d+n:\d+" \[label=', whole, re.MULTILINE))
    assert boxes * 4 < data.enode_count
    near = pictures.egraph_dot(data, focus="exp")
    assert 0 < len(re.findall(r"subgraph cluster_\d+", near)) < len(re.findall(r"subgraph cluster_\d+", whole))
    with pytest.raises(StitchError, match="--focus nope: no e-class id or op"):
        pictures.egraph_dot(data, focus="nope")


def test_the_schedule_picture_focuses_on_a_kernel_and_its_neighbours(tmp_path, capsys):
    compiled = compile_graph(graph_of((EXAMPLES / "attention_block.ir").read_text()), load_rule_files([]),
                             load_target("accel"))
    assert len(compiled.schedule.kernels) >= 3
    whole, near = pictures.schedule_dot(compiled), pictures.schedule_dot(compiled, focus="k0")
    kernels = lambda dot: set(re.findall(r'^  "k:(\d+)" \[label=', dot, re.MULTILINE))  # noqa: E731
    assert kernels(near) < kernels(whole) and "0" in kernels(near)
    path = tmp_path / "p.dot"
    assert main(["compile", str(EXAMPLES / "attention_block.ir"), "--target", "accel", "--dot", str(path),
                 "--focus", "k0"]) == 0
    assert kernels(path.read_text()) == kernels(near)
    assert main(["compile", str(EXAMPLES / "attention_block.ir"), "--focus", "k0"]) == 2  # (without --dot)


@pytest.mark.parametrize("emit", ["ir", "egraph", "schedule", "loops", "c"])
def test_dot_works_with_every_emit(emit, tmp_path, capsys):
    path = tmp_path / "p.dot"
    assert main(["compile", str(EXAMPLES / "mlp.ir"), "--emit", emit, "--dot", str(path)]) == 0
    text = path.read_text()
    assert text.startswith("digraph stitch {") and text.rstrip().endswith("}")
    assert ("e-graph of mlp" if emit == "egraph" else "schedule of mlp on cpu: 1 kernel(s)") in text
    out = capsys.readouterr().out
    # (the C's first line is a preprocessor line: its headers, or gcc 12's choice of them below AVX-512)
    assert out.startswith({"ir": "# examples/mlp.ir", "egraph": "stopped: saturated", "schedule": "schedule mlp",
                           "loops": "program mlp(", "c": "#"}[emit])
    assert emit != "c" or "int stitch_main(" in out


@needs_dot
@pytest.mark.parametrize("emit, suffix", [("schedule", ".svg"), ("egraph", ".svg"), ("loops", ".png")])
def test_pictures_are_rendered_when_dot_is_installed(emit, suffix, tmp_path):
    path = tmp_path / f"p{suffix}"
    assert main(["compile", str(EXAMPLES / "layernorm.ir"), "--emit", emit, "--dot", str(path)]) == 0
    head = path.read_bytes()[:300]
    assert b"<svg" in head if suffix == ".svg" else head.startswith(b"\x89PNG")


def test_without_dot_the_picture_is_written_as_dot_text_beside(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pictures.shutil, "which", lambda name: None)
    assert main(["compile", str(EXAMPLES / "mlp.ir"), "--dot", str(tmp_path / "p.svg")]) == 0
    assert not (tmp_path / "p.svg").exists() and (tmp_path / "p.dot").read_text().startswith("digraph")
    assert "graphviz's dot is not installed" in capsys.readouterr().err
