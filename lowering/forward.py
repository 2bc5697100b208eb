"""Buffer forwarding: a tile produced and consumed in one kernel never goes through global memory.

Loop-nest formation writes every value a kernel holds (a stitched reduction,
a matmul tile) to a global temporary and reads it back, as TVM's schedule in
the accelerator seed does (local -> global -> local). This pass finds the
temporaries one kernel alone writes and reads, and keeps each in an on-chip
buffer of one tile instead: the tile loops' terms drop out of its indices
(`16*p1o + p1` becomes `p1`), its shape becomes the tile's, and its scope is
the one the schedule placed it in (`shared` or `local`).
"""

from __future__ import annotations

from dataclasses import replace

from .liveness import buffers_touched
from .loops import Buffer, For, Ix, Load, LoopProgram, Store, leaves, map_index_loads, map_loads


def forward_buffers(program: LoopProgram) -> LoopProgram:
    """A new program; statements are rebuilt where they change, so `program` is left as it was."""
    kernels = [replace(k, allocs=list(k.allocs), forwardable=dict(k.forwardable)) for k in program.kernels]
    program = replace(program, kernels=kernels, intermediates=list(program.intermediates))
    outputs = set(program.outputs)
    users: dict[str, set[str]] = {}
    for k in program.kernels:
        for name in _accessed(k.body):
            users.setdefault(name, set()).add(k.name)
    globals_ = {b.name: b for b in program.intermediates}
    for k in program.kernels:
        tile_vars = {loop.var for loop in _loops(k.body) if loop.kind == "parallel"}
        for name, scope in list(k.forwardable.items()):
            if name in outputs or users.get(name, set()) - {k.name} or name not in globals_:
                continue
            buf = globals_.pop(name)
            shape = _tile_shape(k.body, name, buf, tile_vars)
            k.allocs.append(Buffer(name, scope, buf.dtype, shape))
            k.body = [_rewrite(s, name, tile_vars) for s in k.body]
            del k.forwardable[name]
    program.intermediates = [b for b in program.intermediates if b.name in globals_]
    return program


def _loops(stmts):
    for s in stmts:
        if isinstance(s, For):
            yield s
            yield from _loops(s.body)


def _accessed(stmts) -> set[str]:
    return set().union(*(buffers_touched(leaf) for leaf in leaves(stmts)))


def _tile_shape(stmts, name: str, buf: Buffer, tile_vars: set[str]) -> tuple[int, ...]:
    """Per dimension: the tile size (the coefficient of its tile loop), else the whole extent, 1 for a constant."""
    for leaf in leaves(stmts):
        if leaf.buffer == name:
            index = leaf.index
            break
    else:
        return buf.shape
    shape = []
    for ix, extent in zip(index, buf.shape):
        tiled = [c for v, c in ix.terms if v in tile_vars]
        shape.append(tiled[0] if tiled else (extent if ix.terms else 1))
    return tuple(shape)


def _local(index: tuple[Ix, ...], tile_vars: set[str]) -> tuple[Ix, ...]:
    """The index inside one tile: the tile loops' terms dropped (a held buffer is indexed by axes)."""
    return tuple(Ix.of({v: c for v, c in ix.terms if v not in tile_vars}, ix.const) for ix in index)


def _rewrite(s, name: str, tile_vars: set[str]):
    """`s` with every access to `name` indexed within the tile: its loads, those inside a gathered
    index too (a gather of indices this kernel computes, MPNet's position ids: read at the global
    position, they read past the tile's buffer)."""
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, [_rewrite(b, name, tile_vars) for b in s.body])

    def local(load: Load) -> Load:
        return Load(load.buffer, _local(load.index, tile_vars)) if load.buffer == name else load

    value = map_loads(s.value, local)
    index = tuple(map_index_loads(ix, local) for ix in s.index)
    index = _local(index, tile_vars) if s.buffer == name else index
    if isinstance(s, Store):
        return Store(s.buffer, index, value)
    return replace(s, index=index, value=value)
