"""What not fusing multiply-adds costs: every example built as shipped (-ffp-contract=off,
docs/explanation/floating-point.md) and with gcc's GNU C default (-ffp-contract=fast), timed interleaved.

Prints a markdown table of medians (outputs reused) and the ratio off/fast. The matmul micro-kernel
fuses its multiply-adds explicitly either way. Run: python3 bench/fp_contract.py [--runs N] [--threads T]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import stitch
    from stitch.engine.ir.interp import np_dtype, random_inputs
    from stitch.targets import cc

    stitch.set_num_threads(args.threads)
    shipped = cc.REQUIRED_FLAGS
    contracted = tuple("-ffp-contract=fast" if f == "-ffp-contract=off" else f for f in shipped)
    print(f"threads {args.threads}, interleaved medians of {args.runs}, outputs reused\n")
    print("| program | contract=off ms | contract=fast ms | off/fast |")
    print("|---|---|---|---|")
    for path in sorted((HERE.parent / "examples").glob("*.ir")):
        programs = {}
        for name, flags in (("off", shipped), ("fast", contracted)):
            cc.REQUIRED_FLAGS = flags
            programs[name] = stitch.compile(path)
        cc.REQUIRED_FLAGS = shipped
        inputs = random_inputs(programs["off"].graph, 0)
        outs = {name: [np.empty(t.shape, np_dtype(t.dtype)) for t in p.graph.output_types]
                for name, p in programs.items()}
        times: dict[str, list[float]] = {name: [] for name in programs}
        for name, p in programs.items():
            p(out=outs[name], **inputs)
        for _ in range(args.runs):
            for name, p in programs.items():
                start = time.perf_counter()
                p(out=outs[name], **inputs)
                times[name].append(time.perf_counter() - start)
        off, fast = (statistics.median(times[n]) for n in ("off", "fast"))
        print(f"| {path.stem} | {off * 1e3:.3f} | {fast * 1e3:.3f} | {off / fast:.2f} |", flush=True)


if __name__ == "__main__":
    main()
