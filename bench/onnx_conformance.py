"""ONNX conformance report: the onnx package's node test cases through stitch, on cpu and accel.

Prints a markdown report: passed / failed / skipped counts per target, then
every failure and every skip with its reason, then the passed cases. The cases
are cached under ~/.cache/stitch by onnx version (the first run collects them,
~20 s). Run: python3 bench/onnx_conformance.py [--targets cpu,accel] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import time

from stitch.frontends.onnx_conformance import load_cases, report, run_suite


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", default="cpu,accel", help="comma-separated targets (default cpu,accel)")
    p.add_argument("--only", default="", help="run only cases whose name contains this")
    args = p.parse_args()
    start = time.perf_counter()
    cases = [c for c in load_cases() if args.only in c.name]
    results = run_suite(cases, tuple(args.targets.split(",")))
    print(f"# ONNX node conformance ({len(cases)} cases, {time.perf_counter() - start:.0f} s)\n")
    print(report(results))


if __name__ == "__main__":
    main()
