"""torch.compile(model, backend="stitch") against Inductor (torch.compile(model)) and torch eager (issue 50).

Models, written in torch with seeded random weights (hidden 768, 12 heads, MLP 3072), batch 1:
  gpt2 block      pre-norm causal attention (scaled_dot_product_attention), tanh-GELU MLP; 128 tokens
  bert layer      post-norm attention with an additive padding mask, softmax, erf-GELU MLP; 128 tokens
  encoder layer   nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True) (its fused inference op in
                  torch eager and Inductor; stitch decomposes it, engine/torch_backend.py); 128 tokens
  decoder step    2 GPT-2 layers and the final norm for one new token against a key/value cache of 127
                  positions (the present caches are outputs)
  conv block      GroupNorm(32) + SiLU + 3x3 conv, twice, and the residual: a U-Net resnet block, 128
                  channels at 32x32 (--conv-channels, --conv-size)

Each model is compiled by both backends under torch.no_grad() in this process; `compile s` is the first
call's time less an eager call's, with empty caches (Inductor's FX graph cache off, stitch's C cache a
fresh directory). Outputs are checked against eager (rtol 1e-3, atol 1e-4: `ok`). Then, per thread count
(torch.set_num_threads and stitch.set_num_threads), the engines are timed interleaved: --rounds rounds,
each engine --calls calls a round; the table gives the median milliseconds a call and the ratios
against Inductor and eager, with the load average when the row started (the machine is shared).

Needs torch (`pip install torch==2.13.0`, the CPU build). Run:
python3 bench/torch_compile.py [--models gpt2,bert,encoder,decoder,conv] [--threads 1,2] [--rounds 5] [--calls 20]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

HIDDEN, HEADS, MLP, TOKENS, PAST = 768, 12, 3072, 128, 127


def modules():
    """The model classes (made once torch is imported)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    def attention_heads(z, b, t, heads):
        return z.view(b, t, heads, -1).transpose(1, 2)

    class GPT2Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
            self.c_attn, self.c_proj = nn.Linear(HIDDEN, 3 * HIDDEN), nn.Linear(HIDDEN, HIDDEN)
            self.c_fc, self.mlp_proj = nn.Linear(HIDDEN, MLP), nn.Linear(MLP, HIDDEN)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (attention_heads(z, b, t, HEADS) for z in self.c_attn(self.ln_1(x)).split(d, dim=2))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class BertLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(HIDDEN, HIDDEN) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(HIDDEN, eps=1e-12), nn.LayerNorm(HIDDEN, eps=1e-12)
            self.fc1, self.fc2 = nn.Linear(HIDDEN, MLP), nn.Linear(MLP, HIDDEN)

        def forward(self, x, mask):
            b, t, d = x.shape
            q, k, v = (attention_heads(p(x), b, t, HEADS) for p in (self.q, self.k, self.v))
            s = q @ k.transpose(-1, -2) / math.sqrt(d // HEADS) + (1.0 - mask[:, None, None, :]) * -10000.0
            a = torch.softmax(s, dim=-1) @ v
            x = self.ln1(x + self.o(a.transpose(1, 2).reshape(b, t, d)))
            return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))

    class DecoderStep(nn.Module):
        def __init__(self, layers=2):
            super().__init__()
            self.blocks = nn.ModuleList(GPT2Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(HIDDEN)

        def forward(self, x, *cache):
            b, _, d = x.shape
            present = []
            for i, blk in enumerate(self.blocks):
                q, k, v = (attention_heads(z, b, 1, HEADS) for z in blk.c_attn(blk.ln_1(x)).split(d, dim=2))
                k, v = torch.cat([cache[2 * i], k], dim=2), torch.cat([cache[2 * i + 1], v], dim=2)
                present += [k, v]
                w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // HEADS), dim=-1)
                x = x + blk.c_proj((w @ v).transpose(1, 2).reshape(b, 1, d))
                x = x + blk.mlp_proj(F.gelu(blk.c_fc(blk.ln_2(x)), approximate="tanh"))
            return (self.ln_f(x), *present)

    class ConvBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.n1, self.n2 = nn.GroupNorm(32, c), nn.GroupNorm(32, c)
            self.c1, self.c2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)

        def forward(self, x):
            return x + self.c2(F.silu(self.n2(self.c1(F.silu(self.n1(x))))))

    return GPT2Block, BertLayer, DecoderStep, ConvBlock


def build(name: str, args):
    """(module, example inputs) with seeded weights and inputs."""
    import torch
    from torch import nn

    GPT2Block, BertLayer, DecoderStep, ConvBlock = modules()
    torch.manual_seed(0)
    if name == "gpt2":
        module, inputs = GPT2Block(), (torch.randn(1, TOKENS, HIDDEN),)
    elif name == "bert":
        mask = torch.ones(1, TOKENS)
        mask[0, -16:] = 0.0
        module, inputs = BertLayer(), (torch.randn(1, TOKENS, HIDDEN), mask)
    elif name == "encoder":
        module = nn.TransformerEncoderLayer(HIDDEN, HEADS, MLP, batch_first=True)
        inputs = (torch.randn(1, TOKENS, HIDDEN),)
    elif name == "decoder":
        module = DecoderStep()
        inputs = (torch.randn(1, 1, HIDDEN), *[torch.randn(1, HEADS, PAST, HIDDEN // HEADS) for _ in range(4)])
    elif name == "conv":
        module = ConvBlock(args.conv_channels)
        inputs = (torch.randn(1, args.conv_channels, args.conv_size, args.conv_size),)
    else:
        raise SystemExit(f"no model {name!r} (gpt2, bert, encoder, decoder, conv)")
    return module.eval(), inputs


def flat(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def median_ms(fn, inputs, calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2,bert,encoder,decoder,conv")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--conv-channels", type=int, default=128)
    ap.add_argument("--conv-size", type=int, default=32)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("bench/torch_compile.py needs torch: pip install torch==2.13.0 (the CPU build)")
        return 1
    import stitch
    import torch._inductor.config
    from peers import round_order

    torch._inductor.config.fx_graph_cache = False  # compile seconds with empty caches, as stitch's
    threads = [int(t) for t in args.threads.split(",")]
    print(f"torch {torch.__version__}, stitch {stitch.__version__}, {os.cpu_count()} CPUs, load {load()}\n")
    rows, compile_rows = [], []
    for name in args.models.split(","):
        module, inputs = build(name, args)
        engines = {"eager": module}
        compile_s = {}
        torch.set_num_threads(threads[0])
        stitch.set_num_threads(threads[0])
        with torch.no_grad():
            want = flat(module(*inputs))
            t0 = time.perf_counter()
            module(*inputs)
            eager_s = time.perf_counter() - t0
            for engine, make in (("inductor", lambda: torch.compile(module)),
                                 ("stitch", lambda: torch.compile(module, backend="stitch", options={
                                     "cache_dir": tempfile.mkdtemp(prefix="stitch-bench-")}))):
                torch._dynamo.reset()
                fn = make()
                t0 = time.perf_counter()
                got = flat(fn(*inputs))
                compile_s[engine] = time.perf_counter() - t0 - eager_s
                ok = all(torch.allclose(g, w, rtol=1e-3, atol=1e-4) for g, w in zip(got, want))
                err = max(float((g - w).abs().max()) for g, w in zip(got, want))
                compile_rows.append((name, engine, compile_s[engine], ok, err))
                engines[engine] = fn
            for n in threads:
                torch.set_num_threads(n)
                stitch.set_num_threads(n)
                started = load()
                times = {e: [] for e in engines}
                for r in range(args.rounds):
                    for engine, fn in round_order(engines, r):
                        times[engine].append(median_ms(fn, inputs, args.calls))
                rows.append((name, n, {e: statistics.median(v) for e, v in times.items()}, started))
        print(f"{name}: compiled ({load()})", file=sys.stderr)
    print("| model | threads | eager ms | Inductor ms | stitch ms | stitch / Inductor | stitch / eager | load |")
    print("|---|---|---|---|---|---|---|---|")
    for name, n, ms, started in rows:
        print(f"| {name} | {n} | {ms['eager']:.3f} | {ms['inductor']:.3f} | {ms['stitch']:.3f} | "
              f"{ms['stitch'] / ms['inductor']:.2f} | {ms['stitch'] / ms['eager']:.2f} | {started} |")
    print("\n| model | backend | compile s | matches eager | max abs err |")
    print("|---|---|---|---|---|")
    for name, engine, seconds, ok, err in compile_rows:
        print(f"| {name} | {engine} | {seconds:.1f} | {'ok' if ok else 'NO'} | {err:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
