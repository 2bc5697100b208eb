"""The table of the committed model fixtures (a dated record in docs/perf/): each imports, runs on the reference
interpreter and on every target, against onnxruntime's outputs stored beside it.

Prints one markdown row per fixture (tests/fixtures/models): ONNX nodes, IR nodes, the
interpreter's max abs error, and per target the kernel count, global bytes over
compulsory bytes and the max abs error; then one per dynamic-axis fixture (tests/fixtures/models/dynamic):
its symbol's range and the interpreter's max abs error at each stored size, from one import.
Needs only onnx. Run:
python3 tools/fixture_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

import onnx  # noqa: E402
import stitch  # noqa: E402
from stitch.engine.ir.check import check_program  # noqa: E402
from stitch.engine.ir.interp import evaluate  # noqa: E402
from stitch.frontends.onnx_import import import_onnx  # noqa: E402

FIXTURES = HERE.parent / "tests" / "fixtures" / "models"
TARGETS = ("cpu", "accel")


def max_err(got, want) -> float:
    return max(float(np.max(np.abs(np.asarray(g, np.float64) - w), initial=0.0)) for g, w in zip(got, want))


def row(path: Path) -> str:
    name, exporter = path.stem.rsplit("-", 1)
    model = onnx.load(path)
    imported = import_onnx(path)
    with np.load(path.with_suffix(".npz")) as data:
        feeds = {imported.inputs[k]: data[k] for k in data.files if k in imported.inputs}
        want = [data[f"output:{o}"] for o in imported.outputs]
    graph = next(iter(check_program(imported.program).values()))
    inputs = feeds | imported.weights
    with np.errstate(all="ignore"):
        cells = [f"{max_err(evaluate(graph, inputs), want):.1e}"]
        for target in TARGETS:
            program = stitch.compile(imported.text, target=target)
            cost = program.compiled.extracted.cost
            cells.append(f"{len(cost.kernels)}, {cost.global_bytes / cost.compulsory_bytes:.2f}x, "
                         f"{max_err(program(**inputs), want):.1e}")
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return (f"| {name} | {exporter} (opset {opset}) | {len(model.graph.node)} | {len(graph.nodes)} | "
            + " | ".join(cells) + " |")


def dynamic_row(path: Path) -> str:
    """A dynamic-axis fixture imported once and evaluated at every size its npz stores."""
    name, exporter = path.stem.rsplit("-", 1)
    model = onnx.load(path)
    imported = import_onnx(path)
    graph = next(iter(check_program(imported.program).values()))
    errors = []
    with np.load(path.with_suffix(".npz")) as data:
        for size in sorted({k.split("/")[0] for k in data.files}, key=lambda s: int(s.split("=")[1])):
            feeds = {imported.inputs[k.split("/")[1]]: data[k] for k in data.files
                     if k.startswith(size + "/") and "/output:" not in k}
            want = [data[f"{size}/output:{o}"] for o in imported.outputs]
            with np.errstate(all="ignore"):
                errors.append(f"{size}: {max_err(evaluate(graph, feeds | imported.weights), want):.1e}")
    ranges = ", ".join(f"{s}: {lo}..{hi}" for s, (lo, hi) in graph.symbols.items())
    return f"| {name} | {exporter} | {len(model.graph.node)} | {len(graph.nodes)} | {ranges} | {'; '.join(errors)} |"


def main() -> int:
    print("| model | exporter | ONNX nodes | IR nodes | interpreter: max abs err | "
          + " | ".join(f"{t}: kernels, bytes / compulsory, max abs err" for t in TARGETS) + " |")
    print("|---|---|---|---|---|" + "---|" * len(TARGETS))
    for path in sorted(FIXTURES.glob("*.onnx")):
        print(row(path), flush=True)
    print("\n| model | exporter | ONNX nodes | IR nodes | symbols | interpreter: max abs err per size |")
    print("|---|---|---|---|---|---|")
    for path in sorted((FIXTURES / "dynamic").glob("*.onnx")):
        print(dynamic_row(path), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
