"""Run a LoopProgram with numpy, tile by tile, and count its global memory traffic.

Tile loops (the kernel's outer loops and anything that is not a perfect nest
ending in one statement) run as Python loops; each perfect loop nest inside a
tile runs as one vectorized numpy statement over all its iterations (loads are
fancy-indexed, accumulations use `ufunc.at` so repeated indices add up).
When no traffic is counted (the fallback without a C compiler), a parallel
loop of small statements runs all its tiles at once instead (`TileRun.tiles`).
A nest reading a global buffer counts the distinct elements it touches; a store
to a global buffer counts the elements written. That is the lowered program's
real traffic, which tests compare with the cost model's estimate.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from ..engine.ir import floats
from ..engine.ir.errors import StitchError
from ..engine.ir.interp import DTYPE_OF_NP, elementwise, np_dtype
from .loops import (
    Accumulate,
    Buffer,
    Checked,
    FloorDiv,
    For,
    IndexValue,
    Indirect,
    Ix,
    Lit,
    Load,
    LoopProgram,
    Mod,
    Op,
    Select,
    Store,
    accumulates_in_float,
    index_vars,
    perfect_nest,
)


@dataclass
class Traffic:
    read: int = 0
    written: int = 0
    per_kernel: dict[str, tuple[int, int]] = field(default_factory=dict)


def param_arrays(params: list[Buffer], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each parameter's array from `inputs`, as it is; one of another shape or dtype is a ValueError."""
    out = {}
    for b in params:
        arr = np.asarray(inputs[b.name])
        if arr.shape != b.shape or arr.dtype != np_dtype(b.dtype):
            raise ValueError(f"input {b.name}: expected {b.dtype}{list(b.shape)}, got {arr.dtype}{list(arr.shape)}")
        out[b.name] = arr
    return out


def execute(program: LoopProgram, inputs: dict[str, np.ndarray], graph=None,
            runner=None, count: bool = True) -> tuple[list[np.ndarray], Traffic]:
    """Outputs in return order, and the global traffic of the run (none counted unless `count`:
    counting distinct cells costs more than the run).

    `runner(kernel, memory, global_names)` makes the object that runs one kernel's body (default
    `TileRun`): the accelerator simulator passes a subclass that also keeps time."""
    memory = param_arrays(program.params, inputs)
    for b in program.intermediates + program.output_buffers:
        memory[b.name] = np.zeros(b.shape, np_dtype(b.dtype))
    traffic = Traffic()
    global_names = set(memory)
    with np.errstate(all="ignore"):
        for k in program.kernels:
            for b in k.allocs:
                memory[b.name] = np.zeros(b.shape, np_dtype(b.dtype))
            run = runner(k, memory, global_names) if runner else TileRun(memory, global_names)
            run.counting = count
            if runner is None and not count:  # (the simulator times its tiles one at a time)
                run.tiles_at_once = {b.name for b in k.allocs}
            run.checks = program.checks
            run.cached = k.cached
            run.block(k.body, {})
            traffic.per_kernel[k.name] = (run.read, run.written)
            traffic.read += run.read
            traffic.written += run.written
            for b in k.allocs:
                del memory[b.name]
    return [np.array(memory[name], copy=True) for name in program.outputs], traffic


class TileRun:
    """Runs one kernel's statements over `memory`, counting the global bytes they read and write."""

    def __init__(self, memory: dict[str, np.ndarray], global_names: set[str]):
        self.memory = memory
        self.global_names = global_names
        self.read = 0
        self.written = 0
        self.checks: list[str] = []  # what each gather site says of an index out of range
        self.counting = True  # count the global traffic (read, written)
        # inside a serial loop run one iteration at a time: per statement, the global cells counted
        # in its earlier iterations (buffer -> flat cells; None for the cells it writes)
        self.seen: dict[int, dict] | None = None
        # when set (no traffic counted): the kernel's own buffers, and parallel loops run every tile at
        # once, each buffer given a leading axis per such loop (`tiles`)
        self.tiles_at_once: set[str] | None = None
        self.par: list[tuple[str, int]] = []  # those loops, outermost first: the leading axes of every nest
        # global buffers read in place of a dropped copy (`LoopKernel.cached`): their cells count once a
        # tile over all its statements (the cache keeps what a tile reads again), marked in `tile_cells`,
        # which each iteration of a parallel loop starts afresh
        self.cached: frozenset = frozenset()
        self.tile_cells: dict = {}

    def block(self, stmts, env: dict) -> None:
        for s in stmts:
            if isinstance(s, For):
                nest = _one_nest(s)
                if s.kind == "parallel" and self.tiles_at_once is not None and _statement_size(s) < TILES_AT_ONCE_BELOW:
                    self.tiles(s, env)
                elif nest is not None:
                    self.nest(nest[0], nest[1], env)
                else:
                    # run one iteration at a time: a statement inside counts its cells once over the
                    # iterations of the outermost serial loop, as the nest over all of them would (a
                    # tile's rows fused into one loop, lowering/fuse.py: a cell every row reads is
                    # read once, as the cost model counts it); tiles count apart, each reading again
                    outer = self.seen
                    self.seen = None if s.kind == "parallel" else {} if outer is None else outer
                    try:
                        for i in range(s.extent):
                            if s.kind == "parallel":
                                self.tile_cells = {}
                            self.block(s.body, {**env, s.var: i})
                    finally:
                        self.seen = outer
            else:
                self.nest([], s, env)

    def tiles(self, loop: For, env: dict) -> None:
        """A parallel loop's tiles at once: its body's statements each run over every tile (a leading
        axis), the kernel's buffers one per tile, as the C's threads have them. Tiles share nothing
        but the global buffers they write apart, so this is the loop's meaning; after it each buffer
        holds the last tile's values, as running the tiles one after another leaves them."""
        if loop.extent == 0:  # (no whole tile: a symbolic axis shorter than its tile)
            return
        axis = len(self.par)
        for name in self.tiles_at_once:
            self.memory[name] = np.repeat(np.expand_dims(self.memory[name], axis), loop.extent, axis=axis)
        self.par.append((loop.var, loop.extent))
        try:
            self.block(loop.body, env)
        finally:
            self.par.pop()
            for name in self.tiles_at_once:
                self.memory[name] = np.array(self.memory[name][(slice(None),) * axis + (-1,)])

    def nest(self, loops: list[For], leaf, env: dict) -> None:
        """One statement over every iteration of `loops` at once (and of the tiles `tiles` runs at once:
        leading axes)."""
        grid = dict(env)
        axes = self.par + [(loop.var, loop.extent) for loop in loops]
        for axis, (var, extent) in enumerate(axes):
            shape = [1] * len(axes)
            shape[axis] = extent
            grid[var] = np.arange(extent).reshape(shape)
        full = tuple(extent for _, extent in axes)
        touched: dict[str, list] = {}
        target = self.memory[leaf.buffer]
        widened = accumulates_in_float(leaf, DTYPE_OF_NP.get(target.dtype))
        if widened:  # numpy's f16 matmul: products and sums in float, one rounding per cell
            a, b = (self.expr(arg, grid, touched).astype(np.float32) for arg in leaf.value.args)
            value = np.broadcast_to(a * b, full)
        else:
            value = np.broadcast_to(self.expr(leaf.value, grid, touched), full)
        index = tuple(np.broadcast_to(i, full)
                      for i in self.tile_index(leaf.buffer, grid) + tuple(self.index(ix, grid, touched)
                                                                          for ix in leaf.index))
        if isinstance(leaf, Store):
            target[index] = value
        else:
            self.accumulate(leaf, loops, len(self.par), target, index, value, widened)
        if not self.counting:
            return
        seen = self.seen.setdefault(id(leaf), {}) if self.seen is not None else None
        for name, accesses in touched.items():
            if name in self.cached:
                flat = np.concatenate([_flat(bidx, shape) for _, bidx, shape in accesses.values()])
                cells = _new_cells(self.tile_cells, name, flat, self.memory[name].size)
            elif seen is None:
                cells = _count(accesses)
            else:
                flat = np.concatenate([_flat(bidx, shape) for _, bidx, shape in accesses.values()])
                cells = _new_cells(seen, name, flat, self.memory[name].size)
            self.read += cells * self.memory[name].itemsize
        if leaf.buffer in self.global_names:
            if seen is not None:
                flat = np.ravel_multi_index(index, target.shape).ravel() if index else np.zeros(1, int)
                cells = _new_cells(seen, None, flat, target.size)
            else:
                cells = _distinct(leaf.index, grid)
                if cells is None:
                    cells = len(np.unique(np.ravel_multi_index(index, target.shape))) if index else 1
            cells *= target.itemsize
            self.written += cells
            if isinstance(leaf, Accumulate):  # accumulating in global memory reads it too
                self.read += cells

    def tile_index(self, buffer: str, grid: dict) -> tuple:
        """The leading index of a kernel's buffer while `tiles` runs tiles at once: the tile."""
        if self.par and buffer in self.tiles_at_once:
            return tuple(grid[var] for var, _ in self.par)
        return ()

    @staticmethod
    def accumulate(leaf: Accumulate, loops: list[For], lead: int, target: np.ndarray, index: tuple,
                   value: np.ndarray, widened: bool) -> None:
        """Fold every iteration's value into the target cells, in the target's dtype (an i32 sum wraps
        as the reference's does). Float max/min fold integer keys ordered as floats.maximum orders
        floats (NaN wins, +0.0 above -0.0), whatever order numpy groups them in."""
        ufunc = _ACCUMULATE[leaf.op]
        keyed = leaf.op in ("max", "min") and target.dtype.kind == "f"
        if keyed:
            acc, value = floats.order_keys(target, leaf.op), floats.order_keys(value, leaf.op)
        else:
            acc = target.astype(np.float32) if widened else target
        if not index:  # a scalar accumulator: fold every iteration into it
            if value.size:
                acc[()] = ufunc(acc[()], ufunc.reduce(value, axis=None, dtype=acc.dtype))
        else:
            rank = lead + len(loops)
            folded = tuple(lead + a for a, loop in enumerate(loops)
                           if all(loop.var not in index_vars(ix) for ix in leaf.index))
            if folded:  # loops the accumulator's index ignores (reduce loops) fold first: one at() per cell, not per term
                value = ufunc.reduce(value, axis=folded, dtype=acc.dtype, keepdims=True)
                first = tuple(slice(0, 1) if a in folded else slice(None) for a in range(rank))
                index = tuple(i[first] for i in index)
            ufunc.at(acc, index, value)
        if keyed:
            target[...] = floats.from_order_keys(acc, target.dtype)
        elif widened:
            target[...] = acc

    def expr(self, e, grid: dict, touched: dict):
        if isinstance(e, Lit):
            return np.asarray(e.value, dtype=np_dtype(e.dtype))
        if isinstance(e, Load):
            arr = self.memory[e.buffer]
            index = self.tile_index(e.buffer, grid) + tuple(self.index(ix, grid, touched) for ix in e.index)
            if index:
                bidx = np.broadcast_arrays(*index)
                out = arr[tuple(bidx)]
            else:
                bidx = ()
                out = arr[()]
            if e.buffer in self.global_names:
                seen = touched.setdefault(e.buffer, {})
                key = (e.index, grid.get(MASK))
                if key not in seen:
                    seen[key] = (_distinct(e.index, grid), bidx, arr.shape)
            return out
        if isinstance(e, Select):
            return self.select(e, grid, touched)
        if isinstance(e, Checked):
            self.index(e.check, grid, touched)
            return self.expr(e.value, grid, touched)
        if isinstance(e, IndexValue):  # an iota's element
            return self.index(e.ix, grid, touched).astype(np_dtype(e.dtype))
        assert isinstance(e, Op)
        args = [self.expr(a, grid, touched) for a in e.args]
        return _scalar_op(e, args)

    def select(self, e: Select, grid: dict, touched: dict):
        """A concat: each side evaluated only where it applies (elsewhere its index is out of range)."""
        low = np.asarray(self.index(e.ix, grid, touched)) < e.split
        loops = {var: v for var, v in grid.items() if var != MASK}
        shape = np.broadcast_shapes(low.shape, *(np.shape(v) for v in loops.values()))
        low = np.broadcast_to(low, shape)
        out = np.empty(shape, np_dtype(e.dtype))
        for mask, side in ((low, e.low), (~low, e.high)):
            if mask.any():
                sub = {var: (np.broadcast_to(v, shape)[mask] if np.ndim(v) else v) for var, v in loops.items()}
                sub[MASK] = next(_MASKS)  # a grid of its own: its accesses are counted apart
                out[mask] = np.broadcast_to(self.expr(side, sub, touched), int(mask.sum()) if mask.ndim else ())
        return out

    def index(self, ix: Ix, grid: dict, touched: dict):
        """An index's value over the grid: div/mod atoms computed, gathered indices read and checked."""
        value = ix.const
        for t, c in ix.terms:
            if isinstance(t, str):
                term = grid[t]
            elif isinstance(t, FloorDiv):
                term = np.floor_divide(self.index(t.x, grid, touched), t.d)
            elif isinstance(t, Mod):
                term = np.mod(self.index(t.x, grid, touched), t.d)
            else:
                term = self.gathered(t, grid, touched)
            value = value + c * term
        return np.asarray(value)

    def gathered(self, t: Indirect, grid: dict, touched: dict):
        raw = np.asarray(self.expr(t.value, grid, touched)).astype(np.int64)
        fixed = np.where(raw < 0, raw + t.extent, raw)
        bad = (fixed < 0) | (fixed >= t.extent)
        if bad.any():
            value = int(raw[bad].flat[0]) if raw.ndim else int(raw)
            message = self.checks[t.site] if t.site < len(self.checks) else "gather: index {value} is out of range"
            raise StitchError(message.format(value=value))
        return fixed


# A parallel loop whose statements run over fewer iterations each than this, on average, runs its
# tiles at once when no traffic is counted: numpy's cost per statement run (tens of microseconds)
# outweighs the work of small ones, while long statements done for every tile at once make
# temporaries that leave the caches (docs/perf/2026-11-27-pass-choices.md).
TILES_AT_ONCE_BELOW = 4096


def _one_nest(loop: For):
    """(loops, statement) when `block` runs `loop` as one numpy statement: a perfect nest, not a
    parallel loop (whose tiles count their traffic apart); else None."""
    return perfect_nest(loop) if loop.kind != "parallel" else None


def _statement_size(loop: For) -> float:
    """The iterations a statement of `loop`'s body runs over on average, run one tile at a time."""
    def walk(stmts) -> tuple[int, int]:  # (statements run, iterations)
        runs = iterations = 0
        for s in stmts:
            if not isinstance(s, For):
                runs, iterations = runs + 1, iterations + 1
                continue
            nest = _one_nest(s)
            if nest is not None:
                runs, iterations = runs + 1, iterations + math.prod(f.extent for f in nest[0])
            else:
                r, i = walk(s.body)
                runs, iterations = runs + s.extent * r, iterations + s.extent * i
        return runs, iterations

    runs, iterations = walk(loop.body)
    return iterations / max(runs, 1)


MASK = "__mask__"  # in a grid: the part of a nest one side of a concat covers
_MASKS = itertools.count()
_ACCUMULATE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def _distinct(index: tuple[Ix, ...], grid: dict) -> int | None:
    """How many distinct cells an access touches, when that needs no counting: each index position
    is affine in at most one loop of the nest and no loop drives two positions (then every
    combination of those loops is a different cell). None otherwise."""
    if MASK in grid:
        return None
    seen = set()
    for ix in index:
        if any(not isinstance(t, str) for t, _ in ix.terms):
            return None
        loops = [var for var, coef in ix.terms if isinstance(grid[var], np.ndarray)]
        if len(loops) > 1 or seen.intersection(loops):
            return None
        seen.update(loops)
    n = 1
    for var in seen:
        n *= grid[var].size
    return n


def _count(accesses: dict) -> int:
    """Distinct cells over all accesses of one buffer in a nest."""
    entries = list(accesses.values())
    if len(entries) == 1 and entries[0][0] is not None:
        return entries[0][0]
    return np.unique(np.concatenate([_flat(bidx, shape) for _, bidx, shape in entries])).size


def _new_cells(seen: dict, name, flat: np.ndarray, size: int) -> int:
    """How many of the cells `flat` (of a buffer of `size` cells) `seen[name]` does not mark yet;
    it marks them too."""
    marked = seen.get(name)
    if marked is None:
        marked = seen[name] = np.zeros(size, bool)
    fresh = np.unique(flat[~marked[flat]])
    marked[fresh] = True
    return int(fresh.size)


def _flat(bidx, shape):
    return np.ravel_multi_index(bidx, shape).ravel() if bidx else np.zeros(1, int)


def _scalar_op(e: Op, args):
    """An elementwise op, defined exactly as the reference interpreter defines it."""
    return elementwise(e.op, e.dtype, [np.asarray(a) for a in args])
