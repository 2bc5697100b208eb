"""Well-formedness of a LoopProgram, checked between lowering passes.

`verify` raises VerifyError on the first problem, with the offending kernel
printed below the message. It checks, kernel by kernel in program order:

(b) every access names a param, a global intermediate, an output buffer, or
    an allocation of this kernel (never another kernel's allocation), and every
    output is declared;
(e) an index has one entry per dimension of its buffer, and every loop
    variable in it (inside div/mod and gathered index values too) is bound
    by an enclosing For;
(a) every buffer is written before it is read, in execution order with each
    loop body run once: an Accumulate reads its target, so a reduction must be
    initialized by a Store first. Params are written on entry, a kernel's
    allocations start unwritten, and globals a kernel writes are written for
    the kernels after it. Every output must be written by the end;
(c) once merged (offsets set), every shared buffer has an offset aligned to its
    dtype, lies inside the merged buffer, and no two shared buffers whose live
    ranges overlap share a byte;
(d) with a capacity, the on-chip footprint (merged shared bytes, or unmerged
    ones if not merged, plus local buffers) fits in it.
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.ir.program import dtype_bytes
from .alloc import local_bytes, scratch_layout, shared_bytes
from .liveness import live_ranges, ranges_overlap
from .loops import (
    Accumulate,
    Buffer,
    For,
    Ix,
    LoopKernel,
    LoopProgram,
    Stmt,
    Store,
    index_vars,
    loads,
    print_kernel,
    print_loops,
)
from .remainder import whole_tiles


class VerifyError(Exception):
    """A malformed LoopProgram: a bug in the compiler, not in the user's program."""


def verify(program: LoopProgram, capacity: int | None = None) -> None:
    """Raise VerifyError unless `program` is well-formed (and fits `capacity` bytes on chip)."""
    globals_ = {b.name: b for b in program.params + program.intermediates + program.output_buffers}
    undeclared = [name for name in program.outputs if name not in globals_]
    if undeclared:
        raise VerifyError(f"program {program.name}: output {', '.join(undeclared)} is not declared\n"
                          + print_loops(program))
    owner = {b.name: k.name for k in program.kernels for b in k.allocs}
    written = {b.name for b in program.params}
    for kernel in program.kernels:
        problem = (_check_accesses(kernel, globals_, owner, written)
                   or _check_layout(kernel) or capacity_problem(kernel, capacity))
        if problem:
            raise VerifyError(f"kernel {kernel.name}: {problem}\n" + "\n".join(print_kernel(kernel)))
    unwritten = [name for name in program.outputs if name not in written]
    if unwritten:
        raise VerifyError(f"program {program.name}: output {', '.join(unwritten)} is never written\n"
                          + print_loops(program))


def _check_accesses(kernel: LoopKernel, globals_: dict[str, Buffer], owner: dict[str, str],
                    written: set[str]) -> str | None:
    """Checks (b), (e) and (a) in one walk; adds the globals the kernel writes to `written`."""
    local: dict[str, Buffer] = {}
    for b in kernel.allocs:
        if b.scope not in ("shared", "local"):
            return f"allocation {b.name} has scope {b.scope}; a kernel allocates shared or local buffers"
        if b.name in local or b.name in globals_:
            return f"allocation {b.name} is declared twice (or shadows a global buffer)"
        local[b.name] = b
    known = {**globals_, **local}
    seen = set(written)  # this kernel's view: its allocations start unwritten

    def access(name: str, index: tuple[Ix, ...], bound: set[str], reading: bool) -> str | None:
        if name not in known:
            if name in owner:
                return f"{name} is an allocation of kernel {owner[name]}, not of this kernel"
            return f"{name} is not a param, intermediate, output or allocation"
        shape = known[name].shape
        if len(index) != len(shape):
            return f"{name} has rank {len(shape)} but is indexed with {len(index)} indices"
        for ix in index:
            for var in sorted(index_vars(ix)):
                if var not in bound:
                    return f"index of {name} uses {var}, which no enclosing loop binds"
        if reading and name not in seen:
            return f"{name} is read before it is written"
        return None

    def leaf(s: Store | Accumulate, bound: set[str]) -> str | None:
        for ld in loads(s.value):  # the value is read before the target is written
            problem = access(ld.buffer, ld.index, bound, reading=True)
            if problem:
                return problem
        problem = access(s.buffer, s.index, bound, reading=False)
        if not problem and isinstance(s, Accumulate) and s.buffer not in seen:
            problem = f"{s.buffer} is accumulated into before a store initializes it"
        seen.add(s.buffer)
        return problem

    def walk(stmts: list[Stmt], bound: set[str]) -> str | None:
        for s in stmts:
            problem = walk(s.body, bound | {s.var}) if isinstance(s, For) else leaf(s, bound)
            if problem:
                return problem
        return None

    problem = walk(kernel.body, set())
    written.update(seen - local.keys())
    return problem


def _check_layout(kernel: LoopKernel) -> str | None:
    """Check (c): the merged buffer's offsets."""
    if not kernel.offsets:
        return None
    shared = {b.name: b for b in kernel.allocs if b.scope == "shared"}
    for name in kernel.offsets:
        if name not in shared:
            return f"{name} has an offset in the merged buffer but is not a shared allocation"
    spans: dict[str, tuple[int, int]] = {}
    for name, b in shared.items():
        if name not in kernel.offsets:
            return f"shared buffer {name} has no offset in the merged buffer"
        start = kernel.offsets[name]
        if start % dtype_bytes(b.dtype):
            return f"{name} at byte {start} is not aligned to its dtype {b.dtype} ({dtype_bytes(b.dtype)} B)"
        spans[name] = (start, start + b.nbytes)
        if start < 0 or start + b.nbytes > kernel.merged_bytes:
            return (f"{name} at bytes [{start}, {start + b.nbytes}) lies outside "
                    f"the merged buffer of {kernel.merged_bytes} B")
    # (a remainder tile is a copy of the tile before it, its buffers live as they are there)
    ranges = live_ranges(replace(kernel, body=whole_tiles(kernel)) if kernel.remainders else kernel)
    names = sorted(spans)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if (ranges_overlap(ranges.get(a), ranges.get(b))
                    and spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]):
                return (f"{a} (bytes [{spans[a][0]}, {spans[a][1]}), live {list(ranges[a])}) and "
                        f"{b} (bytes [{spans[b][0]}, {spans[b][1]}), live {list(ranges[b])}) "
                        "are live together but overlap in the merged buffer")
    return None


def onchip_bytes(kernel: LoopKernel) -> tuple[int, int]:
    """(shared, local) bytes a kernel holds on chip: its shared buffers merged (or side by side, not
    yet merged), and its local buffers."""
    return shared_bytes(kernel)[0], local_bytes(kernel)


def capacity_problem(kernel: LoopKernel, capacity: int | None) -> str | None:
    """Check (d): the kernel's on-chip footprint fits `capacity` bytes. The one capacity check after
    extraction: lowering runs it, and the simulator refuses a program lowered for a larger target by it."""
    if capacity is None:
        return None
    if kernel.pipelined:  # two tiles at once, each in its copy of the scratch (lowering/overlap.py)
        need = 2 * scratch_layout(kernel)[0]
        if need > capacity:
            return f"needs {need} bytes on chip (two copies of a pipelined tile's buffers) but has {capacity}"
        return None
    shared, local = onchip_bytes(kernel)
    if shared + local > capacity:
        return f"needs {shared + local} bytes on chip ({shared} B shared + {local} B local) but has {capacity}"
    return None
