"""Run-time benchmark: where the output falls in its page, against the input, changes a kernel's time.

A load whose address matches an earlier store's in its last 12 bits waits until that store is done
(4 KiB aliasing), so the same program on the same values can take several times as long with its
output a few dozen bytes past the input modulo 4 KiB. This times each streamed example (outputs
of 16 MiB and more, rows stored from the registers) with its out= array placed at several byte
offsets from its first input modulo 4 KiB, the inputs where numpy put them, interleaved round by
round (peers.interleaved_times), and prints the medians and each offset's time over the time at
offset 0 (the output at the input's own place in its page, as numpy's large arrays usually fall).

Run: python3 bench/placement.py [--runs N] [--threads T] [--programs a b ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
PROGRAMS = ["bias_gelu", "softmax", "rmsnorm", "layernorm_lastaxis", "layernorm_large"]
OFFSETS = [0, -16, 48, 112, 240, 1024, 2048]  # bytes from the first input, modulo 4 KiB
BLOCK = 3


def placed(shape, dtype, address: int):
    """An uninitialised array of `shape` whose first byte falls at `address` modulo 4 KiB."""
    import numpy as np

    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    block = np.empty(nbytes + 2 * 4096, np.uint8)
    start = (address - block.ctypes.data) % 4096
    return block[start:start + nbytes].view(dtype).reshape(shape)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--programs", nargs="*", default=PROGRAMS)
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, str(HERE))
    import stitch
    from peers import interleaved_times
    from stitch.engine.ir.interp import np_dtype, random_inputs

    stitch.set_num_threads(args.threads)
    print(f"threads {args.threads}; median of {args.runs} rounds of {BLOCK} calls, offsets interleaved; "
          f"inputs where numpy put them, the output at each offset (bytes, modulo 4 KiB) from the first input\n")
    print("| program | " + " | ".join(f"{d:+d} ms" for d in OFFSETS) + " | worst/0 |")
    print("|---|" + "---|" * (len(OFFSETS) + 1))
    for name in args.programs:
        program = stitch.compile(str(EXAMPLES / f"{name}.ir"))
        inputs = random_inputs(program.graph, 0)
        first = next(iter(inputs.values())).ctypes.data
        outs = {d: [placed(t.shape, np_dtype(t.dtype), first + d) for t in program.graph.output_types]
                for d in OFFSETS}
        engines = {d: (lambda out=out: program(out=out, **inputs)) for d, out in outs.items()}
        times = interleaved_times(engines, args.runs, pause=0, block=BLOCK)
        ms = {d: statistics.median(t for r in times[d] for t in r) * 1e3 for d in OFFSETS}
        print(f"| {name} | " + " | ".join(f"{ms[d]:.3f}" for d in OFFSETS) + f" | {max(ms.values()) / ms[0]:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
