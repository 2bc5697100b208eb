"""Convolutional networks against onnxruntime, and each conv layer's fraction of one core's f32 peak.

ResNet-18 and MobileNetV2 (tools/vision_models.py: torchvision's layouts, seeded random parameters and
BatchNorm statistics) on one 224x224 image, exported once by torch.onnx's dynamo exporter and kept in
--export-cache (bench/compile_speed.py's `cached_export`: onnxruntime checked against torch eager).
Prints, after the machine's load and its peak:

- peak: one core's f32 multiply-add rate, a C loop of 12 independent chains of AVX-512 FMAs (16
  lanes; AVX2's 8 where the compiler's -march=native has no AVX-512), built through targets/cc.py
  and called through ctypes; the best of --peak-runs calls (each ~0.2 s).
- per model: stitch's compile seconds (stitch.compile with an empty C cache, weights bound),
  onnxruntime's session seconds, stitch's largest difference from onnxruntime's logits, then at
  each --threads count both engines' median times (interleaved round by round, both warm, stitch
  with outputs reused) and stitch's over onnxruntime's.
- per conv layer, at one thread: the stitch kernel(s) that compute it (the kernels reading the
  conv's weight; `CompiledProgram.profile`, median of --runs; with --cpu-time on the calling thread's
  CPU time, and the peak loop too, the figures that hold still while other work loads the machine), its FLOPs (2 per multiply-add:
  2 x N x M x output positions x C/group x kernel positions), GFLOP/s and the fraction of the peak.
  Convs computed in the same kernel (a depthwise conv inside the product that reads it) are one
  row. The other kernels (pools, adds, the classifier) are summed in a last row.

Needs torch (`pip install torch==2.13.0`, the CPU build) and `pip install '.[models]'`. Run:
python3 bench/vision.py [--models resnet18,mobilenet_v2] [--threads 1,2] [--runs N] [--cpu-time] [--export-cache DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODELS = {"resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2"}
CHAINS = 12  # independent FMA chains: more than latency x ports (4 x 2) keeps both pipes busy

PEAK_C = r"""
#include <immintrin.h>
#include <stdint.h>
#ifdef __AVX512F__
typedef __m512 vec;
#define LANES 16
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#define ADD _mm512_add_ps
static float hsum(vec v) { return _mm512_reduce_add_ps(v); }
#else
typedef __m256 vec;
#define LANES 8
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
#define ADD _mm256_add_ps
static float hsum(vec v) { float t[8]; _mm256_storeu_ps(t, v); return t[0]+t[1]+t[2]+t[3]+t[4]+t[5]+t[6]+t[7]; }
#endif
int peak_lanes(void) { return LANES; }
/* `iters` rounds of CHAINS independent multiply-adds on LANES floats; the sum keeps them live */
float peak_fma(int64_t iters, float m, float c) {
  vec a[CHAINS];
  for (int j = 0; j < CHAINS; ++j) a[j] = SET1(0.001f * j);
  vec vm = SET1(m), vc = SET1(c);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < CHAINS; ++j) a[j] = FMA(a[j], vm, vc);
  }
  vec s = a[0];
  for (int j = 1; j < CHAINS; ++j) s = ADD(s, a[j]);
  return hsum(s);
}
"""


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--peak-runs", type=int, default=7)
    ap.add_argument("--cpu-time", action="store_true",
                    help="the peak loop and the per-layer profile on the calling thread's CPU time (the whole-call "
                         "rows stay on the wall clock)")
    ap.add_argument("--export-cache", type=Path, default=Path.home() / ".cache" / "stitch" / "exports")
    return ap.parse_args(argv)


def measure_peak(runs: int, cpu_time: bool = False) -> tuple[float, int, float]:
    """(the best FLOP/s of one core over `runs` calls, the vector lanes, the median FLOP/s), on the wall
    clock or the calling thread's CPU time."""
    from stitch.targets.cc import cached_library, compiler, compiler_flags, default_cache_dir

    cc = compiler()
    source = f"#define CHAINS {CHAINS}\n" + PEAK_C
    lib = ctypes.CDLL(str(cached_library(source, 1, cc, compiler_flags(), default_cache_dir())))
    lib.peak_fma.restype, lib.peak_fma.argtypes = ctypes.c_float, [ctypes.c_int64, ctypes.c_float, ctypes.c_float]
    lanes = lib.peak_lanes()
    iters = 2_000_000
    lib.peak_fma(iters // 10, 0.999999, 1e-7)  # warm: the clock up, the page in
    clock = time.thread_time if cpu_time else time.perf_counter
    rates = []
    for _ in range(runs):
        start = clock()
        lib.peak_fma(iters, 0.999999, 1e-7)
        rates.append(iters * CHAINS * lanes * 2 / (clock() - start))
    return max(rates), lanes, float(np.median(rates))


def conv_layers(model) -> list[dict]:
    """Each Conv node of the ONNX model: its name, weight, shape figures and FLOPs (shapes by onnx's inference)."""
    import onnx
    from onnx import shape_inference
    from stitch.frontends.onnx_builder import sanitize

    inferred = shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    inits = {i.name: list(i.dims) for i in model.graph.initializer}
    layers = []
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        w = inits[node.input[1]]
        x, y = shapes[node.input[0]], shapes[node.output[0]]
        group = attrs.get("group", 1)
        kernel, strides = w[2:], attrs.get("strides", [1] * (len(w) - 2))
        kind = ("depthwise" if group == x[1] == w[0] and group > 1 else "grouped" if group > 1 else
                "1x1" if math.prod(kernel) == 1 else "dense")
        shape = "x".join(map(str, kernel)) + (f" s{strides[0]}" if max(strides) > 1 else "")
        flops = 2 * y[0] * y[1] * math.prod(y[2:]) * (x[1] // group) * math.prod(kernel)
        layers.append({"name": node.name or node.output[0], "weight": sanitize(node.input[1]), "kind": kind,
                       "shape": shape, "channels": f"{x[1]}->{y[1]}", "out": "x".join(map(str, y[2:])),
                       "flops": flops})
    return layers


def per_layer_table(program, inputs: dict, layers: list[dict], peak: float, runs: int,
                    cpu_time: bool = False) -> list[str]:
    """The per-conv-layer rows (one thread): the kernels reading each conv's weight, timed by the profile. Convs
    whose kernels overlap (one kernel computing a depthwise conv and the product reading it) are one row."""
    from stitch.engine.schedule.schedule_print import global_names

    rows = program.profile(runs=runs, cpu_time=cpu_time, **inputs)
    schedule = program.compiled.schedule
    names = global_names(schedule)
    reads = [{names.get(c) for c in k.inputs} for k in schedule.kernels]
    groups: list[tuple[list[dict], set[int]]] = []  # (convs, their kernels), in the model's order
    for layer in layers:
        ks = {i for i, r in enumerate(reads) if layer["weight"] in r}
        joined = [g for g in groups if g[1] & ks]
        for g in joined:
            groups.remove(g)
        groups.append(([c for g in joined for c in g[0]] + [layer], ks.union(*(g[1] for g in joined))))
    lines = ["| layer | kind | kernel | channels | out | MFLOP | stitch kernels | ms | GFLOP/s | of peak |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for convs, ks in groups:
        flops = sum(c["flops"] for c in convs)
        seconds = sum(rows[i].seconds for i in ks)
        rate = flops / seconds if seconds else 0.0
        cells = [" + ".join(c[key] for c in convs) for key in ("name", "kind", "shape", "channels", "out")]
        lines.append(f"| {' | '.join(cells)} | {flops / 1e6:.1f} | {','.join(rows[i].name for i in sorted(ks)) or '-'} "
                     f"| {seconds * 1e3:.3f} | {rate / 1e9:.1f} | {rate / peak:.0%} |")
    claimed = set().union(*(ks for _, ks in groups))
    total_flops = sum(c["flops"] for c in layers)
    total_s = sum(rows[i].seconds for i in claimed)
    lines.append(f"| all convs | | | | | {total_flops / 1e6:.0f} | {len(claimed)} | {total_s * 1e3:.2f} | "
                 f"{total_flops / total_s / 1e9:.1f} | {total_flops / total_s / peak:.0%} |")
    rest = [r for i, r in enumerate(rows) if i not in claimed]
    lines.append(f"| other kernels | | | | | | {len(rest)} | {sum(r.seconds for r in rest) * 1e3:.2f} | | |")
    return lines


def bench_model(name: str, args, peak: float) -> None:
    import onnx
    import stitch
    from compile_speed import cached_export
    from peers import interleaved_medians, onnxruntime_session
    from stitch.engine.ir.interp import np_dtype
    from stitch.frontends.onnx_import import import_onnx

    path, exporter = cached_export(name, args.export_cache)
    data = path.read_bytes()
    with np.load(path.with_suffix(".npz")) as npz:
        feeds = {k: npz[k] for k in npz.files if not k.startswith("output:")}
    imported = import_onnx(data, entry=name)
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        program = stitch.compile(imported.text, weights=imported.weights, cache_dir=cache)
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        ort_1 = onnxruntime_session(data, 1)
        session_s = time.perf_counter() - start
        inputs = {imported.inputs[k]: v for k, v in feeds.items()}
        out = [np.empty(t.shape, np_dtype(t.dtype)) for t in program.graph.output_types]
        (want,) = ort_1(feeds)
        (got,) = program(**inputs)
        err = float(np.max(np.abs(got - want)))
        print(f"\n## {MODELS[name]} ({exporter} export, {len(program.compiled.schedule.kernels)} kernels)\n")
        print(f"stitch compile {compile_s:.1f} s (empty C cache); onnxruntime session {session_s:.2f} s; "
              f"max |stitch - onnxruntime| {err:.1e} (logits up to {np.abs(want).max():.1f}); "
              f"load {os.getloadavg()[0]:.2f}\n")
        print("| threads | stitch ms | onnxruntime ms | stitch/ort |\n|---|---|---|---|")
        for threads in [int(t) for t in args.threads.split(",")]:
            stitch.set_num_threads(threads)
            ort = onnxruntime_session(data, threads)
            t = interleaved_medians({"stitch": lambda: program(out=out, **inputs), "ort": lambda: ort(feeds)},
                                    args.runs)
            print(f"| {threads} | {t['stitch'] * 1e3:.2f} | {t['ort'] * 1e3:.2f} | {t['stitch'] / t['ort']:.2f} |",
                  flush=True)
        stitch.set_num_threads(1)
        clock = " on the calling thread's CPU time" if args.cpu_time else ""
        print(f"\nper conv layer, one thread, median of {args.runs} profiled runs{clock}; of peak = GFLOP/s over "
              f"one core's {peak / 1e9:.1f}:\n")
        print("\n".join(per_layer_table(program, inputs, conv_layers(onnx.load_model_from_string(data)), peak,
                                        args.runs, args.cpu_time)), flush=True)


def main(argv=None) -> int:
    from peers import missing_packages

    args = parse_args(argv)
    missing = missing_packages()
    if missing:
        print(f"bench/vision.py needs {', '.join(missing)}: pip install torch==2.13.0 (the CPU build) and "
              "pip install '.[models]'; skipped.")
        return 0
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        print(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    import onnxruntime

    print(f"{os.cpu_count()} cores, onnxruntime {onnxruntime.__version__}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    peak, lanes, median = measure_peak(args.peak_runs, args.cpu_time)
    clock = ", on the calling thread's CPU time" if args.cpu_time else ""
    print(f"one core's f32 FMA peak: {peak / 1e9:.1f} GFLOP/s (best of {args.peak_runs}; median "
          f"{median / 1e9:.1f}{clock}), {CHAINS} chains of {lanes}-lane FMAs")
    for name in args.models.split(","):
        bench_model(name, args, peak)
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
