"""A product of one row whose right operand runs along the sum: each column a dot product (a
STATEMENTS recognizer).

    for k reduce { for j { C[.., j] += A(k) * B(j, k) } }

with B's reads contiguous along k and far apart along j (a decoder step's query against its keys,
`q . k^T`, the keys read where they are: engine/schedule/kernel.py, `read_along_sum`). As written,
every k walks all the columns of B a row apart (a 256-byte stride for 64-wide heads); here every
column j is one dot product along its contiguous run: DOT_COLUMNS columns at a time, each a 16-lane
vector sum over k, added across lanes once, then C[.., j] += it. The sum's order differs from the
loops as written (as the matmul micro-kernel's does): within the reference's tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...lowering.loops import Accumulate, For, Ix, Load, Op, Select, index_vars, loads
from ...lowering.matmul import contiguous_in, uses_var
from .emit import KernelWriter

LANES = 16  # an st_vf32
DOT_COLUMNS = 4  # columns summed side by side (their loads in flight together)


@dataclass(frozen=True)
class Plan:
    k: For
    j: For
    acc: Accumulate
    a: object  # the factor without j
    a_vec: str
    pieces: tuple  # (first column, end, B there, its 16-lane C): a concat along j is one piece a side
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    if w.vector_bytes < 64:
        return None
    k = stmts[at]
    if not (isinstance(k, For) and k.kind == "reduce" and len(k.body) == 1):
        return None
    j = k.body[0]
    if not (isinstance(j, For) and len(j.body) == 1 and isinstance(j.body[0], Accumulate)):
        return None
    acc = j.body[0]
    v = acc.value
    if not (acc.op == "sum" and w.buffers[acc.buffer].dtype == "f32" and isinstance(v, Op) and v.op == "mul"
            and len(v.args) == 2 and v.dtype == "f32"):
        return None
    if not contiguous_in(acc.index, j.var) or uses_var(acc.index, k.var):
        return None
    for a, b in (v.args, v.args[::-1]):
        if _reads(a, j.var) or not _reads(b, j.var) or acc.buffer in {ld.buffer for ld in loads(v)}:
            continue
        a_vec = w.vector_expr(a, k.var)
        pieces = []
        for first, end, side in _pieces(b, j):
            if not all(_along(ld, k.var, j.var) for ld in loads(side) if uses_var(ld.index, j.var)):
                break
            side_vec = w.vector_expr(side, k.var)
            if side_vec is None:
                break
            pieces.append((first, end, side, side_vec))
        else:
            if a_vec is not None:
                return Plan(k, j, acc, a, a_vec, tuple(pieces))
    return None


def _pieces(b, j: For) -> list[tuple]:
    """(first column, end, B over those columns): one piece, or two where B holds a concat along j
    (`j < split ? low : high`), each with its side in place of the select."""
    split = _split(b, j.var)
    if split is None:
        return [(0, j.extent, b)]
    return [(0, split, _side(b, j.var, low=True)), (split, j.extent, _side(b, j.var, low=False))]


def _split(e, var: str):
    if isinstance(e, Select) and e.ix == Ix.var(var):
        return e.split
    for arg in getattr(e, "args", ()):
        found = _split(arg, var)
        if found is not None:
            return found
    return None


def _side(e, var: str, low: bool):
    """`e` with every select on `var` replaced by its low (or high) side."""
    if isinstance(e, Select) and e.ix == Ix.var(var):
        return _side(e.low if low else e.high, var, low)
    if isinstance(e, Op):
        return replace(e, args=tuple(_side(arg, var, low) for arg in e.args))
    return e


def _reads(e, var: str) -> bool:
    return any(uses_var(ld.index, var) for ld in loads(e))


def _along(ld: Load, k: str, j: str) -> bool:
    """A read contiguous along k whose columns j are apart (not along its last index)."""
    return contiguous_in(ld.index, k) and j not in index_vars(ld.index[-1])


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    """Blocks of DOT_COLUMNS columns, then the columns left over; in each, the whole vectors of k,
    then k's leftover elements one at a time."""
    acc, n_k = plan.acc, plan.k.extent
    target = w.access(acc.buffer, acc.index)
    a_one = w.expr(plan.a)
    for first, end, side, b_vec in plan.pieces:
        _columns(w, plan, pad, first, end, target, a_one, w.expr(side), b_vec, n_k)


def _columns(w: KernelWriter, plan: Plan, pad: str, first, end, target: str, a_one: str, b_one: str, b_vec: str,
             n_k) -> None:
    """Columns first .. end - 1, DOT_COLUMNS at a time, then one at a time."""
    k, j = plan.k, plan.j

    def columns(count: int, first: str) -> list[str]:
        p = pad + "  "
        out = [f"{p}st_vf32 {', '.join(f's{c} = st_bcast_f32(0.0f)' for c in range(count))};",
               f"{p}int64_t {k.var} = 0;",
               f"{p}for (; {k.var} + {LANES} <= {n_k}; {k.var} += {LANES}) {{",
               f"{p}  const st_vf32 a = {plan.a_vec};"]
        for c in range(count):
            out.append(f"{p}  {{ const int64_t {j.var} = {first} + {c}; s{c} += a * {b_vec}; }}")
        out.append(f"{p}}}")
        for c in range(count):
            out.append(f"{p}{{ const int64_t {j.var} = {first} + {c}; float t = _mm512_reduce_add_ps((__m512)s{c});")
            out.append(f"{p}  for (int64_t {k.var}_1 = {k.var}; {k.var}_1 < {n_k}; ++{k.var}_1) {{ "
                       f"const int64_t {k.var} = {k.var}_1; t += {a_one} * {b_one}; }}")
            out.append(f"{p}  {target} += t; }}")
        return out

    w.lines.append(f"{pad}{{ int64_t st_j = {first};")
    w.lines.append(f"{pad}for (; st_j + {DOT_COLUMNS} <= {end}; st_j += {DOT_COLUMNS}) {{")
    w.lines += columns(DOT_COLUMNS, "st_j")
    w.lines.append(f"{pad}}}")
    w.lines.append(f"{pad}for (; st_j < {end}; ++st_j) {{")
    w.lines += columns(1, "st_j")
    w.lines.append(f"{pad}}} }}")
