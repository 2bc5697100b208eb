"""Per-kernel timing of a compiled CPU program beside the cost model's estimate (`stitch run --profile`).

The program is built a second time with -DSTITCH_PROFILE, which wraps each
kernel call in `stitch_main` with a clock (the library every other call uses
stays untimed), and called `runs` times after one warm-up call. The clock is the
monotonic wall clock, or with `cpu_time` the calling thread's CPU time: at one
thread every tile runs on the caller, and its CPU time leaves out the time the
thread waits descheduled, the steadier figure on a machine others load.
Each kernel's median time is set beside what the cost model priced it at, on
as many threads as ran it (`--threads`, not the target's cores):
its bytes (read + written, as the model counts them) per second and, for a
kernel with matmuls, its floating-point operations (2 per multiply-add) per
second.
"""

from __future__ import annotations

import ctypes
import statistics
from dataclasses import asdict, dataclass

import numpy as np

from ..engine.ir.errors import StitchError
from ..engine.schedule.facts import facts
from ..engine.schedule.plan import slice_elems
from ..engine.schedule.schedule_print import global_names
from ..engine.schedule.split import planned_kernel
from . import runtime
from .cpu import build

PROFILE_FLAG = "-DSTITCH_PROFILE"
CPU_TIME_FLAG = "-DSTITCH_PROFILE_CPU_TIME"


@dataclass
class KernelTime:
    name: str  # the loop kernel (k0, k1, ...)
    writes: str  # the global value it writes
    seconds: float  # median measured time of one call
    estimated_seconds: float  # the cost model's
    bytes: int  # global bytes read and written, as the cost model counts them
    flops: int  # 2 x the matmul multiply-adds (0 without a matmul)
    threads: int = 1  # the threads it ran on, which the estimate assumes too
    cpu_time: bool = False  # timed on the calling thread's CPU time, not the wall clock

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    @property
    def gflop_per_s(self) -> float | None:
        return self.flops / self.seconds / 1e9 if self.flops and self.seconds > 0 else None

    def to_json(self) -> dict:
        return {**asdict(self), "gb_per_s": self.gb_per_s, "gflop_per_s": self.gflop_per_s}


def profile(program, inputs: dict[str, np.ndarray], runs: int = 10,
            sizes: dict[str, int] | None = None, cpu_time: bool = False) -> list[KernelTime]:
    """Time each kernel of a CompiledProgram running compiled C, `runs` calls after a warm-up (a
    symbolic program's at the symbols' `sizes`; the cost model's figures are at its planning size),
    on the wall clock or (`cpu_time`, one thread only) the calling thread's CPU time."""
    if program.executor != "c":
        raise StitchError(f"--profile times compiled C; this program runs on the {program.executor}")
    if runs < 1:
        raise StitchError(f"the profile needs at least one run, got {runs}")
    if cpu_time and runtime.threads() != 1:
        raise StitchError(f"the profile's CPU time is the calling thread's, which runs every tile only at 1 "
                          f"thread; the pool has {runtime.threads()} (set 1 thread, or time the wall clock)")
    native = program.native
    flags = (PROFILE_FLAG, CPU_TIME_FLAG) if cpu_time else (PROFILE_FLAG,)
    timed = build(native.program, native.cache_dir, tuple(native.flags) + flags)
    kernels = native.program.kernels
    counters = (ctypes.c_int64 * max(1, len(kernels))).in_dll(timed.library, "stitch_profile_ns")
    samples: list[list[float]] = [[] for _ in kernels]
    outputs = None
    for run in range(runs + 1):
        ctypes.memset(counters, 0, ctypes.sizeof(counters))
        outputs = timed.run(inputs, outputs, sizes)
        if run:  # the first call pays for page faults on fresh temporaries
            for i in range(len(kernels)):
                samples[i].append(counters[i] * 1e-9)
    compiled = program.compiled
    schedule, cost, target = compiled.schedule, compiled.cost, compiled.target
    threads = runtime.threads()
    names = global_names(schedule)
    rows = []
    for lk, k, kc, times in zip(kernels, schedule.kernels, cost.kernels, samples):
        k = planned_kernel(k, kc.plan)
        flops = sum(2 * slice_elems(inst.axes, k, {}) * depth for inst, depth in facts(k, schedule.types).matmuls)
        rows.append(KernelTime(lk.name, ", ".join(names[c] for c in k.roots), statistics.median(times),
                               target.seconds(kc.price.cycles_on(kc.plan, target, threads)),
                               kc.price.bytes_read + kc.price.bytes_written, flops, threads, cpu_time))
    return rows


def profile_table(rows: list[KernelTime], runs: int) -> str:
    threads = rows[0].threads if rows else 1
    clock = ", the calling thread's CPU time" if rows and rows[0].cpu_time else ""
    head = (f"per kernel, median of {runs} runs at {threads} thread(s){clock} (the cost model's bytes, and its "
            f"estimate at {threads} thread(s)):")
    lines = [head,
             f"{'kernel':<8} {'writes':<12} {'ms':>10} {'GB/s':>8} {'GFLOP/s':>8} {'estimated ms':>13} {'ratio':>7}"]
    for r in rows:
        gflops = f"{r.gflop_per_s:.1f}" if r.gflop_per_s is not None else "-"
        ratio = f"{r.seconds / r.estimated_seconds:.2f}" if r.estimated_seconds else "-"
        lines.append(f"{r.name:<8} {r.writes:<12} {r.seconds * 1e3:>10.3f} {r.gb_per_s:>8.1f} {gflops:>8} "
                     f"{r.estimated_seconds * 1e3:>13.3f} {ratio:>7}")
    total, estimated = sum(r.seconds for r in rows), sum(r.estimated_seconds for r in rows)
    ratio = f"{total / estimated:.2f}" if estimated else "-"
    lines.append(f"{'total':<21} {total * 1e3:>10.3f} {'':>8} {'':>8} {estimated * 1e3:>13.3f} {ratio:>7}")
    return "\n".join(lines)
