"""Quantized weights (issue 46): a decoder step's one-row products with 4-bit and 8-bit weights, stitch
against onnxruntime's MatMulNBits, beside the same products in f32.

The four products of a GPT-2 small layer (768 -> 2304, 768 -> 768, 768 -> 3072, 3072 -> 768), each
with --layers distinct weight sets called round robin, so that the weights come from memory as a
model's do and not from the last-level cache (12 layers of f32 are 340 MB; of 4-bit, 42 MB plus
the scales). Weights: random bytes, random scales, blocks of 32 along K, symmetric (zero point 8),
the layout of onnxruntime's MatMulNBits (B [N, K/32, 16], two elements a byte, the low nibble first).

Engines, each timed over a whole round of all layers' four products:
- stitch 4-bit: the product with its dequantization written in IR (nibble, cast, zero point, block
  scale), the packed bytes bound as weights (targets/c/nibble_dot.py);
- stitch 8-bit: one byte an element (u8, zero point 128);
- stitch f32: the f32 weights bound (panels, lowering/panels.py);
- onnxruntime MatMulNBits, 4 bits, accuracy_level 0 (f32 compute) and 4 (activations quantized to
  int8 per block, as onnxruntime does when a model allows it);
- onnxruntime MatMul f32.
Medians of --rounds rounds, engines interleaved (bench/peers.py); onnxruntime's threads do not
spin between calls (one session per layer and product). Prints milliseconds per round and
each engine's ratio to stitch 4-bit. Needs onnx and onnxruntime. Run:
python3 bench/quantized.py [--layers 12] [--threads 1,2] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

PRODUCTS = ((768, 2304), (768, 768), (768, 3072), (3072, 768))  # (K, N)
BLOCK = 32


def nibble_text(k: int, n: int) -> str:
    blocks = k // BLOCK
    return f"""func q4(x: f32[1, {k}], b: u8[{n}, {k // 2}], s: f32[{n}, {blocks}]) -> f32[1, {n}] {{
  wide = reshape(broadcast_to(reshape(b, shape=[{n}, {k // 2}, 1]), shape=[{n}, {k // 2}, 2]), shape=[{n}, {k}])
  q = bitand(shr(wide, cast(mul(bitand(iota(shape=[{n}, {k}], axis=1), 1), 4), dtype=u8)), 15)
  sc = reshape(broadcast_to(reshape(s, shape=[{n}, {blocks}, 1]), shape=[{n}, {blocks}, {BLOCK}]), shape=[{n}, {k}])
  return matmul(x, transpose(mul(sub(cast(q, dtype=f32), 8.0), sc), perm=[1, 0]))
}}
"""


def byte_text(k: int, n: int) -> str:
    blocks = k // BLOCK
    return f"""func q8(x: f32[1, {k}], b: u8[{n}, {k}], s: f32[{n}, {blocks}]) -> f32[1, {n}] {{
  sc = reshape(broadcast_to(reshape(s, shape=[{n}, {blocks}, 1]), shape=[{n}, {blocks}, {BLOCK}]), shape=[{n}, {k}])
  return matmul(x, transpose(mul(sub(cast(b, dtype=f32), 128.0), sc), perm=[1, 0]))
}}
"""


def f32_text(k: int, n: int) -> str:
    return f"func f(x: f32[1, {k}], w: f32[{k}, {n}]) -> f32[1, {n}] {{\n  return matmul(x, w)\n}}\n"


def matmul_nbits(k: int, n: int, b: np.ndarray, s: np.ndarray, accuracy: int) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=BLOCK, accuracy_level=accuracy)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, n])],
                              [numpy_helper.from_array(b.reshape(n, k // BLOCK, BLOCK // 2), "B"),
                               numpy_helper.from_array(s.reshape(-1), "S")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


def matmul_f32(k: int, n: int, w: np.ndarray) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph([helper.make_node("MatMul", ["A", "W"], ["Y"])], "g",
                              [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, n])],
                              [numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def dequantized(b: np.ndarray, s: np.ndarray, bits: int) -> np.ndarray:
    """W [K, N] as the IR above computes it (the f32 engines' weights, so every engine computes one product)."""
    n = b.shape[0]
    q = np.stack([b & 15, b >> 4], axis=-1).reshape(n, -1) if bits == 4 else b
    zero = 8.0 if bits == 4 else 128.0
    return ((q.astype(np.float32) - zero) * np.repeat(s, BLOCK, axis=1)).T.copy()


def onnxruntime_session(model: bytes, threads: int):
    """A session whose threads sleep between calls: this bench holds one per layer and product (48
    at 12 layers), and spinning pools would take the cores from one another."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import stitch
    from peers import importable, interleaved_medians
    from stitch.targets import runtime

    have_ort = importable("onnxruntime") and importable("onnx")
    rng = np.random.default_rng(0)
    layers = []  # per layer, per product: the weights of each form
    for _ in range(args.layers):
        products = []
        for k, n in PRODUCTS:
            b4 = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
            b8 = rng.integers(0, 256, (n, k), dtype=np.uint8)
            s = (rng.random((n, k // BLOCK), dtype=np.float32) * 0.02).astype(np.float32)
            products.append((b4, b8, s))
        layers.append(products)
    x = {k: rng.standard_normal((1, k)).astype(np.float32) for k, _ in PRODUCTS}

    programs: dict[str, list] = {"stitch 4-bit": [], "stitch 8-bit": [], "stitch f32": []}
    for products in layers:
        for (k, n), (b4, b8, s) in zip(PRODUCTS, products):
            programs["stitch 4-bit"].append((k, stitch.compile(nibble_text(k, n), weights={"b": b4, "s": s})))
            programs["stitch 8-bit"].append((k, stitch.compile(byte_text(k, n), weights={"b": b8, "s": s})))
            programs["stitch f32"].append((k, stitch.compile(f32_text(k, n), weights={"w": dequantized(b4, s, 4)})))
    # every engine computes the same product: check one layer against the f32 one
    for name in ("stitch 4-bit", "stitch f32"):
        k, prog = programs[name][0]
        want = x[k] @ dequantized(layers[0][0][0], layers[0][0][2], 4)
        np.testing.assert_allclose(prog(x=x[k])[0], want, rtol=1e-3, atol=1e-3, err_msg=name)

    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {args.layers} layers of the products "
          f"{', '.join(f'{k}->{n}' for k, n in PRODUCTS)}; median of {args.rounds} interleaved rounds\n")
    for threads in [int(t) for t in args.threads.split(",")]:
        runtime.set_threads(threads)
        engines = {name: (lambda progs=progs: [p(x=x[k]) for k, p in progs]) for name, progs in programs.items()}
        if have_ort:
            for accuracy in (0, 4):
                sessions = [(k, onnxruntime_session(matmul_nbits(k, n, b4, s, accuracy), threads))
                            for products in layers for (k, n), (b4, _, s) in zip(PRODUCTS, products)]
                engines[f"onnxruntime 4-bit acc {accuracy}"] = (
                    lambda sessions=sessions: [run({"A": x[k]}) for k, run in sessions])
            f32 = [(k, onnxruntime_session(matmul_f32(k, n, dequantized(b4, s, 4)), threads))
                   for products in layers for (k, n), (b4, _, s) in zip(PRODUCTS, products)]
            engines["onnxruntime f32"] = lambda f32=f32: [run({"A": x[k]}) for k, run in f32]
        ms = {name: t * 1e3 for name, t in interleaved_medians(engines, args.rounds).items()}
        base = ms["stitch 4-bit"]
        print(f"{threads} thread(s)")
        print(f"  {'engine':28} {'ms/round':>9} {'vs stitch 4-bit':>16}")
        for name, t in ms.items():
            print(f"  {name:28} {t:9.3f} {t / base:16.2f}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
