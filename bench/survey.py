"""The architecture survey: one layer, block or 1-layer model of many HuggingFace architectures, stitch vs onnxruntime.

Each architecture of the registry below is built from a config (no pretrained
weights: nothing is downloaded) at tools/export_models.py's bench sizes (hidden
768, 12 heads, 4 key/value heads where grouped, MLP 3072, one layer, sequence
128, batch 1, vocabulary 1024); vision models read 224x224 images (ResNet-18 and
MobileNetV2 whole, tools/vision_models.py's, BatchNorm statistics randomised), wav2vec2
41,040 samples (128 frames after its default feature-extractor convs), Mamba 8
positions (its unrolled scan compiles slowly). Parameters are drawn by
export_models' `randomize` from the seed of the name. Each is exported with the
chosen exporters, onnxruntime is checked against torch eager, and stitch imports,
compiles and runs it as bench/models.py does (weights bound, outputs reused).
Then stitch and onnxruntime are timed interleaved round by round, both warm,
medians of --runs, at each --threads count. BEiT and Funnel are known refusals
(Mamba compiles at 8 positions, not at 128): a model that fails at any stage is a
row with its status and the first line of its error, and the survey goes on.

Each (model, exporter) runs in a child process (a crash or --timeout is a row
too) that writes NAME-EXPORTER.json to --out, with the model as
NAME-EXPORTER.onnx and its inputs keyed by stitch parameter as
NAME-EXPORTER.inputs.npz (`stitch import NAME-EXPORTER.onnx -o m.ir --weights
w.npz`, then `stitch run m.ir --weights w.npz --inputs NAME-EXPORTER.inputs.npz
--profile` shows a slow kernel). A survey cut short resumes: models whose JSON
exists are read back, not run, unless --redo. At the end a markdown table of every
requested row, one per thread count: status, kernels, import and compile seconds,
max abs error of stitch against onnxruntime (and of onnxruntime against torch),
each engine's median and stitch's time over onnxruntime's.

Needs torch (`pip install torch==2.13.0`, the CPU build) and `pip install
'.[models]'`; without them it says so and exits. Run:
python3 bench/survey.py [--only NAME,...] [--exporters dynamo,torchscript] [--runs N] [--threads 1,2]
                        [--out DIR] [--redo] [--timeout S]

A whole survey with one exporter took 11 minutes on two busy cores (Swin's and
SegFormer's compiles are the longest, 40-75 s each); --child runs the named models
in this process, without the table (what each child does; for a debugger).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))

import export_models as em  # noqa: E402  (numpy only at import: torch is imported inside its functions)
import vision_models as vm  # noqa: E402
from models import stitch_runner  # noqa: E402
from peers import interleaved_medians, missing_packages, onnxruntime_session  # noqa: E402

SIZE = em.SIZES["bench"]
IMAGE = 224
SAMPLES = 128 * 320 + 80  # wav2vec2's convs (strides 5*2^6 = 320, receptive field 400) make 128 frames of it
CLOSE = {"rtol": 1e-3, "atol": 1e-4}  # as export_models checks onnxruntime against torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help=f"comma-separated model names (default: all): {', '.join(ARCHS)}")
    ap.add_argument("--exporters", default="dynamo", help="comma-separated: dynamo, torchscript")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--out", type=Path, default=Path("/tmp/stitch-survey"), help="JSON, ONNX and inputs per model")
    ap.add_argument("--redo", action="store_true", help="run models whose JSON is already in --out")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per model and exporter (a child's limit)")
    ap.add_argument("--child", action="store_true", help="run in this process, write the JSON, print no table")
    return ap.parse_args(argv)


# -- the registry: each builder returns (module, {input name: tensor}) as export_models' MODELS do -------------


def hidden(s, rng):
    return {"hidden_states": em.hidden_input(s, rng)}


def ids(s, rng):
    return {"input_ids": em.ids_input(s, rng)}


def pixels(s, rng):
    import torch

    return {"pixel_values": torch.from_numpy(rng.standard_normal((s.batch, 3, IMAGE, IMAGE)).astype(np.float32))}


def eager(config):
    """The config with eager attention: a layer built alone reads it (models choose their own)."""
    config._attn_implementation = "eager"
    return config


def on_hidden(layer):
    return em.wrap(lambda m, x: m(x))(layer)


def on_ids(model):
    return em.wrap(lambda m, i: m(input_ids=i))(model)


def on_pixels(model):
    return em.wrap(lambda m, px: m(pixel_values=px))(model)


def with_rotary(layer, rotary):
    """A decoder layer with its rotary embedding computed inside from positions 0..seq-1 (export_models'
    llama_layer_rotary_inside for any of the Llama family)."""
    import torch

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.rotary = layer, rotary

        def forward(self, x):
            positions = torch.arange(x.shape[1]).unsqueeze(0)
            return em.first_output(self.layer(x, position_embeddings=self.rotary(x, positions)))

    return Layer()


def bert_sizes(s) -> dict:
    """The BERT family's config arguments."""
    return dict(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=1, num_attention_heads=s.heads,
                intermediate_size=s.intermediate, max_position_embeddings=max(2 * s.seq, 64),
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def decoder_sizes(s, kv_heads: bool = True) -> dict:
    """The Llama family's config arguments."""
    grouped = {"num_key_value_heads": s.kv_heads} if kv_heads else {}
    return dict(vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=s.intermediate, num_hidden_layers=1,
                num_attention_heads=s.heads, max_position_embeddings=max(2 * s.seq, 64), use_cache=False, **grouped)


def seq2seq_sizes(s) -> dict:
    """BART, Marian and Pegasus config arguments (token ids 0-2 inside the small vocabulary)."""
    return dict(vocab_size=s.vocab, d_model=s.hidden, encoder_layers=1, decoder_layers=1,
                encoder_attention_heads=s.heads, decoder_attention_heads=s.heads, encoder_ffn_dim=s.intermediate,
                decoder_ffn_dim=s.intermediate, max_position_embeddings=max(2 * s.seq, 64), dropout=0.0,
                attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                decoder_start_token_id=1, forced_eos_token_id=2)


def vision_sizes(s) -> dict:
    """ViT-B/16's config arguments at one layer."""
    return dict(hidden_size=s.hidden, num_hidden_layers=1, num_attention_heads=s.heads,
                intermediate_size=s.intermediate, image_size=IMAGE, patch_size=16)


def distilbert(s, rng):
    from transformers import DistilBertConfig
    from transformers.models.distilbert.modeling_distilbert import TransformerBlock

    config = DistilBertConfig(vocab_size=s.vocab, n_layers=1, n_heads=s.heads, dim=s.hidden, hidden_dim=s.intermediate,
                              dropout=0.0, attention_dropout=0.0)
    return on_hidden(TransformerBlock(eager(config))), hidden(s, rng)


def roberta(s, rng):
    from transformers import RobertaConfig
    from transformers.models.roberta.modeling_roberta import RobertaLayer

    return on_hidden(RobertaLayer(eager(RobertaConfig(**bert_sizes(s))))), hidden(s, rng)


def gpt_neox(s, rng):
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXLayer, GPTNeoXRotaryEmbedding

    config = eager(GPTNeoXConfig(**decoder_sizes(s, kv_heads=False), hidden_dropout=0.0, attention_dropout=0.0))
    return with_rotary(GPTNeoXLayer(config, 0), GPTNeoXRotaryEmbedding(config)), hidden(s, rng)


def mistral(s, rng):
    from transformers import MistralConfig
    from transformers.models.mistral.modeling_mistral import MistralDecoderLayer, MistralRotaryEmbedding

    config = eager(MistralConfig(**decoder_sizes(s)))
    return with_rotary(MistralDecoderLayer(config, 0), MistralRotaryEmbedding(config)), hidden(s, rng)


def qwen2(s, rng):
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding

    config = eager(Qwen2Config(**decoder_sizes(s)))
    return with_rotary(Qwen2DecoderLayer(config, 0), Qwen2RotaryEmbedding(config)), hidden(s, rng)


def phi(s, rng):
    from transformers import PhiConfig
    from transformers.models.phi.modeling_phi import PhiDecoderLayer, PhiRotaryEmbedding

    config = eager(PhiConfig(**decoder_sizes(s, kv_heads=False), resid_pdrop=0.0))
    return with_rotary(PhiDecoderLayer(config, 0), PhiRotaryEmbedding(config)), hidden(s, rng)


def gemma2(s, rng):
    from transformers import Gemma2Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer, Gemma2RotaryEmbedding

    config = eager(Gemma2Config(**decoder_sizes(s), head_dim=s.hidden // s.heads))
    return with_rotary(Gemma2DecoderLayer(config, 0), Gemma2RotaryEmbedding(config)), hidden(s, rng)


def gptj(s, rng):
    """GPT-J's block: rotary sin/cos gathered by position ids inside its attention, over a quarter of each head
    as GPT-J-6B's 64 of 256. (Over the whole head, the TorchScript export keeps the empty pass-through slices
    `q[..., 64:]`, which stitch refuses: its tensors are never empty.)"""
    import torch
    from transformers import GPTJConfig
    from transformers.models.gptj.modeling_gptj import GPTJBlock

    config = eager(GPTJConfig(vocab_size=s.vocab, n_positions=max(2 * s.seq, 64), n_embd=s.hidden, n_layer=1,
                              n_head=s.heads, rotary_dim=s.hidden // s.heads // 4, n_inner=s.intermediate,
                              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, bos_token_id=1,
                              eos_token_id=2))
    block = em.wrap(lambda m, x: m(x, position_ids=torch.arange(x.shape[1]).unsqueeze(0)))
    return block(GPTJBlock(config, 0)), hidden(s, rng)


def t5(s, rng):
    """T5's first encoder block: it computes the relative position bias."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Block

    config = eager(T5Config(vocab_size=s.vocab, d_model=s.hidden, d_kv=s.hidden // s.heads, d_ff=s.intermediate,
                            num_layers=1, num_heads=s.heads, dropout_rate=0.0, use_cache=False, is_decoder=False))
    return on_hidden(T5Block(config, has_relative_attention_bias=True)), hidden(s, rng)


def bart(s, rng):
    from transformers import BartConfig
    from transformers.models.bart.modeling_bart import BartEncoderLayer

    return em.wrap(lambda m, x: m(x, None))(BartEncoderLayer(eager(BartConfig(**seq2seq_sizes(s))))), hidden(s, rng)


def pegasus(s, rng):
    from transformers import PegasusConfig
    from transformers.models.pegasus.modeling_pegasus import PegasusEncoderLayer

    layer = PegasusEncoderLayer(eager(PegasusConfig(**seq2seq_sizes(s))))
    return em.wrap(lambda m, x: m(x, None))(layer), hidden(s, rng)


def marian(s, rng):
    """Marian's encoder, one layer, from token ids (sinusoidal positions)."""
    from transformers import MarianConfig
    from transformers.models.marian.modeling_marian import MarianEncoder

    return on_ids(MarianEncoder(eager(MarianConfig(**seq2seq_sizes(s))))), ids(s, rng)


def convbert(s, rng):
    from transformers import ConvBertConfig
    from transformers.models.convbert.modeling_convbert import ConvBertLayer

    return on_hidden(ConvBertLayer(eager(ConvBertConfig(**bert_sizes(s), embedding_size=s.hidden)))), hidden(s, rng)


def electra(s, rng):
    from transformers import ElectraConfig
    from transformers.models.electra.modeling_electra import ElectraLayer

    config = eager(ElectraConfig(**bert_sizes(s), embedding_size=s.hidden))
    return on_hidden(ElectraLayer(config)), hidden(s, rng)


def albert(s, rng):
    from transformers import AlbertConfig, AlbertModel

    return on_ids(AlbertModel(AlbertConfig(**bert_sizes(s), embedding_size=128), add_pooling_layer=False)), ids(s, rng)


def mpnet(s, rng):
    """MPNet from token ids: its position ids are a cumulative sum over the non-padding tokens."""
    from transformers import MPNetConfig, MPNetModel

    return on_ids(MPNetModel(MPNetConfig(**bert_sizes(s)), add_pooling_layer=False)), ids(s, rng)


def deberta_v2(s, rng):
    """DeBERTa-v3-base's attention (shared keys, layer-normed relative embeddings, 256 buckets) at one layer."""
    from transformers import DebertaV2Config, DebertaV2Model

    config = DebertaV2Config(**bert_sizes(s), relative_attention=True, position_buckets=256,
                             norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
                             max_relative_positions=-1, position_biased_input=False, type_vocab_size=0)
    return on_ids(DebertaV2Model(config)), ids(s, rng)


def bloom(s, rng):
    from transformers import BloomConfig, BloomModel

    config = BloomConfig(vocab_size=s.vocab, hidden_size=s.hidden, n_layer=1, n_head=s.heads, hidden_dropout=0.0,
                         attention_dropout=0.0, use_cache=False)
    return on_ids(BloomModel(config)), ids(s, rng)


def falcon(s, rng):
    """Falcon-7B's layout (multi-query attention, attention and MLP in parallel, rotary) at one layer."""
    from transformers import FalconConfig, FalconModel

    config = FalconConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=1, num_attention_heads=s.heads,
                          ffn_hidden_size=s.intermediate, hidden_dropout=0.0, attention_dropout=0.0,
                          max_position_embeddings=max(2 * s.seq, 64), use_cache=False)
    return on_ids(FalconModel(config)), ids(s, rng)


def clip_text(s, rng):
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=s.intermediate,
                            num_hidden_layers=1, num_attention_heads=s.heads, max_position_embeddings=s.seq,
                            pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return on_ids(CLIPTextModel(config)), ids(s, rng)


def clip_vision(s, rng):
    from transformers import CLIPVisionConfig, CLIPVisionModel

    return on_pixels(CLIPVisionModel(CLIPVisionConfig(**vision_sizes(s)))), pixels(s, rng)


def deit(s, rng):
    from transformers import DeiTConfig, DeiTModel

    return on_pixels(DeiTModel(DeiTConfig(**vision_sizes(s)), add_pooling_layer=False)), pixels(s, rng)


def beit(s, rng):
    """BEiT-base's relative position bias (its table resized to the window on every call) at one layer."""
    from transformers import BeitConfig, BeitModel

    config = BeitConfig(**vision_sizes(s), use_relative_position_bias=True, use_absolute_position_embeddings=False)
    return on_pixels(BeitModel(config, add_pooling_layer=False)), pixels(s, rng)


def swin(s, rng):
    """Swin-T's four stages (96 channels to 768) with one window and one shifted-window block each."""
    from transformers import SwinConfig, SwinModel

    config = SwinConfig(image_size=IMAGE, embed_dim=96, depths=[2, 2, 2, 2], num_heads=[3, 6, 12, 24],
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0)
    return on_pixels(SwinModel(config, add_pooling_layer=False)), pixels(s, rng)


def convnext(s, rng):
    """ConvNeXt-T's four stages (96 channels to 768) with one block each."""
    from transformers import ConvNextConfig, ConvNextModel

    config = ConvNextConfig(image_size=IMAGE, hidden_sizes=[96, 192, 384, 768], depths=[1, 1, 1, 1])
    return on_pixels(ConvNextModel(config)), pixels(s, rng)


def segformer(s, rng):
    """SegFormer's MiT-b0 encoder (the config's default widths, 32 to 256 channels) with one block per stage.
    (MiT-b1's widths, 64 to 512, compile in about 100 s, most of it the fusion search.)"""
    from transformers import SegformerConfig, SegformerModel

    config = SegformerConfig(depths=[1, 1, 1, 1], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                             drop_path_rate=0.0)
    return on_pixels(SegformerModel(config)), pixels(s, rng)


def wav2vec2(s, rng):
    """wav2vec2-base's feature extractor (seven strided Conv1d), positional grouped Conv and one layer."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=1,
                            num_attention_heads=s.heads, intermediate_size=s.intermediate, hidden_dropout=0.0,
                            activation_dropout=0.0, attention_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0)
    audio = torch.from_numpy(rng.standard_normal((s.batch, SAMPLES)).astype(np.float32))
    return em.wrap(lambda m, a: m(input_values=a))(Wav2Vec2Model(config)), {"input_values": audio}


def funnel(s, rng):
    """Funnel's three pooled blocks of one layer each and its one-layer decoder."""
    from transformers import FunnelConfig, FunnelModel

    config = FunnelConfig(vocab_size=s.vocab, block_sizes=[1, 1, 1], num_decoder_layers=1, d_model=s.hidden,
                          n_head=s.heads, d_head=s.hidden // s.heads, d_inner=s.intermediate, hidden_dropout=0.0,
                          attention_dropout=0.0, activation_dropout=0.0)
    return on_ids(FunnelModel(config)), ids(s, rng)


def mamba(s, rng):
    """Mamba at one layer and 8 positions: its scan is unrolled position by position."""
    from transformers import MambaConfig, MambaModel

    config = MambaConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=1, use_cache=False)
    return em.wrap(lambda m, i: m(input_ids=i, use_cache=False))(MambaModel(config)), ids(replace(s, seq=8), rng)


@dataclass(frozen=True)
class Arch:
    label: str  # what is built, as the survey's tables name it
    build: Callable  # (Size, numpy Generator) -> (module, {input name: tensor})


ARCHS = {
    "distilbert": Arch("DistilBERT block", distilbert),
    "roberta": Arch("RoBERTa layer", roberta),
    "gpt_neox": Arch("GPT-NeoX layer", gpt_neox),
    "opt": Arch("OPT layer", em.opt_layer),
    "mistral": Arch("Mistral layer", mistral),
    "qwen2": Arch("Qwen2 layer", qwen2),
    "phi": Arch("Phi layer", phi),
    "t5": Arch("T5 block", t5),
    "vit": Arch("ViT (1 layer)", em.vit_model),
    "whisper": Arch("Whisper encoder (1 layer)", em.whisper_encoder),
    "bart": Arch("BART encoder layer", bart),
    "swin": Arch("Swin-T (2 blocks a stage)", swin),
    "bloom": Arch("BLOOM (1 layer)", bloom),
    "falcon": Arch("Falcon (1 layer)", falcon),
    "gemma2": Arch("Gemma2 layer", gemma2),
    "gptj": Arch("GPT-J block", gptj),
    "clip_text": Arch("CLIP text (1 layer)", clip_text),
    "clip_vision": Arch("CLIP vision (1 layer)", clip_vision),
    "convbert": Arch("ConvBERT layer", convbert),
    "albert": Arch("ALBERT (1 layer)", albert),
    "electra": Arch("ELECTRA layer", electra),
    "mpnet": Arch("MPNet (1 layer)", mpnet),
    "deit": Arch("DeiT (1 layer)", deit),
    "marian": Arch("Marian encoder (1 layer)", marian),
    "pegasus": Arch("Pegasus encoder layer", pegasus),
    "convnext": Arch("ConvNeXt-T (1 block a stage)", convnext),
    "deberta_v2": Arch("DeBERTa-v2 (1 layer)", deberta_v2),
    "wav2vec2": Arch("wav2vec2 (1 layer)", wav2vec2),
    "segformer": Arch("SegFormer MiT-b0 (1 block a stage)", segformer),
    "beit": Arch("BEiT (1 layer)", beit),  # refused: Resize of a weight
    "funnel": Arch("Funnel (1 layer a block)", funnel),  # refused: Einsum, ScatterND, Sin/Cos
    "mamba": Arch("Mamba (1 layer, 8 positions)", mamba),  # 8.7 s to compile at 8 positions, 170 s at 32
    "resnet18": Arch("ResNet-18", vm.resnet18),  # whole models, tools/vision_models.py's (224x224)
    "mobilenet_v2": Arch("MobileNetV2", vm.mobilenet_v2),
}


def build(name: str):
    """The seeded module (eval mode) and its inputs: export_models' `build` over this registry."""
    import torch

    torch.manual_seed(em.seed_of(name))
    module, inputs = ARCHS[name].build(SIZE, np.random.default_rng(em.seed_of(name)))
    (vm.randomize_vision if name in vm.VISION else em.randomize)(module, em.seed_of(name))
    return module.eval(), inputs


# -- one model: build, export, check, import, compile, time ---------------------------------------------------


def summary(err: BaseException) -> str:
    """The error in one line: an import error's reasons, each with the ops it refused (`no translation for Sin,
    Cos`), else the message's first line."""
    problems = getattr(err, "problems", None)
    if problems:
        ops: dict[str, list[str]] = {}  # a reason, its op type replaced by a hole -> the op types
        for p in problems:
            hole = p.reason.replace(p.op_type, "\0") if p.op_type else p.reason
            ops.setdefault(hole, [])
            if p.op_type not in ops[hole]:
                ops[hole].append(p.op_type)
        reasons = [hole.replace("\0", ", ".join(o)) if "\0" in hole else f"{', '.join(o)}: {hole}"
                   for hole, o in ops.items()]
        return f"{len(problems)} node(s): " + "; ".join(reasons)
    lines = [line for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b)))


def survey(name: str, exporter: str, args) -> dict:
    """One (model, exporter): its row's figures, `status` naming the stage that failed if one did."""
    import stitch
    import torch
    from stitch.engine.ir.parse import ir_parser
    from stitch.frontends.onnx_import import import_onnx

    stem = args.out / f"{name}-{exporter}"
    result = {"model": name, "label": ARCHS[name].label, "exporter": exporter, "status": "ok", "error": "",
              "runs": args.runs, "timings": []}
    stage = "build"
    try:
        module, inputs = build(name)
        with torch.no_grad():
            want = module(*inputs.values()).numpy()
        stage = "export"
        model = em.export(module, inputs, exporter)
        data = model.SerializeToString()
        Path(f"{stem}.onnx").write_bytes(data)
        result["onnx_nodes"] = len(model.graph.node)
        feeds = {k: v.numpy() for k, v in inputs.items()}
        stage = "onnxruntime"
        reference = em.run_onnxruntime(data, feeds)[0]
        result["ort_vs_torch"] = max_abs(reference, want)
        if not np.allclose(reference, want, **CLOSE):
            return result | {"status": "ort mismatch", "error": f"onnxruntime vs torch {result['ort_vs_torch']:.1e}"}
        stage = "import"
        ir_parser()  # built once per process (about 1 s): not part of the import's time
        start = time.perf_counter()
        imported = import_onnx(data, entry=name)
        result["import_s"] = time.perf_counter() - start
        np.savez(f"{stem}.inputs.npz", **{imported.inputs[k]: v for k, v in feeds.items()})
        stage = "compile"
        run_stitch, program, compile_s = stitch_runner(imported, feeds)
        if run_stitch is None:
            return result | {"status": "not lowered", "error": compile_s}
        result["compile_s"] = compile_s
        result["kernels"] = len(program.compiled.schedule.kernels)
        stage = "run"
        got = np.array(run_stitch()[0])
        result["stitch_vs_ort"] = max_abs(got, reference)
        if not np.allclose(got, reference, **CLOSE):
            result |= {"status": "mismatch", "error": f"stitch vs onnxruntime {result['stitch_vs_ort']:.1e}"}
        stage = "timing"
        for threads in [int(t) for t in args.threads.split(",")]:
            stitch.set_num_threads(threads)
            ort = onnxruntime_session(data, threads)
            t = interleaved_medians({"stitch": run_stitch, "onnxruntime": lambda: ort(feeds)}, args.runs)
            result["timings"].append({"threads": threads, "stitch_ms": t["stitch"] * 1e3,
                                      "ort_ms": t["onnxruntime"] * 1e3, "ratio": t["stitch"] / t["onnxruntime"]})
    except Exception as err:  # every failure is a row; the survey goes on
        result |= {"status": f"{stage} error", "error": summary(err), "error_text": str(err)[:4000]}
    return result


# -- the survey: a child process per model, the JSON files, the table ------------------------------------------


def json_path(out: Path, name: str, exporter: str) -> Path:
    return out / f"{name}-{exporter}.json"


def run_child(name: str, exporter: str, args) -> None:
    """Survey one (model, exporter) in a child process; a crash or a timeout writes its own JSON."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--redo", "--only", name,
               "--exporters", exporter, "--runs", str(args.runs), "--threads", args.threads, "--out", str(args.out)]
    path = json_path(args.out, name, exporter)
    path.unlink(missing_ok=True)
    try:
        done = subprocess.run(command, stderr=subprocess.PIPE, text=True, timeout=args.timeout)
        if path.exists():
            return
        tail = [line for line in done.stderr.splitlines() if line.strip()][-20:]
        print("\n".join(tail), file=sys.stderr)
        if done.returncode < 0:  # a signal: the tail printed above holds faulthandler's stack, if it had one
            error = f"killed by {signal.Signals(-done.returncode).name}"
        else:
            error = f"exit status {done.returncode}" + (f": {tail[-1]}" if tail else "")
        status = "crashed"
    except subprocess.TimeoutExpired:
        status, error = "timeout", f"more than {args.timeout:.0f} s"
    write_json(path, {"model": name, "label": ARCHS[name].label, "exporter": exporter, "status": status,
                      "error": error, "runs": args.runs, "timings": []})
    print(row_lines(json.loads(path.read_text()))[0], flush=True)


def provenance() -> dict:
    """The versions and the stitch commit the figures belong to."""
    import onnxruntime
    import torch
    import transformers

    try:
        commit = subprocess.run(["git", "-C", str(HERE.parent), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"stitch_commit": commit, "torch": torch.__version__, "transformers": transformers.__version__,
            "onnxruntime": onnxruntime.__version__, "date": time.strftime("%Y-%m-%d %H:%M")}


def write_json(path: Path, result: dict) -> None:
    path.write_text(json.dumps(result | provenance(), indent=1) + "\n")


COLUMNS = ["model", "built", "exporter", "status", "kernels", "import s", "compile s", "stitch vs ort", "ort vs torch",
           "threads", "stitch ms", "ort ms", "stitch/ort", "error"]
HEADER = f"| {' | '.join(COLUMNS)} |\n|{'---|' * len(COLUMNS)}"


def row_lines(r: dict) -> list[str]:
    """The table's rows of one result: one per thread count (one row when nothing was timed)."""
    def fmt(key, spec):
        return format(r[key], spec) if r.get(key) is not None else "-"

    head = (f"| {r['model']} | {r['label']} | {r['exporter']} | {r['status']} | {fmt('kernels', 'd')} | "
            f"{fmt('import_s', '.2f')} | {fmt('compile_s', '.1f')} | {fmt('stitch_vs_ort', '.1e')} | "
            f"{fmt('ort_vs_torch', '.1e')} | ")
    error = r["error"].replace("|", "/")[:200]
    if not r["timings"]:
        return [head + f"- | - | - | - | {error} |"]
    return [head + f"{t['threads']} | {t['stitch_ms']:.2f} | {t['ort_ms']:.2f} | {t['ratio']:.2f} | {error} |"
            for t in r["timings"]]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = missing_packages()
    if missing:
        print(f"bench/survey.py needs {', '.join(missing)}: pip install torch==2.13.0 (the CPU build) and "
              "pip install '.[models]'; skipped.")
        return 0
    names = args.only.split(",") if args.only else list(ARCHS)
    exporters = args.exporters.split(",")
    unknown = [n for n in names if n not in ARCHS] + [e for e in exporters if e not in em.EXPORTERS]
    if unknown:
        print(f"unknown model or exporter: {', '.join(unknown)}; models: {', '.join(ARCHS)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.child:
        p = provenance()
        print(f"stitch {p['stitch_commit']}, torch {p['torch']}, transformers {p['transformers']}, onnxruntime "
              f"{p['onnxruntime']}; hidden 768, 12 heads, sequence 128, batch 1, one layer; stitch and onnxruntime "
              f"interleaved, medians of {args.runs}, both warm; stitch/ort is stitch's time over onnxruntime's; "
              f"JSON and ONNX in {args.out}\n", flush=True)
    for name in names:
        for exporter in exporters:
            path = json_path(args.out, name, exporter)
            if path.exists() and not args.redo:
                print(f"{name}-{exporter}: {path} exists (--redo runs it again)", flush=True)
            elif args.child:
                faulthandler.enable()  # a crash in compiled code prints where it was
                write_json(path, survey(name, exporter, args))
                print("\n".join(row_lines(json.loads(path.read_text()))), flush=True)
            else:
                run_child(name, exporter, args)
    if not args.child:
        print("\n" + HEADER)
        for name in names:
            for exporter in exporters:
                print("\n".join(row_lines(json.loads(json_path(args.out, name, exporter).read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
