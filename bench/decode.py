"""Generation (issue 45): greedy decoding of GPT-2-style models, one token per step against a growing
key/value cache, through stitch (one compile of a dynamic export), onnxruntime (the same export),
torch eager and torch.compile (the same module), at 1 and 2 threads, beside the memory bound.

Models: GPT2LMHeadModel built from a config (hidden 768, 12 heads, MLP 3072, GELU, pre-layer-norm,
vocabulary 1024, 2048 positions; 2 and 12 layers by default) with seeded random weights
(tools/export_models.randomize). A *step* takes the new token and every layer's past keys and
values (`past` positions, a dynamic axis 1..2047) and returns the next token's logits and every
layer's present keys and values (past + 1 positions): exported once by torch's dynamo exporter,
imported once and compiled once by stitch (its compile seconds printed, as torch.compile's with
dynamic shapes). "stitch, cache in place" is the same export compiled with `caches=` (each layer's
cache in one array of 2048 positions, each step writing its new position only: lowering/caches.py).
A prompt of --prompt tokens is prefilled by torch eager (untimed, the same cache for
every engine); then each engine generates --tokens tokens greedily (argmax). The tokens of every
engine must be identical (the table says where they are not).

Per engine and thread count: the median milliseconds of a step over the generated tokens (median of
--rounds rounds, engines interleaved round by round), tokens/s, and the fraction of the memory bound:
a step reads every weight once (the token embedding table once more, as the tied LM head) and the
cache, so its time is at least (weight bytes + cache bytes) / read bandwidth, the bandwidth a C read
loop draws from a 512 MiB array with the same thread count, measured in each round (`read_bandwidth`).

The quantized variants (--quantized, both by default): the same export through onnxruntime's own
quantizers, `4-bit` (MatMulNBitsQuantizer: 4 bits, blocks of 32, symmetric, after Gemm is made
MatMul) and `int8` (quantize_dynamic), each run by stitch (its import of that model) and by
onnxruntime; their tokens are compared with stitch's of the same model, their bound counts the
model's own weight bytes.

Needs torch (`pip install torch==2.13.0`, the CPU build) and `pip install '.[models]'`. Run:
python3 bench/decode.py [--layers 2,12] [--threads 1,2] [--tokens 128] [--prompt 16] [--rounds 3] [--no-compile]
                        [--quantized 4-bit,int8]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
VOCAB, HIDDEN, HEADS, MLP, POSITIONS = 1024, 768, 12, 3072, 2048

READ_C = r"""
#include <stddef.h>
typedef float v16 __attribute__((vector_size(64), aligned(64)));
double st_read(const float *a, long n) {
  v16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
  for (long i = 0; i + 64 <= n; i += 64) {
    s0 += *(const v16 *)(a + i); s1 += *(const v16 *)(a + i + 16);
    s2 += *(const v16 *)(a + i + 32); s3 += *(const v16 *)(a + i + 48);
  }
  v16 s = s0 + s1 + s2 + s3;
  double t = 0; for (int k = 0; k < 16; ++k) t += s[k];
  return t;
}
"""


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="2,12")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile)")
    ap.add_argument("--quantized", default="4-bit,int8",
                    help="quantized variants to run beside f32 (stitch and onnxruntime on the same model): 4-bit "
                         "(MatMulNBitsQuantizer, block 32, symmetric), int8 (quantize_dynamic); '' for none")
    return ap.parse_args()


class ReadProbe:
    """The read bandwidth of a vectorized C sum over a 512 MiB float32 array, split across threads."""

    def __init__(self):
        import numpy as np

        self.dir = tempfile.TemporaryDirectory()
        src, lib = Path(self.dir.name) / "read.c", Path(self.dir.name) / "read.so"
        src.write_text(READ_C)
        subprocess.run(["cc", "-O3", "-march=native", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
        self.fn = ctypes.CDLL(str(lib)).st_read
        self.fn.restype = ctypes.c_double
        self.fn.argtypes = [ctypes.c_void_p, ctypes.c_long]
        # 64-byte aligned (the loop's vector loads assume it; numpy's own data is 16-byte aligned)
        block = np.ones((128 << 20) + 16, np.float32)
        skip = (-block.ctypes.data % 64) // 4
        self.array = block[skip:skip + (128 << 20)]

    def bandwidth(self, threads: int) -> float:
        """Bytes per second: the best of three reads of the whole array."""
        parts = _split(self.array, threads)
        best = float("inf")
        with ThreadPoolExecutor(threads) as pool:
            for _ in range(3):
                start = time.perf_counter()
                list(pool.map(lambda p: self.fn(p.ctypes.data, p.size), parts))
                best = min(best, time.perf_counter() - start)
        return self.array.nbytes / best


def _split(array, n: int):
    import numpy as np

    return np.array_split(array, n)


def build(layers: int):
    """(the step module, the LM for prefill, config) with seeded random weights."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    sys.path.insert(0, str(HERE.parent / "tools"))
    import export_models as em

    config = GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_embd=HIDDEN, n_layer=layers, n_head=HEADS,
                        n_inner=MLP, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, use_cache=True, bos_token_id=0, eos_token_id=0)
    name = f"decode_{layers}"
    torch.manual_seed(em.seed_of(name))
    lm = GPT2LMHeadModel(config).eval()
    em.randomize(lm, em.seed_of(name))
    return Step(lm), lm


def _step_class():
    import torch
    from transformers import DynamicCache

    class _Step(torch.nn.Module):
        """One token against every layer's cache: (logits, present keys..., present values...)."""

        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, ids, *cache):
            layers = len(cache) // 2
            past = DynamicCache(config=self.lm.config)
            for i in range(layers):
                past.update(cache[i], cache[layers + i], i)
            out = self.lm(input_ids=ids, past_key_values=past, use_cache=True)
            present = out.past_key_values.layers
            return (out.logits[:, -1, :], *[p.keys for p in present], *[p.values for p in present])

    return _Step


def Step(lm):  # noqa: N802 (a class made when torch is imported)
    return _step_class()(lm)


def names(layers: int) -> tuple[list[str], list[str]]:
    inputs = ["ids"] + [f"past_key_{i}" for i in range(layers)] + [f"past_value_{i}" for i in range(layers)]
    outputs = ["logits"] + [f"present_key_{i}" for i in range(layers)] + [f"present_value_{i}" for i in range(layers)]
    return inputs, outputs


def export(step, layers: int, example: list) -> bytes:
    import warnings

    import torch

    inputs, outputs = names(layers)
    past = torch.export.Dim("past", min=1, max=POSITIONS - 1)
    shapes = (None, tuple({2: past} for _ in range(2 * layers)))  # forward(ids, *cache)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(step, tuple(example), dynamo=True, input_names=inputs, output_names=outputs,
                                    optimize=True, external_data=False, verbose=False, dynamic_shapes=shapes)
    return program.model_proto.SerializeToString()


def quantize(model: bytes, kind: str) -> bytes:
    """The exported step quantized by onnxruntime's own tools: `4-bit` MatMulNBitsQuantizer (4 bits, blocks
    of 32 along K, symmetric) after replace_gemm_with_matmul (it quantizes MatMul only, and GPT-2's
    projections export as Gemm); `int8` quantize_dynamic (int8 weights, activations quantized per call)."""
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    from onnxruntime.quantization.onnx_model import ONNXModel

    proto = onnx.load_from_string(model)
    if kind == "4-bit":
        ONNXModel(proto).replace_gemm_with_matmul()
        quantizer = MatMulNBitsQuantizer(proto, bits=4, block_size=32, is_symmetric=True)
        quantizer.process()
        return quantizer.model.model.SerializeToString()
    assert kind == "int8", kind
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(proto, f"{tmp}/f32.onnx")
        quantize_dynamic(f"{tmp}/f32.onnx", f"{tmp}/int8.onnx", weight_type=QuantType.QInt8)
        return open(f"{tmp}/int8.onnx", "rb").read()


def initializer_bytes(model: bytes) -> int:
    """The bytes of a model's weights a step reads: every initializer but the position table (one row read)."""
    import onnx

    proto = onnx.load_from_string(model)
    return sum(onnx.numpy_helper.to_array(t).nbytes for t in proto.graph.initializer if "wpe" not in t.name)


def prefill(lm, prompt: int):
    """(the last prompt token, every layer's cache of the prompt's other tokens) by torch eager."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    ids = torch.from_numpy(rng.integers(0, VOCAB, (1, prompt)).astype(np.int64))
    with torch.no_grad():
        out = lm(input_ids=ids[:, :-1], use_cache=True)
    layers = out.past_key_values.layers
    return int(ids[0, -1]), [p.keys.numpy().copy() for p in layers] + [p.values.numpy().copy() for p in layers]


def generate(step_fn, token: int, cache: list, tokens: int) -> tuple[list[int], list[float]]:
    """Greedy tokens and each step's seconds."""
    import numpy as np

    out, times = [], []
    for _ in range(tokens):
        start = time.perf_counter()
        logits, *cache = step_fn(np.array([[token]], np.int64), cache)
        token = int(np.argmax(logits))
        times.append(time.perf_counter() - start)
        out.append(token)
    return out, times


def engines(step, model: bytes, layers: int, threads: int, with_compile: bool, compiled, variants: dict):
    """name -> step function (ids, cache arrays) -> (logits, *present arrays), all numpy. `variants`:
    kind -> the quantized model (stitch's compile of it in `compiled` under "stitch KIND")."""
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    from peers import onnxruntime_session

    inputs, _ = names(layers)
    program, imported = compiled["stitch"]

    def stitch_step(ids, cache):
        feeds = dict(zip(inputs, [ids, *cache]))
        return program(**{imported.inputs[k]: v for k, v in feeds.items()})

    ort = onnxruntime_session(model, threads)

    def ort_step(ids, cache):
        return ort(dict(zip(inputs, [ids, *cache])))

    def torch_step(module):
        def run(ids, cache):
            with torch.no_grad():
                out = module(torch.from_numpy(ids), *map(torch.from_numpy, cache))
            return [o.numpy() for o in out]
        return run

    grown, _ = compiled["stitch, cache in place"]
    names_in = inputs[1:]
    buffers = {n: grown.new_cache(imported.inputs[n]) for n in names_in}

    def in_place_step(ids, cache):
        views = []
        for n, arr in zip(names_in, cache):
            buf = buffers[n]
            if not np.may_share_memory(arr, buf):  # a generation's first step: its prompt's cache copied in
                buf[:, :, :arr.shape[2]] = arr
            views.append(buf[:, :, :arr.shape[2]])
        return grown(**{imported.inputs["ids"]: ids}, **{imported.inputs[n]: v for n, v in zip(names_in, views)})

    out = {"stitch": stitch_step, "stitch, cache in place": in_place_step, "onnxruntime": ort_step,
           "torch eager": torch_step(step)}
    if with_compile:
        out["torch.compile"] = torch_step(compiled["torch.compile"])
    for kind, quantized in variants.items():
        out[f"stitch {kind}"] = _stitch_step(*compiled[f"stitch {kind}"], inputs)
        out[f"onnxruntime {kind}"] = _ort_step(onnxruntime_session(quantized, threads), inputs)
    return out


def _stitch_step(program, imported, inputs: list[str]):
    return lambda ids, cache: program(**{imported.inputs[k]: v for k, v in zip(inputs, [ids, *cache])})


def _ort_step(session, inputs: list[str]):
    return lambda ids, cache: session(dict(zip(inputs, [ids, *cache])))


def call_overhead(program, feeds: dict, calls: int = 2000) -> float:
    """Microseconds of a call's Python side (checking the inputs, binding the symbols, passing the
    buffers' addresses) with the compiled library's entry point replaced by one that returns at once."""
    class _NoKernels:
        def stitch_main(self, *args):
            return 0

    natives = {id(p.native): p.native for p in [program] + [v for _, v in program.variants]}
    kept = {k: n.library for k, n in natives.items()}
    try:
        for n in natives.values():
            n.__dict__["library"] = _NoKernels()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            program(**feeds)
            times.append(time.perf_counter() - start)
    finally:
        for k, n in natives.items():
            n.__dict__["library"] = kept[k]
    return statistics.median(times) * 1e6


def main() -> int:
    args = parse_args()
    sys.path.insert(0, str(HERE))
    from peers import missing_packages

    missing = missing_packages()
    if missing:
        print(f"bench/decode.py needs {', '.join(missing)}: pip install torch==2.13.0 '.[models]'")
        return 1
    import numpy as np
    import stitch
    import torch
    from stitch.frontends.onnx_import import import_onnx

    probe = ReadProbe()
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {args.tokens} tokens after a prompt of "
          f"{args.prompt}, median step of {args.rounds} rounds, engines interleaved\n")
    print("| layers | threads | engine | compile s | ms / step | tokens/s | GB read / step | bound ms | "
          "fraction of bound | tokens as stitch's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for layers in [int(x) for x in args.layers.split(",")]:
        step, lm = build(layers)
        token, cache = prefill(lm, args.prompt)
        start = time.perf_counter()
        model = export(step, layers, [torch.tensor([[token]]), *map(torch.from_numpy, cache)])
        export_s = time.perf_counter() - start
        start = time.perf_counter()
        imported = import_onnx(model)
        program = stitch.compile(imported.text, weights=imported.weights)
        compile_s = {"stitch": time.perf_counter() - start}
        start = time.perf_counter()
        inputs, outputs = names(layers)
        caches = {imported.inputs[n]: outputs.index(n.replace("past", "present")) for n in inputs[1:]}
        grown = stitch.compile(imported.text, weights=imported.weights, caches=caches)
        compile_s["stitch, cache in place"] = time.perf_counter() - start
        compiled = {"stitch": (program, imported), "stitch, cache in place": (grown, imported)}
        # every parameter but the position table (one row read); the token table once (the tied LM head's)
        weight_bytes = sum(p.numel() * 4 for n, p in lm.named_parameters() if "wpe" not in n)
        mean_past = args.prompt - 1 + (args.tokens - 1) / 2
        cache_bytes = 2 * layers * HEADS * mean_past * (HIDDEN // HEADS) * 4
        step_bytes = weight_bytes + cache_bytes
        variants, bytes_of, same_as = {}, {}, {}  # quantized kind -> model; engine -> its bytes; -> its reference
        for kind in [k for k in args.quantized.split(",") if k]:
            variants[kind] = quantize(model, kind)
            start = time.perf_counter()
            try:
                q = import_onnx(variants[kind])
                compiled[f"stitch {kind}"] = (stitch.compile(q.text, weights=q.weights), q)
            except Exception as err:  # a variant stitch cannot take yet: said, and the rest still run
                print(f"(stitch {kind}: not run: {type(err).__name__}: {str(err).splitlines()[0][:300]})")
                del variants[kind]
                continue
            compile_s[f"stitch {kind}"] = time.perf_counter() - start
            for engine in (f"stitch {kind}", f"onnxruntime {kind}"):
                bytes_of[engine] = initializer_bytes(variants[kind]) + cache_bytes
                same_as[engine] = f"stitch {kind}"
        for threads in [int(t) for t in args.threads.split(",")]:
            torch.set_num_threads(threads)
            stitch.set_num_threads(threads)
            if not args.no_compile and "torch.compile" not in compiled:
                start = time.perf_counter()
                fn = torch.compile(step, dynamic=True)
                with torch.no_grad():
                    fn(torch.tensor([[token]]), *map(torch.from_numpy, cache))
                    fn(torch.tensor([[token]]), *[torch.from_numpy(np.concatenate([c, c[:, :, :1]], 2)) for c in cache])
                compiled["torch.compile"] = fn
                compile_s["torch.compile"] = time.perf_counter() - start
            fns = engines(step, model, layers, threads, not args.no_compile, compiled, variants)
            for fn in fns.values():  # warm: one step each
                fn(np.array([[token]], np.int64), cache)
            steps: dict[str, list[float]] = {k: [] for k in fns}
            tokens: dict[str, list[int]] = {}
            bandwidths = []
            for _ in range(args.rounds):
                bandwidths.append(probe.bandwidth(threads))
                for name, fn in fns.items():
                    got, times = generate(fn, token, cache, args.tokens)
                    tokens.setdefault(name, got)
                    steps[name].append(statistics.median(times))
            bandwidth = statistics.median(bandwidths)
            for name in fns:
                ms = statistics.median(steps[name]) * 1e3
                reference = same_as.get(name, "stitch")
                first = next((i for i, (a, b) in enumerate(zip(tokens[name], tokens[reference])) if a != b), None)
                same = "yes" if first is None else f"no: first differs at token {first}"
                if reference != "stitch":
                    same += f" (as {reference}'s)"
                cs = compile_s.get(name)
                read = bytes_of.get(name, step_bytes)
                bound_ms = read / bandwidth * 1e3
                print(f"| {layers} | {threads} | {name} | {'-' if cs is None else f'{cs:.1f}'} | {ms:.2f} | "
                      f"{1e3 / ms:.0f} | {read / 1e9:.3f} | {bound_ms:.2f} | {bound_ms / ms:.2f} | {same} |",
                      flush=True)
        feeds = dict(zip(names(layers)[0], [np.array([[token]], np.int64), *cache]))
        overhead = call_overhead(program, {imported.inputs[k]: v for k, v in feeds.items()})
        print(f"\n(layers {layers}: export {export_s:.1f} s; a stitch call's fixed cost on the Python side: "
              f"{overhead:.0f} us, its kernels left out)\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
