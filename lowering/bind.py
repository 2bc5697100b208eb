"""Bound weights: what a kernel derives from them alone is made once, when they are bound.

A parameter bound at compile time (`stitch.compile(..., weights=...)`, `stitch
run --weights W.npz`) holds the same values on every call, as an ONNX model's
initializers do. A kernel stages a tile of a weight on chip before its product
(`w_s1[r0, p1] = w[r0, 144*p1o + p1]`), and may pack a transposed one
(`pack[r0, p1] = w_s1[p1, r0]`): every call would copy the same bytes again,
reading short rows of the weight far apart. This pass finds each nest that
stores an on-chip buffer from bound values only and moves it into the
program's *prologue*, which runs once, when the weights are bound, over every
tile at once: a *block* buffer (`w_s1_k2`) holds each tile's copy after the
other, indexed first by the tile loops the copy read (`w_s1_k2[p1o, r0, p1]`),
so that one tile's block is contiguous.

Where on-chip memory is a cache (a `cpu` target) the kernel then reads the
block in place: the copy and its allocation are gone, and the product streams
one contiguous block per tile (as ONNX Runtime's prepacked weights do). Where
it is a scratchpad (`accel`) the copy stays, of one contiguous block. A copy of
a whole weight in its own layout is, on a cpu, a read of the weight itself.
A weight a kernel reads where it is, without a copy (a head's products read 64
of each 768-wide row), is read on a cpu from a block laid out in the order of
the loops around the read, unless that is the weight's own order (as BERT's
attention kernel's Q, K and V products read theirs).

No value changes: the prologue stores what the moved nest stored, for every
tile the kernel runs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..engine.ir.extent import is_symbolic
from ..engine.ir.interp import aligned_copy, aligned_empty, np_dtype
from ..engine.schedule.index import affine, interval, symbolic
from .execute import execute, param_arrays
from .loops import (
    Buffer,
    For,
    Ix,
    Load,
    LoopKernel,
    LoopProgram,
    Stmt,
    Store,
    flat_index,
    index_loads,
    index_vars,
    leaves,
    loads,
    map_indices_deep,
    map_leaf_loads,
    map_loads,
    perfect_nest,
    written_once,
)

# a block may repeat a weight's elements (tiles whose copies overlap): at most this many times its sources' bytes
MAX_GROWTH = 2


def hoist_bound(program: LoopProgram, in_place: bool) -> LoopProgram:
    """A new program whose nests of bound values run in its prologue (`program.prologue`, a
    LoopProgram of its own: the bound parameters in, the blocks the kernels read out)."""
    if not program.bound:
        return program
    params = {b.name: b for b in program.params}
    hoist = _Hoist({name: params[name] for name in program.bound}, in_place)
    kernels = [hoist.kernel(k) for k in program.kernels]
    read = {ld.buffer for k in kernels for leaf in leaves(k.body) for ld in loads(leaf.value)} | set(program.outputs)
    if not hoist.kernels:
        return replace(program, kernels=kernels)
    blocks = [b for b in hoist.made if b.name in read]
    prologue = LoopProgram(f"{program.name}_bind", [params[name] for name in program.bound],
                           [b.name for b in blocks], [b for b in hoist.made if b.name not in read],
                           hoist.kernels, blocks)
    # a bound parameter read only through blocks (or not at all) is no longer passed to the kernels
    kept = [b for b in program.params if b.name not in program.bound or b.name in read]
    return replace(program, params=kept + blocks, kernels=kernels, prologue=prologue)


def extend_prologue(program: LoopProgram, sources: list[Buffer], kernels: list[LoopKernel], blocks: list[Buffer],
                    consumed: frozenset[str] = frozenset()) -> LoopProgram:
    """`program`'s prologue (a new one where it has none) that also runs `kernels`, once, when the weights
    are bound: they read `sources` (bound parameters, taken in once each) and the blocks the prologue made
    already, and make `blocks`, which the kernels read. A block of the prologue named in `consumed` is read
    only by the new kernels: it becomes one of the prologue's temporaries instead of an output. (The
    layout passes after hoisting, lowering/panels.py and lowering/nibbles.py, each lay a bound weight out
    for a recognizer this way.)"""
    prologue = program.prologue or LoopProgram(f"{program.name}_bind", [], [], [], [], [])
    have = {b.name for b in prologue.params}
    params = prologue.params + [b for b in sources if b.name not in have]
    outputs = [b for b in prologue.output_buffers if b.name not in consumed] + blocks
    temps = prologue.intermediates + [b for b in prologue.output_buffers if b.name in consumed]
    return LoopProgram(prologue.name, params, [b.name for b in outputs], temps, prologue.kernels + kernels, outputs)


class _Hoist:
    def __init__(self, bound: dict[str, Buffer], in_place: bool):
        self.bound = dict(bound)  # bound parameters, and the blocks made from them
        self.params = set(bound)  # the bound parameters themselves
        self.in_place = in_place
        self.made: list[Buffer] = []
        self.kernels: list[LoopKernel] = []
        self.layouts: dict[tuple, str] = {}  # (weight, index, loops) -> the block laid out for such reads

    def kernel(self, k: LoopKernel) -> LoopKernel:
        self.name = k.name
        self.allocs = {b.name: b for b in k.allocs}
        self.single = written_once(k.body)
        self.moved: dict[str, tuple[str, tuple[Ix, ...]]] = {}  # on-chip buffer -> (block, its tile index)
        body = self.stmts(k.body, [])
        return replace(k, allocs=[b for b in k.allocs if b.name not in self.moved], body=body)

    def stmts(self, stmts: list[Stmt], around: list[For]) -> list[Stmt]:
        out = []
        for s in stmts:
            if not isinstance(s, For):
                out.append(map_leaf_loads(s, lambda ld: self.laid_out(self.load(ld), around)))
                continue
            moved = self.hoisted(s, around)
            out.extend(moved if moved is not None else [For(s.var, s.extent, s.kind, self.stmts(s.body, around + [s]))])
        return out

    def hoisted(self, loop: For, around: list[For]) -> list[Stmt] | None:
        """What replaces `loop` when it is a nest storing an on-chip buffer from bound values only,
        moved to the prologue: nothing (its readers read the block in place) or, on a scratchpad, a
        copy of the block; None when it is not such a nest."""
        nest = perfect_nest(loop)
        if nest is None:
            return None
        loops, leaf = nest
        buffer = self.allocs.get(leaf.buffer)
        own = [lp.var for lp in loops]
        if (not isinstance(leaf, Store) or buffer is None or leaf.buffer not in self.single
                or set(leaf.index) != {Ix.var(v) for v in own} or len(own) != len(leaf.index)):
            return None  # (the loops may run in another order than the buffer's: a pack's do)
        value = map_loads(leaf.value, self.load)
        sources = {ld.buffer for ld in loads(value)}
        if not sources or not sources <= self.bound.keys():
            return None
        used = set().union(*(index_vars(ix) for ld in loads(value) for ix in ld.index)) - set(own)
        outer = [lp for lp in around if lp.var in used]
        if (len(outer) != len(used) or any(is_symbolic(lp.extent) for lp in outer + loops)
                or _reads_a_symbol(value)):
            return None  # (a block sized, placed or valued by a call's symbolic extent is not made once)
        whole = self.whole(value, leaf.index, buffer)
        if whole:  # a copy of a weight in its own layout: on a cache, the weight is that block already
            if not self.in_place:
                return None
            self.moved[leaf.buffer] = (whole, ())
            return []
        block = Buffer(f"{leaf.buffer}_{self.name}", "global", buffer.dtype,
                       tuple(lp.extent for lp in outer) + buffer.shape)
        if block.nbytes > MAX_GROWTH * sum(self.bound[name].nbytes for name in sources):
            return None
        lead = tuple(Ix.var(lp.var) for lp in outer)
        self.kernels.append(LoopKernel(f"bind_{block.name}", [], [_nest(outer + loops, Store(
            block.name, lead + leaf.index, value))]))
        self.made.append(block)
        self.bound[block.name] = block
        if self.in_place:
            self.moved[leaf.buffer] = (block.name, lead)
            return []
        return [_nest(loops, Store(leaf.buffer, leaf.index, Load(block.name, lead + leaf.index)))]

    def laid_out(self, ld: Load, around: list[For]) -> Load:
        """A weight read where it is (a product's columns of a tile, 64 of each 768-wide row): read
        from a block holding what the loops around read, in their order, so that one tile's part is
        contiguous and its innermost loop walks consecutive elements. Not where that order is
        already the weight's own, nor where the read runs along a loop that sums (a product of one
        row reading each column along the sum, targets/c/dot.py and nibble_dot.py: the weight's own
        rows are the runs it wants); only on a cache (a scratchpad copies a tile on chip anyway)."""
        if not self.in_place or ld.buffer not in self.params or not all(affine(ix) for ix in ld.index):
            return ld
        used = set().union(*(index_vars(ix) for ix in ld.index))
        loops = [lp for lp in around if lp.var in used]
        if len(loops) != len(used) or any(is_symbolic(lp.extent) for lp in loops) or any(map(symbolic, ld.index)):
            return ld
        source = self.bound[ld.buffer]
        flat = flat_index(ld.index, source.shape)
        if any(lp.kind == "reduce" and flat.coef(lp.var) == 1 for lp in loops):
            return ld
        extents = {lp.var: (0, lp.extent - 1) for lp in loops}
        if any(not 0 <= lo <= hi < d for (lo, hi), d in zip((interval(ix, extents.__getitem__) for ix in ld.index),
                                                             source.shape)):
            return ld  # read only where a concat's side is (a select guards it): not over the loops whole
        block_shape = tuple(lp.extent for lp in loops)
        if flat == flat_index(tuple(Ix.var(lp.var) for lp in loops), block_shape):
            return ld  # the loops read the weight in its own order
        key = (ld.buffer, ld.index, tuple((lp.var, lp.extent) for lp in loops))
        if key not in self.layouts:
            block = Buffer(f"{ld.buffer}_{self.name}_{len(self.layouts)}", "global", source.dtype, block_shape)
            if block.nbytes > MAX_GROWTH * source.nbytes:
                return ld
            self.kernels.append(LoopKernel(f"bind_{block.name}", [], [_nest(loops, Store(
                block.name, tuple(Ix.var(lp.var) for lp in loops), Load(ld.buffer, ld.index)))]))
            self.made.append(block)
            self.bound[block.name] = block
            self.layouts[key] = block.name
        return Load(self.layouts[key], tuple(Ix.var(lp.var) for lp in loops))

    def whole(self, value, index: tuple[Ix, ...], buffer: Buffer) -> str | None:
        """The bound buffer the nest copies whole, in its own layout; else None."""
        if isinstance(value, Load) and value.index == index and self.bound[value.buffer].shape == buffer.shape:
            return value.buffer
        return None

    def load(self, ld: Load) -> Load:
        """A read of a moved copy, as a read of its block."""
        if ld.buffer not in self.moved:
            return ld
        block, lead = self.moved[ld.buffer]
        return Load(block, lead + ld.index)


def _reads_a_symbol(value) -> bool:
    """Whether an index of `value` at any depth (a load's, a concat's select, an iota's value, inside
    a gathered index too) holds a symbolic extent."""
    indices: list[Ix] = []
    map_indices_deep(value, lambda ix: indices.append(ix) or ix)
    return any(map(symbolic, indices))


def _nest(loops: list[For], leaf: Stmt) -> Stmt:
    """`leaf` inside serial loops like `loops` (outermost first)."""
    for lp in reversed(loops):
        leaf = For(lp.var, lp.extent, "serial", [leaf])
    return leaf


def bind(program: LoopProgram, weights: dict[str, np.ndarray],
         copies: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The arrays a bound program's kernels read besides the call's inputs: its prologue's blocks,
    made once from `weights` (`run_prologue`), and its own copy of each bound parameter a kernel
    still reads (a later change to the caller's array changes nothing), taken from `copies` where
    that holds one (another size bucket's of the same weights: one copy whatever the buckets)."""
    params = {b.name for b in program.params}
    copies = copies or {}
    out = {name: copies[name] if name in copies else aligned_copy(weights[name])
           for name in program.bound if name in params}
    if program.prologue is not None:
        out.update(run_prologue(program.prologue, {name: weights[name] for name in program.bound}))
    return out


def run_prologue(prologue: LoopProgram, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The prologue's outputs (the blocks the kernels read), each an aligned array of its own.

    A nest that stores a block from one affine read of a weight or of an earlier block, over the
    whole block (every nest this pass and lowering/panels.py make), is a strided view of its
    source: nothing is copied until an output is written, once, into its aligned array, so a chain
    (a tile's block laid out in panels) reads the weight itself. Running such nests on the numpy
    executor gathered and scattered every element through index arrays, several copies per byte.
    Any other nest runs on the executor."""
    buffers = {b.name: b for b in prologue.params + prologue.intermediates + prologue.output_buffers}
    arrays = param_arrays(prologue.params, weights)
    own: set[str] = set()  # blocks the executor wrote: aligned arrays of their own, never written again
    for k in prologue.kernels:
        view = _strided_copy(k, arrays, buffers)
        if view is not None:
            arrays[view[0]] = view[1]
        else:
            own |= _execute_kernel(k, arrays, buffers, prologue.checks)
    out = {}
    for name in prologue.outputs:
        if name not in arrays:  # (no nest writes it: zeros, as the executor starts every block)
            arrays[name], own = _zeros(buffers[name]), own | {name}
        out[name] = arrays[name] if name in own else aligned_copy(arrays[name])
    return out


def _strided_copy(k: LoopKernel, arrays: dict[str, np.ndarray],
                  buffers: dict[str, Buffer]) -> tuple[str, np.ndarray] | None:
    """(block, a read-only view of its source holding the block's values) when `k` is one nest
    `block[i, j, ..] = source[affine in i, j, ..]` that writes the whole block once, in the block's
    dtype, reading only within the source's bounds; else None."""
    nest = perfect_nest(k.body[0]) if len(k.body) == 1 and isinstance(k.body[0], For) and not k.allocs else None
    if nest is None:
        return None
    loops, leaf = nest
    extent = {lp.var: lp.extent for lp in loops}
    value = leaf.value
    if (not isinstance(leaf, Store) or leaf.buffer in arrays or leaf.buffer not in buffers
            or not isinstance(value, Load) or value.buffer not in arrays or len(extent) != len(loops)
            or not all(type(e) is int and e > 0 for e in extent.values())):
        return None
    block = buffers[leaf.buffer]
    source = arrays[value.buffer]
    order = [_var(ix) for ix in leaf.index]  # the loop each axis of the block runs along
    if (set(order) != extent.keys() or len(order) != len(loops) or source.dtype != np_dtype(block.dtype)
            or tuple(extent[v] for v in order) != block.shape or len(value.index) != source.ndim):
        return None
    strides = dict.fromkeys(extent, 0)
    for ix, size, stride in zip(value.index, source.shape, source.strides):
        if not all(isinstance(t, str) and t in extent for t, _ in ix.terms):
            return None
        steps = [c * (extent[t] - 1) for t, c in ix.terms]
        if ix.const + sum(min(s, 0) for s in steps) < 0 or ix.const + sum(max(s, 0) for s in steps) >= size:
            return None  # (the executor's indexing raises, or wraps a negative index)
        for t, c in ix.terms:
            strides[t] += c * stride
    # (the source's element at every loop's 0 lies within the bounds checked: the view starts there)
    start = source[tuple(slice(ix.const, None) for ix in value.index)]
    view = np.lib.stride_tricks.as_strided(start, tuple(extent[v] for v in order), tuple(strides[v] for v in order),
                                           writeable=False)
    return leaf.buffer, view


def _var(ix: Ix) -> str | None:
    """The loop an index is, when it is one loop's variable alone."""
    if ix.const == 0 and len(ix.terms) == 1 and isinstance(ix.terms[0][0], str) and ix.terms[0][1] == 1:
        return ix.terms[0][0]
    return None


def _execute_kernel(k: LoopKernel, arrays: dict[str, np.ndarray], buffers: dict[str, Buffer],
                    prologue_checks: list[str]) -> set[str]:
    """Run `k` on the numpy executor over the buffers it names; the blocks it writes, each written
    into an aligned array of its own (a copy of the block's values so far: zeros, where no nest wrote
    it yet, as the executor starts every block) so that no earlier view changes. Their names."""
    named, written = set(), set()
    for leaf in leaves(k.body):
        written.add(leaf.buffer)
        named |= {ld.buffer for ld in loads(leaf.value)}
        named |= {ld.buffer for ix in leaf.index for ld in index_loads(ix)}
    local = {b.name for b in k.allocs}
    named, written = (named | written) - local, written - local
    for name in named:
        if name not in arrays:
            arrays[name] = _zeros(buffers[name])
        elif name in written:
            arrays[name] = aligned_copy(arrays[name])
    touched = [buffers[name] for name in sorted(named)]
    execute(LoopProgram(k.name, touched, [], [], [k], checks=prologue_checks),
            {b.name: arrays[b.name] for b in touched}, count=False)
    return written


def _zeros(b: Buffer) -> np.ndarray:
    arr = aligned_empty(b.shape, np_dtype(b.dtype))
    arr[...] = 0
    return arr
