"""The seed comparisons on the simulated accelerator, printed as markdown tables.

    python3 bench/accel_report.py [--only mlp,layernorm]

For each scenario the program is compiled for `accel` twice, with the built-in
rules and without the rules in question (`--without-rules`), run on the
simulator with the same inputs, checked against the reference interpreter, and
the simulator's figures printed with what the rules save. mlp_large takes a
few seconds: the simulator runs every tile in numpy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import differences
from stitch.engine.schedule.target import load_target

# Beside this script in the source tree, wherever stitch is installed (`pip install .` ships no examples).
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# (program, what the built-in rules do, the rules left out for the baseline)
SCENARIOS = [
    ("mlp", "forwarding", "forwarding"),
    ("mlp_large", "forwarding", "forwarding"),
    ("layernorm", "stitching", "stitch-*"),
]

COLUMNS = ("kernels", "global_bytes_read", "global_bytes_written", "intermediate_bytes", "cycles", "dma_cycles",
           "matrix_cycles", "vector_cycles", "peak_onchip_bytes")


def simulate(name: str, without: tuple[str, ...]) -> dict:
    program = stitch.compile(EXAMPLES / f"{name}.ir", target="accel", without_rules=without)
    inputs = random_inputs(program.graph, 0)
    outputs = program(**inputs)
    problems = differences(outputs, evaluate(program.graph, inputs), program.graph)
    if problems:
        raise SystemExit(f"{name} without {without}: outputs differ from the reference: {problems}")
    report = program.report
    row = {key: report.total(key) for key in COLUMNS if key not in ("kernels", "peak_onchip_bytes",
                                                                     "intermediate_bytes")}
    row["kernels"] = len(report.kernels)
    row["peak_onchip_bytes"] = report.peak_onchip_bytes
    row["intermediate_bytes"] = sum(b.nbytes for b in program.loops.intermediates)  # values through global memory
    return row


def table(name: str, feature: str, without: str) -> str:
    with_rules = simulate(name, ())
    baseline = simulate(name, (without,))
    lines = [f"### {name}: with and without {feature} (`--without-rules {without}`)", "",
             "| schedule | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for label, row in ((f"without {feature}", baseline), (f"with {feature}", with_rules)):
        lines.append(f"| {label} | " + " | ".join(_fmt(row[c]) for c in COLUMNS) + " |")
    saved = {c: baseline[c] - with_rules[c] for c in COLUMNS}
    lines.append("| saved | " + " | ".join(_fmt(saved[c]) for c in COLUMNS) + " |")
    cycles = baseline["cycles"] / with_rules["cycles"]
    moved = (baseline["global_bytes_read"] + baseline["global_bytes_written"]) / (
        with_rules["global_bytes_read"] + with_rules["global_bytes_written"])
    lines += ["", f"{feature}: {cycles:.2f}x fewer cycles, {moved:.2f}x fewer global bytes", ""]
    return "\n".join(lines)


def _fmt(x) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated program names (default: all)")
    args = p.parse_args()
    only = set(args.only.split(",")) if args.only else None
    target = load_target("accel")
    print(f"accel: {target.global_bandwidth:g} B/cycle, {target.vector_lanes} lanes, matrix "
          f"{target.matrix.tile_m}x{target.matrix.tile_n}x{target.matrix.tile_k} in {target.matrix.cycles_per_tile:g} "
          f"cycles, launch {target.launch_cycles:g} cycles, {target.onchip_bytes} B on chip, "
          f"overlap_dma={str(target.overlap_dma).lower()}\n")
    for name, feature, without in SCENARIOS:
        if only is None or name in only:
            print(table(name, feature, without), flush=True)


if __name__ == "__main__":
    main()
