"""`torch.compile(model, backend="stitch")`: stitch as a backend of torch's dynamo (inference only).

Installing stitch registers this module's `stitch_backend` under the `torch_dynamo_backends` entry
point (pyproject.toml), so torch finds the name without `import stitch`. For each graph dynamo
captures:

1. A graph that needs gradients (grad mode on and an input, a parameter, that requires them) runs in
   torch eager, with a warning: stitch compiles inference only (call the model under
   `torch.no_grad()` or `torch.inference_mode()`).
2. AOTAutograd lowers it to functional ATen ops with the core ATen decompositions (and
   `encoder_layer` for nn.TransformerEncoderLayer's fused inference op), its parameters and buffers
   still inputs: those that the graph does not mutate are the program's weights, bound at compile time
   (what depends on them alone is computed once).
3. frontends/torch_fx.py translates every node it can; when some do not translate, the graph is
   split around them (torch's CapabilityBasedPartitioner), those nodes run in torch and a warning
   names their ops once.
4. Each translated graph (or part) is compiled by `stitch.compile`: a size dynamo made dynamic is a
   symbol of the program, so one compile serves every size of its range.

A call passes the tensors as numpy views (no copy for contiguous CPU tensors) and returns the
outputs as tensors over stitch's arrays (no copy). A weight changed in place since the compile (its
version counter moved) or another tensor in its place compiles again; a call stitch refuses (a size
past the range: `options={"max_size": N}`) runs the graph in torch.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .ir.errors import StitchError

# What the backend did in this process: graphs dynamo handed over, stitch programs compiled, graphs
# left to torch eager (the tests count compiles with it).
stats: Counter = Counter()
OPTIONS = {"max_size": "the largest size of a dynamic dimension (default 4096)",
           "cache_dir": "the directory of compiled C libraries (stitch.compile's cache_dir)",
           "winograd": "False: every conv as its direct product (default True: a 3x3 conv of a value the model "
                       "makes channels first, 16 channels or more, is Winograd's F(2x2, 3x3))"}
_warned: set[str] = set()


def stitch_backend(gm: torch.fx.GraphModule, example_inputs: list, options: dict | None = None, mode=None):
    """The dynamo backend: a callable that runs `gm` (the graph dynamo captured) through stitch."""
    from torch._dynamo.backends.common import aot_autograd

    options = Options.of(options)
    stats["graphs"] += 1
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        warn_once("grad", "stitch compiles inference only: a graph that needs gradients runs in torch eager "
                          "(call the model under torch.no_grad() or torch.inference_mode())")
        stats["eager"] += 1
        return gm.forward
    static = [isinstance(x, torch.nn.Parameter) or hasattr(x, "_dynamo_static_input_type") for x in example_inputs]

    def compile_aten(aten_gm: torch.fx.GraphModule, fake_inputs: list):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # (it runs in AOTAutograd's fake mode: the weights are real tensors)
            return compile_graph(aten_gm, weight_inputs(aten_gm, example_inputs, static), options)

    return aot_autograd(fw_compiler=compile_aten, decompositions=decompositions())(gm, example_inputs)


@dataclass(frozen=True)
class Options:
    """torch.compile(..., options={...}) for this backend."""

    max_size: int
    cache_dir: str | None = None
    winograd: bool = True

    @staticmethod
    def of(options: dict | None) -> "Options":
        from ..frontends.torch_fx import MAX_SIZE

        options = dict(options or {})
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise StitchError(f"torch.compile(backend='stitch'): no option {', '.join(map(repr, unknown))}",
                              hint="the options: " + "; ".join(f"{k}: {v}" for k, v in OPTIONS.items()))
        size = options.get("max_size", MAX_SIZE)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise StitchError(f"torch.compile(backend='stitch'): max_size must be a positive integer, got {size!r}")
        cache_dir = options.get("cache_dir")
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise StitchError(f"torch.compile(backend='stitch'): cache_dir must be a directory path, got {cache_dir!r}")
        winograd = options.get("winograd", True)
        if not isinstance(winograd, bool):
            raise StitchError(f"torch.compile(backend='stitch'): winograd must be True or False, got {winograd!r}")
        return Options(size, None if cache_dir is None else str(cache_dir), winograd)


def weight_inputs(aten_gm, example_inputs: list, static: list[bool]) -> dict[str, torch.Tensor]:
    """{placeholder name: tensor} of the ATen graph's inputs that are parameters or buffers the graph does
    not mutate. AOTAutograd keeps dynamo's inputs in order; where it did not (their count or shapes
    differ), no input is a weight."""
    placeholders = [n for n in aten_gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return {}
    mutated = set()
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if meta is not None:
        mutated = {k for k, info in enumerate(meta.input_info) if info.mutates_data or info.mutates_metadata}
    weights = {}
    for k, (node, real, is_static) in enumerate(zip(placeholders, example_inputs, static)):
        val = node.meta.get("val")
        if not is_static or k in mutated or not isinstance(real, torch.Tensor) or not isinstance(val, torch.Tensor):
            continue
        if tuple(val.shape) != tuple(real.shape) or val.dtype != real.dtype:
            return {}
        weights[node.name] = real
    return weights


def compile_graph(aten_gm: torch.fx.GraphModule, weights: dict[str, torch.Tensor], options: Options):
    """The ATen graph as one stitch program, or split around the nodes stitch does not translate."""
    from torch.fx.node import _get_qualified_name
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    from ..frontends.torch_aten import LAYOUT
    from ..frontends.torch_fx import op_name, supported_nodes

    good, bad = supported_nodes(aten_gm.graph, weights, options.max_size)
    if not bad:
        return StitchGraph(aten_gm, weights, options, "graph")
    ops = sorted({op_name(n) for n in bad})
    warn_once("ops:" + ",".join(ops), f"stitch runs {', '.join(ops)} in torch (" + "; ".join(
        sorted({f"{op_name(n)}: {why}" for n, why in bad.items()})[:4]) + ")")

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return node in good

    partitioner = CapabilityBasedPartitioner(aten_gm, Support(), allows_single_node_partition=True,
                                             non_compute_ops=[_get_qualified_name(op) for op in LAYOUT])
    split = partitioner.fuse_partitions(partitioner.propose_partitions())
    for node in split.graph.nodes:
        if node.op == "call_module" and node.target.startswith("fused_"):
            sub = getattr(split, node.target)
            if any(n.op == "call_function" and n.target not in LAYOUT for n in sub.graph.nodes):
                setattr(split, node.target, StitchGraph(sub, weights, options, node.target))
    split.recompile()
    return split


class StitchGraph(torch.nn.Module):
    """A graph of ATen ops run as one stitch program (compiled at construction), or by torch where stitch
    refuses it (a warning says why)."""

    def __init__(self, graph_module: torch.fx.GraphModule, weights: dict[str, torch.Tensor], options: Options,
                 name: str):
        super().__init__()
        self.torch_graph = graph_module
        self.graph_weights = weights
        self.options = options
        self.label = name
        out = next(n for n in graph_module.graph.nodes if n.op == "output")
        self.one_output = not isinstance(out.args[0], (list, tuple))
        self.program, self.inputs, self.bound = None, [], []
        self.build()

    def build(self) -> None:
        """Translate and compile; on a refusal, keep running the graph in torch."""
        from ..frontends.onnx_builder import Unsupported
        from ..frontends.torch_fx import translate
        from .api import compile as stitch_compile

        placeholders = [n.name for n in self.torch_graph.graph.nodes if n.op == "placeholder"]
        self.bound = [(k, self.graph_weights[name]) for k, name in enumerate(placeholders)
                      if name in self.graph_weights]
        self.versions = [_version(w) for _, w in self.bound]
        try:
            translation = translate(self.torch_graph.graph, self.label, self.graph_weights, self.options.max_size,
                                    self.options.winograd)
            weights = dict(translation.imported.weights)
            self.program = stitch_compile(translation.imported.text, weights=weights, cache_dir=self.options.cache_dir)
            self.inputs = translation.inputs
            stats["programs"] += 1
        except (Unsupported, StitchError) as err:
            self.refused(getattr(err, "reason", None) or str(err).splitlines()[0])
        except Exception as err:  # a bug in stitch: the model still runs, and the warning says what to report
            self.refused(f"a bug in stitch, please report it: {type(err).__name__}: {str(err).splitlines()[0]}")

    def refused(self, reason: str) -> None:
        warn_once("refused:" + reason, f"stitch cannot compile a graph ({reason}): it runs in torch")
        self.program = None
        stats["eager"] += 1

    def forward(self, *args):
        if self.program is None:
            return self.torch_graph(*args)
        if any(_version(args[k]) != v for (k, _), v in zip(self.bound, self.versions)):
            self.graph_weights = {**self.graph_weights, **{
                n.name: args[k] for k, n in enumerate(self.torch_graph.graph.nodes)
                if n.op == "placeholder" and n.name in self.graph_weights}}
            self.build()  # a weight changed since the compile: bind the new values
            return self.forward(*args)
        feeds = {}
        for k, name in self.inputs:
            x = args[k]
            feeds[name] = (x.detach() if x.requires_grad else x).numpy()
        try:
            outs = self.program(**feeds)
        except StitchError as err:  # a size outside the program's range, ...
            warn_once("call:" + self.label, f"stitch refused a call ({str(err).splitlines()[0]}): it runs in torch")
            return self.torch_graph(*args)
        tensors = [torch.from_numpy(o) for o in outs]
        return tensors[0] if self.one_output else tuple(tensors)


def _version(t: torch.Tensor) -> tuple[int, int]:
    """What changes when a weight is changed in place or replaced: its version counter and address."""
    return t._version, t.data_ptr()


def warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=2)


def decompositions() -> dict:
    from torch._decomp import core_aten_decompositions

    table = dict(core_aten_decompositions())
    table[torch.ops.aten._transformer_encoder_layer_fwd.default] = encoder_layer
    return table


def encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first,
                  eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
                  ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    """nn.TransformerEncoderLayer's fused inference op (batch first) in plain ops, as its Python path
    computes it; with a mask, the op is kept (and runs in torch)."""
    if mask is not None or src.dim() != 3:
        return NotImplemented
    b, t, d = src.shape
    head = d // num_heads

    def attention(x):
        q, k, v = F.linear(x, qkv_weight, qkv_bias).view(b, t, 3, num_heads, head).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        return F.linear(a.transpose(1, 2).reshape(b, t, d), proj_weight, proj_bias)

    def feed_forward(x):
        h = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(h) if use_gelu else F.relu(h), ffn_weight_2, ffn_bias_2)

    def norm(x, w, bias):
        return F.layer_norm(x, (embed_dim,), w, bias, eps)

    if norm_first:
        x = src + attention(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attention(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)
