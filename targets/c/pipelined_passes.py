"""Reductions over one row, run side by side on consecutive rows: a software pipeline over the rows
of a loop.

A softmax cross-entropy's row loop makes three passes over each row, each a reduction whose start
waits on the one before:

    for r {                                   for t in 0 .. rows + 1 {
      m = max(x[r, :])                          for c in columns (16 at a time) {
      s = sum(exp(x[r, :] - m))                   max of row t;  exp sum of row t-1;
      l = log(s)                        =>        weighted sum of row t-2 }
      y += sum((x[r, :] - m - l) * w[r, :])     finish row t-2's sum, then row t-1's (l = log(s)),
    }                                           then row t's maximum
                                              }

Each iteration of the new loop runs the K passes in one loop over the columns, pass k on row t - k,
then finishes them, the oldest row first, each followed by the statements that came after it. One
after the other, the exponentials kept the multiply-add pipes busy while the adds and the loads
waited, and each pass's last lanes were summed while the next pass waited; side by side a max, an
exponential and a multiply-add share each step.

A pass is a reduction loop over the row's columns into one element (a sum, or an f32 maximum or
minimum): all K of the same length, a multiple of 16, each with a 16-lane form (`vector_expr`), one
of them a sum of exponentials (the case measured). A statement between passes belongs to the pass
after it if it sets that pass's start (it runs before the column loop), else to the pass before it.
Legal where each buffer the loop's body writes is written by one pass's statements only, read by
none of an earlier pass, and is either private to its row (every access at one index that moves
with the row) or one element: then a later pass reads a copy taken when its own row was the
writer's (copies shifted down a line at the end of each iteration). Each sum adds its 16 lanes in
the order `rows.lane_sum` does; a maximum or minimum is the same value in any order. Where ST_VECTOR_EXP
is not defined the rows run one after the other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...engine.schedule.index import affine
from ...lowering.loops import (
    Accumulate,
    Buffer,
    For,
    Ix,
    Load,
    Store,
    index_loads,
    index_vars,
    loads,
    map_indices,
    map_loads,
)
from ...lowering.matmul import flat_coef, shift_ix
from . import extremum
from .emit import KernelWriter
from .ops import exponentials
from .prelude import C_TYPES


@dataclass(frozen=True)
class Pass:
    loop: For
    acc: Accumulate
    before: tuple = ()  # its start (and, for the first, what precedes it)
    after: tuple = ()  # the statements after it, up to the next pass's start

    def statements(self) -> tuple:
        return (*self.before, self.acc, *self.after)


@dataclass(frozen=True)
class _Copies:
    """A one-element buffer a later pass reads: written by pass `writer`, read up to `behind` rows later."""
    writer: int
    behind: int
    index: tuple[Ix, ...]


@dataclass(frozen=True)
class Plan:
    loop: For  # the loop over rows
    passes: tuple[Pass, ...]
    copies: dict[str, _Copies]  # the one-element buffers a later pass reads
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    """Row loop `stmts[at]` as a pipeline of its passes (the module's docstring), or None."""
    s = stmts[at]
    if not isinstance(s, For):
        return None
    found = _plan(w, s)
    return Plan(s, *found) if found is not None else None


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    _write(w, plan.loop, plan.passes, plan.copies, pad, loops)


def _plan(k: KernelWriter, s: For) -> tuple[tuple[Pass, ...], dict[str, _Copies]] | None:
    """The passes of row loop `s` with their statements, and the one-element buffers a later pass
    reads; None where `s` is not such a loop."""
    if not (k.vector_bytes == 64 and s.kind == "serial" and s.extent >= 2):
        return None
    at = [i for i, x in enumerate(s.body) if isinstance(x, For)]
    if len(at) < 2 or not all(_is_pass(k, s.body[i], s.body[at[0]].extent) for i in at):
        return None
    parts = [(s.body[i], s.body[i].body[0], [], []) for i in at]  # (loop, sum, before, after)
    if not any(acc.op == "sum" and exponentials(acc.value) for _, acc, _, _ in parts):
        return None
    for i, x in enumerate(s.body):
        if isinstance(x, For):
            continue
        following = sum(1 for j in at if j < i)  # the pass after x
        if (following < len(parts) and isinstance(x, Store)
                and (x.buffer, x.index) == (parts[following][1].buffer, parts[following][1].index)):
            parts[following][2].append(x)  # its start
        elif following == 0:
            parts[0][2].append(x)
        else:
            parts[following - 1][3].append(x)
    passes = tuple(Pass(loop, acc, tuple(before), tuple(after)) for loop, acc, before, after in parts)
    uses: dict[str, list[tuple[int, tuple, bool]]] = {}  # buffer -> (pass, index, written)
    for j, p in enumerate(passes):
        for x in p.statements():
            reads = [*loads(x.value), *(ld for ix in x.index for ld in index_loads(ix))]
            if not all(affine(ix) for ld in (x, *reads) for ix in ld.index):
                return None
            uses.setdefault(x.buffer, []).append((j, x.index, True))
            for ld in reads + ([x] if isinstance(x, Accumulate) else []):
                uses.setdefault(ld.buffer, []).append((j, ld.index, False))
    copies: dict[str, _Copies] = {}
    for name, found in uses.items():
        writers = {j for j, _, written in found if written}
        indices = {index for _, index, _ in found}
        if not writers:
            continue  # (read only: an input, or written before the loop)
        if len(writers) > 1 or len(indices) > 1:
            return None
        (w,), (index,) = writers, indices
        behind = max(j for j, _, _ in found) - w
        if any(j < w for j, _, _ in found):
            return None  # read before its row writes it: the previous row's value
        if not any(s.var in index_vars(ix) for ix in index):  # one element for all the rows
            if behind:
                copies[name] = _Copies(w, behind, index)
        elif flat_coef(index, s.var, k.buffers[name].shape) == 0:
            return None  # (else an element each row has to itself)
    return passes, copies


def _is_pass(k: KernelWriter, x, n: int) -> bool:
    """Whether `x` is a reduction over the row's n columns into one f32 element with a 16-lane form
    (n a multiple of 16) whose terms do not read its own sum (16 lanes add terms of the start)."""
    if not (isinstance(x, For) and x.kind == "reduce" and x.extent == n and n % 16 == 0
            and len(x.body) == 1 and isinstance(x.body[0], Accumulate)):
        return False
    acc = x.body[0]
    if (acc.op not in ("sum", "max", "min") or k.buffers[acc.buffer].dtype != "f32"
            or any(x.var in index_vars(ix) for ix in acc.index) or (acc.op != "sum" and exponentials(acc.value))
            or any(ld.buffer == acc.buffer for ld in loads(acc.value))):
        return False
    return k.vector_expr(acc.value, x.var) is not None


def _copy(name: str, behind: int) -> str:
    """The buffer holding `name` as it was `behind` rows ago."""
    return f"{name}__row{behind}"


def _write(k: KernelWriter, s: For, passes: tuple[Pass, ...], copies: dict[str, _Copies], pad: str,
           loops: tuple[For, ...]) -> None:
    depth, inner = len(pad) // 2, loops + (s,)
    r, rows, count = s.var, s.extent, len(passes)
    column, n = passes[0].loop.var, passes[0].loop.extent
    for name, c in copies.items():
        for d in range(1, c.behind + 1):
            k.buffers[_copy(name, d)] = Buffer(_copy(name, d), "local", k.buffers[name].dtype, (1,))

    def on_row(x, j: int, pass_var: str | None = None):
        """Statement x of pass j: on row r - j, its column read as `column`, copies for old values."""
        def ix(i: Ix) -> Ix:
            i = shift_ix((i,), {r: -j})[0]
            return i.substitute({pass_var: Ix.var(column)}) if pass_var else i

        def load(ld: Load) -> Load:
            c = copies.get(ld.buffer)
            return Load(_copy(ld.buffer, j - c.writer), (Ix.constant(0),)) if c and j > c.writer else ld
        x = map_indices(x, ix)
        return replace(x, value=map_loads(x.value, load))

    on = [f"st_on{j}" for j in range(count)]
    k.lines += [f"{pad}#if defined(ST_VECTOR_EXP)", f"{pad}{{"]
    for name, c in copies.items():
        k.lines.append(f"{pad}  {C_TYPES[k.buffers[name].dtype]} " + ", ".join(
            f"{k.buffer_name(_copy(name, d))}[1] = {{0}}" for d in range(1, c.behind + 1)) + ";")
    k.lines.append(f"{pad}  for (int64_t {r} = 0; {r} < {rows + count - 1}; ++{r}) {{")
    k.lines.append(f"{pad}    const int " + ", ".join(
        f"{on[j]} = {r} >= {j} && {r} < {rows + j}" if j else f"{on[j]} = {r} < {rows}" for j in range(count)) + ";")
    accs = [on_row(p.acc, j, p.loop.var) for j, p in enumerate(passes)]
    steps = []
    for j, (p, acc) in enumerate(zip(passes, accs)):
        if p.before:
            k.lines.append(f"{pad}    if ({on[j]}) {{")
            k.block([on_row(x, j) for x in p.before], depth + 3, inner)
            k.lines.append(f"{pad}    }}")
        value = k.vector_expr(acc.value, column)
        if acc.op == "sum":
            k.lines.append(f"{pad}    st_vf32 st_l{j} = st_bcast_f32(0.0f);")
            steps.append(f"st_l{j} += {value};")
        else:
            start = "-INFINITY" if acc.op == "max" else "INFINITY"
            k.lines.append(f"{pad}    __m512 st_l{j} = _mm512_set1_ps({start}); __mmask16 st_n{j} = 0;")
            steps.append(f"{{ __m512 st_x = (__m512)({value}); st_n{j} |= _mm512_cmp_ps_mask(st_x, st_x, "
                         f"_CMP_UNORD_Q); st_l{j} = _mm512_{acc.op}_ps(st_x, st_l{j}); }}")
    head = f"for (int64_t {column} = 0; {column} < {n}; {column} += 16)"
    k.lines.append(f"{pad}    if ({' && '.join(on)}) {head} {{")  # every pass on a row: no tests
    k.lines += [f"{pad}      {step}" for step in steps]
    k.lines.append(f"{pad}    }} else {head} {{")  # the first and last rows + 1
    k.lines += [f"{pad}      if ({on[j]}) {step}" for j, step in enumerate(steps)]
    k.lines.append(f"{pad}    }}")
    for j in reversed(range(count)):  # the oldest row first (any order would do: copies hold what a row needs)
        acc = accs[j]
        target = k.access(acc.buffer, acc.index)
        k.lines.append(f"{pad}    if ({on[j]}) {{")
        if acc.op == "sum":
            k.lines.append(f"{pad}      {target} += _mm512_reduce_add_ps((__m512)st_l{j});")
        else:
            extremum.write(k, acc, target, "float", f"for (int64_t {column} = 0; {column} < {n}; ++{column})",
                             pad + "      ", passes[j].loop,
                             [f"{pad}        acc = _mm512_reduce_{acc.op}_ps(st_l{j}); nan = st_n{j} != 0;"])
        k.block([on_row(x, j) for x in passes[j].after], depth + 3, inner)
        k.lines.append(f"{pad}    }}")
    for name, c in copies.items():  # down a row
        for d in range(c.behind, 1, -1):
            k.lines.append(f"{pad}    {k.buffer_name(_copy(name, d))}[0] = {k.buffer_name(_copy(name, d - 1))}[0];")
        k.lines.append(f"{pad}    {k.buffer_name(_copy(name, 1))}[0] = {k.access(name, c.index)};")
    k.lines += [f"{pad}  }}", f"{pad}}}", f"{pad}#else", f"{pad}for (int64_t {r} = 0; {r} < {rows}; ++{r}) {{"]
    k.block(s.body, depth + 1, inner)
    k.lines += [f"{pad}}}", f"{pad}#endif"]
