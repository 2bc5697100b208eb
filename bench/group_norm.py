"""Group norm against its memory bound, numpy, torch and onnxruntime, and the estimate against the run (issue 48).

Cases: the newcomer's `groupnorm.ir` ([8, 32, 16, 16], 4 groups of 8 channels, affine per channel,
written in the IR: reshape, mean and variance over the group, reshape back), and
`torch.nn.GroupNorm(32, 128)` + SiLU exported by torch's dynamo exporter (tools/export_group_norm.py)
at [4, 128, 32, 32] (the issue's size) and at [16, 128, 64, 64] (64 MB moved: more than the last-level
cache holds). Per case and thread count, a markdown row: the compulsory bytes and the memory bound
(each byte read once and written once at the cpu target's `global_bandwidth`), the median time of each
engine, engines interleaved round by round on the same inputs (stitch with its outputs reused and the
weights bound), stitch's time over the bound, the cost model's estimate at that thread count and the
measured time over it, stitch over each other engine.

    python3 bench/group_norm.py [--runs N] [--threads 1,2] [--only ir,export,dram]

Needs torch (the CPU build) and onnxruntime for the export cases; the IR case needs only numpy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
NEWCOMER_IR = """func groupnorm(x: f32[8, 32, 16, 16], gamma: f32[32, 1, 1], beta: f32[32, 1, 1]) \
-> f32[8, 32, 16, 16] {
  g = reshape(x, shape=[8, 4, -1])
  mu = mean(g, axes=[2], keepdims=true)
  d = sub(g, mu)
  var = mean(mul(d, d), axes=[2], keepdims=true)
  n = mul(d, rsqrt(add(var, 1e-5)))
  y = reshape(n, shape=[8, 32, 16, 16])
  return add(mul(y, gamma), beta)
}
"""
EXPORTS = {"export": (4, 128, 32, 32), "dram": (16, 128, 64, 64)}


def numpy_group_norm(x, weight, bias, groups: int, silu: bool):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    mu = g.mean(-1, keepdims=True)
    var = g.var(-1, keepdims=True)
    y = ((g - mu) / np.sqrt(var + 1e-5)).reshape(x.shape) * weight.reshape(c, 1, 1) + bias.reshape(c, 1, 1)
    return y / (1 + np.exp(-y)) if silu else y


def ir_case():
    """(name, stitch program, its inputs, {engine: call}, reference output)."""
    import stitch

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32, 16, 16)).astype(np.float32)
    gamma = (1 + 0.1 * rng.standard_normal((32, 1, 1))).astype(np.float32)
    beta = (0.1 * rng.standard_normal((32, 1, 1))).astype(np.float32)
    program = stitch.compile(NEWCOMER_IR, target="cpu")
    inputs = {"x": x, "gamma": gamma, "beta": beta}
    others = {"numpy": lambda: numpy_group_norm(x, gamma, beta, 4, False)}
    return "groupnorm.ir [8, 32, 16, 16], 4 groups", program, inputs, others, numpy_group_norm(x, gamma, beta, 4, False)


def export_case(shape: tuple[int, ...], threads: int):
    import stitch
    import torch
    from stitch.frontends.onnx_import import import_onnx

    sys.path.insert(0, str(HERE.parent / "tools"))
    from export_group_norm import group_norm_silu
    from export_models import export
    from peers import onnxruntime_session

    module, tensors = group_norm_silu(shape)
    model = export(module, tensors, "dynamo").SerializeToString()
    feeds = {k: v.numpy() for k, v in tensors.items()}
    imported = import_onnx(model, entry="group_norm_silu")
    program = stitch.compile(imported.text, target="cpu", weights=imported.weights)
    inputs = {imported.inputs[k]: v for k, v in feeds.items()}
    ort = onnxruntime_session(model, threads)
    weight, bias = (p.detach().numpy() for p in (module.norm.weight, module.norm.bias))
    x = feeds["x"]
    torch.set_num_threads(threads)

    def eager():
        with torch.no_grad():
            return module(tensors["x"])

    others = {"onnxruntime": lambda: ort(feeds), "torch eager": eager,
              "numpy": lambda: numpy_group_norm(x, weight, bias, 32, True)}
    with torch.no_grad():
        want = module(tensors["x"]).numpy()
    return f"GroupNorm(32, 128) + SiLU, dynamo export {list(shape)}", program, inputs, others, want


def row(name: str, threads: int, program, inputs: dict, others: dict, want, runs: int) -> tuple[str, str]:
    import stitch
    from peers import interleaved_medians
    from stitch.engine.ir.interp import np_dtype

    stitch.set_num_threads(threads)
    out = [np.empty(t.shape, np_dtype(t.dtype)) for t in program.graph.output_types]
    run = lambda: program(out=out, **inputs)  # noqa: E731
    (got,) = run()
    err = float(np.max(np.abs(got - want)))
    times = interleaved_medians({"stitch": run} | others, runs)
    compiled = program.compiled
    target = compiled.target
    compulsory = compiled.cost.compulsory_bytes
    bound = target.seconds(compulsory / target.global_bandwidth)
    estimate = sum(target.seconds(kc.price.cycles_on(kc.plan, target, threads)) for kc in compiled.cost.kernels)
    s = times["stitch"]
    engines = " | ".join(f"{t * 1e3:.3f}" for t in times.values())
    ratios = " | ".join(f"{s / t:.2f}" for n, t in times.items() if n != "stitch")
    head = ("| case | threads | kernels | global / compulsory bytes | memory bound ms | "
            + " | ".join(f"{n} ms" for n in times) + " | stitch / bound | estimate ms | measured / estimate | "
            + " | ".join(f"stitch / {n}" for n in times if n != "stitch") + " | max abs err |")
    line = (f"| {name} | {threads} | {len(compiled.schedule.kernels)} | "
            f"{compiled.cost.global_bytes:,} / {compulsory:,} | {bound * 1e3:.3f} | {engines} | {s / bound:.2f} | "
            f"{estimate * 1e3:.3f} | {s / estimate:.2f} | {ratios} | {err:.1e} |")
    return head, line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--only", default="ir,export,dram")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    cases = args.only.split(",")
    printed = set()
    for threads in [int(t) for t in args.threads.split(",")]:
        for case in cases:
            if case == "ir":
                made = ir_case()
            else:
                try:
                    made = export_case(EXPORTS[case], threads)
                except ImportError as err:
                    print(f"{case}: skipped ({err})")
                    continue
            head, line = row(made[0], threads, *made[1:], args.runs)
            if head not in printed:
                print("\n" + head)
                print("|" + "---|" * (head.count("|") - 1))
                printed.add(head)
            print(line, flush=True)


if __name__ == "__main__":
    main()
