"""Export the transformer models stitch is tested on, with both torch.onnx exporters, from seeded random configs.

    python3 tools/export_models.py                    # the fixtures: tests/fixtures/models/NAME-EXPORTER.{onnx,npz}
    python3 tools/export_models.py --size bench -o DIR  # the benchmark sizes (hidden 768, 12 heads, sequence 128)

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

The dynamic-axis fixtures (`DYNAMIC`, in tests/fixtures/models/dynamic/) are exported once with a
dynamic axis (`dynamic_shapes` for dynamo, `dynamic_axes` for torchscript): GPT-2 with a dynamic
sequence, and a decoder step (one new token) whose key/value cache of `past` positions is an input.
Their npz holds the inputs and onnxruntime's outputs at several sizes, keyed `SYMBOL=N/NAME` and
`SYMBOL=N/output:NAME` (`seq=7/input_ids`).
"""

from __future__ import annotations

import argparse
import inspect
import io
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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


# -- dynamic-axis models: (module, inputs at a size, {input: {axis: symbol}}, {output: {axis: symbol}}) ----------


def gpt2_dynamic_seq(s: Size):
    """GPT2Model whose sequence length is dynamic."""
    import torch

    module = build("gpt2_model", s)[0]

    def inputs(n: int, rng: np.random.Generator) -> dict:
        return {"input_ids": torch.from_numpy(rng.integers(0, s.vocab, (s.batch, n)).astype(np.int64))}

    return module, inputs, {"input_ids": {1: "seq"}}, {"output": {1: "seq"}}


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
}


def export_dynamic(module, inputs: dict, axes: dict, outputs: dict, exporter: str, high: int):
    """The ModelProto of one export with dynamic axes (each symbol from 1 to `high`)."""
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
            symbols = {sym: torch.export.Dim(sym, min=1, max=high) for a in axes.values() for sym in a.values()}
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
    (symbol,) = {sym for a in axes.values() for sym in a.values()}
    rng = np.random.default_rng(seed_of(name))
    high = gpt2_config(size).n_positions - (1 if "past" in symbol else 0)
    model = export_dynamic(module, inputs_at(example, rng), axes, outputs, exporter, high)
    data = model.SerializeToString()
    arrays = {}
    for n in lengths:
        inputs = inputs_at(n, rng)
        with torch.no_grad():
            got = module(*inputs.values())
        want = [t.numpy() for t in (got if isinstance(got, tuple) else (got,))]
        feeds = {k: v.numpy() for k, v in inputs.items()}
        results = run_onnxruntime(data, feeds)
        for r, w in zip(results, want, strict=True):
            np.testing.assert_allclose(r, w, rtol=1e-3, atol=1e-4, err_msg=f"{name} {exporter} {symbol}={n}")
        arrays |= {f"{symbol}={n}/{k}": v for k, v in feeds.items()}
        arrays |= {f"{symbol}={n}/output:{o.name}": v for o, v in zip(model.graph.output, results)}
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
    module, inputs = MODELS[name](size, np.random.default_rng(seed_of(name)))
    randomize(module, seed_of(name))
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
    """np.savez with fixed timestamps (numpy stamps each member with the current time)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for key, value in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(value), allow_pickle=False)
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="fixture")
    ap.add_argument("-o", "--out", type=Path, default=FIXTURES)
    ap.add_argument("--only", help="comma-separated model names (default: all)")
    ap.add_argument("--exporters", default=",".join(EXPORTERS))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else list(MODELS) + list(DYNAMIC)
    (args.out / "dynamic").mkdir(exist_ok=True)
    failed = 0
    for name in names:
        for exporter in args.exporters.split(","):
            try:
                if name in DYNAMIC:
                    print(write_dynamic_fixture(args.out / "dynamic", name, exporter, SIZES[args.size]), flush=True)
                else:
                    print(write_fixture(args.out, name, exporter, SIZES[args.size]), flush=True)
            except Exception as err:  # report every export that fails, then exit 1
                failed += 1
                print(f"{name}-{exporter}: FAILED: {type(err).__name__}: {str(err)[:2000]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
