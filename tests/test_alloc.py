"""Liveness and merged shared allocations (lowering/liveness.py, lowering/alloc.py).

The cases restate the tests of TVM's MergeSharedMemoryAllocations rework
(seeds/tvm-merge-shared-memory-commit.txt) for stitch: buffers live at
different times share bytes, each kernel launch gets its own merged buffer,
dtype alignment is kept. Kernels are written by hand as LoopKernels.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stitch.engine.ir.program import DTYPES, dtype_bytes
from stitch.lowering.alloc import buffer_alignment, merge_allocations, shared_bytes
from stitch.lowering.liveness import live_ranges, loads
from stitch.lowering.loops import (
    Accumulate,
    Buffer,
    For,
    Ix,
    Lit,
    Load,
    LoopKernel,
    LoopProgram,
    Op,
    Store,
    print_kernel,
    print_loops,
)
from stitch.lowering.verify import verify

# -- building IR by hand ---------------------------------------------------------


def ix(i) -> Ix:
    return i if isinstance(i, Ix) else Ix.var(i) if isinstance(i, str) else Ix((), i)


def load(name: str, *index) -> Load:
    return Load(name, tuple(ix(i) for i in index))


def store(name: str, index: tuple, value) -> Store:
    return Store(name, tuple(ix(i) for i in index), value)


def loop(var: str, extent: int, *body, kind: str = "serial") -> For:
    return For(var, extent, kind, list(body))


def tile(var: str, extent: int, *body) -> For:
    return loop(var, extent, *body, kind="parallel")


def shared(name: str, *shape: int, dtype: str = "f32") -> Buffer:
    return Buffer(name, "shared", dtype, shape)


def one_kernel(kernel: LoopKernel, n: int = 512) -> LoopProgram:
    """A program around one kernel reading param x and writing output y, both f32[n]."""
    return LoopProgram("p", [Buffer("x", "global", "f32", (n,))], ["y"], [], [kernel],
                       [Buffer("y", "global", "f32", (n,))])


def text(kernel: LoopKernel) -> str:
    return "\n".join(print_kernel(kernel)) + "\n"


X = load("x", 0)  # a value from the param, for statements whose value does not matter


def chain(name: str, a: str, b: str, out: str = "y") -> LoopKernel:
    """The seed's kernel: a = x; b = a; y = b, one thread per element (a, b overlap at b = a)."""
    return LoopKernel(name, [shared(a, 128), shared(b, 128)], [
        tile("t", 128,
             store(a, ("t",), load("x", "t")),
             store(b, ("t",), load(a, "t")),
             store(out, ("t",), load(b, "t")))])


# -- liveness --------------------------------------------------------------------


def test_live_range_spans_first_to_last_access():
    k = LoopKernel("k", [shared("a", 1), shared("b", 1)], [tile("t", 4,
        store("a", (0,), X),
        store("b", (0,), load("a", 0)),
        store("y", ("t",), load("b", 0)))])
    assert live_ranges(k) == {"a": (0, 1), "b": (1, 2)}


def test_access_inside_a_loop_is_live_for_the_whole_outermost_loop():
    # a's last read is statement 1, but the loop repeats: the next iteration's
    # write of b (statement 2) happens while a must still hold its value.
    k = LoopKernel("k", [shared("a", 4), shared("b", 4), shared("c", 4)], [tile("t", 4,
        loop("i", 4, store("a", ("i",), X)),
        loop("j", 4, loop("r", 4,
                          store("c", ("j",), load("a", "r")),
                          kind="reduce"),
             store("b", ("j",), load("c", "j"))),
        store("y", ("t",), load("b", 0)))])
    assert live_ranges(k) == {"a": (0, 2), "b": (1, 3), "c": (1, 2)}


def test_tile_loops_do_not_extend_but_inner_parallel_loops_do():
    k = LoopKernel("k", [shared("a", 1), shared("b", 1), shared("c", 1)], [
        tile("t", 2, tile("u", 2,
            store("a", (0,), X),
            store("c", (0,), X),
            loop("v", 4, store("b", (0,), load("a", 0)), store("y", ("v",), X), kind="parallel"),
            store("y", ("t",), load("b", 0))))])
    assert live_ranges(k) == {"a": (0, 3), "b": (2, 4), "c": (1, 1)}


def test_liveness_covers_allocations_only_and_skips_untouched_ones():
    k = LoopKernel("k", [shared("a", 1), Buffer("acc", "local", "f32", (1,)), shared("unused", 8)], [
        tile("t", 4,
             store("a", (0,), X),
             store("acc", (0,), Lit(0.0, "f32")),
             Accumulate("acc", (ix(0),), "sum", load("a", 0)),
             store("y", ("t",), load("acc", 0)))])
    assert live_ranges(k) == {"a": (0, 2), "acc": (1, 3)}


# -- merging: the seed's cases ---------------------------------------------------


def test_buffers_live_at_different_times_share_bytes():
    # TVM's test_async_copy: A_sh and B_sh are each written once, one after the other.
    k = LoopKernel("k", [shared("a_sh", 128), shared("b_sh", 128)], [tile("t", 128,
        store("a_sh", ("t",), load("x", "t")),
        store("b_sh", ("t",), load("x", "t")))])
    merged = merge_allocations(one_kernel(k)).kernels[0]
    assert merged.offsets == {"a_sh": 0, "b_sh": 0}
    assert shared_bytes(merged) == (512, 1024)


def test_buffers_live_together_do_not_share_bytes():
    merged = merge_allocations(one_kernel(chain("k", "a", "b"))).kernels[0]
    assert merged.offsets == {"a": 0, "b": 512}
    assert shared_bytes(merged) == (1024, 1024)


def test_each_kernel_gets_its_own_merged_buffer():
    # TVM's test_multi_thread_extent_blocks: the second kernel launch must not
    # lose its merged buffer to the first.
    program = LoopProgram("p", [Buffer("x", "global", "f32", (128,))], ["z"], [Buffer("y", "global", "f32", (128,))],
                          [chain("k0", "a_sh", "b_sh", out="y"), chain("k1", "c_sh", "d_sh", out="z")],
                          [Buffer("z", "global", "f32", (128,))])
    program.kernels[1].body[0].body[0].value = load("y", "t")
    merged = merge_allocations(program)
    assert [k.offsets for k in merged.kernels] == [{"a_sh": 0, "b_sh": 512}, {"c_sh": 0, "d_sh": 512}]
    assert [k.merged_bytes for k in merged.kernels] == [1024, 1024]
    verify(merged)


def test_kernels_are_planned_independently():
    # Kernel 0's buffers overlap, kernel 1's do not: each size is its own.
    k1 = LoopKernel("k1", [shared("c", 64), shared("d", 64)], [tile("t", 64,
        store("c", ("t",), load("y", "t")),
        store("z", ("t",), load("c", "t")),
        store("d", ("t",), load("z", "t")),
        store("z", ("t",), load("d", "t")))])
    program = LoopProgram("p", [Buffer("x", "global", "f32", (128,))], ["z"], [Buffer("y", "global", "f32", (128,))],
                          [chain("k0", "a", "b"), k1], [Buffer("z", "global", "f32", (128,))])
    merged = merge_allocations(program)
    assert [shared_bytes(k) for k in merged.kernels] == [(1024, 1024), (256, 512)]
    verify(merged)


def test_mixed_dtypes_keep_their_alignment():
    bufs = [shared("h", 3, dtype="f16"), shared("f", 5, dtype="f32"),
            shared("d", 3, dtype="f64"), shared("i", 7, dtype="i32")]
    # All four live together: packed without padding, largest alignment first.
    k = LoopKernel("k", bufs, [tile("t", 4,
        *[store(b.name, (0,), X) for b in bufs],
        store("y", ("t",), Op("add", tuple(load(b.name, 0) for b in bufs), "f32")))])
    merged = merge_allocations(one_kernel(k)).kernels[0]
    assert merged.offsets == {"d": 0, "i": 24, "f": 52, "h": 72}
    assert shared_bytes(merged) == (78, 78)
    for b in bufs:
        assert merged.offsets[b.name] % dtype_bytes(b.dtype) == 0


def test_reuse_across_dtypes_stays_aligned():
    # h (f16) dies before d (f64) is born; d reuses h's bytes at an 8-aligned offset.
    k = LoopKernel("k", [shared("h", 5, dtype="f16"), shared("f", 3), shared("d", 2, dtype="f64")], [
        tile("t", 4,
             store("h", (0,), X),
             store("f", (0,), load("h", 0)),
             store("d", (0,), load("f", 0)),
             store("y", ("t",), load("d", 0)))])
    merged = merge_allocations(one_kernel(k)).kernels[0]
    assert merged.offsets == {"d": 0, "f": 16, "h": 0}
    assert shared_bytes(merged) == (28, 38)
    verify(one_kernel(merged))


def test_single_buffer_kernel_is_left_alone():
    k = LoopKernel("k", [shared("a", 128), Buffer("acc", "local", "f32", (1,))], [tile("t", 4,
        store("a", (0,), X), store("acc", (0,), load("a", 0)), store("y", ("t",), load("acc", 0)))])
    merged = merge_allocations(one_kernel(k)).kernels[0]
    assert merged.offsets == {}
    assert merged.merged_bytes == 512
    assert merge_allocations(one_kernel(k), alignment=64).kernels[0].merged_bytes == 512
    odd = LoopKernel("odd", [shared("a", 3)], k.body[:1])
    assert shared_bytes(merge_allocations(one_kernel(odd), alignment=64).kernels[0]) == (64, 64)


def test_alignment_padding_never_makes_merged_exceed_unmerged():
    """Regression: a kernel's one 4-byte accumulator was 64 bytes merged against 4 unmerged; three
    scalars live together, 192 against 12. Unmerged counts each buffer aligned, as merged does."""
    scalar = LoopKernel("k", [shared("acc", 1)], [tile("t", 4, store("acc", (0,), X),
                                                                store("y", ("t",), load("acc", 0)))])
    assert shared_bytes(merge_allocations(one_kernel(scalar), alignment=64).kernels[0]) == (64, 64)
    bufs = [shared(name, 1) for name in "abc"]
    together = LoopKernel("k", bufs, [tile("t", 4, *[store(b.name, (0,), X) for b in bufs],
                                           store("y", ("t",), Op("add", tuple(load(b.name, 0) for b in bufs), "f32")))])
    assert shared_bytes(merge_allocations(one_kernel(together), alignment=64).kernels[0]) == (192, 192)
    assert shared_bytes(merge_allocations(one_kernel(together)).kernels[0]) == (12, 12)


def test_local_buffers_are_not_merged():
    k = LoopKernel("k", [shared("a", 8), shared("b", 8), Buffer("acc", "local", "f32", (8,))], [tile("t", 4,
        store("a", (0,), X), store("b", (0,), X), store("acc", (0,), X),
        store("y", ("t",), Op("add", (load("a", 0), load("b", 0), load("acc", 0)), "f32")))])
    merged = merge_allocations(one_kernel(k)).kernels[0]
    assert set(merged.offsets) == {"a", "b"}
    assert shared_bytes(merged) == (64, 64)


def test_alignment_is_respected():
    k = chain("k", "a", "b")
    k.allocs = [shared("a", 3), shared("b", 5, dtype="f16")]
    merged = merge_allocations(one_kernel(k), alignment=64).kernels[0]
    assert merged.offsets == {"a": 0, "b": 64}
    assert merged.merged_bytes == 128
    with pytest.raises(ValueError, match="power of two"):
        merge_allocations(one_kernel(k), alignment=48)


def test_merging_is_idempotent_and_leaves_its_input_alone():
    program = one_kernel(chain("k", "a", "b"))
    before = print_loops(program)
    once = merge_allocations(program, alignment=16)
    assert print_loops(program) == before and program.kernels[0].merged_bytes == 0
    assert once.kernels[0] is not program.kernels[0]
    assert merge_allocations(once, alignment=16) == once


# -- Before / After text ---------------------------------------------------------


def test_chain_reuses_the_first_buffer_for_the_third():
    strip = Ix.var("t", 128) + Ix.var("i")
    k = LoopKernel("chain", [shared("a", 128), shared("b", 128), shared("c", 128)], [tile("t", 4,
        loop("i", 128, store("a", ("i",), load("x", strip))),
        loop("i", 128, store("b", ("i",), Op("mul", (load("a", "i"), Lit(2.0, "f32")), "f32"))),
        loop("i", 128, store("c", ("i",), Op("add", (load("b", "i"), Lit(1.0, "f32")), "f32"))),
        loop("i", 128, store("y", (strip,), load("c", "i"))))])
    body = """\
  for t in 0..4 parallel {
    for i in 0..128 serial {
      a[i] = x[128*t + i]
    }
    for i in 0..128 serial {
      b[i] = mul(a[i], 2.0:f32)
    }
    for i in 0..128 serial {
      c[i] = add(b[i], 1.0:f32)
    }
    for i in 0..128 serial {
      y[128*t + i] = c[i]
    }
  }
}
"""
    assert text(k) == """\
kernel chain {
  alloc shared a: f32[128]
  alloc shared b: f32[128]
  alloc shared c: f32[128]
""" + body
    assert text(merge_allocations(one_kernel(k)).kernels[0]) == """\
kernel chain  # shared: 1024 B merged, 1536 B unmerged {
  alloc shared a: f32[128] @ 0
  alloc shared b: f32[128] @ 512
  alloc shared c: f32[128] @ 0
""" + body


def test_single_buffer_text_has_no_offsets():
    k = LoopKernel("one", [shared("a", 4), Buffer("r", "local", "f32", (1,))], [tile("t", 4,
        store("a", (0,), load("x", "t")),
        store("r", (0,), load("a", 0)),
        store("y", ("t",), load("r", 0)))])
    assert text(merge_allocations(one_kernel(k)).kernels[0]) == """\
kernel one  # shared: 16 B merged, 16 B unmerged {
  alloc shared a: f32[4]
  alloc local r: f32[1]
  for t in 0..4 parallel {
    a[0] = x[t]
    r[0] = a[0]
    y[t] = r[0]
  }
}
"""


# -- property: random kernels ----------------------------------------------------


@st.composite
def random_kernels(draw) -> LoopProgram:
    """A kernel of random loops over random buffers, well-formed by construction.

    Statements are drawn in execution order; a buffer is only read (or
    accumulated into) once some earlier statement has stored to it.
    """
    n = draw(st.integers(1, 6))
    allocs = [Buffer(f"b{i}", draw(st.sampled_from(["shared"] * 4 + ["local"])), draw(st.sampled_from(DTYPES)),
                     tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=2)))) for i in range(n)]
    x = Buffer("x", "global", "f32", (4,))
    written = {"x"}
    loop_vars = itertools.count()

    def index(buffer: Buffer, bound: list[str]) -> tuple[Ix, ...]:
        return tuple(Ix.var(draw(st.sampled_from(bound))) if bound and draw(st.booleans()) else Ix()
                     for _ in buffer.shape)

    def leaf(bound: list[str]):
        target = draw(st.sampled_from(allocs))
        readable = [b for b in allocs + [x] if b.name in written]
        args = tuple(Load(b.name, index(b, bound))
                     for b in draw(st.lists(st.sampled_from(readable), max_size=3)))
        value = Op("add", args, "f32") if args else Lit(1.0, "f32")
        if target.name in written and draw(st.booleans()):
            return Accumulate(target.name, index(target, bound), "sum", value)
        written.add(target.name)
        return Store(target.name, index(target, bound), value)

    def block(depth: int, bound: list[str]) -> list:
        stmts = []
        for _ in range(draw(st.integers(1, 3))):
            if depth < 3 and draw(st.integers(0, 2)) == 0:
                var = f"i{next(loop_vars)}"
                kind = draw(st.sampled_from(["serial", "reduce", "parallel"]))
                stmts.append(For(var, draw(st.integers(1, 3)), kind, block(depth + 1, bound + [var])))
            else:
                stmts.append(leaf(bound))
        return stmts

    body = block(0, ["t"])
    body.append(Store("y", (Ix.var("t"),), Load("x", (Ix(),))))
    kernel = LoopKernel("k", allocs, [For("t", 4, "parallel", body)])
    return LoopProgram("p", [x], ["y"], [], [kernel], [Buffer("y", "global", "f32", (4,))])


def trace_intervals(kernel: LoopKernel) -> dict[str, tuple[int, int]]:
    """Liveness by brute force: run one tile with every loop unrolled; first and last step touching each buffer."""
    steps: list[set[str]] = []

    def run(stmts):
        for s in stmts:
            if isinstance(s, For):
                for _ in range(1 if s.kind == "parallel" and s.var == "t" else s.extent):
                    run(s.body)
            else:
                steps.append({s.buffer} | {a.buffer for a in loads(s.value)})

    run(kernel.body)
    spans: dict[str, tuple[int, int]] = {}
    for step, names in enumerate(steps):
        for name in names:
            spans[name] = (spans.get(name, (step, step))[0], step)
    return spans


@given(random_kernels(), st.sampled_from([0, 0, 16, 64]))
def test_merged_buffers_never_clobber_a_live_buffer(program, alignment):
    merged = merge_allocations(program, alignment)
    verify(program)
    verify(merged)
    assert merge_allocations(merged, alignment) == merged
    kernel = merged.kernels[0]
    shared_bufs = [b for b in kernel.allocs if b.scope == "shared"]
    merged_b, unmerged_b = shared_bytes(kernel)
    assert unmerged_b == sum(-(-b.nbytes // buffer_alignment(b, alignment)) * buffer_alignment(b, alignment)
                             for b in shared_bufs)
    assert merged_b <= unmerged_b
    if len(shared_bufs) <= 1:
        assert kernel.offsets == {}
        return
    assert set(kernel.offsets) == {b.name for b in shared_bufs}
    for b in shared_bufs:
        start = kernel.offsets[b.name]
        assert start % buffer_alignment(b, alignment) == 0
        assert start + b.nbytes <= merged_b
    trace = trace_intervals(kernel)
    ranges = live_ranges(kernel)
    for a, b in itertools.combinations(shared_bufs, 2):
        if a.name in trace and b.name in trace:
            (s0, e0), (s1, e1) = trace[a.name], trace[b.name]
            if s0 <= e1 and s1 <= e0:  # both hold values at one step of the run
                assert ranges[a.name][0] <= ranges[b.name][1] and ranges[b.name][0] <= ranges[a.name][1]
                lo_a, lo_b = kernel.offsets[a.name], kernel.offsets[b.name]
                assert lo_a + a.nbytes <= lo_b or lo_b + b.nbytes <= lo_a, (a.name, b.name)
