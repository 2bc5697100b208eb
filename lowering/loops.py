"""The LoopProgram IR: kernels as loop nests over buffers in memory scopes.

    LoopProgram  params, outputs, global intermediates, kernels
    LoopKernel   allocations (shared / local), a body of statements; after
                 merging, each shared allocation has a byte offset in the
                 kernel's one merged buffer
    For          a loop: `parallel` over tiles, `serial` inside a tile,
                 `reduce` over reduced axes
    Store        buf[index] = value
    Accumulate   buf[index] = buf[index] <op> value (reductions, matmul)

Indices are `Ix` expressions of loop variables (engine/schedule/index.py): affine,
with div/mod where a reshape could not be simplified away and Indirect where a
gather reads an index from a tensor. Expressions are loads, literals, scalar
ops, a concat's `Select` and an iota's `IndexValue`. Everything prints as text (`print_loops`), the form
`stitch compile --emit loops` shows and the pass tests compare.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Union

from ..engine.ir.program import dtype_bytes
from ..engine.schedule.index import FloorDiv, Indirect, Ix, Mod, flat_address  # noqa: F401  (re-exported: the index type of loops)


@dataclass(frozen=True)
class Buffer:
    name: str
    scope: str  # "global" | "shared" | "local"
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = dtype_bytes(self.dtype)
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Load:
    buffer: str
    index: tuple[Ix, ...]  # may hold div/mod (a reshape) and Indirect (a gather) atoms


@dataclass(frozen=True)
class Lit:
    value: Union[int, float, bool]
    dtype: str


@dataclass(frozen=True)
class Op:
    op: str  # an elementwise op of engine.ops (unary, binary, compare, where, cast)
    args: tuple["Expr", ...]
    dtype: str  # the result dtype


@dataclass(frozen=True)
class Select:
    """A concat's element: `low` where ix < split, else `high`; only the chosen one is evaluated
    (each reads its own operand, whose index is out of range on the other side)."""

    ix: Ix
    split: int
    low: "Expr"
    high: "Expr"
    dtype: str


@dataclass(frozen=True)
class Checked:
    """`value`, after checking a gather's index (`check`, an index holding its Indirect) is in
    range: for a gather whose index map no longer reads the index (a table axis of size 1)."""

    check: Ix
    value: "Expr"


@dataclass(frozen=True)
class IndexValue:
    """An index's value as an element of `dtype` (an iota: its position along its axis)."""

    ix: Ix
    dtype: str


Expr = Union[Load, Lit, Op, Select, Checked, IndexValue]


@dataclass
class Store:
    buffer: str
    index: tuple[Ix, ...]
    value: Expr


@dataclass
class Accumulate:
    buffer: str
    index: tuple[Ix, ...]
    op: str  # "sum" | "max" | "min"
    value: Expr
    # "matrix": a matmul's multiply-accumulate, which an accelerator runs on its matrix unit
    # (targets/simulator.py times it by matrix tiles); everything else is vector work
    unit: str = "vector"
    # for the matrix unit: the loop variables of the product's rows and of its columns
    # (engine.cost.matrix_dims); the others its accumulator is indexed by are its batch
    matrix: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


@dataclass
class For:
    var: str
    extent: int
    kind: str  # "parallel" | "serial" | "reduce"
    body: list["Stmt"]


Stmt = Union[For, Store, Accumulate]


@dataclass
class LoopKernel:
    name: str
    allocs: list[Buffer]  # on-chip buffers (shared, local), allocated per tile
    body: list[Stmt]
    offsets: dict[str, int] = field(default_factory=dict)  # shared buffer -> byte offset once merged
    merged_bytes: int = 0  # size of the merged shared buffer (0 before merging)
    # the shared buffers' bytes without merging, each rounded up to its alignment as the merge
    # places it (0 before merging): never less than merged_bytes
    unmerged_bytes: int = 0
    # global temporaries this kernel alone writes and reads, and the scope the schedule
    # placed them in: what forward_buffers keeps on chip
    forwardable: dict[str, str] = field(default_factory=dict)
    # staged copies the plan reads in place (`Staged.in_place`): lowering/inplace.py drops them
    in_place: frozenset = frozenset()
    # the global buffers its nests read where a dropped copy was: a cache keeps what a tile reads of
    # them again, as the plan prices it (execute counts each of their cells once a tile)
    cached: frozenset = frozenset()
    # its tile loops run as a two-stage pipeline on the C target (lowering/overlap.py): each tile's
    # last row loop beside the next tile's first, the tiles' buffers in two copies
    pipelined: bool = False
    # its tiles spread over the cores (`KernelPlan.threaded`); False: run on the calling thread
    threaded: bool = True
    # tile loops along symbolic axes, (axis, tile, extent): each is followed by its remainder tile,
    # written by the last pass (lowering/remainder.py)
    remainders: tuple[tuple[str, int, int], ...] = ()
    tails: list = field(default_factory=list)  # the loops that pass added (copies of whole tiles), by identity


@dataclass
class LoopProgram:
    name: str
    params: list[Buffer]
    outputs: list[str]  # buffer names, in return order
    intermediates: list[Buffer]  # global buffers written by one kernel, read by later ones
    kernels: list[LoopKernel]
    output_buffers: list[Buffer] = field(default_factory=list)  # global buffers the outputs are written to
    # what each gather site (Indirect.site) reports when an index is out of range
    checks: list[str] = field(default_factory=list)
    # parameters bound at compile time (weights): their values are given once, when the program is
    # built, not on each call; `prologue` (lowering/bind.py) then makes, from them alone, the blocks
    # the kernels read (params too, so the kernels take them as they take any input)
    bound: tuple[str, ...] = ()
    prologue: LoopProgram | None = None
    # the symbols its extents are expressions of (engine/ir/extent.py), in the order `stitch_main`
    # takes their values
    symbols: tuple[str, ...] = ()
    # parameters that grow in place into an output (lowering/caches.py: `Cache`s): both laid out with
    # the capacity's strides, the output written only past the parameter's positions
    caches: tuple = ()

    def buffer(self, name: str) -> Buffer:
        for b in self.params + self.intermediates + self.output_buffers:
            if b.name == name:
                return b
        for k in self.kernels:
            for b in k.allocs:
                if b.name == name:
                    return b
        raise KeyError(name)


# ---------------------------------------------------------------------------
# walking


def loads(expr: Expr) -> Iterator[Load]:
    """Every Load in an expression, left to right (the index values gathers read included)."""
    if isinstance(expr, Load):
        for ix in expr.index:
            yield from index_loads(ix)
        yield expr
    elif isinstance(expr, Op):
        for arg in expr.args:
            yield from loads(arg)
    elif isinstance(expr, Select):
        yield from index_loads(expr.ix)
        yield from loads(expr.low)
        yield from loads(expr.high)
    elif isinstance(expr, Checked):
        yield from index_loads(expr.check)
        yield from loads(expr.value)
    elif isinstance(expr, IndexValue):
        yield from index_loads(expr.ix)


def map_loads(e: Expr, fn) -> Expr:
    """`e` with every Load replaced by `fn(load)`, the loads inside gathered indices too (their own
    index rebuilt first)."""
    if isinstance(e, Load):
        return fn(Load(e.buffer, tuple(map_index_loads(ix, fn) for ix in e.index)))
    if isinstance(e, Op):
        return Op(e.op, tuple(map_loads(a, fn) for a in e.args), e.dtype)
    if isinstance(e, Select):
        return Select(map_index_loads(e.ix, fn), e.split, map_loads(e.low, fn), map_loads(e.high, fn), e.dtype)
    if isinstance(e, Checked):
        return Checked(map_index_loads(e.check, fn), map_loads(e.value, fn))
    if isinstance(e, IndexValue):
        return IndexValue(map_index_loads(e.ix, fn), e.dtype)
    return e


def map_indices(e, fn):
    """`e` (a Store or Accumulate, or an expression) with `fn` applied to every index it holds: its
    own, its loads', a concat select's and a checked gather's (not the indices inside gathered
    index values)."""
    if isinstance(e, (Store, Accumulate)):
        return replace(e, index=tuple(fn(ix) for ix in e.index), value=map_indices(e.value, fn))
    if isinstance(e, Load):
        return Load(e.buffer, tuple(fn(ix) for ix in e.index))
    if isinstance(e, Op):
        return Op(e.op, tuple(map_indices(a, fn) for a in e.args), e.dtype)
    if isinstance(e, Select):
        return Select(fn(e.ix), e.split, map_indices(e.low, fn), map_indices(e.high, fn), e.dtype)
    if isinstance(e, Checked):
        return Checked(fn(e.check), map_indices(e.value, fn))
    if isinstance(e, IndexValue):
        return IndexValue(fn(e.ix), e.dtype)
    assert isinstance(e, Lit)
    return e


def map_indices_deep(e, fn):
    """`map_indices`, and inside gathered index values too: every index `e` holds at any depth (an
    iota's position inside a gather's index value included) is `fn(ix)`, innermost first."""
    def deep(ix: Ix) -> Ix:
        if all(isinstance(t, str) for t, _ in ix.terms):
            return fn(ix)

        def atom(t):
            if isinstance(t, Indirect):
                return Ix.var(Indirect(map_indices_deep(t.value, fn), t.extent, t.site))
            if isinstance(t, (FloorDiv, Mod)):
                return Ix.var(type(t)(deep(t.x), t.d))
            return Ix.var(t)

        return fn(ix.map_atoms(atom))

    return map_indices(e, deep)


def map_leaves(stmts: list[Stmt], fn) -> list[Stmt]:
    """`stmts` with every Store / Accumulate under them replaced by `fn(leaf)`, the loops rebuilt."""
    return [For(s.var, s.extent, s.kind, map_leaves(s.body, fn)) if isinstance(s, For) else fn(s) for s in stmts]


def map_index_loads(ix: Ix, fn) -> Ix:
    """`ix` with the loads of its gathered index values replaced by `fn(load)` (`map_loads`)."""
    if all(isinstance(t, str) for t, _ in ix.terms):
        return ix

    def atom(t):
        if isinstance(t, Indirect):
            return Ix.var(Indirect(map_loads(t.value, fn), t.extent, t.site))
        if isinstance(t, (FloorDiv, Mod)):
            return Ix.var(type(t)(map_index_loads(t.x, fn), t.d))
        return Ix.var(t)

    return ix.map_atoms(atom)


def map_leaf_loads(s, fn):
    """A Store or Accumulate with `map_loads` applied to its value and its index."""
    return replace(s, index=tuple(map_index_loads(ix, fn) for ix in s.index), value=map_loads(s.value, fn))


def index_loads(ix: Ix) -> Iterator[Load]:
    """The Loads inside an index: a gather's index value, read from its tensor."""
    for t, _ in ix.terms:
        if isinstance(t, Indirect):
            yield from loads(t.value)
        elif isinstance(t, (FloorDiv, Mod)):
            yield from index_loads(t.x)


def index_vars(ix: Ix) -> set[str]:
    """The loop variables an index uses, inside atoms and gathered index values too."""
    out = set()
    for t, _ in ix.terms:
        if isinstance(t, str):
            out.add(t)
        elif isinstance(t, Indirect):
            out |= expr_vars(t.value)
        else:
            out |= index_vars(t.x)
    return out


def expr_vars(e: Expr) -> set[str]:
    if isinstance(e, Load):
        return set().union(*(index_vars(ix) for ix in e.index)) if e.index else set()
    if isinstance(e, Op):
        return set().union(*(expr_vars(a) for a in e.args)) if e.args else set()
    if isinstance(e, Select):
        return index_vars(e.ix) | expr_vars(e.low) | expr_vars(e.high)
    if isinstance(e, Checked):
        return index_vars(e.check) | expr_vars(e.value)
    if isinstance(e, IndexValue):
        return index_vars(e.ix)
    return set()


def flat_index(index: tuple[Ix, ...], shape: tuple[int, ...]) -> Ix:
    """The element `index` reads of a buffer of `shape`, counted from its start (row-major); the
    digits of one value that add up to it taken back (`x[.., r // 1024, (r // 32) % 32, r % 32]` of a
    [.., 4, 32, 32] buffer reads `r`: index.py `flat_address`)."""
    return flat_address(index, shape)


def leaves(stmts: list[Stmt]) -> Iterator[Union[Store, Accumulate]]:
    """Every Store / Accumulate under `stmts`, in program order."""
    for s in stmts:
        if isinstance(s, For):
            yield from leaves(s.body)
        else:
            yield s


def written_once(stmts: list[Stmt]) -> set[str]:
    """The buffers exactly one Store / Accumulate under `stmts` writes."""
    writes: dict[str, int] = {}
    for leaf in leaves(stmts):
        writes[leaf.buffer] = writes.get(leaf.buffer, 0) + 1
    return {name for name, n in writes.items() if n == 1}


def perfect_nest(loop: For) -> tuple[list[For], Union[Store, Accumulate]] | None:
    """(loops, leaf) if `loop` is a chain of single-statement loops (none of them a tile loop
    below the first) ending in one statement."""
    loops = [loop]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], For) and loops[-1].body[0].kind != "parallel":
        loops.append(loops[-1].body[0])
    body = loops[-1].body
    if len(body) == 1 and isinstance(body[0], (Store, Accumulate)):
        return loops, body[0]
    return None


def accumulates_in_float(leaf, dtype: str) -> bool:
    """An f16 matmul's multiply-accumulate into an accumulator of `dtype` (f16, or f32 once
    lowering/widen.py widened it): as numpy's f16 matmul, products and sums are float and each cell
    is rounded once (the C target and the numpy executor both honour this)."""
    return (isinstance(leaf, Accumulate) and leaf.unit == "matrix" and leaf.op == "sum" and dtype in ("f16", "f32")
            and isinstance(leaf.value, Op) and leaf.value.op == "mul" and leaf.value.dtype == "f16")


# ---------------------------------------------------------------------------
# text


def print_loops(program: LoopProgram) -> str:
    lines = [f"program {program.name}("
             + ", ".join(f"{b.name}: {_type(b)}" for b in program.params) + ") -> "
             + ", ".join(program.outputs)]
    if program.bound:
        lines.append(f"  bound {', '.join(program.bound)}")
    for b in program.output_buffers + program.intermediates:
        lines.append(f"  alloc global {b.name}: {_type(b)}")
    if program.prologue is not None:
        lines.append("")
        lines.extend("  " + line if line else line for line in print_loops(program.prologue).splitlines())
    for k in program.kernels:
        lines.append("")
        lines.extend(print_kernel(k))
    return "\n".join(lines) + "\n"


def print_kernel(k: LoopKernel) -> list[str]:
    head = f"kernel {k.name}"
    if k.merged_bytes:
        head += f"  # shared: {k.merged_bytes} B merged, {k.unmerged_bytes} B unmerged"
    if k.pipelined:
        head += "  # pipelined"
    lines = [head + " {"]
    for b in k.allocs:
        at = f" @ {k.offsets[b.name]}" if b.name in k.offsets else ""
        lines.append(f"  alloc {b.scope} {b.name}: {_type(b)}{at}")
    for s in k.body:
        lines.extend(_stmt(s, "  "))
    lines.append("}")
    return lines


def _type(b: Buffer) -> str:
    return f"{b.dtype}[{', '.join(map(str, b.shape))}]"


def _stmt(s: Stmt, pad: str) -> list[str]:
    if isinstance(s, For):
        out = [f"{pad}for {s.var} in 0..{s.extent} {s.kind} {{"]
        for b in s.body:
            out.extend(_stmt(b, pad + "  "))
        out.append(pad + "}")
        return out
    if isinstance(s, Store):
        return [f"{pad}{_access(s.buffer, s.index)} = {print_expr(s.value)}"]
    return [f"{pad}{_access(s.buffer, s.index)} {_ACC[s.op]} {print_expr(s.value)}"]


_ACC = {"sum": "+=", "max": "max=", "min": "min="}


def _access(buffer: str, index: tuple[Ix, ...]) -> str:
    return f"{buffer}[{', '.join(print_ix(i) for i in index)}]"


def print_expr(e: Expr) -> str:
    if isinstance(e, Load):
        return _access(e.buffer, e.index)
    if isinstance(e, Lit):
        return f"{e.value!r}:{e.dtype}"
    if isinstance(e, Select):
        return f"({print_ix(e.ix)} < {e.split} ? {print_expr(e.low)} : {print_expr(e.high)})"
    if isinstance(e, Checked):
        return f"checked({print_ix(e.check)}, {print_expr(e.value)})"
    if isinstance(e, IndexValue):
        return f"index({print_ix(e.ix)}):{e.dtype}"
    return f"{e.op}({', '.join(print_expr(a) for a in e.args)})"


def print_ix(ix: Ix) -> str:
    """An index as text, gathered index values printed as expressions."""
    parts = []
    for t, c in ix.terms:
        text = t if isinstance(t, str) else _atom_text(t)
        parts.append(text if c == 1 else f"{c}*{text}" if isinstance(t, (str, Indirect)) else f"{c}*({text})")
    if ix.const or not parts:
        parts.append(str(ix.const))
    return " + ".join(parts).replace("+ -", "- ")


def _atom_text(t) -> str:
    if isinstance(t, Indirect):
        return f"idx<{t.extent}>({print_expr(t.value)})"
    x = print_ix(t.x) if t.x.plain else f"({print_ix(t.x)})"
    return f"{x} {'//' if isinstance(t, FloorDiv) else '%'} {t.d}"
