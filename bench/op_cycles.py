"""What an elementwise op costs on this machine, in cycles an element at the cpu target's clock,
beyond a copy: the figures targets/cpu.toml's [op_cycles] tables price (an entry there is this
figure times `vector_lanes`).

    python3 bench/op_cycles.py [--runs N] [--rows R]

Each op runs over [R, 1024] f32 (256 KiB at R = 64: in L2), one thread, through the Python API
with its output reused; the ops and a copy (x * 1) are timed interleaved (peers.interleaved_times:
medians over rounds, so load drifts hit all alike).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OPS = {"copy": "mul(x, 1.0)", "exp": "exp(x)", "sigmoid": "sigmoid(x)", "tanh": "tanh(x)", "erf": "erf(x)",
       "pow": "pow(x, 1.37)", "log": "log(x)", "sqrt": "sqrt(x)", "div": "div(1.0, x)"}


def main() -> None:
    import stitch
    from stitch.engine.schedule.target import load_target

    sys.path.insert(0, str(HERE))
    from peers import interleaved_medians

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rows", type=int, default=64)
    args = parser.parse_args()
    shape = f"f32[{args.rows}, 1024]"
    x = np.random.default_rng(0).uniform(0.5, 4.0, (args.rows, 1024)).astype(np.float32)
    calls = {}
    for name, expr in OPS.items():
        program = stitch.compile(f"func f(x: {shape}) -> {shape} {{\n  return {expr}\n}}\n", target="cpu")
        out = np.empty_like(x)
        calls[name] = functools.partial(program, x=x, out=[out])
    stitch.set_num_threads(1)
    times = interleaved_medians(calls, args.runs, pause=0.0, block=5)
    ghz = load_target("cpu").clock_ghz
    print("| op | us a call | cycles an element beyond a copy |\n|---|---|---|")
    for name, t in times.items():
        beyond = (t - times["copy"]) * ghz * 1e9 / x.size
        print(f"| {name} | {t * 1e6:.1f} | {'-' if name == 'copy' else f'{beyond:.2f}'} |")


if __name__ == "__main__":
    main()
