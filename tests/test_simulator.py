"""The accelerator simulator: reference results, the cost model's bytes, the cycle formulas of docs/explanation/accelerator.md,
on-chip capacity, and the seed comparisons (forwarding, stitching)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.cli import main
from stitch.engine.ir.check import check_program
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.parse import parse_file, parse_program
from stitch.engine.ir.tolerance import differences
from stitch.engine.pipeline import compile_graph, load_rule_files
from stitch.engine.schedule.target import load_target, parse_target
from stitch.lowering.execute import execute
from stitch.lowering.loops import Accumulate, Buffer, For, Ix, Load, LoopKernel, LoopProgram, Op, Store
from stitch.lowering.lower import lower
from stitch.targets.simulator import check_fits, simulate
from stitch_testing import EXAMPLES, graphs

ACCEL = load_target("accel")
ACCEL_TOML = (Path(stitch.__file__).resolve().parent / "targets" / "accel.toml").read_text()


def accel(**changes):
    """The built-in accel target with some keys replaced."""
    text = ACCEL_TOML
    for key, value in changes.items():
        lines = text.splitlines()
        (i,) = [i for i, line in enumerate(lines) if line.startswith(f"{key} =")]
        lines[i] = f"{key} = {json.dumps(value)}"
        text = "\n".join(lines)
    return parse_target(text)


def example(name: str):
    return next(iter(check_program(parse_file(EXAMPLES / f"{name}.ir")).values()))


def assert_matches_reference(graph, outputs, inputs):
    assert differences(outputs, evaluate(graph, inputs)) == []


def simulated(graph, target=ACCEL, without=(), seed=0):
    compiled = compile_graph(graph, load_rule_files([], without=without), target)
    program = lower(compiled)
    inputs = random_inputs(graph, seed)
    outputs, report = simulate(program, target, inputs)
    return compiled, program, inputs, outputs, report


# ---------------------------------------------------------------------------
# results and bytes


@settings(max_examples=25)
@given(graphs(dtypes=("f32", "i32", "bool", "f64", "u8"), max_ops=8, max_rank=3, max_dim=5, movement=True),
       st.integers(0, 1000), st.booleans())
def test_generated_programs_simulate_like_the_reference_and_move_the_estimated_bytes(graph, seed, overlap):
    target = accel(overlap_dma=overlap)
    compiled, program, inputs, outputs, report = simulated(graph, target, seed=seed)
    assert_matches_reference(graph, outputs, inputs)
    _, traffic = execute(program, inputs)
    assert report.global_bytes == traffic.read + traffic.written
    if all(kc.price.exact for kc in compiled.cost.kernels):
        assert report.global_bytes == compiled.cost.global_bytes
    else:  # a gather with repeated indices reads a row once: the estimate is an upper bound
        assert report.global_bytes <= compiled.cost.global_bytes
    assert [(k.global_bytes_read, k.global_bytes_written) for k in report.kernels] == list(traffic.per_kernel.values())
    # the time model's bookkeeping: steps add up to the kernel, the kernel to the launch plus its steps
    dma, compute = report.total("dma_cycles"), report.total("matrix_cycles") + report.total("vector_cycles")
    launches = ACCEL.launch_cycles * len(program.kernels)
    if overlap:
        assert launches + max(dma, compute) <= report.cycles <= launches + dma + compute
    else:
        assert report.cycles == launches + dma + compute
    has_matmul = any(i.node.op == "matmul" for k in compiled.schedule.kernels for i in k.instances)
    assert (report.total("matrix_cycles") > 0) == has_matmul


@st.composite
def matmul_epilogues(draw) -> str:
    """A (batched) matmul, an elementwise epilogue, and a reduction over some of its output axes:
    the reduced matmul axes are `reduce` loops of the kernel's matrix nest without being its k."""
    batch = draw(st.sampled_from([[], [draw(st.integers(1, 3))]]))
    m, k, n = (draw(st.integers(1, 40)) for _ in range(3))
    rank = len(batch) + 2
    axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    op = draw(st.sampled_from(["sum", "max", "min", "mean"]))
    epilogue = draw(st.sampled_from(["mul({}, 0.5)", "relu({})", "exp({})", "{}"]))
    a, b = (f"f32[{', '.join(map(str, [*batch, *shape]))}]" for shape in ((m, k), (k, n)))
    out = [d for i, d in enumerate([*batch, m, n]) if i not in axes]
    return (f"func f(a: {a}, b: {b}) -> f32[{', '.join(map(str, out))}] {{\n"
            f"  return {op}({epilogue.format('matmul(a, b)')}, axes={sorted(axes)})\n}}\n")


def assert_simulated_cycles_match_the_estimate(graph, factor: float | None = None):
    """Matrix cycles per kernel exactly as estimated (both count the unit's tiles the same way) and,
    given a factor, every kernel's cycles within it of the estimate. Not on every program: the cost
    model prices an inline value once per element of its own shape, the lowered nest recomputes it
    per element it is read at (a broadcast operand), so vector work can differ several times."""
    compiled, program, inputs, outputs, report = simulated(graph)
    assert_matches_reference(graph, outputs, inputs)
    for sim, est in zip(report.kernels, (kc.price for kc in compiled.cost.kernels)):
        assert sim.matrix_cycles == est.matrix_cycles, sim.name
        if factor:
            assert est.cycles / factor <= sim.cycles <= est.cycles * factor, (sim.name, sim.cycles, est.cycles)


@settings(max_examples=25)
@given(matmul_epilogues())
def test_simulated_cycles_of_a_matmul_reduced_in_its_kernel_match_the_estimate(text):
    """Regression: the reduced output axis counted as part of k, 58x the estimate's matrix cycles."""
    (graph,) = check_program(parse_program(text)).values()
    assert_simulated_cycles_match_the_estimate(graph, factor=1.5)


def test_the_issue_example_simulates_the_estimated_matrix_cycles():
    text = "func f(a: f32[64, 32], b: f32[32, 128]) -> f32[64] { return max(mul(matmul(a, b), 0.5), axes=[1]) }"
    (graph,) = check_program(parse_program(text)).values()
    compiled, _, _, _, report = simulated(graph)
    assert report.total("matrix_cycles") == 1024 and report.cycles == compiled.cost.cycles == 2280


@pytest.mark.parametrize("text", [
    # a vector times a batch of matrices: the output's last two dimensions are the batch and the
    # columns; taken for rows and columns they made the batch 0 and no tile counted (hypothesis)
    "func f(v: f32[1], b: f32[2, 1, 2]) -> f32[4] { return reshape(matmul(v, b), shape=[4]) }",
    "func f(v: f32[4], b: f32[4, 40]) -> f32[40] { return matmul(v, b) }",
    "func f(a: f32[2, 40, 4], v: f32[4]) -> f32[2, 40] { return matmul(a, v) }",
    "func f(v: f32[4], w: f32[4]) -> f32[] { return matmul(v, w) }",
])
def test_products_with_a_vector_operand_count_their_matrix_tiles(text):
    """Rows and columns of a product whose operand is a vector: none on the vector's side. The
    simulator counts the tiles the estimate counts, at least one."""
    (graph,) = check_program(parse_program(text)).values()
    compiled, _, _, _, report = simulated(graph)
    estimate = sum(kc.price.matrix_cycles for kc in compiled.cost.kernels)
    assert report.total("matrix_cycles") == estimate >= ACCEL.matrix.cycles_per_tile


@settings(max_examples=25)
@given(graphs(dtypes=("f32",), max_ops=6, max_rank=3, max_dim=40))
def test_simulated_cycles_of_generated_programs_match_the_estimate(graph):
    assert_simulated_cycles_match_the_estimate(graph)


@pytest.mark.parametrize("name", ["mlp", "layernorm", "two_outputs"])
def test_examples_simulate_like_the_reference_and_move_the_estimated_bytes(name):
    graph = example(name)
    compiled, program, inputs, outputs, report = simulated(graph)
    assert_matches_reference(graph, outputs, inputs)
    _, traffic = execute(program, inputs)
    assert report.global_bytes == compiled.cost.global_bytes == traffic.read + traffic.written
    for k, kc in zip(report.kernels, compiled.cost.kernels):
        assert k.peak_onchip_bytes <= kc.price.footprint <= ACCEL.onchip_bytes


# ---------------------------------------------------------------------------
# docs/explanation/accelerator.md's formulas on hand-computable kernels (accel: 64 B/cycle, 64 lanes, 16x16x16 tiles of 16 cycles,
# launch 1000 cycles)


def one_kernel(body, allocs=(), params=(("x", (16, 16)), ("w", (16, 16))), out=(16, 16)) -> LoopProgram:
    return LoopProgram("hand", [Buffer(n, "global", "f32", s) for n, s in params], ["out"], [],
                       [LoopKernel("k0", list(allocs), body)], [Buffer("out", "global", "f32", out)])


def nest(loops, leaf):
    for var, extent, kind in reversed(loops):
        leaf = For(var, extent, kind, [leaf])
    return leaf


def hand_inputs(program):
    import numpy as np

    rng = np.random.default_rng(0)
    return {b.name: rng.random(b.shape, dtype=np.float32) for b in program.params}


def hand_matmul(m: int, k: int, n: int):
    """One kernel: out[m, n] = x[m, k] @ w[k, n], accumulated on the matrix unit in a local buffer."""
    i, j, r = Ix.var("i"), Ix.var("j"), Ix.var("r")
    acc = Buffer("acc", "local", "f32", (m, n))
    matmul = nest([("i", m, "serial"), ("r", k, "reduce"), ("j", n, "serial")],
                  Accumulate("acc", (i, j), "sum", Op("mul", (Load("x", (i, r)), Load("w", (r, j))), "f32"), "matrix",
                             matrix=(("i",), ("j",))))
    store = nest([("i", m, "serial"), ("j", n, "serial")], Store("out", (i, j), Load("acc", (i, j))))
    return one_kernel([matmul, store], [acc], params=(("x", (m, k)), ("w", (k, n))), out=(m, n))


def test_one_matrix_tile_costs_its_cycles_per_tile_and_its_operands_dma():
    program = hand_matmul(16, 16, 16)
    inputs = hand_inputs(program)
    for overlap in (True, False):
        (out,), report = simulate(program, accel(overlap_dma=overlap), inputs)
        (k,) = report.kernels
        assert abs(out - inputs["x"] @ inputs["w"]).max() < 1e-4
        assert k.matrix_cycles == 16  # ceil(16/16) * ceil(16/16) * ceil(16/16) * 16
        assert k.dma_cycles == 32 + 16  # x and w: ceil(2048 / 64); out: ceil(1024 / 64)
        assert k.vector_cycles == 0  # the copy out of the accumulator does no vector work
        assert k.cycles == (1000 + max(48, 16) if overlap else 1000 + 48 + 16)
        assert k.peak_onchip_bytes == 1024


def test_a_partial_matrix_tile_counts_whole_tiles():
    program = hand_matmul(17, 40, 8)
    (k,) = simulate(program, ACCEL, hand_inputs(program))[1].kernels
    assert k.matrix_cycles == 2 * 1 * 3 * 16  # ceil(17/16) * ceil(8/16) * ceil(40/16) * 16


def test_one_vector_op_costs_lane_passes_times_its_op_cycles():
    i = Ix.var("i")
    body = [nest([("i", 200, "serial")], Store("out", (i,), Op("exp", (Load("x", (i,)),), "f32")))]
    program = one_kernel(body, params=(("x", (200,)),), out=(200,))
    inputs = hand_inputs(program)
    (k,) = simulate(program, accel(overlap_dma=False), inputs)[1].kernels
    assert k.vector_cycles == 4 * 4  # ceil(200 / 64) passes, exp = 4 cycles
    assert k.dma_cycles == 25  # ceil((800 + 800) / 64)
    assert k.cycles == 1000 + 25 + 16


def test_one_dma_per_tile_and_tiles_overlap_separately():
    """A copy in two tiles: each tile is one step, max(dma, compute) per step with overlap."""
    i = Ix.var("i")
    body = [For("to", 2, "parallel", [nest([("i", 100, "serial")],
                                           Store("out", (Ix.var("to", 100) + i,), Load("x", (Ix.var("to", 100) + i,))))])]
    program = one_kernel(body, params=(("x", (200,)),), out=(200,))
    (out,), report = simulate(program, ACCEL, hand_inputs(program))
    (k,) = report.kernels
    assert k.tiles == 2
    assert k.dma_cycles == 2 * 13  # per tile ceil(800 / 64)
    assert k.cycles == 1000 + 26 and k.vector_cycles == 0


def test_seed_mlp_cycles_by_hand():
    """examples/mlp.ir on accel (--emit loops): x staged once (192 B), then per 1x32 tile the matmul streams
    w's 48x32 slice (6144 B) through one 1x32x48 matrix job (1*2*3 tiles of 16 cycles) and the epilogue reads
    32 bias values and writes 32 outputs (ceil(32/64) lane pass of add and relu)."""
    *_, report = simulated(example("mlp"))
    (k,) = report.kernels
    assert k.tiles == 2 and k.matrix_cycles == 2 * 96 and k.vector_cycles == 2 * 2
    first = max(3 + 96 + 4, 96 + 2)  # staging x belongs to the first tile
    second = max(96 + 4, 96 + 2)
    assert k.dma_cycles == 3 + 2 * (96 + 4)
    assert k.cycles == 1000 + first + second == 1203


# ---------------------------------------------------------------------------
# on-chip capacity


def test_a_stitched_tile_that_does_not_fit_is_split_into_kernels_or_refused():
    graph = example("layernorm")
    small = accel(onchip_bytes=128)
    _, program, inputs, outputs, report = simulated(graph, small)
    assert len(program.kernels) > 1  # the stitched kernel needs 256 B for its smallest tile
    assert all(k.peak_onchip_bytes <= 128 for k in report.kernels)
    assert_matches_reference(graph, outputs, inputs)
    with pytest.raises(StitchError, match="no schedule of 'layernorm' fits"):
        compile_graph(graph, load_rule_files([]), accel(onchip_bytes=32))


def test_the_simulator_refuses_a_kernel_whose_on_chip_bytes_exceed_the_target():
    graph = example("layernorm")
    program = lower(compile_graph(graph, load_rule_files([]), ACCEL))  # tiles chosen for 256 KiB
    need = check_fits(program.kernels[0], ACCEL)  # merged shared + local buffers
    assert need > 4096
    with pytest.raises(StitchError) as err:
        simulate(program, accel(onchip_bytes=4096), random_inputs(graph, 0))
    assert f"kernel k0: needs {need} bytes on chip" in str(err.value) and "has 4096" in str(err.value)


def test_accel_targets_have_one_core():
    with pytest.raises(StitchError, match="one core"):
        accel(cores=2)


# ---------------------------------------------------------------------------
# the seed scenarios


@pytest.mark.parametrize("name", ["mlp", "mlp_large"])
def test_forwarding_keeps_the_matmul_tile_out_of_global_memory(name):
    graph = example(name)
    _, fwd_program, *_, fwd_report = simulated(graph)
    _, plain_program, *_, plain_report = simulated(graph, without=("forwarding",))
    assert fwd_program.intermediates == []  # the only global buffers are the parameters and the output
    assert fwd_report.total("global_bytes_written") == sum(b.nbytes for b in fwd_program.output_buffers)
    (tile,) = plain_program.intermediates  # without forwarding the matmul result goes through global memory
    assert plain_report.global_bytes - fwd_report.global_bytes == 2 * tile.nbytes  # written, then read back
    assert plain_report.total("global_bytes_written") - fwd_report.total("global_bytes_written") == tile.nbytes
    assert fwd_report.cycles < plain_report.cycles


def test_stitching_the_seed_layer_norm_saves_bytes_and_cycles():
    graph = example("layernorm")
    stitched, *_, report = simulated(graph)
    split, split_program, *_, split_report = simulated(graph, without=("stitch-*",))
    assert len(stitched.schedule.kernels) == 1 < len(split_program.kernels)
    assert report.global_bytes == stitched.cost.compulsory_bytes < split_report.global_bytes
    assert report.cycles < split_report.cycles


def test_without_rules_leaves_out_files_and_patterns_and_names_the_valid_ones():
    names = [rf.name for rf in load_rule_files([], without=("forwarding",))]
    assert names == ["algebra", "fusion"]
    fusion = {rf.name: rf for rf in load_rule_files([], without=("stitch-*",))}["fusion"]
    assert fusion.rules and not any(r.name.startswith("stitch-") for r in fusion.rules)
    with pytest.raises(StitchError) as err:
        load_rule_files([], without=("forwardin",))
    assert "forwardin" in str(err.value) and "algebra, forwarding, fusion" in err.value.render()


# ---------------------------------------------------------------------------
# the command line and the API


def test_run_accel_json_reports_the_simulation(capsys):
    assert main(["run", str(EXAMPLES / "mlp.ir"), "--target", "accel", "--json", "--check"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["executor"] == "simulator" and out["check"] == "ok"
    keys = ("cycles", "global_bytes_read", "global_bytes_written", "peak_onchip_bytes", "matrix_cycles",
            "vector_cycles", "dma_cycles")
    for key in keys:
        assert key in out and all(key in k for k in out["kernels"])
    assert out["cycles"] == 1203 and out["global_bytes_read"] + out["global_bytes_written"] == out["global_bytes"]
    assert "estimated_cycles" in out


def test_run_accel_prints_a_table_and_without_rules_is_checked(capsys):
    assert main(["run", str(EXAMPLES / "mlp.ir"), "--target", "accel", "--without-rules", "forwarding"]) == 0
    text = capsys.readouterr().out
    assert "simulated on accel: 2211 cycles" in text
    assert text.splitlines()[-1].split()[:3] == ["total", "4", "2211"]
    assert main(["run", str(EXAMPLES / "mlp.ir"), "--target", "accel", "--without-rules", "nope"]) == 1
    assert "--without-rules nope" in capsys.readouterr().err
    assert main(["compile", str(EXAMPLES / "mlp.ir"), "--target", "accel", "--without-rules", "forwarding",
                 "--emit", "loops"]) == 0
    assert "alloc global t4" in capsys.readouterr().out


def test_compile_api_keeps_the_simulation_report():
    program = stitch.compile(EXAMPLES / "layernorm.ir", target="accel", without_rules=("stitch-*",))
    assert program.executor == "simulator" and program.report is None
    outputs = program(**random_inputs(program.graph, 3))
    assert len(program.report.kernels) == 3 and outputs[0].shape == (32, 32, 32)


def test_run_on_a_users_accel_toml_without_overlap_adds_dma_and_compute(tmp_path, capsys):
    toml = tmp_path / "slow.toml"
    toml.write_text(ACCEL_TOML.replace("overlap_dma = true", "overlap_dma = false")
                    .replace("global_bandwidth = 64.0", "global_bandwidth = 8.0"))
    assert main(["run", str(EXAMPLES / "layernorm.ir"), "--target", str(toml), "--json", "--check"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["target"] == "accel" and out["check"] == "ok"
    (k,) = out["kernels"]
    assert k["cycles"] == 1000 + k["dma_cycles"] + k["matrix_cycles"] + k["vector_cycles"] == out["cycles"]
    assert k["dma_cycles"] == out["global_bytes"] / 8  # every nest's bytes are a multiple of 8 here


def test_a_product_under_a_reshaped_chain_is_priced_as_simulated():
    """Found by a random seed: the product's output sits in a [4, 1, 1] buffer; the simulator took
    its last two dimensions for the matrix's rows and columns (two tiles where there is one).
    Both now read them off the operands (cost.matrix_axes)."""
    graph = next(iter(check_program(parse_program("""func f(x0: f32[1], x1: f32[1, 4], x2: f32[]) -> f32[4, 1, 1] {
  return neg(reshape(neg(neg(add(matmul(x0, x1), x2))), shape=[4, 1, 1]))
}""")).values()))
    assert_simulated_cycles_match_the_estimate(graph)
