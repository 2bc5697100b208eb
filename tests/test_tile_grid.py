"""The sums over tiles taken as arrays (engine/schedule/tile_grid.py) equal the tile-by-tile loops
(engine/schedule/reads.py `_tile_boxes_by_tile`, `_tile_hulls_by_tile`) they replace from GRID_TILES
tiles up: on random reads (strided, offset, div/mod, guarded like a padded conv's taps) of random
kernels in random tiles, and on a 3x3 conv's nine taps."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.schedule import reads
from stitch.engine.schedule.index import FloorDiv, Ix, Mod
from stitch.engine.schedule.kernel import Axis, AxisKind, Kernel, Read
from stitch.engine.schedule.maps import Guard
from stitch.engine.schedule.plan import divisors
from stitch.engine.schedule.tile_grid import tile_boxes, tile_hulls

AXES = ("p0", "p1", "p2", "r0")


def kernel_of(extents: dict[str, int]) -> Kernel:
    kinds = {a: AxisKind.REDUCE if a.startswith("r") else AxisKind.PARALLEL for a in extents}
    return Kernel(("out",), (0,), (), (), tuple(Axis(a, n, kinds[a]) for a, n in extents.items()))


@st.composite
def terms(draw, axes):
    """One dimension's index: a few axes with coefficients, maybe a div or mod of one, an offset."""
    chosen = draw(st.lists(st.sampled_from(axes), max_size=2, unique=True))
    ix = Ix.of({a: draw(st.sampled_from([1, 1, 2, 3, -1])) for a in chosen}, draw(st.integers(-2, 3)))
    atom = draw(st.sampled_from([None, None, FloorDiv, Mod]))
    if atom is not None:
        ix = ix + Ix.var(atom(Ix.var(draw(st.sampled_from(axes))), draw(st.integers(2, 4))))
    return ix


@st.composite
def case(draw):
    extents = {a: draw(st.integers(1, 12)) for a in AXES}
    kernel = kernel_of(extents)
    shape = tuple(draw(st.integers(1, 14)) for _ in range(draw(st.integers(0, 3))))
    rs = []
    for _ in range(draw(st.integers(1, 5))):
        index = tuple(draw(terms(AXES)) for _ in shape)
        guards = ()
        if shape and draw(st.booleans()):  # a padded conv's tap: read where 0 <= c*a + k < n
            a = draw(st.sampled_from(AXES))
            guards = (Guard(Ix.var(a, draw(st.integers(1, 2)), draw(st.integers(-2, 2))), 0, shape[0]),)
        rs.append(Read("x", index, 0, (0, 0), guards))
    tile = {a: draw(st.sampled_from(divisors(extents[a]))) for a in AXES[:3] if draw(st.booleans())}
    return kernel, shape, rs, tile


@settings(max_examples=300, deadline=None)
@given(case())
def test_the_grid_sums_equal_the_loops(c):
    kernel, shape, rs, tile = c
    spans = [reads._spans(r, kernel) for r in rs]
    assert tile_hulls(rs, spans, shape, kernel, tile) == reads._tile_hulls_by_tile(rs, kernel, shape, tile, spans)
    for r, span in zip(rs, spans):
        assert tile_boxes(r, span, shape, kernel, tile) == reads._tile_boxes_by_tile(r, kernel, shape, span, tile)


def test_a_padded_convs_taps_over_many_tiles():
    """A 3x3 conv's nine taps of a padded 16x56x56 input, stride 2, tiled 1 x 4 x 4 over 16 x 28 x 28
    outputs (784 tiles): both sums agree and the hull counts what the tiles read."""
    kernel = kernel_of({"p0": 16, "p1": 28, "p2": 28})
    rs = []
    for i in range(3):
        for j in range(3):
            row, col = Ix.var("p1", 2, i - 1), Ix.var("p2", 2, j - 1)
            rs.append(Read("x", (Ix.var("p0"), row, col), 0, (0, 0), (Guard(row, 0, 56), Guard(col, 0, 56))))
    tile = {"p0": 1, "p1": 4, "p2": 4}
    spans = [reads._spans(r, kernel) for r in rs]
    hulls = tile_hulls(rs, spans, (16, 56, 56), kernel, tile)
    assert hulls == reads._tile_hulls_by_tile(rs, kernel, (16, 56, 56), tile, spans)
    # each tile of 4 output rows reads 9 input rows (8 at the top edge, the pad), 9 or 8 columns likewise
    assert hulls == 16 * (8 + 6 * 9) ** 2
