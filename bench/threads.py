"""Threads under load: each example's time with 1 and 2 threads, on a quiet machine and with a busy process.

A parallel runtime that waits for every thread at the end of a kernel loses a
whole scheduler tick whenever another process holds one of the cores; stitch's
pool (targets/runtime.c) lets the calling thread take the tiles no worker has
claimed. This prints, per program and load, the median call time (outputs
reused) with 1 and 2 threads and their ratio; with --baseline DIR also for the
library another stitch tree builds for the same program (e.g. an export of the
OpenMP version, `git archive <commit> | tar -x -C DIR/stitch`; its thread count
set with libgomp's omp_set_num_threads). Everything runs in this one process,
in short blocks of calls in shuffled order, round after round, so that every
engine and thread count sees the same machine (it is shared: the figures are
only as quiet as it is). The load is `python3 -c 'while True: pass'`, unpinned
or pinned to a core (--pin-busy CPU).

Run: python3 bench/threads.py [--programs softmax attention ...] [--rounds R] [--block N] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

BASELINE_CHILD = r"""
import sys, stitch
try:
    from stitch.targets.c.source import buffer_order
except ImportError:  # (a tree from before targets/c/)
    from stitch.targets.c.source import buffer_order
f = stitch.compile(sys.argv[1])
print(f.native.library._name)
print(" ".join(b.name for b in buffer_order(f.loops)))
"""


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", nargs="+", default=["softmax", "attention", "layernorm_large", "rmsnorm",
                                                       "mlp_large"])
    ap.add_argument("--rounds", type=int, default=5, help="rounds over every engine and thread count")
    ap.add_argument("--block", type=int, default=10, help="calls in a row per engine and thread count")
    ap.add_argument("--baseline", metavar="DIR", help="a directory holding another `stitch` package to compare")
    ap.add_argument("--pin-busy", type=int, metavar="CPU", help="pin the busy process to this core")
    return ap.parse_args()


def baseline_native(tree: Path, path: Path, compiled):
    """The library `tree`'s stitch builds for `path`, called like ours (same buffers in the same order)."""
    from stitch.targets.c.source import buffer_order
    from stitch.targets.cpu import Native

    proc = subprocess.run([sys.executable, "-c", BASELINE_CHILD, str(path)], capture_output=True, text=True,
                          check=True, env=dict(os.environ, PYTHONPATH=str(tree)))
    lib_path, names = proc.stdout.strip().splitlines()[-2:]
    if names.split() != [b.name for b in buffer_order(compiled.loops)]:
        sys.exit(f"{path.name}: the baseline lowers to other buffers; compare trees with the same lowering")
    lib = ctypes.CDLL(lib_path)
    lib.stitch_main.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.stitch_main.restype = None  # the OpenMP version's stitch_main returns nothing
    return Native(compiled.loops, lib, None)


def busy_process(cpu: int | None) -> subprocess.Popen:
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)
    time.sleep(0.2)
    return proc


def main() -> None:
    args = parse_args()
    import numpy as np
    import stitch
    from stitch.engine.ir.interp import bind_inputs, np_dtype, random_inputs
    from stitch.targets import runtime

    calls = {}  # (program, engine) -> (call, set_threads)
    for name in args.programs:
        path = HERE.parent / "examples" / f"{name}.ir"
        f = stitch.compile(path)
        inputs = bind_inputs(f.graph, random_inputs(f.graph, 0))
        out = [np.empty(t.shape, np_dtype(t.dtype)) for t in f.graph.output_types]
        calls[name, "stitch (pool)"] = ((lambda n=f.native, i=inputs, o=out: n.run(i, o)), runtime.set_threads)
        if args.baseline:
            native = baseline_native(Path(args.baseline).resolve(), path, f)
            gomp = ctypes.CDLL("libgomp.so.1")
            calls[name, "baseline"] = ((lambda n=native, i=inputs, o=out: n.run(i, o)), gomp.omp_set_num_threads)
    engines = list(dict.fromkeys(engine for _, engine in calls))
    samples: dict[tuple, list[float]] = {}
    for _ in range(args.rounds):
        for load in ("quiet", "busy"):
            busy = busy_process(args.pin_busy) if load == "busy" else None
            try:
                for name in args.programs:
                    order = [(engine, threads) for engine in engines for threads in (1, 2)]
                    random.shuffle(order)
                    for engine, threads in order:
                        call, set_threads = calls[name, engine]
                        set_threads(threads)
                        call()
                        for _ in range(args.block):
                            t = time.perf_counter()
                            call()
                            samples.setdefault((name, load, engine, threads), []).append(time.perf_counter() - t)
                        time.sleep(0.02)  # let spinning threads go to sleep before the next engine
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
    print(f"load average {os.getloadavg()[0]:.2f} at the end; median of {args.rounds} rounds x {args.block} calls; "
          f"busy: one python busy loop{'' if args.pin_busy is None else f' pinned to cpu {args.pin_busy}'}\n")
    print("| program | load | engine | 1 thread ms | 2 threads ms | 2 threads / 1 thread |")
    print("|---|---|---|---|---|---|")
    for name in args.programs:
        for load in ("quiet", "busy"):
            for engine in engines:
                one = statistics.median(samples[name, load, engine, 1])
                two = statistics.median(samples[name, load, engine, 2])
                print(f"| {name} | {load} | {engine} | {one * 1e3:.2f} | {two * 1e3:.2f} | {two / one:.2f} |")


if __name__ == "__main__":
    main()
