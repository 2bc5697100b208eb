"""The LoopProgram verifier (lowering/verify.py): each check catches a hand-broken program."""

from __future__ import annotations

import pytest
from stitch.lowering.alloc import merge_allocations
from stitch.lowering.loops import (
    Accumulate,
    Buffer,
    FloorDiv,
    For,
    Indirect,
    Ix,
    Lit,
    Load,
    LoopKernel,
    LoopProgram,
    Mod,
    Op,
    Store,
    print_kernel,
)
from stitch.lowering.verify import VerifyError, verify


def ix(i) -> Ix:
    return Ix.var(i) if isinstance(i, str) else Ix((), i)


def load(name: str, *index) -> Load:
    return Load(name, tuple(ix(i) for i in index))


def store(name: str, index: tuple, value) -> Store:
    return Store(name, tuple(ix(i) for i in index), value)


def f32(v: float) -> Lit:
    return Lit(v, "f32")


def program() -> LoopProgram:
    """Row sums of 2*x+1 into m (kernel k0), then y = m*m (kernel k1).

    k0's live ranges: a [0, 1], b [1, 3], acc [2, 4]; merged, a @ 0 and b @ 64.
    """
    k0 = LoopKernel("k0", [Buffer("a", "shared", "f32", (16,)), Buffer("b", "shared", "f32", (16,)),
                           Buffer("acc", "local", "f32", (1,))], [
        For("t", 8, "parallel", [
            For("i", 16, "serial", [store("a", ("i",), Op("mul", (load("x", "t", "i"), f32(2.0)), "f32"))]),
            For("i", 16, "serial", [store("b", ("i",), Op("add", (load("a", "i"), f32(1.0)), "f32"))]),
            store("acc", (0,), f32(0.0)),
            For("r", 16, "reduce", [Accumulate("acc", (ix(0),), "sum", load("b", "r"))]),
            store("m", ("t",), load("acc", 0)),
        ])])
    k1 = LoopKernel("k1", [Buffer("c", "shared", "f32", (1,))], [
        For("t", 8, "parallel", [
            store("c", (0,), load("m", "t")),
            store("y", ("t",), Op("mul", (load("c", 0), load("c", 0)), "f32")),
        ])])
    return LoopProgram("p", [Buffer("x", "global", "f32", (8, 16))], ["y"],
                       [Buffer("m", "global", "f32", (8,))], [k0, k1], [Buffer("y", "global", "f32", (8,))])


def rejects(p: LoopProgram, kernel: int, match: str, capacity: int | None = None) -> None:
    """verify(p) fails with `match` in the message, followed by the offending kernel's text."""
    with pytest.raises(VerifyError, match=match) as err:
        verify(p, capacity)
    assert "\n".join(print_kernel(p.kernels[kernel])) in str(err.value)


def k0_tile(p: LoopProgram) -> list:
    return p.kernels[0].body[0].body


def test_a_correct_program_passes():
    p = program()
    verify(p)
    merged = merge_allocations(p)
    assert merged.kernels[0].offsets == {"a": 0, "b": 64}
    verify(merged, capacity=128 + 4)


# (a) written before read


def test_read_before_write():
    p = program()
    tile = k0_tile(p)
    tile[0], tile[1] = tile[1], tile[0]
    rejects(p, 0, "a is read before it is written")


def test_global_read_before_the_kernel_that_writes_it():
    p = program()
    p.kernels.reverse()
    rejects(p, 0, "m is read before it is written")


def test_read_in_a_loop_before_the_store_later_in_the_loop():
    # The first iteration reads a before anything wrote it.
    p = program()
    tile = k0_tile(p)
    tile[0].body.reverse()
    tile[0].body.insert(0, store("a", ("i",), Op("add", (load("a", "i"), f32(1.0)), "f32")))
    rejects(p, 0, "a is read before it is written")


def test_accumulate_needs_an_initializing_store():
    p = program()
    del k0_tile(p)[2]
    rejects(p, 0, "acc is accumulated into before a store initializes it")


def test_every_output_is_written():
    p = program()
    p.kernels[1].body[0].body.pop()
    with pytest.raises(VerifyError, match="output y is never written"):
        verify(p)


def test_every_output_is_declared():
    p = program()
    p.outputs.append("z")
    with pytest.raises(VerifyError, match="output z is not declared"):
        verify(p)


# (b) buffers in scope


def test_a_kernel_cannot_use_another_kernels_allocation():
    p = program()
    p.kernels[1].body[0].body[0] = store("c", (0,), load("a", 0))
    rejects(p, 1, "a is an allocation of kernel k0, not of this kernel")


def test_unknown_buffer():
    p = program()
    p.kernels[1].body[0].body[0] = store("nowhere", (0,), f32(1.0))
    rejects(p, 1, "nowhere is not a param, intermediate, output or allocation")


def test_an_allocation_cannot_shadow_a_global():
    p = program()
    p.kernels[1].allocs.append(Buffer("m", "shared", "f32", (1,)))
    rejects(p, 1, "allocation m is declared twice")


# (c) the merged buffer


def test_live_buffers_must_not_overlap():
    p = merge_allocations(program())
    p.kernels[0].offsets["b"] = 32
    rejects(p, 0, r"a \(bytes \[0, 64\), live \[0, 1\]\) and b \(bytes \[32, 96\), live \[1, 3\]\) are live together")


def test_offsets_are_aligned_to_the_dtype():
    p = merge_allocations(program())
    p.kernels[0].offsets["b"] = 66
    p.kernels[0].merged_bytes = 256
    rejects(p, 0, "b at byte 66 is not aligned to its dtype f32")


def test_buffers_lie_inside_the_merged_buffer():
    p = merge_allocations(program())
    p.kernels[0].merged_bytes = 100
    rejects(p, 0, r"b at bytes \[64, 128\) lies outside the merged buffer of 100 B")


def test_every_shared_buffer_has_an_offset():
    p = merge_allocations(program())
    del p.kernels[0].offsets["b"]
    rejects(p, 0, "shared buffer b has no offset")


# (d) capacity


def test_footprint_within_capacity():
    p = program()
    rejects(p, 0, r"needs 132 bytes on chip \(128 B shared \+ 4 B local\) but has 131", capacity=131)
    verify(p, capacity=132)


def test_merging_shrinks_the_footprint_that_is_checked():
    p = program()
    k0 = p.kernels[0]
    k0.allocs.append(Buffer("d", "shared", "f32", (16,)))  # live after a: reuses a's bytes
    k0_tile(p).append(For("i", 16, "serial", [store("d", ("i",), load("b", "i"))]))
    rejects(p, 0, "192 B shared", capacity=195)
    verify(merge_allocations(p), capacity=195)


# (e) indices


def test_loop_variables_must_be_bound():
    p = program()
    k0_tile(p)[0].body[0] = store("a", ("i",), load("x", "t", "j"))
    rejects(p, 0, "index of x uses j, which no enclosing loop binds")


def test_a_loop_variable_is_not_bound_after_its_loop():
    p = program()
    k0_tile(p)[4] = store("m", ("r",), load("acc", 0))
    rejects(p, 0, "index of m uses r")


def test_index_arity_matches_the_rank():
    p = program()
    k0_tile(p)[0].body[0] = store("a", ("i",), load("x", "t"))
    rejects(p, 0, "x has rank 2 but is indexed with 1 indices")


def test_loop_variables_inside_div_mod_and_gathered_indices_must_be_bound():
    """A reshape's div/mod and a gather's index read are indices too: their variables are checked."""
    p = program()
    flat = Ix.var("t", 16) + Ix.var("i")
    split = (Ix.var(FloorDiv(flat, 16)), Ix.var(Mod(flat, 16)))  # x read through a reshape of itself
    k0_tile(p)[0].body[0] = store("a", ("i",), Load("x", split))
    verify(p)
    k0_tile(p)[0].body[0] = store("a", ("i",), Load("x", (Ix.var(FloorDiv(Ix.var("j"), 16)), Ix.var("i"))))
    rejects(p, 0, "index of x uses j, which no enclosing loop binds")
    gathered = Ix.var(Indirect(Load("x", (Ix.var("t"), Ix.var("k"))), 8))
    k0_tile(p)[0].body[0] = store("a", ("i",), Load("x", (gathered, Ix.var("i"))))
    rejects(p, 0, "index of x uses k, which no enclosing loop binds")
