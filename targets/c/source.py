"""LoopProgram -> one C translation unit: the prelude, one function per kernel (kernels the same up to
names share one, share.py), `stitch_main`.

`stitch_main(void **buffers)` runs the kernels in order on the global buffers the caller owns
(parameters, intermediates, outputs, in the order `buffer_order` gives) and returns 0, 1 when
memory ran out, or 2 when a gather read an index out of range (`stitch_error_site` /
`stitch_error_value` say which and what); built with -DSTITCH_PROFILE it adds each kernel's
nanoseconds to `stitch_profile_ns`. Large programs are dealt into parts compiled at once.
"""

from __future__ import annotations

import dataclasses

from ...engine.ir.extent import c_spelling, c_symbol_value
from ...lowering.loops import Buffer, LoopProgram
from . import recognizers, tuning
from .emit import PROTO, KernelWriter, Recognizer, ident, kernel_name, signature
from .micro_kernel import vector_typedefs
from .prelude import C_TYPES, ERROR_SLOT, PRELUDE, PROFILE, RUNNER, RUNNER_DEFINITION, STRIDED_ROW, VECTOR_EXP
from .share import RenderedKernel, nest_key, share_functions
from .tiles import render_kernel


def buffer_order(program: LoopProgram) -> list[Buffer]:
    """The global buffers `stitch_main` takes, in order."""
    seen: dict[str, Buffer] = {}
    for b in program.params + program.output_buffers + program.intermediates:
        seen.setdefault(b.name, b)
    return list(seen.values())


def c_source(program: LoopProgram, vector_bytes: int = 32, max_parts: int = 1,
             table: tuple[Recognizer, ...] | None = None) -> tuple[str, int]:
    """`_c_source`, symbolic extents printed as C (engine/ir/extent.py)."""
    with c_spelling():
        return _c_source(program, vector_bytes, max_parts, table)


def _c_source(program: LoopProgram, vector_bytes: int, max_parts: int,
              table: tuple[Recognizer, ...] | None) -> tuple[str, int]:
    """The C translation unit and the number of parts it is dealt into; `vector_bytes` is the
    machine's vector width (it shapes the matmul blocks); `table` the recognizers the printer
    tries (recognizers.RECOGNIZERS, read when called, by default).

    Kernel functions (one for the kernels share.py finds the same) over PART_BYTES of source in all
    are dealt into up to `max_parts` groups of about equal size, each under `#if STITCH_PART == i`
    (stitch_main in part 0), so the compiler can build the parts in parallel (`cpu.build`); compiled
    without STITCH_PART defined, the file is one unit."""
    table = recognizers.RECOGNIZERS if table is None else table
    globals_ = buffer_order(program)
    position = {b.name: i for i, b in enumerate(globals_)}
    printed: dict[int, RenderedKernel] = {}  # kernel index -> its C, for the kernels printed
    same_as: list[int] = []  # each kernel's printed kernel of the same nests (itself, if printed)
    uses, same_nests = {}, {}
    for j, k in enumerate(program.kernels):
        # Each kernel takes the global buffers it touches, not all of them: a program of n kernels
        # would otherwise have n * n parameters (10,000 kernels: gigabytes of C).
        uses[k.name] = [globals_[i] for i in sorted(position[n] for n in buffers_named(k) if n in position)]
        used = {b.name: b for b in uses[k.name]}
        streamed = {name for name in program.outputs if name in used and used[name].nbytes >= tuning.STREAM_BYTES}
        same_as.append(same_nests.setdefault(nest_key(k, uses[k.name], streamed), j))
        if same_as[-1] != j:  # another layer's copy of a kernel printed before: its function (share.py)
            continue
        writer = KernelWriter(k, used, vector_bytes, streamed, table, program.symbols)
        text = render_kernel(writer, signature(uses[k.name]))
        printed[j] = RenderedKernel(kernel_name(k.name), text, tuple(ident(b.name) for b in uses[k.name]),
                                    tuple(ident(b.name) for b in k.allocs))
    # identical layers: one function for the kernels whose C is the same up to names (share.py)
    function = dict(zip(printed, share_functions(list(printed.values()))))
    called = [function[j] for j in same_as]
    defined = [(k, signature(uses[program.kernels[j].name])) for j, k in printed.items() if function[j] == k.function]
    parts = min(max_parts, sum(len(k.text) for k, _ in defined) // tuning.PART_BYTES + 1)
    out = [PRELUDE, vector_typedefs(vector_bytes),
           f"#define ST_LANES {vector_bytes // 4}\n{VECTOR_EXP}{STRIDED_ROW}" if vector_bytes in (32, 64) else "", RUNNER]
    # a symbol's value: one global of the library, set by stitch_main (calls into one library hold
    # its lock, targets/cpu.py), read by every kernel's extents
    out += [f"{PROTO} extern long long {c_symbol_value(name)};" for name in program.symbols]
    out += [f"{PROTO} int {k.function}({params});" for k, params in defined]
    for part, group in enumerate(_deal([(k.function, k.text) for k, _ in defined], parts)):
        out.append(_part_guard(part, parts))
        out += [text for _, text in group]
        out.append("#endif" if parts > 1 else "")
    out.append(_part_guard(0, parts))
    out.append(RUNNER_DEFINITION)
    out.append(PROFILE.replace("KERNELS", str(max(1, len(program.kernels)))))
    out.append(ERROR_SLOT)
    out += [f"{PROTO} long long {c_symbol_value(name)};" for name in program.symbols]
    out.append("int stitch_main(void **b, const long long *st_dims) {" if program.symbols else
               "int stitch_main(void **b) {")
    out += [f"  {c_symbol_value(name)} = st_dims[{i}];" for i, name in enumerate(program.symbols)]
    out.append("  st_error_site = -1;")
    for i, b in enumerate(globals_):
        out.append(f"  {C_TYPES[b.dtype]} *{ident(b.name)} = ({C_TYPES[b.dtype]} *)b[{i}];")
    for i, (k, function) in enumerate(zip(program.kernels, called)):  # (profile slot i: kernel i, shared or not)
        out.append(f"  ST_CALL({i}, {function}({', '.join(ident(b.name) for b in uses[k.name])}));")
        if program.checks:  # a gather read an index out of range: stop, the caller reports it
            out.append("  if (st_error_site >= 0) return 2;")
    out.append("  return 0;")
    out.append("}")
    out.append("#endif" if parts > 1 else "")
    return "\n".join(out) + "\n", parts


def buffers_named(node) -> set[str]:
    """The buffer names a kernel's statements name anywhere (a load, a store, an index), whatever IR
    nodes hold them: any dataclass with a `buffer` field, searched through fields, lists and tuples."""
    names: set[str] = set()
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            if isinstance(getattr(x, "buffer", None), str):
                names.add(x.buffer)
            stack.extend(getattr(x, f.name) for f in dataclasses.fields(x) if f.name != "allocs")
    return names


def _part_guard(part: int, parts: int) -> str:
    return f"#if !defined(STITCH_PART) || STITCH_PART == {part}" if parts > 1 else ""


def _deal(kernels: list[tuple[str, str]], parts: int) -> list[list[tuple[str, str]]]:
    """Kernels into `parts` groups, largest source first into the smallest group (program order kept)."""
    groups: list[list[int]] = [[] for _ in range(max(parts, 1))]
    sizes = [0] * len(groups)
    for i in sorted(range(len(kernels)), key=lambda i: -len(kernels[i][1])):
        g = sizes.index(min(sizes))
        groups[g].append(i)
        sizes[g] += len(kernels[i][1])
    return [[kernels[i] for i in sorted(g)] for g in groups]
