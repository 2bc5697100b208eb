"""Updating in place (lowering/reuse.py): a temporary made element for element from one nothing reads
afterwards takes its place; anything less than that keeps its own buffer.

The property test runs random kernels on a scalar interpreter whose on-chip buffers start as NaN at
every tile: where the kernel as written never reads an element it has not written, the rewritten
kernel reads the same values in the same order."""

from __future__ import annotations

import math
import re

import numpy as np
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.schedule.target import parse_target
from stitch.lowering.loops import (
    Accumulate,
    Buffer,
    For,
    Ix,
    Lit,
    Load,
    LoopKernel,
    Op,
    Store,
    print_loops,
)
from stitch.lowering.lower import lower
from stitch.lowering.reuse import update_in_place
from stitch.lowering.verify import verify
from stitch.targets import cc, cpu
from stitch_testing import EXAMPLES, compile_text, executes_like_the_reference, needs_cc, target_text
from test_alloc import load, loop, one_kernel, shared, store, text, tile

LAYERNORM = (EXAMPLES / "layernorm_large.ir").read_text().replace("512, 64, 256", "64, 8, 32").replace(
    "64, 256", "8, 32")


def rewritten(kernel: LoopKernel) -> LoopKernel:
    program = update_in_place(one_kernel(kernel))
    verify(program)
    return program.kernels[0]


def elementwise(out: str, a: str, op: str = "neg", n: int = 8, var: str = "i") -> For:
    return loop(var, n, store(out, (var,), Op(op, (load(a, var),), "f32")))


def test_a_layer_norms_deviations_take_the_place_of_its_values():
    c = compile_text(LAYERNORM, parse_target(target_text("cpu", onchip_bytes=65536)))
    program = lower(c)
    loops = print_loops(program)
    assert "k0_v3" not in loops  # d in a's bytes
    assert "k0_v4[p0, p1, p2] = sub(k0_v4[p0, p1, p2], k0_v5[p1, p2])" in loops
    executes_like_the_reference(program, c.graph, 0)
    assert program.kernels[0].merged_bytes < 2 * 64 * 2 * 32 * 4  # one tile of a, not two


@needs_cc
def test_the_compiled_layer_norm_equals_the_reference(cache):
    f = stitch.compile(LAYERNORM, cache_dir=cache)
    assert "b_k0_v3" not in f.native.source_path.read_text()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8, 32), dtype=np.float32)
    g, b = rng.standard_normal((8, 32), dtype=np.float32), rng.standard_normal((8, 32), dtype=np.float32)
    (got,) = f(x=x, gamma=g, beta=b)
    a = x + x
    d = a - a.mean(axis=0)
    want = d * (1 / np.sqrt((d * d).mean(axis=0) + np.float32(1e-5))) * g + b
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_a_chain_folds_into_one_buffer():
    k = LoopKernel("k", [shared("a", 8), shared("b", 8), shared("c", 8)], [tile("t", 4,
        loop("i", 8, store("a", ("i",), load("x", "i"))),
        elementwise("b", "a"), elementwise("c", "b", "exp"),
        loop("i", 8, store("y", ("i",), load("c", "i"))))])
    out = text(rewritten(k))
    assert [b.name for b in rewritten(k).allocs] == ["a"]
    assert "a[i] = neg(a[i])" in out and "a[i] = exp(a[i])" in out and "y[i] = a[i]" in out


def test_what_keeps_its_own_buffer():
    first = loop("i", 8, store("a", ("i",), load("x", "i")))
    use_b = loop("i", 8, store("y", ("i",), load("b", "i")))
    cases = {
        "a read later": [first, elementwise("b", "a"), loop("i", 8, store("y", ("i",), load("a", "i"))), use_b],
        "a read at another index": [first, loop("i", 7, store("b", ("i",), Op(
            "add", (load("a", "i"), load("a", Ix.var("i") + 1)), "f32"))), use_b],
        "a read by another statement of the loop": [first, loop("i", 8, store("b", ("i",), load("a", "i")),
                                                                 store("y", ("i",), load("a", "i"))), use_b],
        "an element written twice": [first, loop("r", 2, elementwise("b", "a")), use_b],
        "b written by another statement": [first, loop("i", 8, store("b", ("i",), load("a", "i")),
                                                        store("b", (0,), load("x", 0))), use_b],
        "b used before": [store("b", (0,), load("x", 0)), first, elementwise("b", "a"), use_b],
        "another shape": [first, loop("i", 4, store("c", ("i",), load("a", "i"))),
                          loop("i", 4, store("y", ("i",), load("c", "i")))],
    }
    for name, body in cases.items():
        k = LoopKernel("k", [shared("a", 8), shared("b", 8), shared("c", 4)], [tile("t", 4, *body)])
        assert text(rewritten(k)) == text(k), name


# -- the property: the same values read, in the same order -------------------------------------


@st.composite
def kernels(draw) -> LoopKernel:
    """Random loops over six on-chip buffers of two shapes, elementwise nests among them (the
    pattern the pass rewrites) and arbitrary statements (which may stop it)."""
    shapes = [(3,), (3,), (3,), (2, 3), (2, 3), (2, 3)]
    bufs = [Buffer(f"b{i}", draw(st.sampled_from(["shared", "local"])), "f32", s) for i, s in enumerate(shapes)]
    written = {"x"}
    full: set[str] = set()  # written whole by a nest
    names = iter(range(10**6))

    def value(index_of) -> object:
        readable = [b for b in bufs if b.name in written] + [Buffer("x", "global", "f32", (4,))]
        args = tuple(Load(b.name, index_of(b)) for b in draw(st.lists(st.sampled_from(readable), max_size=3)))
        return Op("add", args, "f32") if len(args) > 1 else args[0] if args else Lit(1.5, "f32")

    def nest(b: Buffer) -> For:
        """b = f(buffers of its shape, mostly at the same index), over all of b; at times beside
        another statement, or repeated."""
        vars_ = [f"e{next(names)}" for _ in b.shape]
        same = tuple(Ix.var(v) for v in vars_)

        def index_of(c: Buffer) -> tuple[Ix, ...]:
            if c.shape == b.shape and draw(st.integers(0, 3)):
                return same
            return tuple(Ix((), draw(st.integers(0, 1))) for _ in c.shape)

        made = [c for c in bufs if c.name in full and c.shape == b.shape and c.name != b.name]
        v = value(index_of)
        if made and draw(st.integers(0, 3)):  # mostly from a buffer made whole before: the pattern
            v = Op("add", (Load(draw(st.sampled_from(made)).name, same), v), "f32")
        body = [Store(b.name, same, v)]
        if draw(st.integers(0, 3)) == 0:
            c = b if draw(st.booleans()) else draw(st.sampled_from(bufs))
            body.insert(draw(st.integers(0, 1)), Store(c.name, index_of(c), value(index_of)))
            written.add(c.name)
        loop = body
        for v, n in reversed(list(zip(vars_, b.shape))):
            loop = [For(v, n, "serial", loop)]
        if draw(st.integers(0, 4)) == 0:
            loop = [For(f"r{next(names)}", 2, "serial", loop)]
        return loop[0]

    def any_stmt(bound: list[tuple[str, int]], depth: int):
        if depth < 2 and draw(st.integers(0, 3)) == 0:
            var, extent = f"i{next(names)}", draw(st.integers(1, 3))
            kind = draw(st.sampled_from(["serial", "reduce", "parallel"]))
            return For(var, extent, kind,
                       [any_stmt(bound + [(var, extent)], depth + 1) for _ in range(draw(st.integers(1, 2)))])
        b = draw(st.sampled_from(bufs))

        def index_of(c: Buffer):
            def one(d: int) -> Ix:
                fits = [v for v, n in bound if n <= d]
                return Ix.var(draw(st.sampled_from(fits))) if fits and draw(st.booleans()) else Ix((), draw(st.integers(0, 1)))
            return tuple(one(d) for d in c.shape)

        leaf_value = value(index_of)
        if b.name in written and draw(st.booleans()):
            return Accumulate(b.name, index_of(b), "sum", leaf_value)
        written.add(b.name)
        return Store(b.name, index_of(b), leaf_value)

    body = []
    for _ in range(draw(st.integers(2, 7))):
        if draw(st.integers(0, 2)):
            fresh = [c for c in bufs if c.name not in written]
            b = draw(st.sampled_from(fresh if fresh and draw(st.integers(0, 3)) else bufs))
            body.append(nest(b))
            written.add(b.name)
            full.add(b.name)
        else:
            body.append(any_stmt([], 0))
    last = [b for b in bufs if b.name in written][-1:] or [Buffer("x", "global", "f32", (4,))]
    body.append(For("o", 3, "serial", [Store("y", (Ix.var("o"),), Load(last[0].name, tuple(
        Ix.var("o") if d == 3 else Ix() for d in last[0].shape)))]))  # the values of one buffer
    return LoopKernel("k", bufs, [For("t", 2, "parallel", body)])


def trace(kernel: LoopKernel) -> list[float] | None:
    """The values the kernel's loads read, in order; None if it reads an element never written."""
    memory: dict[str, np.ndarray] = {"x": np.arange(1.0, 5.0), "y": np.zeros(4)}
    seen: list[float] = []

    def at(index: tuple[Ix, ...], env: dict[str, int]) -> tuple[int, ...]:
        return tuple(ix.const + sum(env[t] * c for t, c in ix.terms) for ix in index)

    def ev(e, env) -> float:
        if isinstance(e, Lit):
            return e.value
        if isinstance(e, Load):
            v = float(memory[e.buffer][at(e.index, env)])
            seen.append(v)
            return v
        assert e.op == "add"
        return sum(ev(a, env) for a in e.args)

    def run(stmts, env):
        for s in stmts:
            if isinstance(s, For):
                for i in range(s.extent):
                    if s.var == "t":  # a tile: its own buffers, not yet written
                        memory.update({b.name: np.full(b.shape, np.nan) for b in kernel.allocs})
                    run(s.body, {**env, s.var: i})
                continue
            v, i = ev(s.value, env), at(s.index, env)
            memory[s.buffer][i] = memory[s.buffer][i] + v if isinstance(s, Accumulate) else v

    run(kernel.body, {})
    return None if any(math.isnan(v) for v in seen) else seen


@settings(max_examples=300, deadline=None)
@given(kernels())
def test_rewritten_kernels_read_the_same_values(kernel):
    program = one_kernel(kernel, 4)
    verify(program)
    before = trace(kernel)
    after_kernel = update_in_place(program).kernels[0]
    if before is None:
        return
    assert trace(after_kernel) == before, text(after_kernel)


def test_the_property_sees_rewrites():
    """The generator makes kernels the pass rewrites, often enough to matter."""
    rewrites = []

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(kernels())
    def count(kernel):
        if trace(kernel) is not None:
            rewrites.append(len(update_in_place(one_kernel(kernel, 4)).kernels[0].allocs) < len(kernel.allocs))

    count()
    assert sum(rewrites) >= 10, (sum(rewrites), len(rewrites))  # 24 of 145 when written


@needs_cc
def test_an_update_in_place_keeps_its_vector_code(cache):
    """The BERT layer's softmax exponentials are written over the scores they are made from; the C
    still computes that row with 16-lane exponentials (a store reading its own buffer, at the element
    it writes, is a row like any other), and the layer still matches onnxruntime."""
    from test_onnx_models import ATOL, RTOL, load

    imported, _, inputs, want = load("bert_layer-dynamo")
    f = stitch.compile(imported.text, cache_dir=cache, weights=imported.weights)
    rows = re.findall(r"\*\(st_vf32 \*\)&(b_\w+)\[[^\]]*\] = st_expv_f32\(\(\(\*\(st_vf32 \*\)&(b_\w+)\[",
                      f.native.source_path.read_text())
    if cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) == 64:  # (16-lane exponentials: AVX-512's)
        assert any(out == src for out, src in rows), rows
    with np.errstate(all="ignore"):
        got = f(**{k: v for k, v in inputs.items() if k not in imported.weights})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
