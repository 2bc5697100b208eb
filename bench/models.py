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
python3 bench/models.py [--runs N] [--threads 1,2] [--exporters dynamo,torchscript] [--only NAME,...] [--no-compile]
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
    return ap.parse_args()


def missing_packages() -> list[str]:
    sys.path.insert(0, str(HERE))
    from peers import importable

    return [m for m in ("torch", "transformers", "onnxscript", "onnxruntime", "onnx") if not importable(m)]


SETTLE_SECONDS = 0.05


def interleaved_medians(engines: dict, runs: int) -> dict[str, float]:
    """Median seconds of each engine's call, one timed call of each per round (so load drifts hit
    all alike). Each engine's turn starts after a pause and an untimed call: a thread pool keeps
    spinning for a while after its call (onnxruntime's does), and on a 2-core machine that took
    the cores from whatever ran next (GPT-2 block, 2 threads: stitch 22 ms alone, 36 ms right
    after onnxruntime; eager torch 26 and 47 ms). Timed back to back with its own previous call,
    each engine is measured in its steady state, as a loop serving requests runs it."""
    for fn in engines.values():  # warm
        fn()
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(runs):
        for name, fn in engines.items():
            time.sleep(SETTLE_SECONDS)
            fn()
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def stitch_runner(imported, feeds):
    """(a no-argument call of the compiled program with reused outputs, the CompiledProgram, compile seconds),
    or (None, None, reason) when the program cannot compile here."""
    import numpy as np

    import stitch
    from stitch.engine.check import check_program
    from stitch.engine.interp import np_dtype
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


def bench_model(name: str, exporter: str, args, rows: list[str]) -> None:
    import numpy as np
    import torch

    import stitch
    from stitch.frontends.onnx_import import import_onnx

    sys.path.insert(0, str(HERE.parent / "tools"))
    import export_models as em
    from peers import onnxruntime_session

    module, inputs = em.build(name, em.SIZES["bench"])
    model = em.export(module, inputs, exporter).SerializeToString()
    feeds = {k: v.numpy() for k, v in inputs.items()}
    from stitch.engine.parse import ir_parser

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


def main() -> int:
    args = parse_args()
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
