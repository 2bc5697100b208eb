"""Real transformer blocks at realistic sizes: stitch vs onnxruntime vs torch eager vs torch.compile.

The models of tools/export_models.py (nn.TransformerEncoderLayer, GPT2Block,
GPT2Model with and without attention_mask, BertLayer, BertModel, LlamaDecoderLayer
with rotary embedding given and computed inside, LlamaModel) at hidden 768, 12
heads (Llama: 4 key/value heads), MLP 3072, sequence 128, batch 1, one layer,
vocabulary 1024 (the embedding table's size does not change the run time of a
lookup), exported at bench time with the chosen exporters, from the same seeded
random parameters. Prints a markdown table: kernels, global/compulsory bytes,
import and compile seconds, and the median run time of each engine at each thread
count, every engine warm, on the same inputs, engines interleaved round by
round; then the ratios. stitch runs with outputs reused (out=).

Needs torch (`pip install torch==2.13.0`, the CPU build) and `pip install
'.[models]'`; without them it says so and exits. Run:
python3 bench/models.py [--runs N] [--threads 1,2] [--exporters dynamo,torchscript] [--only NAME,...] [--no-compile] [--profile]

--profile also prints, per model and thread count, each stitch kernel's median time (its
`CompiledProgram.profile` row: GB/s, GFLOP/s, the cost model's estimate) and onnxruntime's
own per-node profile (median kernel time of each node, nodes under 0.02 ms left out), so a
gap between the two engines can be put on a kernel.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--exporters", default="dynamo")
    ap.add_argument("--only", help="comma-separated model names (default: all)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile column (slow to compile)")
    ap.add_argument("--profile", action="store_true", help="also print per-kernel times of stitch and onnxruntime")
    return ap.parse_args()


def stitch_runner(imported, feeds):
    """(a no-argument call of the compiled program with reused outputs, the CompiledProgram, compile seconds),
    or (None, None, reason) when the program cannot compile here."""
    import numpy as np
    import stitch
    from stitch.engine.ir.check import check_program
    from stitch.engine.ir.interp import np_dtype
    from stitch.frontends.onnx_conformance import not_lowered

    graph = next(iter(check_program(imported.program).values()))
    for target in ("cpu",):
        reason = not_lowered(graph, target)
        if reason:
            return None, None, reason
    start = time.perf_counter()
    # the initializers bound as weights, as onnxruntime holds them (and prepacks its products' operands)
    program = stitch.compile(imported.text, target="cpu", weights=imported.weights)
    seconds = time.perf_counter() - start
    inputs = {imported.inputs[k]: v for k, v in feeds.items()}
    out = [np.empty(t.shape, np_dtype(t.dtype)) for t in program.graph.output_types]
    return (lambda: program(out=out, **inputs)), program, seconds


def onnxruntime_profile(model: bytes, feeds: dict, threads: int, runs: int) -> list[tuple[str, float]]:
    """(node name, median kernel seconds) from onnxruntime's own profiler, in the order the nodes ran."""
    import json
    import os
    import tempfile

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="stitch-ort-"), "profile")
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    session.run(None, feeds)  # warm (its events are in the file too: the medians hide them)
    for _ in range(runs):
        session.run(None, feeds)
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    os.rmdir(os.path.dirname(path))
    per: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per.setdefault(e["name"][: -len("_kernel_time")], []).append(e["dur"] * 1e-6)
    return [(node, statistics.median(ds)) for node, ds in per.items()]


def print_profile(name: str, threads: int, program, inputs: dict, model: bytes, feeds: dict, runs: int) -> None:
    """Per kernel: stitch's profile rows, then onnxruntime's nodes, each with its total."""
    print(f"\n{name}, {threads} thread(s), median of {runs}:")
    print("  stitch kernel  writes                          ms    GB/s  GFLOP/s  estimated ms")
    rows = program.profile(runs=runs, **inputs)
    for k in rows:
        writes = ",".join(k.writes) if isinstance(k.writes, (list, tuple)) else str(k.writes)
        gflops = f"{k.gflop_per_s:7.1f}" if k.gflop_per_s else "      -"
        print(f"  {k.name:13s}  {writes[:28]:28s} {k.seconds * 1e3:7.3f} {k.gb_per_s:7.1f}  {gflops}  "
              f"{k.estimated_seconds * 1e3:12.3f}")
    print(f"  {'total':13s}  {'':28s} {sum(k.seconds for k in rows) * 1e3:7.3f}")
    nodes = onnxruntime_profile(model, feeds, threads, runs)
    print("  onnxruntime node                                            ms")
    for node, seconds in nodes:
        if seconds >= 2e-5:
            print(f"  {node[:56]:56s} {seconds * 1e3:7.3f}")
    print(f"  {'total':56s} {sum(sec for _, sec in nodes) * 1e3:7.3f}\n", flush=True)


def bench_model(name: str, exporter: str, args, rows: list[str]) -> None:
    import numpy as np
    import stitch
    import torch
    from stitch.frontends.onnx_import import import_onnx

    sys.path.insert(0, str(HERE.parent / "tools"))
    import export_models as em
    from peers import interleaved_medians, onnxruntime_session

    module, inputs = em.build(name, em.SIZES["bench"])
    model = em.export(module, inputs, exporter).SerializeToString()
    feeds = {k: v.numpy() for k, v in inputs.items()}
    from stitch.engine.ir.parse import ir_parser

    ir_parser()  # built once per process (about 1 s): not part of any model's import
    start = time.perf_counter()
    imported = import_onnx(model, entry=name)
    import_s = time.perf_counter() - start
    args_t = tuple(inputs.values())
    compiled_torch = None
    if not args.no_compile:
        torch._dynamo.reset()
        compiled_torch = torch.compile(module, dynamic=False)
    run_stitch, program, compile_s = stitch_runner(imported, feeds)
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        if program is not None:
            stitch.set_num_threads(threads)
        ort = onnxruntime_session(model, threads)
        engines = {"onnxruntime": lambda: ort(feeds)}
        with torch.no_grad():
            want = module(*args_t).numpy()
        engines["eager"] = lambda: module(*args_t)
        if compiled_torch is not None:
            engines["torch.compile"] = lambda: compiled_torch(*args_t)
        if run_stitch is not None:
            engines["stitch"] = run_stitch
            (got,) = run_stitch()
            err = float(np.max(np.abs(got - want)))
        with torch.no_grad():
            t = interleaved_medians(engines, args.runs)
        kernels = len(program.compiled.schedule.kernels) if program else "-"
        ratio = (f"{program.compiled.cost.global_bytes / program.compiled.cost.compulsory_bytes:.2f}"
                 if program else "-")
        ms = {k: f"{v * 1e3:.2f}" for k, v in t.items()}
        s = t.get("stitch")
        rel = {k: (f"{s / t[k]:.2f}" if s and k in t else "-") for k in ("onnxruntime", "eager", "torch.compile")}
        rows.append(f"| {name} | {exporter} | {kernels} | {ratio} | {import_s:.2f} | "
                    f"{'not lowered' if isinstance(compile_s, str) else f'{compile_s:.2f}'} | {threads} | "
                    f"{ms.get('stitch', '-')} | {ms['onnxruntime']} | {ms['eager']} | {ms.get('torch.compile', '-')} | "
                    f"{rel['onnxruntime']} | {rel['eager']} | {rel['torch.compile']} |"
                    + (f" max abs err {err:.1e}" if run_stitch else ""))
        print(rows[-1], flush=True)
        if args.profile and program is not None:
            print_profile(name, threads, program, {imported.inputs[k]: v for k, v in feeds.items()}, model, feeds,
                          args.runs)


def main() -> int:
    args = parse_args()
    sys.path.insert(0, str(HERE))
    from peers import missing_packages

    missing = missing_packages()
    if missing:
        print(f"bench/models.py needs {', '.join(missing)}: pip install torch==2.13.0 (the CPU build) and "
              "pip install '.[models]'; skipped.")
        return 0
    import onnxruntime
    import torch
    import transformers

    sys.path.insert(0, str(HERE.parent / "tools"))
    import export_models as em

    names = args.only.split(",") if args.only else list(em.MODELS)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, onnxruntime "
          f"{onnxruntime.__version__}; hidden 768, 12 heads, sequence 128, batch 1; median of {args.runs}, engines "
          "interleaved (each timed call after a pause and an untimed call of its own), each warm; stitch with outputs reused; "
          "ratios are stitch's time over each peer's\n")
    print("| model | exporter | kernels | global/compulsory | import s | compile s | threads | stitch ms | "
          "onnxruntime ms | eager ms | torch.compile ms | stitch/ort | stitch/eager | stitch/compile |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows: list[str] = []
    for name in names:
        for exporter in args.exporters.split(","):
            bench_model(name, exporter, args, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
