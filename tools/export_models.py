"""Export the transformer models stitch is tested on, with both torch.onnx exporters, from seeded random configs.

    python3 tools/export_models.py                    # the fixtures: tests/fixtures/models/NAME-EXPORTER.{onnx,npz}
    python3 tools/export_models.py --size bench -o DIR  # the benchmark sizes (hidden 768, 12 heads, sequence 128)
    python3 tools/export_models.py --quantized        # tests/fixtures/models/quantized/NAME.{onnx,npz}
    python3 tools/export_models.py --size bench --only mobilenet_v2,resnet18 -o DIR  # a model of BY_NAME

Needs `pip install torch==2.13.0` (the CPU build; a bare `pip install torch`
pulls several GB of CUDA) and `pip install '.[models]'` (transformers,
onnxscript, onnxruntime). No pretrained weights: every model is built from a
config and its parameters drawn from a seeded generator (scaled so that
attention is far from uniform, unlike HuggingFace's 0.02 init). The exporters:

- `torchscript`: `torch.onnx.export(..., dynamo=False, opset_version=17)`
- `dynamo`: `torch.onnx.export(..., dynamo=True, opset_version=20)`

Each NAME-EXPORTER.npz holds the inputs (keyed by graph input name) and
onnxruntime's outputs (`output:NAME`), computed with one thread. Files are
written byte for byte the same on every run: node metadata (stack traces with
this machine's paths) is dropped, and the npz is a zip with fixed timestamps.

`BY_NAME` holds models exported only when named in `--only`, never among the default fixtures: the
12-layer GPT2Model and BertModel (`gpt2_model_12layers`, `bert_model_12layers`) and the vision models of
tools/vision_models.py (`mobilenet_v2`, `resnet18`: torchvision's layouts written out in torch, 224x224
images at the bench size, their parameters and BatchNorm statistics drawn by `randomize_vision`).
`VISION_FIXTURES` are default fixtures written to tests/fixtures/models/vision/: `resnet18_narrow`, ResNet-18's
layers at width 4 (4 to 32 channels, 10 classes) on 32x32 images.

The dynamic-axis fixtures (`DYNAMIC`, in tests/fixtures/models/dynamic/) are exported once with a
dynamic axis (`dynamic_shapes` for dynamo, `dynamic_axes` for torchscript): GPT-2 with a dynamic
sequence, GPT-2 with a dynamic batch and sequence (two symbols), and a decoder step (one new token)
whose key/value cache of `past` positions is an input. Their npz holds the inputs and onnxruntime's
outputs at several sizes, keyed `SYMBOL=N/NAME` and `SYMBOL=N/output:NAME` (`seq=7/input_ids`;
`batch=2,seq=7/input_ids` with two symbols).

The quantized fixtures (`QUANTIZED`, in tests/fixtures/models/quantized/, written by `--quantized` or named
in `--only`) are single-operator models built with onnx.helper (DequantizeLinear, QuantizeLinear,
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, com.microsoft MatMulNBits and GatherBlockQuantized)
and three whole models quantized by onnxruntime's own quantizers: the 2-layer GPT-2 decoder step by
MatMulNBitsQuantizer, GPT2Model by quantize_dynamic with int8 and with uint8 weights. Their npz also holds,
keyed `value:NAME`, every input and output of a quantized operator that is neither a graph input nor a graph
output, from a second session that returns them (onnxruntime fuses some of these operators when nothing
else reads their outputs). The semantics they were checked against: docs/reference/quantized-onnx.md.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import logging
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from vision_models import VISION, VISION_FIXTURES, randomize_vision

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "models"
EXPORTERS = {"torchscript": 17, "dynamo": 20}


@dataclass(frozen=True)
class Size:
    hidden: int
    heads: int
    kv_heads: int  # Llama's grouped key/value heads
    intermediate: int
    seq: int
    batch: int
    vocab: int


SIZES = {"fixture": Size(hidden=64, heads=4, kv_heads=2, intermediate=128, seq=16, batch=2, vocab=128),
         "bench": Size(hidden=768, heads=12, kv_heads=4, intermediate=3072, seq=128, batch=1, vocab=1024)}


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode())


def randomize(module, seed: int) -> None:
    """Parameters from one seeded generator: matrices ~ N(0, 1/fan_in), norms' scales ~ 1 + N(0, 0.1^2),
    biases ~ N(0, 0.1^2), embeddings ~ N(0, 1). Far from HuggingFace's 0.02 init, so that attention
    and the activations are not nearly linear (the comparison would prove little)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if "emb" in name or "wte" in name or "wpe" in name:
                p.copy_(noise)
            elif p.dim() >= 2:
                fan_in = p.shape[0] if "c_attn" in name or "c_proj" in name or "c_fc" in name else p.shape[1]
                p.copy_(noise / fan_in ** 0.5)
            elif "norm" in name.lower() or "ln_" in name or name.endswith("LayerNorm.weight"):
                p.copy_((1 + 0.1 * noise) if name.endswith("weight") else 0.1 * noise)
            else:
                p.copy_(0.1 * noise)


# -- the models: each returns (module, {input name: tensor}) --------------------------------------------------


def gpt2_config(s: Size):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=s.vocab, n_positions=max(2 * s.seq, 64), n_embd=s.hidden, n_layer=1,
                      n_head=s.heads, n_inner=s.intermediate, activation_function="gelu_new",
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)


def bert_config(s: Size):
    from transformers import BertConfig

    return BertConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=1, num_attention_heads=s.heads,
                      intermediate_size=s.intermediate, max_position_embeddings=max(2 * s.seq, 64),
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def llama_config(s: Size):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=s.intermediate,
                       num_hidden_layers=1, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
                       max_position_embeddings=max(2 * s.seq, 64), use_cache=False)


def hidden_input(s: Size, rng: np.random.Generator):
    import torch

    return torch.from_numpy(rng.standard_normal((s.batch, s.seq, s.hidden)).astype(np.float32))


def ids_input(s: Size, rng: np.random.Generator):
    import torch

    return torch.from_numpy(rng.integers(0, s.vocab, (s.batch, s.seq)).astype(np.int64))


def padding_mask(s: Size):
    """1 for real tokens; every row after the first ends with s.seq // 4 padding tokens."""
    import torch

    mask = torch.ones((s.batch, s.seq), dtype=torch.int64)
    mask[1:, s.seq - s.seq // 4:] = 0
    return mask


def first_output(out):
    """The hidden states of a HuggingFace module's output (a tensor, a tuple or a ModelOutput)."""
    import torch

    if isinstance(out, torch.Tensor):
        return out
    return out[0]


def wrap(forward):
    """A module whose forward is `forward(inner, *inputs)` and returns one tensor."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return first_output(forward(self.inner, *args))

    return Wrapped


def transformer_encoder_layer(s: Size, rng):
    import torch

    layer = torch.nn.TransformerEncoderLayer(d_model=s.hidden, nhead=s.heads, dim_feedforward=s.intermediate,
                                             dropout=0.0, batch_first=True)
    # Called through a wrapper: the TorchScript tracer hands the layer's own defaults (is_causal=False)
    # to scaled_dot_product_attention as tensors, which it refuses.
    return wrap(lambda m, x: m(x, is_causal=False))(layer), {"x": hidden_input(s, rng)}


def gpt2_block(s: Size, rng):
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    config = gpt2_config(s)
    config._attn_implementation = "eager"
    return wrap(lambda m, x: m(x))(GPT2Block(config, layer_idx=0)), {"hidden_states": hidden_input(s, rng)}


def gpt2_model(s: Size, rng):
    from transformers import GPT2Model

    model = GPT2Model(gpt2_config(s), )
    return wrap(lambda m, ids: m(input_ids=ids, use_cache=False))(model), {"input_ids": ids_input(s, rng)}


def gpt2_model_masked(s: Size, rng):
    from transformers import GPT2Model

    model = GPT2Model(gpt2_config(s))
    forward = wrap(lambda m, ids, mask: m(input_ids=ids, attention_mask=mask, use_cache=False))
    return forward(model), {"input_ids": ids_input(s, rng), "attention_mask": padding_mask(s)}


def bert_layer(s: Size, rng):
    from transformers.models.bert.modeling_bert import BertLayer

    config = bert_config(s)
    config._attn_implementation = "eager"
    return wrap(lambda m, x: m(x))(BertLayer(config)), {"hidden_states": hidden_input(s, rng)}


def bert_model(s: Size, rng):
    from transformers import BertModel

    model = BertModel(bert_config(s), add_pooling_layer=False)
    forward = wrap(lambda m, ids, mask: m(input_ids=ids, attention_mask=mask))
    return forward(model), {"input_ids": ids_input(s, rng), "attention_mask": padding_mask(s)}


def llama_layer_rotary_given(s: Size, rng):
    import torch
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = llama_config(s)
    config._attn_implementation = "eager"
    positions = torch.arange(s.seq).unsqueeze(0)
    x = hidden_input(s, rng)
    cos, sin = LlamaRotaryEmbedding(config)(x, positions)
    layer = wrap(lambda m, x, cos, sin: m(x, position_embeddings=(cos, sin)))(LlamaDecoderLayer(config, 0))
    return layer, {"hidden_states": x, "cos": cos.contiguous(), "sin": sin.contiguous()}


def llama_layer_rotary_inside(s: Size, rng):
    import torch
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = llama_config(s)
    config._attn_implementation = "eager"

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = LlamaDecoderLayer(config, 0)
            self.rotary = LlamaRotaryEmbedding(config)

        def forward(self, x):
            positions = torch.arange(x.shape[1]).unsqueeze(0)
            return first_output(self.layer(x, position_embeddings=self.rotary(x, positions)))

    return Layer(), {"hidden_states": hidden_input(s, rng)}


def llama_model(s: Size, rng):
    from transformers import LlamaModel

    model = LlamaModel(llama_config(s))
    return wrap(lambda m, ids: m(input_ids=ids, use_cache=False))(model), {"input_ids": ids_input(s, rng)}


def opt_layer(s: Size, rng):
    """OPT's decoder layer: its Linear weights exported as [out, in], read through a transpose."""
    from transformers import OPTConfig
    from transformers.models.opt.modeling_opt import OPTDecoderLayer

    config = OPTConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=1, num_attention_heads=s.heads,
                       ffn_dim=s.intermediate, dropout=0.0, attention_dropout=0.0,
                       max_position_embeddings=max(2 * s.seq, 64), use_cache=False)
    config._attn_implementation = "eager"
    return wrap(lambda m, x: m(x))(OPTDecoderLayer(config, 0)), {"hidden_states": hidden_input(s, rng)}


def vit_model(s: Size, rng):
    """A 1-layer ViTModel from pixels: a Conv2d patch embedding (stride = kernel), the class token,
    positions, the layer, the final norm. 224x224 images in patches of 16 at bench size (197 tokens),
    32x32 in patches of 8 for the fixtures."""
    import torch
    from transformers import ViTConfig, ViTModel

    image, patch = (224, 16) if s.seq >= 128 else (32, 8)
    config = ViTConfig(hidden_size=s.hidden, num_hidden_layers=1, num_attention_heads=s.heads, image_size=image,
                       patch_size=patch, intermediate_size=s.intermediate, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0)
    pixels = torch.from_numpy(rng.standard_normal((s.batch, 3, image, image)).astype(np.float32))
    return wrap(lambda m, px: m(pixel_values=px))(ViTModel(config, add_pooling_layer=False)), {"pixel_values": pixels}


def whisper_encoder(s: Size, rng):
    """Whisper's encoder with one layer, from 80 mel bins of 2 x seq frames: two Conv1d of kernel 3
    (the second of stride 2), GELU, positions, the layer, the final norm."""
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(vocab_size=s.vocab, d_model=s.hidden, encoder_layers=1, encoder_attention_heads=s.heads,
                           encoder_ffn_dim=s.intermediate, num_mel_bins=80, max_source_positions=s.seq,
                           dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0,
                           bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    config._attn_implementation = "eager"
    features = torch.from_numpy(rng.standard_normal((s.batch, 80, 2 * s.seq)).astype(np.float32))
    return wrap(lambda m, f: m(f))(WhisperEncoder(config)), {"input_features": features}


MODELS = {
    "transformer_encoder_layer": transformer_encoder_layer,
    "gpt2_block": gpt2_block,
    "gpt2_model": gpt2_model,
    "gpt2_model_masked": gpt2_model_masked,
    "bert_layer": bert_layer,
    "bert_model": bert_model,
    "llama_layer_rotary_given": llama_layer_rotary_given,
    "llama_layer_rotary_inside": llama_layer_rotary_inside,
    "llama_model": llama_model,
    "opt_layer": opt_layer,
    "vit_model": vit_model,
    "whisper_encoder": whisper_encoder,
}


def gpt2_model_12layers(s: Size, rng):
    """GPT2Model with 12 layers (GPT-2 small's depth at the bench size)."""
    from transformers import GPT2Model

    config = gpt2_config(s)
    config.n_layer = 12
    return wrap(lambda m, ids: m(input_ids=ids, use_cache=False))(GPT2Model(config)), {"input_ids": ids_input(s, rng)}


def bert_model_12layers(s: Size, rng):
    """BertModel with 12 layers (BERT-base's depth at the bench size), with attention_mask."""
    from transformers import BertModel

    config = bert_config(s)
    config.num_hidden_layers = 12
    forward = wrap(lambda m, ids, mask: m(input_ids=ids, attention_mask=mask))
    return forward(BertModel(config, add_pooling_layer=False)), {"input_ids": ids_input(s, rng),
                                                                "attention_mask": padding_mask(s)}


# Exported by name only (--only NAME, with --size bench for their real sizes), not among the default fixtures:
# the 12-layer models and the vision models of tools/vision_models.py (MobileNetV2, ResNet-18; 224x224 images
# at the bench size, 32x32 otherwise), whose parameters and BatchNorm statistics `randomize_vision` draws.
BY_NAME = {"gpt2_model_12layers": gpt2_model_12layers, "bert_model_12layers": bert_model_12layers} | VISION


# -- dynamic-axis models: (module, inputs at a size, {input: {axis: symbol}}, {output: {axis: symbol}}) ----------


def gpt2_dynamic_seq(s: Size):
    """GPT2Model whose sequence length is dynamic."""
    import torch

    module = build("gpt2_model", s)[0]

    def inputs(n: int, rng: np.random.Generator) -> dict:
        return {"input_ids": torch.from_numpy(rng.integers(0, s.vocab, (s.batch, n)).astype(np.int64))}

    return module, inputs, {"input_ids": {1: "seq"}}, {"output": {1: "seq"}}


def gpt2_dynamic_batch_seq(s: Size):
    """GPT2Model whose batch and sequence length are both dynamic: inputs at a (batch, seq) size."""
    import torch

    module = build("gpt2_model", s)[0]

    def inputs(size: tuple[int, int], rng: np.random.Generator) -> dict:
        return {"input_ids": torch.from_numpy(rng.integers(0, s.vocab, size).astype(np.int64))}

    return module, inputs, {"input_ids": {0: "batch", 1: "seq"}}, {"output": {0: "batch", 1: "seq"}}


def gpt2_step_dynamic_past(s: Size):
    """One decoder step of GPT2Model: a new token per row, the key/value cache of `past` positions as inputs,
    the hidden state and the cache of past + 1 positions as outputs."""
    import torch
    from transformers import GPT2Model

    name = "gpt2_step_dynamic_past"
    torch.manual_seed(seed_of(name))
    model = GPT2Model(gpt2_config(s))
    randomize(model, seed_of(name))
    return decoder_step(model, s, s.batch)


def decoder_step(model, s: Size, batch: int):
    """(the module, inputs at a size, input axes, output axes) of one decoder step of a GPT2Model:
    `ids` one new token per row, `past_key` and `past_value` every layer's cache of `past` positions
    (layer 0 reads them, the others copies), the hidden state and layer 0's cache of past + 1 out."""
    import torch
    from transformers import DynamicCache

    class Step(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, ids, past_key, past_value):
            cache = DynamicCache(config=self.inner.config)
            for layer in range(self.inner.config.n_layer):
                cache.update(past_key if layer == 0 else past_key.clone(),
                             past_value if layer == 0 else past_value.clone(), layer)
            out = self.inner(input_ids=ids, past_key_values=cache, use_cache=True)
            layer = out.past_key_values.layers[0]
            return out.last_hidden_state, layer.keys, layer.values

    head = s.hidden // s.heads

    def inputs(n: int, rng: np.random.Generator) -> dict:
        cache = [torch.from_numpy(rng.standard_normal((batch, s.heads, n, head)).astype(np.float32))
                 for _ in range(2)]
        ids = torch.from_numpy(rng.integers(0, s.vocab, (batch, 1)).astype(np.int64))
        return {"input_ids": ids, "past_key": cache[0], "past_value": cache[1]}

    axes = {"past_key": {2: "past"}, "past_value": {2: "past"}}
    return Step(model).eval(), inputs, axes, {"present_key": {2: "past_1"}, "present_value": {2: "past_1"}}


# name -> (the builder, the example size the export traces at, the sizes the npz stores)
DYNAMIC = {
    "gpt2_model_dynamic_seq": (gpt2_dynamic_seq, 5, (7, 33)),
    "gpt2_step_dynamic_past": (gpt2_step_dynamic_past, 5, (1, 7, 33)),
    "gpt2_model_dynamic_batch_seq": (gpt2_dynamic_batch_seq, (2, 5), ((1, 1), (3, 7), (2, 33))),
}
BATCH_HIGH = 8  # the top of a dynamic batch's range in an export


def export_dynamic(module, inputs: dict, axes: dict, outputs: dict, exporter: str, high: dict[str, int]):
    """The ModelProto of one export with dynamic axes (each symbol from 1 to its `high`)."""
    import warnings

    import onnx
    import torch

    names = list(inputs)
    output_names = ["output"] if len(outputs) <= 1 and "output" in outputs else ["hidden", *outputs]
    torch.backends.mha.set_fastpath_enabled(False)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            register_torchscript_symbolics()
            buf = io.BytesIO()
            torch.onnx.export(module, tuple(inputs.values()), buf, dynamo=False, opset_version=EXPORTERS[exporter],
                              input_names=names, output_names=output_names, do_constant_folding=True,
                              dynamic_axes={**axes, **outputs})
            model = onnx.load_model_from_string(buf.getvalue())
        else:
            symbols = {sym: torch.export.Dim(sym, min=1, max=high[sym]) for a in axes.values() for sym in a.values()}
            shapes = tuple({axis: symbols[sym] for axis, sym in axes[n].items()} if n in axes else None
                           for n in names)
            if any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(module.forward).parameters.values()):
                shapes = (shapes,)  # a forward(*args) (`wrap`) takes its inputs as one tuple
            program = torch.onnx.export(module, tuple(inputs.values()), dynamo=True,
                                        opset_version=EXPORTERS[exporter], input_names=names,
                                        output_names=output_names, optimize=True, external_data=False,
                                        verbose=False, dynamic_shapes=shapes)
            model = program.model_proto
    strip_metadata(model)
    return model


def write_dynamic_fixture(out: Path, name: str, exporter: str, size: Size) -> str:
    """NAME-EXPORTER.onnx exported once, and its npz: inputs and onnxruntime's outputs at each stored size
    (onnxruntime checked against torch eager at each)."""
    import torch

    builder, example, lengths = DYNAMIC[name]
    module, inputs_at, axes, outputs = builder(size)
    symbols = sorted({sym for a in axes.values() for sym in a.values()}, key=["batch", "seq", "past"].index)
    rng = np.random.default_rng(seed_of(name))
    high = {sym: BATCH_HIGH if sym == "batch" else gpt2_config(size).n_positions - (sym == "past") for sym in symbols}
    model = export_dynamic(module, inputs_at(example, rng), axes, outputs, exporter, high)
    data = model.SerializeToString()
    arrays = {}
    for n in lengths:
        key = ",".join(f"{sym}={v}" for sym, v in zip(symbols, n if isinstance(n, tuple) else (n,), strict=True))
        inputs = inputs_at(n, rng)
        with torch.no_grad():
            got = module(*inputs.values())
        want = [t.numpy() for t in (got if isinstance(got, tuple) else (got,))]
        feeds = {k: v.numpy() for k, v in inputs.items()}
        results = run_onnxruntime(data, feeds)
        for r, w in zip(results, want, strict=True):
            np.testing.assert_allclose(r, w, rtol=1e-3, atol=1e-4, err_msg=f"{name} {exporter} {key}")
        arrays |= {f"{key}/{k}": v for k, v in feeds.items()}
        arrays |= {f"{key}/output:{o.name}": v for o, v in zip(model.graph.output, results)}
    stem = f"{name}-{exporter}"
    (out / f"{stem}.onnx").write_bytes(data)
    save_npz(out / f"{stem}.npz", arrays)
    ops = sorted({n.op_type for n in model.graph.node})
    return f"dynamic/{stem}: {len(data):,} bytes, {len(model.graph.node)} nodes, ops {' '.join(ops)}"


# -- export -------------------------------------------------------------------------------------------------


def build(name: str, size: Size):
    """The seeded module (eval mode) and its inputs."""
    import torch

    torch.manual_seed(seed_of(name))
    module, inputs = (MODELS | BY_NAME | VISION_FIXTURES)[name](size, np.random.default_rng(seed_of(name)))
    (randomize_vision if name in VISION | VISION_FIXTURES else randomize)(module, seed_of(name))
    return module.eval(), inputs


def export(module, inputs: dict, exporter: str):
    """The ONNX ModelProto of one export, with node metadata (stack traces, source paths) dropped."""
    import warnings

    import onnx
    import torch

    args = tuple(inputs.values())
    torch.backends.mha.set_fastpath_enabled(False)  # the fused encoder-layer kernel has no ONNX export
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            register_torchscript_symbolics()
            buf = io.BytesIO()
            torch.onnx.export(module, args, buf, dynamo=False, opset_version=EXPORTERS[exporter],
                              input_names=list(inputs), output_names=["output"], do_constant_folding=True)
            model = onnx.load_model_from_string(buf.getvalue())
        else:
            program = torch.onnx.export(module, args, dynamo=True, opset_version=EXPORTERS[exporter],
                                        input_names=list(inputs), output_names=["output"], optimize=True,
                                        external_data=False, verbose=False)
            model = program.model_proto
    strip_metadata(model)
    return model


def register_torchscript_symbolics() -> None:
    """Two symbolics the TorchScript exporter lacks or gets wrong, both met by HuggingFace's mask code
    when no attention_mask is given (it looks for packed sequences in the position ids:
    `(diff(position_ids, prepend=...) != 1).cumsum(-1)`): aten::diff has no symbolic, and aten::cumsum
    of a bool tensor is exported as a CumSum of bool, which ONNX does not allow (torch sums bools as
    int64). diff(x, n=1, dim) = x[1:] - x[:-1] along dim (prepend concatenated first)."""
    from torch.onnx import register_custom_op_symbolic
    from torch.onnx._internal.torchscript_exporter import symbolic_helper

    @symbolic_helper.parse_args("v", "i", "i", "v", "v")
    def diff(g, x, n, dim, prepend, append):
        if n != 1:
            raise NotImplementedError("aten::diff with n != 1")
        parts = [p for p in (prepend, x, append) if not symbolic_helper._is_none(p)]
        if len(parts) > 1:
            x = g.op("Concat", *parts, axis_i=dim)
        ints = lambda v: g.op("Constant", value_t=torch.tensor(v, dtype=torch.int64))  # noqa: E731
        big = 2 ** 62
        later = g.op("Slice", x, ints([1]), ints([big]), ints([dim]))
        earlier = g.op("Slice", x, ints([0]), ints([-1]), ints([dim]))
        return g.op("Sub", later, earlier)

    @symbolic_helper.parse_args("v", "i", "none")
    def cumsum(g, x, dim, dtype):
        if x.type().scalarType() == "Bool":
            x = g.op("Cast", x, to_i=7)  # INT64
        return g.op("CumSum", x, g.op("Constant", value_t=torch.tensor(dim, dtype=torch.int64)))

    import torch

    register_custom_op_symbolic("aten::diff", diff, EXPORTERS["torchscript"])
    register_custom_op_symbolic("aten::cumsum", cumsum, EXPORTERS["torchscript"])


def strip_metadata(model) -> None:
    """Drop what varies between machines or runs: metadata properties and doc strings on every node and value."""
    model.ClearField("metadata_props")
    model.doc_string = ""
    graphs = [model.graph] + [f for f in model.functions]
    for g in graphs:
        g.ClearField("metadata_props")
        g.doc_string = ""
        for node in g.node:
            node.ClearField("metadata_props")
            node.doc_string = ""
        for vi in list(getattr(g, "value_info", [])) + list(g.input) + list(g.output):
            vi.ClearField("metadata_props")
            vi.doc_string = ""
        for init in getattr(g, "initializer", []):
            init.ClearField("metadata_props")
            init.doc_string = ""


def run_onnxruntime(model_bytes: bytes, feeds: dict[str, np.ndarray], threads: int = 1) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """np.savez with fixed timestamps (numpy stamps each member with the current time); a scalar stays a
    scalar (np.ascontiguousarray would make it 1-D)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for key, value in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(value, order="C"), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, member.getvalue())
    path.write_bytes(buf.getvalue())


def export_one(name: str, exporter: str, size: Size):
    """(model bytes, feeds, onnxruntime outputs, torch's output); checks onnxruntime against torch eager."""
    import torch

    module, inputs = build(name, size)
    with torch.no_grad():
        want = module(*inputs.values()).numpy()
    model = export(module, inputs, exporter)
    data = model.SerializeToString()
    feeds = {k: v.numpy() for k, v in inputs.items()}
    outputs = run_onnxruntime(data, feeds)
    np.testing.assert_allclose(outputs[0], want, rtol=1e-3, atol=1e-4, err_msg=f"{name} {exporter}: ort vs torch")
    return data, feeds, outputs, model


def write_fixture(out: Path, name: str, exporter: str, size: Size) -> str:
    data, feeds, outputs, model = export_one(name, exporter, size)
    stem = f"{name}-{exporter}"
    (out / f"{stem}.onnx").write_bytes(data)
    save_npz(out / f"{stem}.npz", feeds | {f"output:{o.name}": v for o, v in zip(model.graph.output, outputs)})
    ops = sorted({n.op_type for n in model.graph.node})
    return f"{stem}: {len(data):,} bytes, {len(model.graph.node)} nodes, ops {' '.join(ops)}"


# -- quantized operators: (ModelProto, {key prefix: feeds}, a note) from a seeded generator ------------------


QUANTIZED_OPS = ("DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul",
                 "MatMulNBits", "GatherBlockQuantized")


def integer_type(name: str):
    """The numpy type of `u8`, `i8`, `int4` or `uint4` (the 4-bit ones are ml_dtypes', which onnx requires)."""
    import ml_dtypes

    return {"u8": np.uint8, "i8": np.int8, "int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4}[name]


def random_integers(rng: np.random.Generator, name: str, shape) -> np.ndarray:
    """Integers drawn uniformly from the whole range of type `name`."""
    low, high = {"u8": (0, 256), "i8": (-128, 128), "int4": (-8, 8), "uint4": (0, 16)}[name]
    return rng.integers(low, high, shape).astype(integer_type(name))


def random_scales(rng: np.random.Generator, shape) -> np.ndarray:
    return (0.005 + 0.045 * rng.random(shape)).astype(np.float32)


def onnx_graph_model(nodes, inputs: dict, outputs: dict, initializers: dict):
    """A ModelProto at opset 21 and IR version 10 (int4, uint4 and blocked quantization need both), with
    com.microsoft 1 where a node is in that domain: `inputs` and `initializers` {name: example array},
    `outputs` {name: numpy type} (shapes left to the runtime)."""
    from onnx import helper, numpy_helper

    def info(name, dtype, shape):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)

    graph = helper.make_graph(nodes, "g", [info(k, v.dtype, v.shape) for k, v in inputs.items()],
                              [info(k, t, None) for k, t in outputs.items()],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()])
    opsets = [helper.make_opsetid("", 21)]
    if any(n.domain == "com.microsoft" for n in nodes):
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="tools/export_models.py")
    model.ir_version = 10
    return model


@contextlib.contextmanager
def quiet():
    """Logging silenced (onnxruntime's quantizers log every node at INFO, and quantize_dynamic warns on the
    root logger that the model was not pre-processed)."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def dequantize_linear_case(rng, dtype: str, axis: int | None = None, block: int = 0, zero_point: bool = True,
                           shape=(64, 96)):
    """A bare DequantizeLinear of a constant weight (the model's output is the dequantized tensor): per tensor
    (axis None), per axis, or in blocks of `block` along `axis`."""
    from onnx import helper

    if axis is None:
        params = ()
    elif block:
        params = tuple(-(-d // block) if i == axis else d for i, d in enumerate(shape))
    else:
        params = (shape[axis],)
    inits = {"x": random_integers(rng, dtype, shape), "x_scale": random_scales(rng, params)}
    if zero_point:
        inits["x_zero_point"] = random_integers(rng, dtype, params)
    attrs = {} if axis is None else {"axis": axis, **({"block_size": block} if block else {})}
    node = helper.make_node("DequantizeLinear", list(inits), ["y"], **attrs)
    return onnx_graph_model([node], {}, {"y": np.float32}, inits), {"": {}}, ""


def quantize_linear_case(rng, dtype: str, axis: int | None = None, zero_point: bool = True, shape=(8, 64)):
    """QuantizeLinear of an input. Per tensor, the scale is 1/32 and the input has exact ties (halves of the
    scale) and values beyond the type's range; per axis, random scales."""
    from onnx import helper

    params = () if axis is None else (shape[axis],)
    if axis is None:
        scale = np.array(1 / 32, np.float32)
        x = (np.rint(rng.standard_normal(shape) * 2 * 100) / 2 / 32).astype(np.float32)  # many k + 0.5
        x.flat[:4] = [1e3, -1e3, 300.0, -300.0]
    else:
        scale = random_scales(rng, params)
        x = (rng.standard_normal(shape) * 2).astype(np.float32)
    inits = {"y_scale": scale}
    if zero_point:
        inits["y_zero_point"] = random_integers(rng, dtype, params) // 4  # near the middle: both ends saturate
        if dtype == "u8":
            inits["y_zero_point"] += 96
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("QuantizeLinear", ["x", *inits], ["y"], **attrs)
    out = integer_type(dtype) if zero_point else np.uint8
    return onnx_graph_model([node], {"x": x}, {"y": out}, inits), {"": {"x": x}}, ""


def dynamic_quantize_linear_case(rng, positive: bool = False):
    """DynamicQuantizeLinear of an input f32[4, 64]: values of both signs, or all positive (the range
    always includes 0, so the zero point is then 0)."""
    from onnx import helper

    x = (rng.standard_normal((4, 64)) * 1.5 + (3 if positive else 0.5)).astype(np.float32)
    if positive:
        x = np.abs(x) + np.float32(0.25)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "y_scale", "y_zero_point"])
    model = onnx_graph_model([node], {"x": x}, {"y": np.uint8, "y_scale": np.float32, "y_zero_point": np.uint8}, {})
    return model, {"": {"x": x}}, ""


def matmul_integer_case(rng, b_type: str, b_zero_point: bool):
    """MatMulInteger of u8 activations [5, 64] (an input) with a zero point, and a constant weight [64, 32] of
    `b_type`, with a zero point per column if asked."""
    from onnx import helper

    a = random_integers(rng, "u8", (5, 64))
    inits = {"b": random_integers(rng, b_type, (64, 32)), "a_zero_point": np.array(121, np.uint8)}
    if b_zero_point:
        inits["b_zero_point"] = random_integers(rng, b_type, (32,)) // 8 + (112 if b_type == "u8" else 0)
    node = helper.make_node("MatMulInteger", ["a", "b", "a_zero_point", *(["b_zero_point"] if b_zero_point else [])],
                            ["y"])
    return onnx_graph_model([node], {"a": a}, {"y": np.int32}, inits), {"": {"a": a}}, ""


def quantize_dynamic_matmul_case(rng, weight_type: str, per_channel: bool):
    """What onnxruntime.quantization.quantize_dynamic makes of a MatMul of an input f32[5, 64] and a constant
    weight [64, 32]: DynamicQuantizeLinear of the input, MatMulInteger with the quantized weight, Cast to
    float and a Mul by the product of both scales."""
    import tempfile

    import onnx
    from onnx import helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    x = rng.standard_normal((5, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 32)) / 8).astype(np.float32)
    model = onnx_graph_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x}, {"y": np.float32}, {"w": w})
    with tempfile.TemporaryDirectory() as tmp, quiet():
        quantize_dynamic(model, Path(tmp) / "q.onnx", weight_type=QuantType[weight_type], per_channel=per_channel)
        quantized = onnx.load(Path(tmp) / "q.onnx")
    return quantized, {"": {"x": x}}, ""


def qlinear_matmul_case(rng, a_type: str, b_type: str, per_column: bool):
    """QLinearMatMul of activations [5, 64] (an input) and a constant weight [64, 32], the output of a's type;
    b's scale and zero point per column if asked. y_scale is chosen so that few outputs saturate."""
    from onnx import helper

    a = random_integers(rng, a_type, (5, 64))
    params = (32,) if per_column else ()
    mid = {"u8": 128, "i8": 0}
    inits = {"a_scale": np.array(0.02, np.float32), "a_zero_point": np.array(mid[a_type] + 3, integer_type(a_type)),
             "b": random_integers(rng, b_type, (64, 32)), "b_scale": random_scales(rng, params) / 4,
             "b_zero_point": (random_integers(rng, "i8", params).astype(np.int32) // 32 + mid[b_type]).astype(
                 integer_type(b_type)),
             "y_scale": np.array(0.25, np.float32), "y_zero_point": np.array(mid[a_type] - 5, integer_type(a_type))}
    names = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"]
    node = helper.make_node("QLinearMatMul", names, ["y"])
    return onnx_graph_model([node], {"a": a}, {"y": integer_type(a_type)}, inits), {"": {"a": a}}, ""


def matmul_nbits_case(rng, bits: int, k: int, block: int, zero_point: bool, accuracy: int, m: int, n: int = 96,
                      flat: bool = False):
    """A float MatMul of an input f32[m, k] and a weight [k, n] ~ N(0, 1/k) made a com.microsoft MatMulNBits by
    onnxruntime's MatMulNBitsQuantizer (symmetric: no zero_points input; else asymmetric, with them).
    `flat`: scales and zero points reshaped to one dimension, the other layout MatMulNBits accepts."""
    from onnx import helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    a = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((k, n)) / k ** 0.5).astype(np.float32)
    model = onnx_graph_model([helper.make_node("MatMul", ["a", "w"], ["y"])], {"a": a}, {"y": np.float32}, {"w": w})
    with quiet():
        quantizer = MatMulNBitsQuantizer(model, bits=bits, block_size=block, is_symmetric=not zero_point,
                                         accuracy_level=accuracy or None)
        quantizer.process()
    quantized = quantizer.model.model
    if flat:
        for init in quantized.graph.initializer:
            if init.name.endswith(("_scales", "_zero_points")):
                init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).reshape(-1), init.name))
    return quantized, {"": {"a": a}}, ""


def gather_block_quantized_case(rng, form: str, zero_point: bool):
    """A Gather of rows of an embedding table f32[128, 64] by i64 ids [2, 5] (one negative) made a
    com.microsoft GatherBlockQuantized (4 bits, blocks of 32 along the hidden axis) by onnxruntime's
    MatMulNBitsQuantizer: symmetric without zero points (int4 data), asymmetric with them (uint4 data and
    zero points). `form` u8: the same levels as uint8 with bits=4, two to a byte, the low nibble first (the
    zero points packed likewise; without them, the int4 levels plus 8, the zero point uint8 data defaults to)."""
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    table = rng.standard_normal((128, 64)).astype(np.float32)
    ids = rng.integers(0, 128, (2, 5)).astype(np.int64)
    ids[1, 2] = -3
    node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)
    model = onnx_graph_model([node], {"ids": ids}, {"y": np.float32}, {"table": table})
    with quiet():
        quantizer = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=not zero_point,
                                         op_types_to_quantize=("Gather",), quant_axes=(("Gather", 1),))
        quantizer.process()
    quantized = quantizer.model.model
    if form == "u8":
        (gather,) = quantized.graph.node
        inits = {i.name: i for i in quantized.graph.initializer}
        for name in gather.input:
            if name in inits and inits[name].data_type in (TensorProto.INT4, TensorProto.UINT4):
                levels = numpy_helper.to_array(inits[name]).astype(np.int32)
                levels = (levels + 8 if inits[name].data_type == TensorProto.INT4 else levels).astype(np.uint8)
                packed = levels[..., 0::2] | (levels[..., 1::2] << 4)
                inits[name].CopyFrom(numpy_helper.from_array(packed, name))
        gather.attribute.append(helper.make_attribute("bits", 4))
    return quantized, {"": {"ids": ids}}, ""


def gpt2_step_matmul_nbits(rng):
    """The 2-layer GPT-2 decoder step of `decoder_step` at fixture size, exported by dynamo with the cache
    length `past` dynamic, its Gemm made MatMul and Add by onnxruntime's replace_gemm_with_matmul (the
    rewrite quantize_dynamic does itself; MatMulNBitsQuantizer quantizes MatMul only), then every MatMul with a
    constant weight made a MatMulNBits by MatMulNBitsQuantizer (4 bits, block 32, symmetric: no zero points).
    The float export is checked against torch eager at each stored past length."""
    import torch
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    from onnxruntime.quantization.onnx_model import ONNXModel
    from transformers import GPT2Model

    name, s = "gpt2_step_2layers", SIZES["fixture"]
    config = gpt2_config(s)
    config.n_layer = 2
    torch.manual_seed(seed_of(name))
    model = GPT2Model(config)
    randomize(model, seed_of(name))
    module, inputs_at, axes, outputs = decoder_step(model, s, s.batch)
    exported = export_dynamic(module, inputs_at(5, rng), axes, outputs, "dynamo", {"past": config.n_positions - 1})
    ONNXModel(exported).replace_gemm_with_matmul()
    float_bytes = exported.SerializeToString()
    with quiet():
        quantizer = MatMulNBitsQuantizer(exported, bits=4, block_size=32, is_symmetric=True)
        quantizer.process()
    quantized = quantizer.model.model
    runs, worst = {}, 0.0
    for n in (1, 7, 33):
        inputs = inputs_at(n, rng)
        with torch.no_grad():
            want = [t.numpy() for t in module(*inputs.values())]
        feeds = {k: v.numpy() for k, v in inputs.items()}
        for r, w in zip(run_onnxruntime(float_bytes, feeds), want, strict=True):
            np.testing.assert_allclose(r, w, rtol=1e-3, atol=1e-4, err_msg=f"{name} float export, past={n}")
        got = run_onnxruntime(quantized.SerializeToString(), feeds)
        worst = max(worst, max(float(np.abs(g - w).max()) for g, w in zip(got, want)))
        runs[f"past={n}/"] = feeds
    return quantized, runs, f"max |quantized - float| {worst:.3f}"


def gpt2_model_quantize_dynamic(rng, weight_type: str):
    """The fixture gpt2_model-dynamo (the same seeded GPT2Model, export and input ids) quantized by
    onnxruntime.quantization.quantize_dynamic with `weight_type` weights (QInt8: symmetric int8, zero point 0;
    QUInt8: asymmetric uint8), one scale a tensor."""
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    _, feeds, outputs, model = export_one("gpt2_model", "dynamo", SIZES["fixture"])
    with tempfile.TemporaryDirectory() as tmp, quiet():
        quantize_dynamic(model, Path(tmp) / "q.onnx", weight_type=QuantType[weight_type])
        quantized = onnx.load(Path(tmp) / "q.onnx")
    got = run_onnxruntime(quantized.SerializeToString(), feeds)
    worst = max(float(np.abs(g - w).max()) for g, w in zip(got, outputs))
    return quantized, {"": feeds}, f"max |quantized - float| {worst:.3f}"


def quantized_cases() -> dict:
    """name -> a builder of (the model, {key prefix: feeds}, a note) from a seeded generator."""
    from functools import partial as p

    cases = {}
    for dtype, zero_point in (("u8", True), ("u8", False), ("i8", True), ("i8", False)):
        cases[f"dequantize_linear-per_tensor-{dtype}{'' if zero_point else '-no_zero_point'}"] = p(
            dequantize_linear_case, dtype=dtype, zero_point=zero_point)
    for axis, dtype, zero_point in ((0, "i8", True), (0, "u8", False), (1, "u8", True), (1, "i8", False)):
        cases[f"dequantize_linear-per_axis{axis}-{dtype}{'' if zero_point else '-no_zero_point'}"] = p(
            dequantize_linear_case, dtype=dtype, axis=axis, zero_point=zero_point)
    for axis in (0, 1):
        for dtype in ("int4", "uint4", "i8", "u8"):
            for zero_point in (True, False):
                cases[f"dequantize_linear-blocked_axis{axis}-{dtype}{'' if zero_point else '-no_zero_point'}"] = p(
                    dequantize_linear_case, dtype=dtype, axis=axis, block=32, zero_point=zero_point)
    cases["dequantize_linear-blocked_axis1-int4-partial_block"] = p(  # the last block of each row partial
        dequantize_linear_case, dtype="int4", axis=1, block=32, shape=(64, 80))
    cases["quantize_linear-per_tensor-u8"] = p(quantize_linear_case, dtype="u8")
    cases["quantize_linear-per_tensor-u8-no_zero_point"] = p(quantize_linear_case, dtype="u8", zero_point=False)
    cases["quantize_linear-per_tensor-i8"] = p(quantize_linear_case, dtype="i8")
    cases["quantize_linear-per_axis0-u8"] = p(quantize_linear_case, dtype="u8", axis=0)
    cases["quantize_linear-per_axis1-i8"] = p(quantize_linear_case, dtype="i8", axis=1)
    cases["dynamic_quantize_linear"] = p(dynamic_quantize_linear_case)
    cases["dynamic_quantize_linear-positive"] = p(dynamic_quantize_linear_case, positive=True)
    cases["matmul_integer-u8_i8-a_zero_point"] = p(matmul_integer_case, b_type="i8", b_zero_point=False)
    cases["matmul_integer-u8_u8-zero_points"] = p(matmul_integer_case, b_type="u8", b_zero_point=True)
    cases["matmul_integer-quantize_dynamic-qint8"] = p(quantize_dynamic_matmul_case, weight_type="QInt8",
                                                       per_channel=False)
    cases["matmul_integer-quantize_dynamic-quint8_per_channel"] = p(quantize_dynamic_matmul_case,
                                                                    weight_type="QUInt8", per_channel=True)
    cases["qlinear_matmul-u8_u8"] = p(qlinear_matmul_case, a_type="u8", b_type="u8", per_column=False)
    cases["qlinear_matmul-u8_i8-per_column"] = p(qlinear_matmul_case, a_type="u8", b_type="i8", per_column=True)
    cases["qlinear_matmul-i8_i8"] = p(qlinear_matmul_case, a_type="i8", b_type="i8", per_column=False)
    # (bits, K, block, zero points, accuracy_level, rows of the activation)
    for bits, k, block, zero_point, accuracy, m in (
            (4, 128, 32, False, 0, 1), (4, 128, 32, True, 0, 5), (4, 128, 16, False, 0, 5), (4, 128, 16, True, 0, 1),
            (4, 256, 128, True, 0, 1), (4, 256, 128, False, 0, 5), (4, 128, 32, False, 4, 1), (4, 128, 32, True, 4, 5),
            (4, 256, 128, True, 4, 5), (4, 72, 32, True, 0, 5), (4, 72, 32, False, 4, 1),
            (8, 128, 32, False, 0, 1), (8, 128, 32, True, 0, 5), (8, 128, 16, True, 0, 1), (8, 256, 128, False, 0, 5),
            (8, 128, 32, True, 4, 1), (8, 72, 32, True, 0, 5)):
        tag = f"{bits}bit-k{k}-block{block}{'-zp' if zero_point else ''}-acc{accuracy}-m{m}"
        cases[f"matmul_nbits-{tag}"] = p(matmul_nbits_case, bits=bits, k=k, block=block, zero_point=zero_point,
                                          accuracy=accuracy, m=m)
    cases["matmul_nbits-4bit-k128-block32-zp-acc0-m5-flat_scales"] = p(
        matmul_nbits_case, bits=4, k=128, block=32, zero_point=True, accuracy=0, m=5, flat=True)
    cases["gather_block_quantized-int4"] = p(gather_block_quantized_case, form="int4", zero_point=False)
    cases["gather_block_quantized-uint4-zp"] = p(gather_block_quantized_case, form="uint4", zero_point=True)
    cases["gather_block_quantized-u8_bits4"] = p(gather_block_quantized_case, form="u8", zero_point=False)
    cases["gather_block_quantized-u8_bits4-zp"] = p(gather_block_quantized_case, form="u8", zero_point=True)
    cases["gpt2_step_2layers-matmul_nbits-dynamo"] = p(gpt2_step_matmul_nbits)
    cases["gpt2_model-quantize_dynamic_qint8-dynamo"] = p(gpt2_model_quantize_dynamic, weight_type="QInt8")
    cases["gpt2_model-quantize_dynamic_quint8-dynamo"] = p(gpt2_model_quantize_dynamic, weight_type="QUInt8")
    return cases


QUANTIZED = quantized_cases()


def watched_values(model) -> list[str]:
    """The inputs and outputs of the model's quantized operators that are neither graph inputs, graph outputs
    nor initializers, in the order the nodes name them."""
    known = {i.name for i in model.graph.initializer} | {v.name for v in model.graph.input}
    known |= {v.name for v in model.graph.output} | {""}
    names = [t for n in model.graph.node if n.op_type in QUANTIZED_OPS for t in (*n.input, *n.output)]
    return list(dict.fromkeys(t for t in names if t not in known))


def write_quantized_fixture(out: Path, name: str) -> str:
    """NAME.onnx and its npz: each run's inputs, onnxruntime's outputs and the watched values."""
    import copy

    from onnx import helper

    model, runs, note = QUANTIZED[name](np.random.default_rng(seed_of(name)))
    strip_metadata(model)
    data = model.SerializeToString()
    watched = watched_values(model)
    instrumented = copy.deepcopy(model)
    instrumented.graph.output.extend(helper.make_empty_tensor_value_info(t) for t in watched)
    arrays = {}
    for prefix, feeds in runs.items():
        outputs = run_onnxruntime(data, feeds)
        arrays |= {f"{prefix}{k}": v for k, v in feeds.items()}
        arrays |= {f"{prefix}output:{o.name}": v for o, v in zip(model.graph.output, outputs)}
        if watched:
            values = run_onnxruntime(instrumented.SerializeToString(), feeds)[len(model.graph.output):]
            arrays |= {f"{prefix}value:{t}": v for t, v in zip(watched, values)}
    (out / f"{name}.onnx").write_bytes(data)
    save_npz(out / f"{name}.npz", arrays)
    ops = sorted({n.op_type for n in model.graph.node})
    return (f"quantized/{name}: {len(data):,} bytes, {len(model.graph.node)} nodes, ops {' '.join(ops)}"
            + (f"; {note}" if note else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="fixture")
    ap.add_argument("-o", "--out", type=Path, default=FIXTURES)
    ap.add_argument("--only", help="comma-separated model names (default: all, or all quantized with --quantized)")
    ap.add_argument("--exporters", default=",".join(EXPORTERS))
    ap.add_argument("--quantized", action="store_true",
                    help="write the quantized fixtures (QUANTIZED, always at fixture size) into OUT/quantized")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    names = (args.only.split(",") if args.only else list(QUANTIZED) if args.quantized
             else list(MODELS) + list(VISION_FIXTURES) + list(DYNAMIC))
    (args.out / "dynamic").mkdir(exist_ok=True)
    failed = 0
    for name in names:
        if name in QUANTIZED:
            (args.out / "quantized").mkdir(exist_ok=True)
            try:
                print(write_quantized_fixture(args.out / "quantized", name), flush=True)
            except Exception as err:  # report every fixture that fails, then exit 1
                failed += 1
                print(f"{name}: FAILED: {type(err).__name__}: {str(err)[:2000]}", flush=True)
            continue
        for exporter in args.exporters.split(","):
            try:
                if name in DYNAMIC:
                    print(write_dynamic_fixture(args.out / "dynamic", name, exporter, SIZES[args.size]), flush=True)
                elif name in VISION_FIXTURES:
                    (args.out / "vision").mkdir(exist_ok=True)
                    print(write_fixture(args.out / "vision", name, exporter, SIZES[args.size]), flush=True)
                else:
                    print(write_fixture(args.out, name, exporter, SIZES[args.size]), flush=True)
            except Exception as err:  # report every export that fails, then exit 1
                failed += 1
                print(f"{name}-{exporter}: FAILED: {type(err).__name__}: {str(err)[:2000]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
