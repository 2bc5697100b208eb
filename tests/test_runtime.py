"""The CPU runtime: the thread pool (targets/runtime.c), tile scratch on the heap, the thread count, --profile."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import stitch
import stitch_testing
from stitch.engine.cli import main
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch.targets import cc, cpu, runtime
from stitch.targets.c import tuning
from stitch_testing import EXAMPLES, needs_cc, target_text


@pytest.fixture
def threads():
    """Set the pool's size inside a test; the size before is restored after it."""
    before = runtime.threads()
    yield runtime.set_threads
    runtime.set_threads(before)


# A tile function that records which thread ran each tile and checks that its scratch is its own.
HARNESS = r"""
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
typedef void (*st_tiles)(void *, int64_t, int64_t, unsigned char *);
typedef int (*st_runner)(st_tiles, void *, int64_t, int64_t, size_t, int);
struct job { pthread_t caller; _Atomic int worker_ran; int wait_for_worker; int *runs; pthread_t *owner;
             size_t bytes; _Atomic int bad_scratch; };
static void tiles(void *args, int64_t lo, int64_t hi, unsigned char *scratch) {
  struct job *j = args;
  for (int64_t t = lo; t < hi; ++t) {
    int mine = pthread_equal(pthread_self(), j->caller);
    if (!mine) atomic_store(&j->worker_ran, 1);
    for (int i = 0; mine && j->wait_for_worker && !atomic_load(&j->worker_ran) && i < 50000; ++i) {
      struct timespec pause = {0, 100000};
      nanosleep(&pause, NULL);  /* the caller's tiles wait (up to 5 s) until a worker has run one */
    }
    __atomic_fetch_add(&j->runs[t], 1, __ATOMIC_SEQ_CST);
    j->owner[t] = pthread_self();
    memset(scratch, (int)(t & 0xff), j->bytes);
    struct timespec pause = {0, 20000};
    nanosleep(&pause, NULL);
    for (size_t i = 0; i < j->bytes; ++i)
      if (scratch[i] != (unsigned char)(t & 0xff)) { atomic_store(&j->bad_scratch, 1); break; }
  }
}
int run_tiles(st_runner run, int64_t n, int64_t grain, size_t bytes, int parallel, int wait_for_worker,
              int *runs, int64_t *distinct_threads) {
  pthread_t owner[4096];
  struct job j = {pthread_self(), 0, wait_for_worker, runs, owner, bytes, 0};
  if (run(tiles, &j, n, grain, bytes, parallel)) return -1;
  /* the threads that ran tiles, the caller counted whether or not it ran one (a worker may take
     every tile while the caller waits for a core): 1 = the caller alone, 2 = it and one worker */
  int64_t distinct = 1;
  for (int64_t t = 0; t < n; ++t) {
    int seen = pthread_equal(owner[t], j.caller);
    for (int64_t u = 0; u < t; ++u) seen |= pthread_equal(owner[u], owner[t]);
    distinct += !seen;
  }
  *distinct_threads = distinct;
  return j.bad_scratch;
}
/* Which thread ran each tile (the caller or not), and in what order; the caller's tiles wait (up to
   5 s) until a worker has run one. */
struct ordered { pthread_t caller; _Atomic int64_t seq; int64_t *order; int *by_caller; _Atomic int worker_ran; };
static void ordered_tiles(void *args, int64_t lo, int64_t hi, unsigned char *scratch) {
  struct ordered *j = args;
  (void)scratch;
  for (int64_t t = lo; t < hi; ++t) {
    int mine = pthread_equal(pthread_self(), j->caller);
    if (!mine) atomic_store(&j->worker_ran, 1);
    for (int i = 0; mine && !atomic_load(&j->worker_ran) && i < 50000; ++i) {
      struct timespec pause = {0, 100000};
      nanosleep(&pause, NULL);
    }
    j->order[t] = atomic_fetch_add(&j->seq, 1);
    j->by_caller[t] = mine;
    struct timespec pause = {0, 20000};
    nanosleep(&pause, NULL);
  }
}
int run_ordered(st_runner run, int64_t n, int64_t *order, int *by_caller) {
  struct ordered j = {pthread_self(), 0, order, by_caller, 0};
  return run(ordered_tiles, &j, n, 1, 64, 1);
}
"""


def build_harness(cc: str, directory: Path) -> Path:
    """HARNESS compiled into `directory`: the shared library's path."""
    src, lib = directory / "harness.c", directory / "harness.so"
    src.write_text(HARNESS)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", str(src), "-o", str(lib)], check=True)
    return lib


@pytest.fixture
def harness(cache, tmp_path):
    cc = cpu.compiler()
    lib = ctypes.CDLL(str(build_harness(cc, tmp_path)))
    rt = runtime._load(cc, cache)
    run = ctypes.cast(rt.stitch_rt_run, ctypes.c_void_p)

    def run_tiles(n: int, grain: int = 1, nbytes: int = 256, parallel: bool = True, wait_for_worker: bool = False):
        runs = (ctypes.c_int * n)()
        distinct = ctypes.c_int64()
        bad = lib.run_tiles(run, ctypes.c_int64(n), ctypes.c_int64(grain), ctypes.c_size_t(nbytes), int(parallel),
                            int(wait_for_worker), runs, ctypes.byref(distinct))
        return list(runs), distinct.value, bad

    return run_tiles


@needs_cc
@pytest.mark.parametrize("n, grain", [(64, 1), (37, 4), (5, 2), (1000, 7)])
def test_every_tile_runs_once_and_threads_share_the_work(harness, threads, n, grain):
    threads(3)
    runs, distinct, bad = harness(n, grain, wait_for_worker=True)
    assert runs == [1] * n
    assert bad == 0, "two threads wrote the same scratch at once"
    assert distinct >= 2, "the caller's first tile waits until a worker has run one"


FIRST_JOB = """
import ctypes, subprocess, sys
from pathlib import Path
from stitch.targets import cc, cpu, runtime
home = Path(sys.argv[1])
lib = ctypes.CDLL(sys.argv[2])
rt = runtime._load(cpu.compiler(), home / "cache")
runtime.set_threads(3)
runs, distinct = (ctypes.c_int * 16)(), ctypes.c_int64()
lib.run_tiles(ctypes.cast(rt.stitch_rt_run, ctypes.c_void_p), ctypes.c_int64(16), ctypes.c_int64(1),
              ctypes.c_size_t(256), 1, 1, runs, ctypes.byref(distinct))
print(list(runs) == [1] * 16, distinct.value)
"""


@needs_cc
def test_the_first_job_of_a_process_wakes_the_workers_it_starts(tmp_path):
    """Workers are started by the first parallel call, just before it publishes its job. A worker
    that took the epoch to wait past when it began running could take that job's own epoch as
    already seen and sleep through it: every process's first parallel kernel ran on its caller
    alone (here the caller's tiles wait for a worker, so that call took minutes). Run in a fresh
    process: the pool is one per process."""
    lib = build_harness(cpu.compiler(), tmp_path)
    root = str(Path(stitch.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", FIRST_JOB, str(tmp_path), str(lib)],
                             capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr
        every_tile_once, distinct = out.stdout.split()
        assert every_tile_once == "True" and int(distinct) >= 2


PINNED = """
import ctypes, os, sys
from pathlib import Path
from stitch.targets import cc, cpu, runtime
home, threads, allowed = Path(sys.argv[1]), int(sys.argv[3]), {int(c) for c in sys.argv[4].split(",")}
os.sched_setaffinity(0, allowed)
lib = ctypes.CDLL(sys.argv[2])
rt = runtime._load(cpu.compiler(), home / "cache")
runtime.set_threads(threads)
runs, distinct = (ctypes.c_int * 16)(), ctypes.c_int64()
def call():
    lib.run_tiles(ctypes.cast(rt.stitch_rt_run, ctypes.c_void_p), ctypes.c_int64(16), ctypes.c_int64(1),
                  ctypes.c_size_t(256), 1, 0, runs, ctypes.byref(distinct))
call()
me = os.gettid() if hasattr(os, "gettid") else os.getpid()
workers = [int(t) for t in os.listdir("/proc/self/task") if int(t) != me]
masks = [sorted(os.sched_getaffinity(t)) for t in workers]
pinned = [m[0] for m in masks if len(m) == 1]
# the caller put on a worker's CPU: the call moves it off, and leaves its own mask as it was
for cpu_ in pinned:
    os.sched_setaffinity(0, {cpu_}); os.sched_setaffinity(0, allowed)
    call()
print(sorted(os.sched_getaffinity(0)) == sorted(allowed), len(pinned), len(set(pinned)), len(workers))
"""


@needs_cc
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs")
def test_workers_are_pinned_to_cpus_of_their_own_and_the_caller_keeps_its_mask(tmp_path):
    """Unpinned, Linux woke a sleeping worker onto its caller's CPU after an idle pause, and the
    two shared one core (a 2-thread call took the 1-thread time). With a CPU per thread, each worker
    is pinned to a CPU of its own; the caller's own affinity is left as it was. With fewer CPUs
    than threads nothing is pinned."""
    lib = build_harness(cpu.compiler(), tmp_path)
    root = str(Path(stitch.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    cpus = sorted(os.sched_getaffinity(0))

    def run(threads: int, allowed: list[int]) -> list[str]:
        out = subprocess.run([sys.executable, "-c", PINNED, str(tmp_path), str(lib), str(threads),
                              ",".join(map(str, allowed))], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    mask_kept, pinned, distinct, _ = run(2, cpus[:2])  # (numpy may have threads of its own, unpinned)
    assert mask_kept == "True" and (pinned, distinct) == ("1", "1")
    mask_kept, pinned, _, _ = run(3, cpus[:2])  # more threads than CPUs: none pinned
    assert mask_kept == "True" and pinned == "0"


@needs_cc
def test_each_thread_takes_its_own_block_of_tiles_in_order_first(cache, tmp_path, threads):
    """The tiles are dealt in a contiguous block per thread, the caller's first: the worker begins
    at the first tile of its own block, and each thread runs the tiles it takes of one block in
    order (so a tile may prefetch what the tile after it reads); every tile runs once."""
    cc = cpu.compiler()
    lib = ctypes.CDLL(str(build_harness(cc, tmp_path)))
    run = ctypes.cast(runtime._load(cc, cache).stitch_rt_run, ctypes.c_void_p)
    threads(2)
    n = 64
    for _ in range(3):
        order, by_caller = (ctypes.c_int64 * n)(), (ctypes.c_int * n)()
        assert lib.run_ordered(run, ctypes.c_int64(n), order, by_caller) == 0
        assert sorted(order) == list(range(n))  # every tile once
        for caller in (1, 0):
            ran = sorted((t for t in range(n) if by_caller[t] == caller), key=lambda t: order[t])
            for block in (range(0, n // 2), range(n // 2, n)):
                mine = [t for t in ran if t in block]
                assert mine == sorted(mine)
        worker = min((t for t in range(n) if not by_caller[t]), key=lambda t: order[t])
        assert worker == n // 2


@needs_cc
def test_a_pool_shrunk_after_growing_still_wakes_a_worker_that_takes_part(harness, threads):
    """Workers beyond the pool's size ignore jobs: waking only those would leave the caller alone."""
    threads(5)
    assert harness(16)[0] == [1] * 16  # four workers started
    threads(2)
    for _ in range(5):
        time.sleep(0.01)  # every worker asleep on the futex, not spinning
        runs, distinct, _ = harness(16, wait_for_worker=True)
        assert runs == [1] * 16 and distinct == 2


@needs_cc
def test_serial_kernels_and_a_pool_of_one_run_on_the_caller(harness, threads):
    threads(4)
    runs, distinct, _ = harness(50, parallel=False)
    assert runs == [1] * 50 and distinct == 1
    threads(1)
    runs, distinct, _ = harness(50)
    assert runs == [1] * 50 and distinct == 1


@needs_cc
def test_scratch_grows_to_what_a_kernel_asks_for(harness, threads):
    threads(2)
    for nbytes in (64, 1 << 20, 100, 3 << 20):
        runs, _, bad = harness(8, nbytes=nbytes)
        assert runs == [1] * 8 and bad == 0


@needs_cc
@pytest.mark.parametrize("name", ["softmax", "attention", "layernorm_large", "mlp_large"])
def test_results_are_the_same_bits_for_any_thread_count(name, cache, threads):
    f = stitch.compile(EXAMPLES / f"{name}.ir", cache_dir=cache)
    assert ", 1)) goto fail;" in f.native.source_path.read_text(), "a kernel the pool runs in parallel"
    inputs = random_inputs(f.graph, 3)
    results = {}
    for n in (1, 2, 3, 5):
        threads(n)
        results[n] = [out.copy() for out in f(**inputs)]
    for n, outputs in results.items():
        for got, first in zip(outputs, results[1]):
            np.testing.assert_array_equal(got, first, err_msg=f"{n} threads")
    for got, want in zip(results[1], evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
def test_code_after_a_tile_loop_runs_on_the_caller_once_every_tile_is_done(cache, threads):
    """The hook for per-tile partials: tiles write one partial each, the statements after the tile
    loop combine them in a fixed order, so the result is the same bits for any thread count."""
    from stitch.lowering.loops import Accumulate, Buffer, For, Ix, Lit, Load, LoopKernel, LoopProgram, Store

    t, i = Ix.var("t"), Ix.var("i")
    body = [
        For("t", 64, "parallel", [Store("partial", (t,), Lit(0.0, "f32")),
                                  For("i", 8192, "reduce", [Accumulate("partial", (t,), "sum",
                                                                       Load("x", (t, i)))])]),
        Store("out", (Ix(),), Lit(0.0, "f32")),
        For("t", 64, "serial", [Accumulate("out", (Ix(),), "sum", Load("partial", (t,)))]),
    ]
    program = LoopProgram("partials", [Buffer("x", "global", "f32", (64, 8192))], ["out"],
                          [Buffer("partial", "global", "f32", (64,))], [LoopKernel("k0", [], body)],
                          [Buffer("out", "global", "f32", (1,))])
    native = cpu.build(program, cache)
    source = native.source_path.read_text()
    assert re.search(r"st_run\(kernel_k0_tiles0_run, &a, 64, \d+, \d+, 1\)\) goto fail;\n  b_out\[0\] = ", source)
    x = np.random.default_rng(0).random((64, 8192), dtype=np.float32)
    results = []
    for n in (1, 2, 3):
        threads(n)
        results.append(native.run({"x": x})[0].copy())
    assert all(np.array_equal(r, results[0]) for r in results)
    np.testing.assert_allclose(results[0], [x.astype(np.float64).sum()], rtol=1e-4)


@needs_cc
def test_programs_called_from_several_threads_at_once(cache, threads):
    """Two programs share the pool (the one not holding it runs its tiles on its own thread); two
    threads calling one program take turns."""
    threads(2)
    programs = [stitch.compile(EXAMPLES / f"{name}.ir", cache_dir=cache) for name in ("softmax", "layernorm_large")]
    cases = []
    for f in programs:
        inputs = random_inputs(f.graph, 1)
        alone = f(**inputs)  # one call by itself, checked against the reference once
        assert [compare(got, w) for got, w in zip(alone, evaluate(f.graph, inputs))] == [""] * len(alone)
        cases.append((f, inputs, alone))
    failures = []

    def call(case, times):
        # each call at once with the others must give the lone call's bits (the tiles compute the same
        # whichever thread runs them): stricter than the tolerance, and cheap to check on 8M elements
        f, inputs, want = case
        for _ in range(times):
            for got, w in zip(f(**inputs), want):
                if not np.array_equal(got, w, equal_nan=True):
                    failures.append(f"{f.graph.name}: differs from the lone call")

    workers = [threading.Thread(target=call, args=(case, 8)) for case in cases + cases]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []


@needs_cc
def test_a_forked_child_gets_a_pool_of_its_own(cache, threads):
    threads(2)
    f = stitch.compile(EXAMPLES / "softmax.ir", cache_dir=cache)
    inputs = random_inputs(f.graph, 2)
    want = evaluate(f.graph, inputs)
    f(**inputs)  # the parent's workers are running
    pid = os.fork()
    if pid == 0:  # the child: its workers are gone; the pool must start new ones, not wait for the old
        try:
            ok = all(compare(got, w) == "" for _ in range(3) for got, w in zip(f(**inputs), want))
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 120
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert all(compare(got, w) == "" for got, w in zip(f(**inputs), want))


@needs_cc
def test_emitted_c_compiled_on_its_own_runs_every_tile_on_the_caller(cache, tmp_path, capsys):
    """`stitch compile --emit c` is a whole program: unbound, its tiles run serially, scratch from the heap."""
    path = EXAMPLES / "layernorm_large.ir"
    assert main(["compile", str(path), "--emit", "c"]) == 0
    src = tmp_path / "alone.c"
    src.write_text(capsys.readouterr().out)
    flags = [f for f in cc.DEFAULT_FLAGS if f != "-march=native"]
    subprocess.run([cpu.compiler(), *flags, str(src), "-o", str(tmp_path / "alone.so"), "-lm"], check=True)
    lib = ctypes.CDLL(str(tmp_path / "alone.so"))
    lib.stitch_main.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.stitch_main.restype = ctypes.c_int
    f = stitch.compile(path, cache_dir=cache)
    alone = cpu.Native(f.loops, lib, src)
    inputs = random_inputs(f.graph, 4)
    for got, want in zip(alone.run(inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
def test_without_the_runtime_programs_run_on_the_caller(cache, tmp_path):
    """A runtime that does not build (another OS, a broken compiler) costs threads, not correctness."""
    broken = tmp_path / "runtime.c"
    broken.write_text("this is not C\n")
    script = f"""
import sys
from pathlib import Path
import stitch
from stitch.targets import runtime
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
runtime.SOURCE = Path({str(broken)!r})
for name in ("softmax", "attention"):
    f = stitch.compile(Path({str(EXAMPLES)!r}) / (name + ".ir"), cache_dir={str(cache)!r})
    inputs = random_inputs(f.graph, 0)
    assert all(compare(g, w) == "" for g, w in zip(f(**inputs), evaluate(f.graph, inputs)))
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert proc.stderr.count("the thread pool could not be built") == 1


def big_onchip_target(tmp_path: Path) -> Path:
    path = tmp_path / "big.toml"
    path.write_text(target_text(onchip_bytes=33554432))
    return path


@needs_cc
@pytest.mark.parametrize("name", ["attention", "mlp_large"] + ["rmsnorm", "layernorm_large"] * stitch_testing.LONG)
def test_a_large_onchip_budget_keeps_tile_buffers_off_the_stack(name, cache, tmp_path):
    """Issue 18.1: with 32 MiB on chip a tile's buffers are 16 MB; as stack arrays they segfaulted.
    Run in a child process, so a crash is a failure rather than the end of the test run. (The norms,
    5-9 s each, with --long only.)"""
    target = big_onchip_target(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "stitch.engine.cli", "run", str(EXAMPLES / f"{name}.ir"), "--check",
                           "--target", str(target), "--cache-dir", str(cache)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "check: outputs equal the reference" in proc.stdout
    compiled = stitch.compile(EXAMPLES / f"{name}.ir", target=str(target), cache_dir=cache)
    source = cpu.c_for_target(compiled.loops, compiled.compiled.target)
    sizes = {"float": 4, "double": 8, "_Float16": 2, "int32_t": 4, "int64_t": 8, "bool": 1}
    stack = [sizes[t] * int(n) * (int(m) if m else 1)
             for t, n, m in re.findall(r"\b(float|double|_Float16|int32_t|int64_t|bool) \w+\[(\d+)\](?:\[(\d+)\])?;",
                                       source)]
    assert max(stack, default=0) <= tuning.LOCAL_STACK_BYTES
    assert "_Alignas" not in source


@needs_cc
def test_a_wide_f16_matmul_keeps_its_float_shadow_in_scratch(cache, tmp_path):
    """The float shadow of an f16 matmul's row of cells is 512 KiB here: beyond LOCAL_STACK_BYTES it
    lives in the tile's scratch, and the result is still numpy's (one rounding per element)."""
    f = stitch.compile("func f(a: f16[2, 8], b: f16[8, 131072]) -> f16[2, 131072] { return matmul(a, b) }",
                       target=str(big_onchip_target(tmp_path)), cache_dir=cache)
    assert "float *acc_f = (float *)(st_scratch + " in f.native.source_path.read_text()
    rng = np.random.default_rng(0)
    a, b = (rng.random(shape, dtype=np.float32).astype(np.float16) for shape in ((2, 8), (8, 131072)))
    np.testing.assert_array_equal(f(a=a, b=b)[0], a @ b)


@needs_cc
def test_run_profile_times_every_kernel_beside_the_estimate(cache, capsys):
    path = str(EXAMPLES / "attention.ir")
    assert main(["run", path, "--profile", "--runs", "3", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "median of 3 runs" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"k\d+ ", line)]
    assert [r[0] for r in rows] == ["k0"]  # attention is one kernel: softmax and both matmuls
    assert all(float(r[2]) > 0 for r in rows)
    assert rows[0][4] != "-", "GFLOP/s for the kernel with the matmuls"
    assert main(["run", path, "--profile", "--runs", "2", "--json", "--cache-dir", str(cache)]) == 0
    report = json.loads(capsys.readouterr().out)
    kernels = report["profile"]["kernels"]
    assert [k["name"] for k in kernels] == ["k0"]
    for k, priced in zip(kernels, report["kernels"]):
        assert k["seconds"] > 0 and k["bytes"] == priced["bytes_read"] + priced["bytes_written"]
        assert k["gb_per_s"] == pytest.approx(k["bytes"] / k["seconds"] / 1e9)
    assert kernels[0]["flops"] == 2 * 2 * 8 * 512 * 512 * 64  # QK^T and PV, 8 heads


@needs_cc
def test_only_the_profile_build_is_timed(cache):
    f = stitch.compile(EXAMPLES / "softmax.ir", cache_dir=cache)
    with pytest.raises(ValueError, match="undefined symbol"):
        ctypes.c_int64.in_dll(f.native.library, "stitch_profile_ns")
    (row,) = f.profile(runs=2, **random_inputs(f.graph, 0))
    assert row.name == "k0" and row.writes == "out0" and row.seconds > 0 and row.flops == 0


@needs_cc
def test_the_profile_on_the_calling_threads_cpu_time(cache, threads, capsys):
    """At 1 thread every tile runs on the caller, whose CPU time (a loaded machine's steadier figure)
    a second timed build reads; at 2 the caller's CPU time would miss the other thread's tiles."""
    f = stitch.compile(EXAMPLES / "softmax.ir", cache_dir=cache)
    inputs = random_inputs(f.graph, 0)
    threads(1)
    start = time.thread_time()
    (row,) = f.profile(runs=3, cpu_time=True, **inputs)
    assert row.cpu_time and 0 < row.seconds < time.thread_time() - start
    threads(2)
    with pytest.raises(StitchError, match="CPU time is the calling thread's.*1 thread"):
        f.profile(runs=3, cpu_time=True, **inputs)
    path = str(EXAMPLES / "softmax.ir")
    assert main(["run", path, "--cpu-time", "--cache-dir", str(cache)]) == 2
    assert "--cpu-time is --profile's clock" in capsys.readouterr().err
    assert main(["run", path, "--profile", "--cpu-time", "--threads", "1", "--cache-dir", str(cache)]) == 0
    assert "at 1 thread(s), the calling thread's CPU time" in capsys.readouterr().out


@needs_cc
def test_profile_of_a_program_without_kernels(cache, tmp_path, capsys):
    path = tmp_path / "same.ir"
    path.write_text("func f(x: f32[4]) -> f32[4] { return x }\n")
    assert main(["run", str(path), "--profile", "--cache-dir", str(cache)]) == 0
    assert re.search(r"^total +0\.000 +0\.000 +-$", capsys.readouterr().out, re.M)


@needs_cc
def test_profile_refuses_what_is_not_compiled_c(capsys):
    assert main(["run", str(EXAMPLES / "mlp.ir"), "--profile", "--target", "accel"]) == 1
    assert "--profile times compiled C" in capsys.readouterr().err


def test_the_runtime_source_ships_with_the_package():
    """Installed (CI installs the package, not the tree) the C source sits beside the module; from
    the source tree, pyproject's package data names it, so an install would ship it."""
    import fnmatch
    import tomllib

    assert runtime.SOURCE.is_file() and "st_tiles" in runtime.SOURCE.read_text()
    pyproject = Path(runtime.__file__).parent.parent / "pyproject.toml"
    if pyproject.is_file():
        patterns = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["stitch.targets"]
        assert any(fnmatch.fnmatch(runtime.SOURCE.name, p) for p in patterns)


def test_thread_count_knobs():
    assert runtime.default_threads({"OMP_NUM_THREADS": "3"}) == 3
    assert runtime.default_threads({"OMP_NUM_THREADS": "4,2"}) == 4
    cores = len(os.sched_getaffinity(0))
    assert runtime.default_threads({"OMP_NUM_THREADS": "many"}) == cores
    assert runtime.default_threads({}) == cores
    for bad in (0, -1, 2.5, "2", True):
        with pytest.raises(StitchError, match="thread count"):
            stitch.set_num_threads(bad)


def test_run_threads_flag_sets_the_pool(cache, threads, capsys):
    before = runtime.threads()
    assert main(["run", str(EXAMPLES / "mlp.ir"), "--threads", "3", "--cache-dir", str(cache)]) == 0
    assert runtime.threads() == 3
    capsys.readouterr()
    assert main(["run", str(EXAMPLES / "mlp.ir"), "--threads", "2", "--json", "--cache-dir", str(cache)]) == 0
    assert json.loads(capsys.readouterr().out)["threads"] == 2
    threads(before)
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(EXAMPLES / "mlp.ir"), "--threads", "0"])
    assert exit_.value.code == 2
