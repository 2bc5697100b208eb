"""Compile-time benchmark: parse, saturate, extract, lower and build C for every example and generated programs.

Prints a markdown table of median seconds per stage (several runs), the
extracted kernels, the C build with an empty cache (`C cold`, once), and the
whole `stitch.compile` (parse to loaded library) with the C cache warm.
Run: python3 bench/compile_speed.py [--runs N] [--target cpu|accel]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"  # the source tree's, wherever stitch is installed
sys.path.insert(0, str(HERE))

import stitch  # noqa: E402
from gen import random_program  # noqa: E402
from stitch.engine.ir.check import check_func  # noqa: E402
from stitch.engine.ir.parse import parse_program  # noqa: E402
from stitch.engine.ir.recursion import deep_recursion  # noqa: E402
from stitch.engine.rewrite.rules import builtin_rule_files  # noqa: E402
from stitch.engine.rewrite.saturate import EGraphRun, Limits  # noqa: E402
from stitch.engine.schedule.extract import extract_schedule  # noqa: E402
from stitch.engine.schedule.target import load_target  # noqa: E402
from stitch.targets.cpu import build  # noqa: E402


def stages(text: str, target, limits: Limits) -> dict:
    t0 = time.perf_counter()
    graph = check_func(parse_program(text).funcs[0])
    t1 = time.perf_counter()
    run = EGraphRun(graph, builtin_rule_files())
    report = run.run(limits)
    t2 = time.perf_counter()
    data = run.data()
    t3 = time.perf_counter()
    result = extract_schedule(data, target)
    t4 = time.perf_counter()
    ops = sum(1 for n in graph.nodes if n.op not in ("param", "const"))
    return {"ops": ops, "parse": t1 - t0, "saturate": t2 - t1, "serialize": t3 - t2, "extract": t4 - t3,
            "total": t4 - t0, "enodes": report.enodes, "kernels": len(result.schedule.kernels),
            "exhaustive": result.exhaustive}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--target", default="cpu")
    args = ap.parse_args()
    target = load_target(args.target)
    programs = [(p.stem, p.read_text()) for p in sorted(EXAMPLES.glob("*.ir"))]
    programs += [(f"random-{n}", random_program(n)) for n in (100, 500)]
    print(f"compile stages on {target.name}, median of {args.runs} runs, seconds\n")
    print("| program | ops | e-nodes | kernels | search | parse | saturate | serialize | extract | total | "
          "C cold | compile warm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, text in programs:
        runs = [stages(text, target, Limits(seconds=10.0)) for _ in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in ("parse", "saturate", "serialize", "extract",
                                                                  "total")}
        r = runs[0]
        search = "exhaustive" if r["exhaustive"] else "greedy"
        cold, warm = c_build_times(text, args.target, args.runs)
        print(f"| {name} | {r['ops']} | {r['enodes']} | {r['kernels']} | {search} | {med['parse']:.3f} | "
              f"{med['saturate']:.3f} | {med['serialize']:.3f} | {med['extract']:.3f} | {med['total']:.3f} | "
              f"{cold} | {warm:.3f} |")


def c_build_times(text: str, target: str, runs: int) -> tuple[str, float]:
    """The C build of the lowered program with an empty cache (cpu only), and the median whole compile,
    parse to loaded library, once the cache is warm."""
    with tempfile.TemporaryDirectory() as cache:
        program = stitch.compile(text, target=target, cache_dir=cache)
        cold = "-"
        if program.native is not None:
            with tempfile.TemporaryDirectory() as empty:
                start = time.perf_counter()
                build(program.loops, empty)
                cold = f"{time.perf_counter() - start:.3f}"
        warm = []
        for _ in range(runs):
            start = time.perf_counter()
            stitch.compile(text, target=target, cache_dir=cache)
            warm.append(time.perf_counter() - start)
    return cold, statistics.median(warm)


if __name__ == "__main__":
    with deep_recursion():  # the stages are called one by one here, outside stitch's entry points
        main()
