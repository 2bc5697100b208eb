"""Caches that grow in place: an output that is a parameter plus one step along a symbolic axis
(a decoder step's `present_key = concat(past_key, new_key, axis=2)`) is written into the
parameter's own memory, only its new part.

A generation loop keeps each cache in one array of the largest length (its *capacity*) and passes
the filled prefix as the parameter (`past_key=cache[:, :, :p]`, a view). The program lays both the
parameter and the output out with the capacity's strides along that axis (so every kernel indexes
them in place), and the kernel storing the output

    for a in 0..p + 1 { out[.., a, ..] = (a < p ? past[.., a, ..] : new(..)) }

stores only the positions past the parameter's:

    for a in 0..1 { out[.., p + a, ..] = new(..) }

The positions before are the parameter's, already there: no copy of the cache is made. The call
(targets/cpu.py) passes the parameter's view as it is and returns the output as a view of the same
memory one position longer. A kernel reading the output reads the cache where it is.

Where the output is not such a store (fused into a larger loop, tiled along that axis, a concat
with the parameter second), the compile is refused, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..engine.ir.errors import StitchError
from ..engine.ir.extent import at, is_symbolic
from .loops import (
    Buffer,
    For,
    Ix,
    Load,
    LoopKernel,
    LoopProgram,
    Select,
    Stmt,
    Store,
    leaves,
    map_indices,
    perfect_nest,
)


@dataclass(frozen=True)
class Cache:
    """Parameter `param` grows by one step along `axis` into output `output` (a buffer name), both
    laid out with `capacity` positions along it."""

    param: str
    output: str
    axis: int
    capacity: int
    shape: tuple  # the output's shape (its extents at a call's sizes: how far the call's view reaches)


def grow_in_place(program: LoopProgram, caches: dict[str, int], tops: dict[str, int]) -> LoopProgram:
    """`program` with each cache (parameter name -> output position) grown in place (the module's
    docstring), its capacity the output's length at the symbols' `tops` (the program's planning
    values: a size bucket's program lays its caches out as the top's does); StitchError where one
    cannot be."""
    if not caches:
        return program
    params = {b.name: b for b in program.params}
    found: list[Cache] = []
    kernels = list(program.kernels)
    for param, position in caches.items():
        if param not in params:
            raise StitchError(f"caches: '{program.name}' has no parameter '{param}'"
                              f" (its parameters: {', '.join(params)})")
        if not isinstance(position, int) or isinstance(position, bool) or not 0 <= position < len(program.outputs):
            raise StitchError(f"caches: '{param}' names output {position!r}; '{program.name}' returns "
                              f"{len(program.outputs)} value(s), numbered from 0")
        output = program.outputs[position]
        if any(c.output == output for c in found):
            raise StitchError(f"caches: output {position} is named for two parameters")
        for i, k in enumerate(kernels):
            grown = _grow(k, params[param], output, tops)
            if grown is not None:
                kernels[i], cache = grown
                found.append(cache)
                break
        else:
            raise StitchError(
                f"caches: output {position} of '{program.name}' is not '{param}' extended along a symbolic axis "
                "by one kernel's store (concat(" + param + ", new, axis=...) written on its own), so it cannot "
                "grow in place", hint="compile without caches= (the output is then a new array each call)")
    outputs = {b.name: b for b in program.output_buffers}
    found = [replace(c, shape=outputs[c.output].shape) for c in found]
    shapes = {c.param: c for c in found} | {c.output: c for c in found}

    def laid_out(b: Buffer) -> Buffer:
        c = shapes.get(b.name)
        if c is None:
            return b
        return replace(b, shape=b.shape[:c.axis] + (c.capacity,) + b.shape[c.axis + 1:])

    return replace(program, kernels=kernels, params=[laid_out(b) for b in program.params],
                   output_buffers=[laid_out(b) for b in program.output_buffers],
                   intermediates=[laid_out(b) for b in program.intermediates], caches=tuple(found))


def _grow(k: LoopKernel, param: Buffer, output: str, tops: dict[str, int]) -> tuple[LoopKernel, Cache] | None:
    """The kernel storing only the new part of `output`, and the cache; None when `k` does not store it."""
    stores = [leaf for leaf in leaves(k.body) if leaf.buffer == output]
    if not stores:
        return None
    if len(stores) != 1 or not isinstance(stores[0], Store):
        raise StitchError(f"caches: kernel {k.name} writes '{output}' in more than one store; it cannot grow "
                          f"'{param.name}' in place")
    done: list[Cache] = []
    body = _restrict(k.body, stores[0], param, done, tops)
    if not done:
        raise StitchError(f"caches: kernel {k.name} stores '{output}' as something other than '{param.name}' "
                          "followed by a new part along one axis, in a loop of its own; it cannot grow in place")
    return replace(k, body=body), done[0]


def _restrict(stmts: list[Stmt], store: Store, param: Buffer, done: list, tops: dict[str, int]) -> list[Stmt]:
    out = []
    for s in stmts:
        if isinstance(s, For):
            nest = perfect_nest(s)
            if nest is not None and nest[1] is store:
                cache = _cache(s, store, param, tops)
                if cache is not None:
                    out.append(_new_part(s, store))
                    done.append(cache)
                    continue
            out.append(replace(s, body=_restrict(s.body, store, param, done, tops)))
        else:
            out.append(s)
    return out


def _cache(loop: For, store: Store, param: Buffer, tops: dict[str, int]) -> Cache | None:
    """The cache when `loop` (around `store`, in a nest of its own) walks the concat's axis and the
    store is `param` where the axis is below the split, the new part at and past it."""
    v = store.value
    if not (isinstance(v, Select) and v.ix == Ix.var(loop.var) and v.low == Load(param.name, store.index)):
        return None
    axes = [i for i, ix in enumerate(store.index) if ix == Ix.var(loop.var)]
    if len(axes) != 1 or not is_symbolic(loop.extent) or param.shape[axes[0]] != v.split:
        return None
    return Cache(param.name, store.buffer, axes[0], at(loop.extent, tops), ())


def _new_part(loop: For, store: Store) -> For:
    """The nest over the positions past the parameter's: the axis at split + a, the store of the new part."""
    split = store.value.split
    at_split = {loop.var: Ix.var(loop.var) + split}

    def walk(s):
        if isinstance(s, For):
            return For(s.var, s.extent, s.kind, [walk(b) for b in s.body])
        return map_indices(Store(store.buffer, store.index, store.value.high), lambda ix: ix.substitute(at_split))

    return For(loop.var, loop.extent - split, loop.kind, [walk(b) for b in loop.body])
