"""A product of one row whose right operand runs along the sum: each column a dot product (a
STATEMENTS recognizer).

    for k reduce { for j { C[.., j] += A(k) * B(j, k) } }

with B's reads contiguous along k and far apart along j (a decoder step's query against its keys,
`q . k^T`, the keys read where they are: engine/schedule/kernel.py, `read_along_sum`). As written,
every k walks all the columns of B a row apart (a 256-byte stride for 64-wide heads); here every
column j is one dot product along its contiguous run: DOT_COLUMNS columns at a time, each a vector
sum over k (16 lanes on AVX-512, 8 on AVX2), added across lanes once, then C[.., j] += it. The
sum's order differs from the loops as written (as the matmul micro-kernel's does): within the
reference's tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.loops import Accumulate, For, Load, Op, index_vars, loads
from ...lowering.matmul import contiguous_in, expr_uses, uses_var
from .emit import KernelWriter
from .split import open_cut, replace_in, select_on

DOT_COLUMNS = 4  # columns summed side by side (their loads in flight together)


@dataclass(frozen=True)
class Plan:
    k: For
    j: For
    acc: Accumulate
    a: object  # the factor without j
    a_vec: str
    # B as a tree: ("piece", B over some columns, its vector C), or ("cut", a concat's select along
    # j, the tree of its low side, the tree of its high side): each piece its own columns
    b: tuple
    taken: int = 1


def one_row_product(w: KernelWriter, stmt, dtype: str = "f32",
                    vector_bytes: int = 64) -> tuple[For, For, Accumulate, list[tuple]] | None:
    """(k, j, the accumulation, its (A, B) factor pairs) where `stmt` is
    `for k reduce { for j { C[.., j] += A(k) * B(j, k) } }` in `dtype` with vectors of at least
    `vector_bytes` (this module's shape from AVX2's 32 on; nibble_dot.py's in f32 and int_dot.py's in
    i32 with AVX-512's 64); else None."""
    if w.vector_bytes < vector_bytes:
        return None
    k = stmt
    if not (isinstance(k, For) and k.kind == "reduce" and len(k.body) == 1):
        return None
    j = k.body[0]
    if not (isinstance(j, For) and len(j.body) == 1 and isinstance(j.body[0], Accumulate)):
        return None
    acc = j.body[0]
    v = acc.value
    if not (acc.op == "sum" and w.buffers[acc.buffer].dtype == dtype and isinstance(v, Op) and v.op == "mul"
            and len(v.args) == 2 and v.dtype == dtype):
        return None
    if not contiguous_in(acc.index, j.var) or uses_var(acc.index, k.var):
        return None
    if acc.buffer in {ld.buffer for ld in loads(v)}:
        return None
    pairs = [(a, b) for a, b in (v.args, v.args[::-1]) if not expr_uses(a, j.var) and expr_uses(b, j.var)]
    return k, j, acc, pairs


def column_steps(pad: str, end, steps: list[tuple[int, list[str]]]) -> list[str]:
    """C walking the columns `st_j` .. `end` - 1 in steps of each width in turn, widest first, each
    width's body (written for the columns st_j ..) as long as a whole step is left."""
    out = []
    for width, body in steps:
        head = f"st_j + {width} <= {end}; st_j += {width}" if width > 1 else f"st_j < {end}; ++st_j"
        out += [f"{pad}for (; {head}) {{", *body, f"{pad}}}"]
    return out


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    shape = one_row_product(w, stmts[at], vector_bytes=32)
    if shape is None:
        return None
    k, j, acc, pairs = shape
    for a, b in pairs:
        a_vec, tree = w.vector_expr(a, k.var), _pieces(w, b, k.var, j.var)
        if a_vec is not None and tree is not None:
            return Plan(k, j, acc, a, a_vec, tree)
    return None


def _pieces(w: KernelWriter, b, k: str, j: str) -> tuple | None:
    """B's tree (`Plan.b`), cut at each concat along j (targets/c/split.py's selects); None where a
    piece does not read along k or has no vector form."""
    sel = select_on(b, j)
    if sel is not None:
        low, high = _pieces(w, replace_in(b, sel, sel.low), k, j), _pieces(w, replace_in(b, sel, sel.high), k, j)
        return None if low is None or high is None else ("cut", sel, low, high)
    if not all(_along(ld, k, j) for ld in loads(b) if uses_var(ld.index, j)):
        return None
    vec = w.vector_expr(b, k)
    return None if vec is None else ("piece", b, vec)


def _along(ld: Load, k: str, j: str) -> bool:
    """A read contiguous along k whose columns j are apart (not along its last index)."""
    return contiguous_in(ld.index, k) and j not in index_vars(ld.index[-1])


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    """Blocks of DOT_COLUMNS columns, then the columns left over; in each, the whole vectors of k,
    then k's leftover elements one at a time."""
    acc, n_k = plan.acc, plan.k.extent
    target = w.access(acc.buffer, acc.index)
    a_one = w.expr(plan.a)

    def walk(tree, first: str, end: str, p: str) -> None:
        if tree[0] == "piece":
            _columns(w, plan, p, first, end, target, a_one, w.expr(tree[1]), tree[2], n_k)
            return
        _, sel, low, high = tree
        cut = open_cut(w, sel, plan.j.var, first, end, p)
        walk(low, first, cut, p + "  ")
        walk(high, cut, end, p + "  ")
        w.lines.append(f"{p}}}")

    walk(plan.b, "0", str(plan.j.extent), pad)


def _columns(w: KernelWriter, plan: Plan, pad: str, first, end, target: str, a_one: str, b_one: str, b_vec: str,
             n_k) -> None:
    """Columns first .. end - 1, DOT_COLUMNS at a time, then one at a time."""
    k, j = plan.k, plan.j
    lanes = w.vector_bytes // 4  # an st_vf32's

    def columns(count: int, first: str) -> list[str]:
        p = pad + "  "
        out = [f"{p}st_vf32 {', '.join(f's{c} = st_bcast_f32(0.0f)' for c in range(count))};",
               f"{p}int64_t {k.var} = 0;",
               f"{p}for (; {k.var} + {lanes} <= {n_k}; {k.var} += {lanes}) {{",
               f"{p}  const st_vf32 a = {plan.a_vec};"]
        for c in range(count):
            out.append(f"{p}  {{ const int64_t {j.var} = {first} + {c}; s{c} += a * {b_vec}; }}")
        out.append(f"{p}}}")
        for c in range(count):
            out.append(f"{p}{{ const int64_t {j.var} = {first} + {c}; float t = st_hsum_f32(s{c});")
            out.append(f"{p}  for (int64_t {k.var}_1 = {k.var}; {k.var}_1 < {n_k}; ++{k.var}_1) {{ "
                       f"const int64_t {k.var} = {k.var}_1; t += {a_one} * {b_one}; }}")
            out.append(f"{p}  {target} += t; }}")
        return out

    w.lines.append(f"{pad}{{ int64_t st_j = {first};")
    w.lines += column_steps(pad, end, [(DOT_COLUMNS, columns(DOT_COLUMNS, "st_j")), (1, columns(1, "st_j"))])
    w.lines.append(f"{pad}}}")
