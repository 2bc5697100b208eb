"""Symbolic dimensions (issue 44): one compile of a dynamic export against a static compile per size,
and onnxruntime.

Two models at the real size (hidden 768, 12 heads, MLP 3072, 2 layers, vocabulary 1024, seeded
random weights), exported by torch's dynamo exporter with a dynamic axis (tools/export_models.py):

- `seq`: GPT2Model whose sequence length is dynamic, 1..1024;
- `past`: one decoder step of GPT2Model (one new token) whose key/value cache of `past` positions is
  an input, 1..2047.

Each is imported as exported and compiled once (its compile seconds printed), then run at each size
beside a static compile of that size (`import --dim`, compiled apart: its compile seconds too) and
onnxruntime, at 1 and 2 threads: median milliseconds, engines interleaved round by round (peers.py),
and the first call's milliseconds at each new size (no compile happens there). Prints markdown tables.

Needs torch (`pip install torch==2.13.0`, the CPU build) and `pip install '.[models]'`. Run:
python3 bench/symbolic.py [--runs N] [--threads 1,2] [--only seq,past] [--sizes 1,7,64,...] [--no-static]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = {"seq": (1, 7, 64, 128, 333, 1024), "past": (1, 127, 511, 2047)}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--only", default="seq,past", help="seq, past or both")
    ap.add_argument("--sizes", help="comma-separated sizes (default: the issue's)")
    ap.add_argument("--no-static", action="store_true", help="skip the static compile per size")
    return ap.parse_args()


def models(which: str):
    """(module, inputs_at(n, rng), input axes, output axes, the symbol's top) of one model at the real size."""
    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2Model

    sys.path.insert(0, str(HERE.parent / "tools"))
    import export_models as em

    s = em.SIZES["bench"]
    config = GPT2Config(vocab_size=s.vocab, n_positions=2048, n_embd=s.hidden, n_layer=2, n_head=s.heads,
                        n_inner=s.intermediate, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, use_cache=which == "past")
    torch.manual_seed(em.seed_of(f"symbolic_{which}"))
    model = GPT2Model(config).eval()
    em.randomize(model, em.seed_of(f"symbolic_{which}"))
    if which == "seq":
        def ids(n, rng):
            return {"input_ids": torch.from_numpy(rng.integers(0, s.vocab, (1, n)).astype(np.int64))}

        return model, ids, {"input_ids": {1: "seq"}}, {"output": {1: "seq"}}, 1024
    return (*em.decoder_step(model, s, 1), 2047)


def main() -> int:
    args = parse_args()
    sys.path.insert(0, str(HERE))
    from peers import interleaved_medians, missing_packages, onnxruntime_session

    missing = missing_packages()
    if missing:
        print(f"bench/symbolic.py needs {', '.join(missing)}: pip install torch==2.13.0 '.[models]'")
        return 1
    import numpy as np
    import stitch
    import torch

    sys.path.insert(0, str(HERE.parent / "tools"))
    import export_models as em
    from stitch.engine.ir.parse import ir_parser
    from stitch.frontends.onnx_import import import_onnx

    ir_parser()
    threads = [int(t) for t in args.threads.split(",")]
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; median of {args.runs} interleaved runs\n")
    for which in args.only.split(","):
        module, inputs_at, axes, outputs, high = models(which)
        (symbol,) = {sym for a in axes.values() for sym in a.values()}
        rng = np.random.default_rng(0)
        model = em.export_dynamic(module, inputs_at(5, rng), axes, outputs, "dynamo", {symbol: high}).SerializeToString()
        start = time.perf_counter()
        imported = import_onnx(model)
        program = stitch.compile(imported.text, weights=imported.weights)
        dynamic_s = time.perf_counter() - start
        print(f"## {which}: GPT2Model, 2 layers, hidden 768, {symbol} in 1..{high}")
        print(f"one compile of the dynamic export: {dynamic_s:.2f} s (import and compile, empty or warm C cache)\n")
        print(f"| {symbol} | static compile s | first call ms | threads | stitch ms | static ms | onnxruntime ms "
              "| stitch / static | stitch / onnxruntime | max error |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else SIZES[which]
        for n in sizes:
            inputs = inputs_at(n, rng)
            feeds = {k: v.numpy() for k, v in inputs.items()}
            call = {imported.inputs[k]: v for k, v in feeds.items()}
            start = time.perf_counter()
            got = program(**call)
            first_ms = (time.perf_counter() - start) * 1e3
            static, static_s = None, "-"
            if not args.no_static:
                start = time.perf_counter()
                fixed = import_onnx(model, dims={symbol: n})
                static = stitch.compile(fixed.text, weights=fixed.weights)
                static_s = f"{time.perf_counter() - start:.2f}"
            for t in threads:
                torch.set_num_threads(t)
                stitch.set_num_threads(t)
                ort = onnxruntime_session(model, t)
                want = ort(feeds)
                err = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
                engines = {"onnxruntime": lambda: ort(feeds), "stitch": lambda: program(**call)}
                if static is not None:
                    engines["static"] = lambda: static(**call)
                ms = {k: v * 1e3 for k, v in interleaved_medians(engines, args.runs).items()}
                mine, st, peer = ms["stitch"], ms.get("static"), ms["onnxruntime"]
                static_ms, ratio = ("-", "-") if st is None else (f"{st:.2f}", f"{mine / st:.2f}")
                print(f"| {n} | {static_s} | {first_ms:.1f} | {t} | {mine:.2f} | {static_ms} | {peer:.2f} | {ratio} | "
                      f"{mine / peer:.2f} | {err:.1e} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
