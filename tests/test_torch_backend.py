"""`torch.compile(model, backend="stitch")` (issue 50; engine/torch_backend.py, frontends/torch_fx.py):
small modules compiled by the backend match torch eager (rtol 1e-3, atol 1e-4), an encoder called at
five sequence lengths compiles twice, an op stitch lacks runs in torch with a warning, a graph that
needs gradients runs in eager. Skipped without torch."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
from stitch.engine import torch_backend  # noqa: E402
from stitch_testing import needs_cc  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

pytestmark = needs_cc
RTOL, ATOL = 1e-3, 1e-4


class Encoder(nn.Module):
    """Post-norm attention with an additive padding mask, softmax, an erf-GELU MLP (a BERT layer)."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).split(d, dim=2))
        s = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + (1.0 - mask[:, None, None, :]) * -1e4
        a = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = self.ln1(x + self.out(a))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Attention(nn.Module):
    """Layer norm, one head of attention with an additive padding mask, a projection."""

    def __init__(self, d=16):
        super().__init__()
        self.ln, self.qkv, self.out = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x, mask):
        q, k, v = self.qkv(self.ln(x)).split(x.shape[-1], dim=2)
        s = q @ k.transpose(-1, -2) / math.sqrt(x.shape[-1]) + (1.0 - mask[:, None, :]) * -1e4
        return x + self.out(torch.softmax(s, dim=-1) @ v)


class Causal(nn.Module):
    """Pre-norm causal attention through scaled_dot_product_attention and a tanh-GELU MLP (GPT-2)."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(d, dim=2))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class CacheStep(nn.Module):
    """One new token against a key/value cache: the present cache is the past one and the new position."""

    def __init__(self, d=32):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x, past_k, past_v):
        k = torch.cat([past_k, self.k(x)], dim=1)
        v = torch.cat([past_v, self.v(x)], dim=1)
        w = torch.softmax(self.q(x) @ k.transpose(1, 2) / math.sqrt(x.shape[-1]), dim=-1)
        return w @ v, k, v


class ConvNorm(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.norm, self.conv = nn.GroupNorm(4, c), nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return x + self.conv(F.silu(self.norm(x)))


class WithCumprod(nn.Module):
    """A linear layer, an op stitch lacks (cumprod), then more stitch ops."""

    def __init__(self, d=16):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        h = torch.sigmoid(self.a(x))
        return torch.tanh(self.b(torch.cumprod(h, dim=-1)) * 2.0 + h)


def seeded(module: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for p in module.parameters():
        p.data.uniform_(-0.5, 0.5)
    return module.eval()


def compiled(module: nn.Module, **options):
    torch._dynamo.reset()
    return torch.compile(module, backend="stitch", options=options or None)


def assert_matches(got, want):
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", ["encoder", "causal", "cache step", "conv", "conv winograd", "encoder layer"])
def test_a_module_matches_eager(name):
    torch.manual_seed(1)
    module, args = {
        "encoder": (Encoder, (torch.randn(2, 6, 32), torch.tensor([[1.0] * 6, [1.0] * 4 + [0.0] * 2]))),
        "causal": (Causal, (torch.randn(1, 7, 32),)),
        "cache step": (CacheStep, (torch.randn(1, 1, 32), torch.randn(1, 5, 32), torch.randn(1, 5, 32))),
        "conv": (ConvNorm, (torch.randn(1, 8, 6, 6),)),
        # 16 channels: the 3x3 conv of the normalized value is F(2x2, 3x3), half a tile left along each axis
        "conv winograd": (lambda: ConvNorm(16), (torch.randn(2, 16, 7, 5),)),
        "encoder layer": (lambda: nn.TransformerEncoderLayer(32, 2, 64, batch_first=True), (torch.randn(2, 5, 32),)),
    }[name]
    module = seeded(module())
    before = dict(torch_backend.stats)
    with torch.no_grad():
        want = module(*args)
        got = compiled(module)(*args)
    assert_matches(got, want)
    assert torch_backend.stats["programs"] > before.get("programs", 0)  # (stitch ran it, not torch)
    assert torch_backend.stats["eager"] == before.get("eager", 0)


def test_an_encoder_at_five_lengths_compiles_twice():
    """dynamo's static first compile, then one symbolic program serves every later length."""
    module = seeded(Attention())
    fn = compiled(module, max_size=64)
    before = torch_backend.stats["programs"]
    torch.manual_seed(2)
    with torch.no_grad():
        for t in (5, 9, 12, 17, 30):
            x, mask = torch.randn(1, t, 16), torch.ones(1, t)
            mask[0, -1] = 0.0
            assert_matches(fn(x, mask), module(x, mask))
    assert torch_backend.stats["programs"] - before == 2


def test_batch_and_length_both_dynamic_compile_twice():
    """Two sizes dynamo marks dynamic in one graph (batch and sequence) become two symbols of one
    program: the static first compile, then one symbolic program for every later (batch, length)."""
    module = seeded(Attention())
    fn = compiled(module, max_size=32)
    before, eager = torch_backend.stats["programs"], torch_backend.stats["eager"]
    torch.manual_seed(4)
    with torch.no_grad():
        for b, t in ((1, 5), (2, 9), (3, 12), (2, 17), (4, 3)):
            x, mask = torch.randn(b, t, 16), torch.ones(b, t)
            mask[:, -1] = 0.0
            assert_matches(fn(x, mask), module(x, mask))
    assert torch_backend.stats["programs"] - before == 2 and torch_backend.stats["eager"] == eager


def test_a_length_past_the_range_runs_in_torch():
    module = seeded(CacheStep())
    fn = compiled(module, max_size=8)
    torch.manual_seed(3)
    with torch.no_grad():
        for past in (3, 4, 12):  # 12 + 1 positions: past max_size
            args = (torch.randn(1, 1, 32), torch.randn(1, past, 32), torch.randn(1, past, 32))
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                assert_matches(fn(*args), module(*args))


def test_an_op_stitch_lacks_runs_in_torch_with_one_warning():
    module = seeded(WithCumprod())
    fn = compiled(module)
    torch_backend._warned.clear()
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for seed in (4, 5):
            torch.manual_seed(seed)
            x = torch.randn(3, 16)
            assert_matches(fn(x), module(x))
    named = [w for w in caught if "cumprod" in str(w.message)]
    assert len(named) == 1 and "in torch" in str(named[0].message)


def test_a_graph_that_needs_gradients_runs_in_eager():
    module = seeded(Causal())
    fn = compiled(module)
    torch_backend._warned.clear()
    x = torch.randn(1, 4, 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = fn(x)
    assert any("inference only" in str(w.message) for w in caught)
    y.sum().backward()  # gradients flow: torch ran it
    assert module.fc.weight.grad is not None
    torch.testing.assert_close(y, module(x), rtol=RTOL, atol=ATOL)


def test_a_weight_changed_in_place_is_bound_again():
    module = seeded(CacheStep())
    fn = compiled(module)
    args = (torch.randn(1, 1, 32), torch.randn(1, 3, 32), torch.randn(1, 3, 32))
    with torch.no_grad():
        fn(*args)
        module.q.weight.mul_(-2.0)
        assert_matches(fn(*args), module(*args))


def test_the_backend_is_found_by_name_without_importing_stitch():
    """The torch_dynamo_backends entry point of the installed package (pyproject.toml): torch.compile looks
    the name up with lookup_backend, in a process that has not imported stitch (the other tests here
    compile with backend="stitch" too)."""
    code = ("import sys, torch\n"
            "from torch._dynamo import lookup_backend\n"
            "assert 'stitch' not in sys.modules\n"
            "fn = lookup_backend('stitch')\n"
            "print(fn.__module__, fn.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["stitch.engine.torch_backend", "stitch_backend"]


def test_an_unknown_option_is_one_clear_error():
    module = seeded(CacheStep())
    with pytest.raises(Exception, match="no option 'tile'"):
        with torch.no_grad():
            compiled(module, tile=4)(torch.randn(1, 1, 32), torch.randn(1, 3, 32), torch.randn(1, 3, 32))


def test_winograd_can_be_turned_off_and_the_option_is_checked():
    """options={"winograd": False}: every conv its direct product, the same results; not a bool: an error."""
    module = seeded(ConvNorm(16))
    x = torch.randn(1, 16, 6, 6)
    with torch.no_grad():
        assert_matches(compiled(module, winograd=False)(x), module(x))
        with pytest.raises(Exception, match="winograd must be True or False"):
            compiled(module, winograd="no")(x)
