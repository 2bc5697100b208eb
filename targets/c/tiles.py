"""A kernel as C: its tile functions and the function that hands them to the runtime.

Each top-level tile loop becomes a tile function (`kernel_k0_tiles0(lo, hi, scratch, buffers...)`:
tiles lo..hi-1) and a runner the kernel passes to `st_run`; a kernel without tile loops is one
tile. Inside a tile, the merged shared buffer and the large local buffers are pointers into the
thread's scratch block, small local buffers plain arrays. A buffer written before the tile loops
(an input held whole for the kernel) is allocated once, before them, and what follows a tile loop
runs on the caller after every tile is done. A tile loop lowering marked pipelined
(lowering/overlap.py) runs as a two-stage pipeline over its tiles.
"""

from __future__ import annotations

import math

from ...engine.ir.extent import c_locals, planned
from ...engine.ir.program import dtype_bytes
from ...lowering.alloc import scratch_layout
from ...lowering.loops import For, leaves
from ...lowering.overlap import Stages, stages
from . import tuning
from .emit import PROTO, KernelWriter, ident, kernel_name
from .prelude import C_TYPES


def render_kernel(w: KernelWriter, signature: str) -> str:
    """The tile functions, then the kernel: it allocates the buffers held for the whole kernel,
    runs its statements outside tile loops itself and hands each tile loop to the runtime."""
    k = w.k
    name = kernel_name(k.name)
    outer = [b for b in k.allocs if _written_outside_tiles(w, b.name)]
    held = list(w.globals.values()) + outer
    params = signature + "".join(f", {C_TYPES[b.dtype]} *restrict {ident(b.name)}" for b in outer)
    w.lines.append(f"struct {name}_args {{ {' '.join(f'{C_TYPES[b.dtype]} *{ident(b.name)};' for b in held)} }};")
    tiled = any(_is_tile_loop(s) for s in k.body)
    body, loops = [], 0
    for s in k.body if tiled else [None]:  # None: the whole body, one tile
        if s is not None and not _is_tile_loop(s):
            body += _kernel_statement(w, s)
            continue
        body.append(_tile_loop(w, f"{name}_tiles{loops}", s, params, [ident(b.name) for b in held],
                               {b.name for b in outer}))
        loops += 1
    head = [f"{PROTO} int {name}({signature}) {{"] + ([f"  {c_locals(w.symbols)}"] if w.symbols else [])
    head += [f"  {C_TYPES[b.dtype]} *{ident(b.name)} = ({C_TYPES[b.dtype]} *)malloc({max(b.nbytes, 1)});"
             for b in outer]
    if outer:
        head.append(f"  if ({' || '.join('!' + ident(b.name) for b in outer)}) goto fail;")
    head.append(f"  struct {name}_args a = {{{', '.join(ident(b.name) for b in held)}}};")
    frees = [f"  free({ident(b.name)});" for b in outer]
    tail = frees + ["  return 0;", "fail:"] + frees + ["  return 1;", "}"]
    return "\n".join(w.lines + head + body + tail) + "\n"


def _tile_loop(w: KernelWriter, fn: str, loop: For | None, params: str, names: list[str], declared: set[str]) -> str:
    """Emit the tile function `fn` and its runner; the kernel's line handing the tiles to the runtime
    (over the cores where the plan says `threaded`, GRAIN_WORK at least per claim)."""
    st = _stages(w, loop) if w.k.pipelined and loop is not None else None
    scratch_bytes = _tile_function(w, fn, loop, params, declared, st)
    w.lines.append(f"static void {fn}_run(void *args, int64_t lo, int64_t hi, unsigned char *scratch) {{")
    w.lines.append(f"  struct {kernel_name(w.k.name)}_args *a = args;")
    w.lines.append(f"  {fn}(lo, hi, scratch, {', '.join('a->' + n for n in names)});")
    w.lines.append("}")
    # (a pipelined loop walks its nested tile loops itself, lowering/overlap.py's stages)
    tiles = 1 if loop is None else loop.extent if st is not None else _tiles(loop)
    work = _work(loop) if loop is not None else 0
    # (at the planning values where the tiles are symbolic: a grain is a tuning choice, right at any size)
    grain = max(1, -(-tuning.GRAIN_WORK * planned(tiles) // max(planned(work), 1)))
    if st is not None:  # a claim's first reads and last writes run alone
        inner = math.prod(x.extent for x in st.nest[1:])
        grain = max(grain, min(-(-tuning.PIPELINE_CLAIM // inner), max(1, tiles // tuning.PIPELINE_CLAIMS)))
    return (f"  if (st_run({fn}_run, &a, {tiles}, {grain}, {scratch_bytes}, {int(w.k.threaded and tiles > 1)})) "
            "goto fail;")


def _kernel_statement(w: KernelWriter, s) -> list[str]:
    """A statement outside the tile loops (copying an input held for the kernel), run by the caller."""
    mark = len(w.lines)
    w.block([s], 1)
    lines = w.lines[mark:]
    del w.lines[mark:]
    return lines


def _tile_function(w: KernelWriter, fn: str, loop: For | None, params: str, declared: set[str],
                   st: Stages | None) -> int:
    """`fn(lo, hi, st_scratch, buffers...)` running tiles lo..hi-1 of `loop` (None: the kernel's
    whole body, one tile), pipelined in the stages `st` when given; returns the scratch bytes
    it needs."""
    w.lines.append(f"static void {fn}(int64_t lo, int64_t hi, unsigned char *restrict st_scratch, {params}) {{")
    if w.symbols:  # (the extents' symbols, local: engine/ir/extent.py c_symbol)
        w.lines.append(f"  {c_locals(w.symbols)}")
    w.frame = 0
    if loop is None:
        w.lines.append("  (void)lo; (void)hi;")
        _scratch(w, "  ", set(declared))
        w.block(w.k.body, 1)
    elif st is not None:
        w.before_loop(loop, (), "  ")
        _pipelined_tiles(w, st, declared)
    else:
        w.before_loop(loop, (), "  ")
        nest = _parallel_nest(loop)
        if len(nest) == 1:
            w.lines.append(f"  for (int64_t {loop.var} = lo; {loop.var} < hi; ++{loop.var}) {{")
        else:  # one tile index over the nested tile loops, the outermost slowest
            w.lines.append("  for (int64_t st_tile = lo; st_tile < hi; ++st_tile) {")
            w.lines += [f"    const int64_t {var} = {value};" for var, value in _tile_vars(nest, "st_tile").items()]
        _scratch(w, "    ", set(declared))
        w.next_tile = _next_tile(nest)
        w.block(nest[-1].body, 2, tuple(nest))
        w.next_tile = None
        w.lines.append("  }")
    if w.streamed:
        w.lines.append("  ST_SFENCE();")
    w.lines.append("}")
    used, w.frame = w.frame, None
    return used


def _tile_vars(nest: list[For], tile: str) -> dict[str, str]:
    """Each variable of the nested tile loops `nest` as C of the one tile index `tile` (the outermost
    slowest), innermost first."""
    inner, values = 1, {}
    for lp in reversed(nest):
        values[lp.var] = f"({tile} / ({inner})) % ({lp.extent})" if lp is not nest[0] else f"{tile} / ({inner})"
        inner = inner * lp.extent
    return values


def _next_tile(nest: list[For]) -> dict[str, str]:
    """Each variable of the tile loops `nest` (as `_tile_function` walks them) at the next tile of
    the claim lo..hi-1, or at this tile where it is the claim's last."""
    if len(nest) == 1:
        v = nest[0].var
        return {v: f"({v} + 1 < hi ? {v} + 1 : {v})"}
    return _tile_vars(nest, "(st_tile + 1 < hi ? st_tile + 1 : st_tile)")


def _stages(w: KernelWriter, loop: For) -> Stages:
    st = stages(loop, set(w.buffers) - set(w.globals))
    assert st is not None, f"{w.k.name}: marked pipelined, but a tile loop has no stages"
    return st


def _pipelined_tiles(w: KernelWriter, st: Stages, declared: set[str]) -> None:
    """Tiles lo..hi-1 (with the tile loops inside the claimed one: tiles of all of them, `st_t`) as
    a two-stage pipeline (lowering/overlap.py): each step runs the statements before tile st_t's
    first read, that read in one loop with tile st_t-1's last write, then the rest of tile st_t;
    tile st_t's buffers are copy st_t % 2 of the tile's scratch block."""
    copy, offsets = scratch_layout(w.k)
    base = w.reserve(2 * copy)
    inner = math.prod(x.extent for x in st.nest[1:])
    first, end = (f"lo * {inner}", f"hi * {inner}") if inner > 1 else ("lo", "hi")
    add = w.lines.append

    def tile(k: str, pad: str) -> None:  # open a block with tile k's loop variables and buffers
        add(f"{pad}{{ const int64_t st_k = {k};")
        stride = inner
        for i, x in enumerate(st.nest):
            if i == 0:
                value = f"st_k / {inner}" if inner > 1 else "st_k"
            else:
                stride //= x.extent
                value = f"st_k / {stride} % {x.extent}" if stride > 1 else f"st_k % {x.extent}"
            add(f"{pad}  const int64_t {x.var} = {value};")
        for b in w.k.allocs:
            if b.name not in declared:
                add(f"{pad}  {C_TYPES[b.dtype]} *{ident(b.name)} = ({C_TYPES[b.dtype]} *)"
                    f"(st_scratch + {base} + (st_k & 1) * {copy} + {offsets[b.name]});")

    def run(k: str, stmts, pad: str) -> None:
        tile(k, pad)
        w.block(list(stmts), len(pad) // 2 + 1, st.nest)
        add(f"{pad}}}")

    head, tail = st.head, st.tail
    add(f"  for (int64_t st_t = {first}; st_t <= {end}; ++st_t) {{")
    if st.before:
        add(f"    if (st_t < {end})")
        run("st_t", st.before, "      ")
    add(f"    if (st_t > {first} && st_t < {end}) {{")
    add(f"      for (int64_t {tail.var} = 0; {tail.var} < {tail.extent}; ++{tail.var}) {{")
    for k, loop in (("st_t - 1", tail), ("st_t", head)):
        tile(k, "        ")
        if loop.var != tail.var:
            add(f"          const int64_t {loop.var} = {tail.var};")
        w.block(loop.body, 5, st.nest + (loop,))
        add("        }")
    add("      }")
    add(f"    }} else if (st_t < {end})")  # the claim's first tile: its reads alone
    run("st_t", [head], "      ")
    add(f"    else if (st_t > {first})")  # its last: the writes alone
    run("st_t - 1", [tail], "      ")
    if st.middle:
        add(f"    if (st_t < {end})")
        run("st_t", st.middle, "      ")
    add("  }")


def _written_outside_tiles(w: KernelWriter, name: str) -> bool:
    return any(not _is_tile_loop(s) and name in {leaf.buffer for leaf in leaves([s])} for s in w.k.body)


def _scratch(w: KernelWriter, pad: str, declared: set[str]) -> None:
    """Declare the per-tile buffers: the merged shared buffer and the local ones larger than
    LOCAL_STACK_BYTES in all are in the thread's scratch block, the other locals on the stack."""
    k = w.k
    merged = [b for b in k.allocs if b.scope == "shared" and b.name not in declared]
    size = k.merged_bytes or sum(b.nbytes for b in merged)
    base = w.reserve(size) if merged else 0
    offset = 0
    for b in merged:
        at = k.offsets.get(b.name, offset)
        offset = at + b.nbytes
        w.lines.append(f"{pad}{C_TYPES[b.dtype]} *{ident(b.name)} = ({C_TYPES[b.dtype]} *)(st_scratch + {base + at});")
    stack = 0
    for b in k.allocs:
        if b.scope == "local" and b.name not in declared:
            n = max(1, b.nbytes // dtype_bytes(b.dtype))
            if stack + b.nbytes <= tuning.LOCAL_STACK_BYTES:
                stack += b.nbytes
                w.lines.append(f"{pad}{C_TYPES[b.dtype]} {ident(b.name)}[{n}] __attribute__((aligned(64)));")
            else:
                w.lines.append(f"{pad}{C_TYPES[b.dtype]} *{ident(b.name)} = "
                               f"({C_TYPES[b.dtype]} *)(st_scratch + {w.reserve(b.nbytes)});")
    declared.update(b.name for b in k.allocs)


def _parallel_nest(loop: For) -> list[For]:
    """The tile loop and the tile loops nested directly inside it, one in the other's body alone (a
    symbolic axis's whole tiles around a static axis's: `for p0o in 0..seq // 256 { for p1o in 0..6 }`),
    outermost first: their tiles are one index to the runtime, so that the threads share all of
    them, not only the outer loop's (a size of one tile of rows left a thread idle)."""
    nest = [loop]
    while len(nest[-1].body) == 1 and _is_tile_loop(nest[-1].body[0]):
        nest.append(nest[-1].body[0])
    return nest


def _tiles(loop: For):
    """The tiles the runtime hands out for tile loop `loop`: every tile of its nest (`_parallel_nest`)."""
    return math.prod((lp.extent for lp in _parallel_nest(loop)), start=1)


def _is_tile_loop(stmt) -> bool:
    return isinstance(stmt, For) and stmt.kind == "parallel"


def _work(stmt) -> int:
    """Element updates the statement performs: what a thread claims at least (GRAIN_WORK) is measured in."""
    if isinstance(stmt, For):
        return stmt.extent * sum(_work(s) for s in stmt.body)
    return 1
