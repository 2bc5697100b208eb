"""Reads' boxes tile by tile, every tile at once: what reads.py sums over a kernel's tiles.

reads.py counts the elements a read (or a nest's reads) touches tile by tile: each tile's box of
the input, its points, the hull of several reads' boxes. Summed one tile at a time, a conv's windows
took the schedule search's time: ResNet-18's nine or forty-nine taps over up to 4096 tiles, in every
plan of every kernel. Each dimension of a read's box and each axis's range in a tile depend only on
the tiled axes that dimension or axis names (a tap's row on the row tiles, not on the channel's or
column's), so each is worked out once per origin of those axes (`per_tile`) and the tiles combined
as arrays over the grid of tiles: the same integers as the loop, in a few array operations per read.

`tile_boxes` and `tile_hulls` are reads.py's `_tile_boxes_by_tile` and `_tile_hulls_by_tile`
(which remain the reference, and what symbolic extents use) computed so; the tests compare them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from .index import interval
from .kernel import Kernel, Read

Span = Callable[[str], tuple[int, int]]  # an axis's inclusive range


def grid(axes, kernel: Kernel, tile: dict[str, int]) -> tuple[list[str], list[int]]:
    """The tiled ones among `axes` (those a tile cuts, sorted: reads.py `_tile_origins`' order) and
    how many tiles each makes."""
    tiled = sorted({a for a in axes if a in tile and tile[a] < kernel.extents[a]})
    return tiled, [-(-kernel.extents[a] // tile[a]) for a in tiled]


def per_tile(f: Callable[[dict[str, int]], tuple[int, ...]], used, tiled: list[str], dims: list[int],
             kernel: Kernel, tile: dict[str, int]) -> np.ndarray:
    """f(origin) for each tile's origin on the tiled axes among `used` (a dict: axis -> where the tile
    starts), as an int64 array over the grid of `tiled` (its last dimension f's values), of extent 1
    along the axes f does not use (numpy broadcasts it along them)."""
    on = [a for a in tiled if a in used]
    starts = [range(0, kernel.extents[a], tile[a]) for a in on]
    values = [f(dict(zip(on, origin))) for origin in itertools.product(*starts)]
    return np.array(values, dtype=np.int64).reshape([n if a in used else 1 for a, n in zip(tiled, dims)] + [-1])


def in_tile(span: Span, at: dict[str, int], tile: dict[str, int]) -> Span:
    """`span` narrowed to the tile whose origin (on the axes in `at`) is `at`."""
    def tile_span(a: str) -> tuple[int, int]:
        lo, hi = span(a)
        return (max(lo, at[a]), min(hi, at[a] + tile[a] - 1)) if a in at else (lo, hi)

    return tile_span


def box_arrays(r: Read, span: Span, shape: tuple[int, ...], kernel: Kernel, tile: dict[str, int],
               tiled: list[str], dims: list[int]) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Per tile of the grid: the read's points there (the product of its axes' ranges in the tile) and
    its box (each dimension's inclusive (lo, hi), within the input), as arrays broadcasting over the
    grid."""
    points = np.ones([1] * len(tiled), dtype=np.int64)
    for a in r.axes:
        def length(at: dict[str, int], a: str = a) -> tuple[int]:
            lo, hi = in_tile(span, at, tile)(a)
            return (max(hi - lo + 1, 0),)

        points = points * per_tile(length, {a}, tiled, dims, kernel, tile)[..., 0]
    box = []
    for ix, d in zip(r.index, shape):
        def bounds(at: dict[str, int], ix=ix, d: int = d) -> tuple[int, int]:
            lo, hi = interval(ix, in_tile(span, at, tile))
            return max(lo, 0), min(hi, d - 1)

        b = per_tile(bounds, set(ix.axes()), tiled, dims, kernel, tile)
        box.append((b[..., 0], b[..., 1]))
    return points, box


def tile_boxes(r: Read, span: Span, shape: tuple[int, ...], kernel: Kernel, tile: dict[str, int]) -> int:
    """The sum over the tiles of the read's axes of min(its points in the tile, its box's volume there)."""
    tiled, dims = grid(r.axes, kernel, tile)
    points, box = box_arrays(r, span, shape, kernel, tile, tiled, dims)
    volume = np.ones([1] * len(tiled), dtype=np.int64)
    for lo, hi in box:
        volume = volume * np.maximum(hi - lo + 1, 0)
    return int(np.broadcast_to(np.minimum(points, volume), dims).sum())


def tile_hulls(rs: list[Read], spans: list[Span], shape: tuple[int, ...], kernel: Kernel,
               tile: dict[str, int]) -> int:
    """The sum over the tiles of the reads' axes of the volume of the box around every box a read
    makes in the tile (one with points and a volume there)."""
    tiled, dims = grid([a for r in rs for a in r.axes], kernel, tile)
    far = 1 << 40  # (beyond any index: where no read has reached a tile yet)
    lo = [np.full(dims, far, dtype=np.int64) for _ in shape]
    hi = [np.full(dims, -far, dtype=np.int64) for _ in shape]
    seen = np.zeros(dims, dtype=bool)
    for r, span in zip(rs, spans):
        points, box = box_arrays(r, span, shape, kernel, tile, tiled, dims)
        made = points > 0
        for b_lo, b_hi in box:
            made = made & (b_hi >= b_lo)
        made = np.broadcast_to(made, dims)
        for d, (b_lo, b_hi) in enumerate(box):
            lo[d] = np.where(made, np.minimum(lo[d], b_lo), lo[d])
            hi[d] = np.where(made, np.maximum(hi[d], b_hi), hi[d])
        seen |= made
    volume = np.ones(dims, dtype=np.int64)
    for d_lo, d_hi in zip(lo, hi):
        volume *= np.where(seen, d_hi - d_lo + 1, 0)
    return int(np.where(seen, volume, 0).sum())
