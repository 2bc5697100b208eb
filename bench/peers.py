"""Peers for the run-time benchmark: the same stitch graph written in torch, compiled with torch.compile.

The torch function is built by walking the graph's nodes (engine/ir/graph.py) and
mapping each op to its torch counterpart, so every example is covered without
hand-written torch code. Outputs go into tensors allocated once
(`out.copy_(value)` inside the compiled function, which Inductor fuses into
the kernel that computes the value), so torch is timed with reused outputs
like stitch's `out=` column.
"""

from __future__ import annotations

import importlib.util
import statistics
import time

import numpy as np
from stitch.engine.ir.graph import Graph

_UNARY = {"neg": "neg", "abs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt",
          "tanh": "tanh", "sigmoid": "sigmoid", "relu": "relu", "erf": "erf"}
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow", "maximum": "maximum",
           "minimum": "minimum", "less": "lt", "greater": "gt", "equal": "eq", "matmul": "matmul"}
_REDUCE = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}


def importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


MODEL_PACKAGES = ("torch", "transformers", "onnxscript", "onnxruntime", "onnx")  # the `models` extra and torch


def missing_packages() -> list[str]:
    """The packages the model benches need that this Python cannot import."""
    return [m for m in MODEL_PACKAGES if not importable(m)]


SETTLE_SECONDS = 0.05


def interleaved_medians(engines: dict, runs: int, pause: float = SETTLE_SECONDS, block: int = 1) -> dict[str, float]:
    """Median seconds of each engine's call, `block` timed calls of each per round (so load drifts
    hit all alike). Each engine's turn starts after `pause` seconds and an untimed call: a thread
    pool keeps spinning for a while after its call (onnxruntime's does), and on a 2-core machine
    that took the cores from whatever ran next (GPT-2 block, 2 threads: stitch 22 ms alone, 36 ms
    right after onnxruntime; eager torch 26 and 47 ms). Timed back to back with its own previous
    call, each engine is measured in its steady state, as a loop serving requests runs it. (A
    pause lets every pool fall asleep: the next call pays the wake-up, 4 ms for Inductor's OpenMP
    on a 0.1 ms layer norm; run_speed.py times blocks without a pause instead.)"""
    return medians(interleaved_times(engines, runs, pause, block))


def medians(rounds: dict[str, list[list[float]]]) -> dict[str, float]:
    """Each engine's median call over all its rounds (`interleaved_times`' figures)."""
    return {name: statistics.median(t for r in ts for t in r) for name, ts in rounds.items()}


def round_order(engines: dict, r: int) -> list:
    """The engines' (name, function) pairs in round r's order: each round starts one engine later: on
    the 2-core VM a fixed place in the round biased the figures (docs/perf/2026-11-29-torch-compile.md)."""
    order = list(engines.items())
    return order[r % len(order):] + order[:r % len(order)]


def interleaved_times(engines: dict, runs: int, pause: float = SETTLE_SECONDS,
                      block: int = 1) -> dict[str, list[list[float]]]:
    """interleaved_medians' timings, round by round: for each engine, one list of its `block` timed
    calls per round, so figures of different engines in the same round (the same seconds of the
    machine) can be set against each other, each round in `round_order`."""
    for fn in engines.values():  # warm
        fn()
    times: dict[str, list[list[float]]] = {name: [] for name in engines}
    for r in range(runs):
        for name, fn in round_order(engines, r):
            if pause:
                time.sleep(pause)
            fn()
            round_times = []
            for _ in range(block):
                t = time.perf_counter()
                fn()
                round_times.append(time.perf_counter() - t)
            times[name].append(round_times)
    return times


def _torch_dtypes() -> dict:
    import torch

    return {"f16": torch.float16, "f32": torch.float32, "f64": torch.float64, "i32": torch.int32,
            "i64": torch.int64, "bool": torch.bool}


def torch_function(graph: Graph):
    """A torch function f(*params, *outs) computing the graph and copying its results into outs."""
    import torch

    dtypes = _torch_dtypes()
    consts = {n.id: torch.tensor(np.asarray(n.attr("value")), dtype=dtypes[n.type.dtype])
              for n in graph.nodes if n.op == "const"}

    def node_value(n, args):
        if n.op in _UNARY:
            return getattr(torch, _UNARY[n.op])(args[0])
        if n.op in _BINARY:
            return getattr(torch, _BINARY[n.op])(args[0], args[1])
        if n.op in _REDUCE:
            axes = list(n.attr("axes"))
            kwargs = {"dtype": dtypes[n.type.dtype]} if n.op in ("sum", "mean") else {}
            return getattr(torch, _REDUCE[n.op])(args[0], dim=axes, keepdim=n.attr("keepdims"), **kwargs)
        if n.op == "where":
            return torch.where(*args)
        if n.op == "transpose":
            return args[0].permute(list(n.attr("perm")))
        if n.op == "reshape":
            return args[0].reshape(list(n.attr("shape")))
        if n.op == "broadcast_to":
            return args[0].expand(list(n.attr("shape")))
        if n.op == "cast":
            return args[0].to(dtypes[n.type.dtype])
        if n.op == "slice":
            index = [slice(None)] * args[0].dim()
            for a, start, end, step in zip(*(n.attr(k) for k in ("axes", "starts", "ends", "steps"))):
                index[a] = slice(start, end, step)
            return args[0][tuple(index)]
        if n.op == "concat":
            return torch.cat(args, dim=n.attr("axis"))
        if n.op == "gather":  # np.take: negative indices count from the end
            x, idx = args
            axis = n.attr("axis")
            idx = torch.where(idx < 0, idx + x.shape[axis], idx).long()
            return torch.index_select(x, axis, idx.reshape(-1)).reshape(
                x.shape[:axis] + idx.shape + x.shape[axis + 1:])
        if n.op == "iota":
            shape, axis = n.attr("shape"), n.attr("axis")
            line = torch.arange(shape[axis], dtype=dtypes[n.type.dtype])
            return line.reshape([-1 if a == axis else 1 for a in range(len(shape))]).expand(list(shape))
        raise NotImplementedError(f"no torch for op {n.op}")

    def run(*tensors):
        params, outs = tensors[:len(graph.params)], tensors[len(graph.params):]
        env = dict(zip(graph.params, params))
        for n in graph.nodes:
            if n.op == "const":
                env[n.id] = consts[n.id]
            elif n.op != "param":
                env[n.id] = node_value(n, [env[i] for i in n.inputs])
        for out, o in zip(outs, graph.outputs):
            out.copy_(env[o])

    return run


def torch_compiled(graph: Graph, inputs: dict[str, np.ndarray], threads: int):
    """A no-argument callable running the torch.compile'd graph on `inputs` into preallocated outputs."""
    import torch

    torch.set_num_threads(threads)
    torch._dynamo.reset()  # each graph runs through the same `run` code: start its guards afresh
    params = [torch.from_numpy(inputs[name]) for name in graph.param_names]
    outs = [torch.empty(t.shape, dtype=_torch_dtypes()[t.dtype]) for t in graph.output_types]
    fn = torch.compile(torch_function(graph), dynamic=False)
    with torch.no_grad():
        fn(*params, *outs)

    def call():
        with torch.no_grad():
            fn(*params, *outs)

    return call


def onnxruntime_session(model: bytes, threads: int):
    """An onnxruntime CPU session with `threads` intra-op threads (what a user runs an ONNX model with).

    Returns run(feeds) -> outputs. Graph optimizations at their default (all), one inter-op thread.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)
