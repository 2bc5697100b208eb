"""`stitch compile --explain` (issue 51 item 7, engine/explain.py): each fused edge names the rules
that offered its placement, asked of the saturated e-graph; each boundary between kernels lists
the placements the e-graph held for it, priced as the schedule with that one edge changed, or says
no rule offered one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from stitch.engine.cli import main
from stitch.engine.explain import explain
from stitch.engine.ir.check import check_program
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.parse import parse_program
from stitch.engine.pipeline import load_rule_files
from stitch.engine.schedule.target import load_target

ROOT = Path(__file__).resolve().parent.parent
GELU_MLP = """
func f(x: f32[64, 256], w: f32[256, 1024], b: f32[1024], w2: f32[1024, 256]) -> f32[64, 256] {
  h = add(matmul(x, w), b)
  g = mul(mul(h, 0.5), add(erf(mul(h, 0.7071067811865476)), 1.0))
  return matmul(g, w2)
}
"""


def graph_of(text: str, name: str = "t.ir"):
    return next(iter(check_program(parse_program(text, name)).values()))


def rule_at(where: str) -> str:
    """The name of the rule written at `file:line` (a built-in file's path within the package)."""
    file, line = where.rsplit(":", 1)
    path = ROOT / file if not Path(file).is_absolute() and (ROOT / file).exists() else Path(file)
    m = re.match(r"\s*rule\s+([\w-]+)\s*:", path.read_text().splitlines()[int(line) - 1])
    assert m, f"no rule at {where}"
    return m.group(1)


def test_every_fused_edge_of_the_seed_layer_norm_names_the_rules_that_offered_it_at_their_lines():
    text = (ROOT / "examples" / "layernorm.ir").read_text()
    e = explain(graph_of(text), load_rule_files([]), load_target("cpu"))
    schedule = e.extracted.schedule
    held = sum(ref.held for k in schedule.kernels for inst in k.instances for ref in inst.operands)
    assert len(e.fused) == held > 0 and e.kernels == 1 and not e.boundaries
    for edge in e.fused:
        assert edge.offers, edge
        for offer in edge.offers:
            assert rule_at(offer.where) == offer.rule
    # the centred values d are read by the variance's square as `local` (forwarding), the
    # means as `shared` (stitching)
    by_rule = {o.rule for edge in e.fused for o in edge.offers}
    assert {"inline-injective", "stitch-reduction", "forward-shared"} <= by_rule


def test_a_boundary_lists_each_placement_the_e_graph_held_and_its_price():
    """The GELU MLP's second product reads the GELU from global memory: holding it on chip instead
    is offered (inline, shared, local) and each alternative breaks the cpu's on-chip capacity."""
    e = explain(graph_of(GELU_MLP), load_rule_files([]), load_target("cpu"))
    (boundary,) = e.boundaries
    assert boundary.edge.consumer == "%0 = matmul" and boundary.edge.operand == 0
    assert {a.placement for a in boundary.alternatives} == {"inline", "shared", "local"}
    for a in boundary.alternatives:
        assert a.cycles is None and any("on chip" in p for p in a.problems)
        assert a.offers and all(rule_at(o.where) == o.rule for o in a.offers)


def test_an_alternative_the_search_passed_is_priced_at_or_above_the_schedule_taken():
    """On the accelerator the attention block's boundaries hold feasible alternatives; each, priced
    as the taken schedule with that one edge changed, costs at least what the taken one does."""
    text = (ROOT / "examples" / "attention_block.ir").read_text()
    e = explain(graph_of(text), load_rule_files([]), load_target("accel"))
    priced = [a for b in e.boundaries for a in b.alternatives if a.cycles is not None]
    assert priced
    for a in priced:
        assert a.cycles >= e.cycles * (1 - 1e-9), a


def test_without_the_built_in_rules_every_boundary_says_no_rule_offered_one(capsys):
    assert main(["compile", str(ROOT / "examples" / "layernorm.ir"), "--no-builtin-rules", "--explain"]) == 0
    out = capsys.readouterr().out
    assert out.count("boundary:") >= 5 and out.count("no rule offered another placement") == out.count("boundary:")


def test_a_user_rule_is_named_at_its_own_file_and_line(tmp_path, capsys):
    rules = tmp_path / "mine.rules"
    rules.write_text("# a user's rule\n\nrule hold-unary: ?f(global(?p)) => ?f(shared(?p)) where elementwise(?p)\n")
    assert main(["compile", str(ROOT / "examples" / "layernorm.ir"), "--rules", str(rules),
                 "--without-rules", "inline-*", "--explain", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ats = {r["at"] for edge in out["fused"] for r in edge["rules"] if r["rule"] == "hold-unary"}
    assert ats == {f"{rules}:3"}


def test_explain_refuses_another_stage_and_a_symbolic_program(tmp_path, capsys):
    assert main(["compile", str(ROOT / "examples" / "layernorm.ir"), "--explain", "--emit", "loops"]) == 2
    assert "--explain explains the schedule" in capsys.readouterr().err
    with pytest.raises(StitchError, match="static program"):
        explain(graph_of("func f[n: 1..8](x: f32[n]) -> f32[n] { return exp(x) }"), load_rule_files([]),
                load_target("cpu"))


def test_an_imported_block_with_its_weights_is_explained(tmp_path, capsys):
    pytest.importorskip("onnx")
    model = ROOT / "tests" / "fixtures" / "models" / "gpt2_block-dynamo.onnx"
    ir, npz = tmp_path / "block.ir", tmp_path / "block.npz"
    assert main(["import", str(model), "-o", str(ir), "--weights", str(npz)]) == 0
    capsys.readouterr()
    assert main(["compile", str(ir), "--weights", str(npz), "--explain"]) == 0
    out = capsys.readouterr().out
    assert "forward-matmul (rules/forwarding.rules:" in out and "boundary:" in out


# -- readable displays (issue 51 item 6, the newcomer's P25 and P26) --------------------------------


def test_p25_a_multiplied_quotient_prints_in_parentheses():
    from stitch.engine.schedule.index import FloorDiv, Ix
    from stitch.lowering.loops import print_ix

    ix = Ix.var(FloorDiv(Ix.var("p1"), 8)) * 8 + Ix.var(FloorDiv(Ix.var("r0"), 256))
    assert str(ix) == "8*(p1 // 8) + r0 // 256" and print_ix(ix) == "8*(p1 // 8) + r0 // 256"


def test_p26_global_bytes_below_compulsory_say_why_in_the_line(capsys):
    """A gather reads only the table rows it picks; compulsory counts every parameter whole."""
    assert main(["compile", str(ROOT / "examples" / "embedding_layernorm.ir")]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    got, compulsory = map(int, re.search(r"global bytes (\d+) \(compulsory (\d+)", head).groups())
    assert got < compulsory and "parameters counted whole: this schedule reads part of some" in head
    assert main(["compile", str(ROOT / "examples" / "layernorm.ir")]) == 0
    assert "counted whole" not in capsys.readouterr().out


def test_p26_a_fusion_note_names_the_limit_and_points_to_explain(tmp_path, capsys):
    path = tmp_path / "mlp.ir"
    path.write_text(GELU_MLP)
    assert main(["compile", str(path), "--target", "accel"]) == 0
    (note,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert "breaks a limit of 'accel': in the kernel ending in matmul, its smallest tile needs" in note
    assert "--explain" in note


def test_p7_hypothesis_gc_callback_is_dropped_when_a_process_s_tests_are_done():
    """(issue 51 item 8) conftest's pytest_sessionfinish drops it, so a worker interrupted while
    exiting prints no traceback from inside it."""
    import gc

    from conftest import drop_hypothesis_gc_callbacks
    from hypothesis import given
    from hypothesis import strategies as st

    @given(st.integers())
    def draw(x):
        pass

    draw()
    ours = [cb for cb in gc.callbacks if cb.__module__.startswith("hypothesis")]
    assert ours  # (hypothesis times collections with one)
    try:
        drop_hypothesis_gc_callbacks()
        assert not any(cb.__module__.startswith("hypothesis") for cb in gc.callbacks)
    finally:
        gc.callbacks.extend(ours)
