"""The plain C printer: statements, expressions and indices of one kernel, as written.

`KernelWriter` prints a kernel's loop nests line by line (`block`, `leaf`, `expr`, `ix`,
`access`), and the 16-lane AVX-512 form of an f32 expression (`vector_expr`) for the recognizers
that write one. It knows no loop shape: `block` walks the recognizers it is given (in order:
`c_source` gives it recognizers.py's RECOGNIZERS) and writes a statement plainly only where none takes it.

A recognizer is a `match` returning a small frozen plan (or None) and an `emit` writing it, at
one of three stages (`Stage`):

- REWRITE: `match(writer, statement)`; `emit(writer, plan)` returns the statement written in its
  place (still open to the other stages);
- STATEMENTS: `match(writer, statements, at, loops)` for the statements from `at` on inside
  `loops`; `emit(writer, plan, pad, loops)` writes C for the first `plan.taken` of them;
- BEFORE_LOOP: `match(writer, loop, loops, skip)` for a loop about to be written (skip: a buffer
  to leave alone); `emit(writer, plan, pad)` writes lines ahead of it (prefetches).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...engine.schedule.index import FloorDiv, Mod, affine
from ...lowering.loops import (
    Buffer,
    Checked,
    For,
    IndexValue,
    Ix,
    Lit,
    Load,
    LoopKernel,
    Op,
    Select,
    Store,
    expr_vars,
    flat_index,
    index_loads,
)
from ...lowering.matmul import expr_dtype, flat_coef
from .ops import EXPONENTIALS, literal, scalar_op, vector_op
from .prelude import C_TYPES

PROTO = '__attribute__((visibility("hidden")))'


def ident(name: str) -> str:
    """The C variable holding buffer `name`."""
    return "b_" + name


def kernel_name(name: str) -> str:
    return "kernel_" + name


def signature(buffers: list[Buffer]) -> str:
    """A kernel's parameter list: its global buffers."""
    return ", ".join(f"{C_TYPES[b.dtype]} *restrict {ident(b.name)}" for b in buffers) or "void"


class Stage(enum.Enum):
    """When the printer asks a recognizer (the module's docstring)."""

    REWRITE = "rewrite"
    STATEMENTS = "statements"
    BEFORE_LOOP = "before loop"


@dataclass(frozen=True)
class Recognizer:
    """A loop shape the printer writes in a form of its own: `match` gives a plan or None, `emit`
    writes the plan (signatures by `stage`, the module's docstring)."""

    name: str
    stage: Stage
    match: Callable[..., Any]
    emit: Callable[..., Any]


class KernelWriter:
    """The C lines of one kernel, printed into `lines`."""

    def __init__(self, kernel: LoopKernel, globals_: dict[str, Buffer], vector_bytes: int,
                 streamed: set[str] = frozenset(), recognizers: tuple[Recognizer, ...] = (),
                 symbols: tuple[str, ...] = ()):
        self.k = kernel
        self.symbols = symbols  # the program's symbols (LoopProgram.symbols), read by its extents
        self.vector_bytes = vector_bytes
        self.streamed = streamed  # outputs written with non-temporal stores (`stream`, `vector_loop`)
        self.globals = globals_
        self.buffers = {b.name: b for b in kernel.allocs}
        self.buffers.update(globals_)
        self.lines: list[str] = []
        self.frame: int | None = None  # inside a tile function: the scratch bytes it uses so far
        # inside a tile function's plain tile loop: each tile loop variable's C value at the claim's next
        # tile (at its last, this tile's), for rows that prefetch what it reads (rows.next_tile_prefetch)
        self.next_tile: dict[str, str] | None = None
        self.recognizers = recognizers
        self.rewrites = [r for r in recognizers if r.stage is Stage.REWRITE]
        self.statements = [r for r in recognizers if r.stage is Stage.STATEMENTS]
        self.before_loops = [r for r in recognizers if r.stage is Stage.BEFORE_LOOP]

    def block(self, stmts, depth: int, loops: tuple[For, ...] = ()) -> None:
        """Write `stmts` inside `loops`, each by the first recognizer that takes it, else plainly."""
        pad = "  " * depth
        stmts = list(stmts)
        i = 0
        while i < len(stmts):
            for r in self.rewrites:
                plan = r.match(self, stmts[i])
                if plan is not None:
                    stmts[i] = r.emit(self, plan)
            for r in self.statements:
                plan = r.match(self, stmts, i, loops)
                if plan is not None:
                    r.emit(self, plan, pad, loops)
                    i += plan.taken
                    break
            else:
                self.plain(stmts[i], depth, loops)
                i += 1

    def plain(self, s, depth: int, loops: tuple[For, ...]) -> None:
        """A statement as it is: a loop (with what the BEFORE_LOOP recognizers put ahead of it) or a leaf."""
        pad = "  " * depth
        if isinstance(s, For):
            self.before_loop(s, loops, pad)
            self.lines.append(f"{pad}for (int64_t {s.var} = 0; {s.var} < {s.extent}; ++{s.var}) {{")
            self.block(s.body, depth + 1, loops + (s,))
            self.lines.append(f"{pad}}}")
        else:
            self.lines.append(pad + self.leaf(s))

    def before_loop(self, inner: For, loops: tuple[For, ...], pad: str, skip: str | None = None) -> None:
        """What the BEFORE_LOOP recognizers write ahead of loop `inner` (leaving buffer `skip` alone)."""
        for r in self.before_loops:
            plan = r.match(self, inner, loops, skip)
            if plan is not None:
                r.emit(self, plan, pad)

    def reserve(self, nbytes: int) -> int:
        """Room for `nbytes` in this tile's scratch block: its offset."""
        at = self.frame
        self.frame = at + (nbytes + 63) // 64 * 64
        return at

    def leaf(self, s) -> str:
        target = self.access(s.buffer, s.index)
        value = self.expr(s.value)
        if isinstance(s, Store):
            return f"{target} = {value};"
        dtype = self.buffers[s.buffer].dtype
        if s.op == "sum":
            return f"{target} += {value};"
        return f"{target} = st_{s.op}_{dtype}({target}, {value});"

    def access(self, name: str, index: tuple[Ix, ...]) -> str:
        return f"{ident(name)}[{self.ix(self.flat_index(name, index))}]"

    def flat_index(self, name: str, index: tuple[Ix, ...]) -> Ix:
        """The element of buffer `name` at `index`, counted from its start (row-major)."""
        return flat_index(index, self.buffers[name].shape)

    @staticmethod
    def buffer_name(name: str) -> str:
        """The C variable holding buffer `name`."""
        return ident(name)

    def ix(self, ix: Ix) -> str:
        """An index: div/mod of non-negative values (wherever one is evaluated it is in range), a
        gather's index read and checked by st_index."""
        parts = []
        for t, c in ix.terms:
            if isinstance(t, str):
                text = t
            elif isinstance(t, FloorDiv):
                text = f"(({self.ix(t.x)}) / {t.d})"
            elif isinstance(t, Mod):
                text = f"(({self.ix(t.x)}) % {t.d})"
            else:
                text = f"st_index((int64_t)({self.expr(t.value)}), {t.extent}, {t.site})"
            parts.append(text if c == 1 else f"{c} * {text}")
        if ix.const or not parts:
            parts.append(str(ix.const))
        return " + ".join(parts)

    def expr(self, e, named: Mapping[int, str] | None = None) -> str:
        """C for an expression. An op it reads more than once (an inline value used twice) is computed
        once into a typed temporary of a statement expression, so the text stays linear in the
        expression's DAG, not its tree (and no recursion: a chain of thousands of inline ops is fine).
        `named`: ops (by id) already computed into C variables (`hoisted`), read by name."""
        if not isinstance(e, Op):
            return self.operand(e)
        canon, order, uses = number_ops(e)
        given = {canon[i]: name for i, name in (named or {}).items() if i in canon}
        if canon[id(e)] in given:
            return given[canon[id(e)]]
        needed = _reached(canon, order, canon[id(e)], given)
        text: dict[int, str] = dict(given)
        decls = []
        for n, op in order:
            if n in given or n not in needed:
                continue
            args = [text[canon[id(a)]] if isinstance(a, Op) else self.operand(a) for a in op.args]
            text[n] = scalar_op(op.op, op.dtype, args, [expr_dtype(a, lambda name: self.buffers[name].dtype)
                                                        for a in op.args])
            if uses.get(n, 0) > 1:
                decls.append(f"{C_TYPES[op.dtype]} t{len(decls)}_ = {text[n]};")
                text[n] = f"t{len(decls) - 1}_"
        body = text[canon[id(e)]]
        return f"({{ {' '.join(decls)} {body}; }})" if decls else body

    def hoisted(self, e, var: str) -> tuple[list[str], str]:
        """(declarations computing once the ops of `e` that do not change along loop `var`, to be
        written ahead of it; C for `e` reading them). The same operations on the same values, so the
        same bits; a loop gcc's vectorizer would not take with them inside (the scale and zero point
        of a dynamic quantization in a product's rows of A: their conditions on a scalar) does."""
        if not isinstance(e, Op):
            return [], self.expr(e)
        canon, order, _ = number_ops(e)
        moves: dict[int, bool] = {}
        for n, op in order:
            moves[n] = any(moves[canon[id(a)]] if isinstance(a, Op) else _moves(a, var) for a in op.args)
        if not moves[canon[id(e)]]:
            return [], self.expr(e)
        fixed = {canon[id(a)]: a for _, op in order if moves[canon[id(op)]] for a in op.args
                 if isinstance(a, Op) and not moves[canon[id(a)]]}
        decls, named = [], {}
        for n, op in fixed.items():
            name = f"st_h{len(decls)}_"
            decls.append(f"const {C_TYPES[op.dtype]} {name} = {self.expr(op)};")
            named[id(op)] = name
        for i, n in canon.items():  # every object of an op hoisted is read by name
            if n in fixed:
                named[i] = named[id(fixed[n])]
        return decls, self.expr(e, named)

    def operand(self, e) -> str:
        if isinstance(e, Load):
            return self.access(e.buffer, e.index)
        if isinstance(e, Select):  # a concat: only the chosen side is evaluated
            return f"(({self.ix(e.ix)}) < {e.split} ? {self.expr(e.low)} : {self.expr(e.high)})"
        if isinstance(e, Checked):  # a gather whose load no longer reads its index: check it anyway
            return f"((void)({self.ix(e.check)}), {self.expr(e.value)})"
        if isinstance(e, IndexValue):  # an iota's element: its position
            return f"(({C_TYPES[e.dtype]})({self.ix(e.ix)}))"
        return literal(e.value, e.dtype)

    def vector_expr(self, e, var: str, operand: Callable | None = None, forms: dict | None = None) -> str | None:
        """C for `e` on consecutive iterations of `var`, one st_vf32 (16 lanes on AVX-512, 8 on AVX2),
        or None if it has no such form (exp, sigmoid and tanh have one on AVX-512 and AVX2: vector_math.h).
        An op read more than once is computed once into a temporary, as `expr` does. `operand` (the
        writer and an operand to its C) and `forms` (an op to its C from its operands' C, or None for
        no form) replace `vector_operand` and ops.py's VECTOR_OPS where a recognizer has its own."""
        operand = operand or type(self).vector_operand
        forms = forms or {}
        if not isinstance(e, Op):
            return operand(self, e, var)
        canon, order, uses = number_ops(e)
        text: dict[int, str] = {}
        decls = []
        for n, op in order:
            args = [text[canon[id(a)]] if isinstance(a, Op) else operand(self, a, var) for a in op.args]
            if op.dtype != "f32" or None in args or (self.vector_bytes not in (32, 64) and op.op in EXPONENTIALS):
                return None
            form = forms[op.op] if op.op in forms else (lambda args, name=op.op: vector_op(name, args))
            if form is None or (value := form(args)) is None:
                return None
            text[n] = value
            if uses.get(n, 0) > 1:
                decls.append(f"st_vf32 t{len(decls)}_ = {value};")
                text[n] = f"t{len(decls) - 1}_"
        body = text[canon[id(e)]]
        return f"({{ {' '.join(decls)} {body}; }})" if decls else body

    def vector_operand(self, e, var: str) -> str | None:
        """A literal, or a load contiguous in `var` or invariant in it, on an st_vf32's iterations; else None."""
        if isinstance(e, Lit) and e.dtype == "f32":
            return f"st_bcast_f32({literal(e.value, e.dtype)})"
        if not isinstance(e, Load):
            return None
        b = self.buffers[e.buffer]
        if b.dtype != "f32":
            return None
        if all(affine(ix) for ix in e.index):
            step = flat_coef(e.index, var, b.shape)
        else:
            # a read through a reshape (`x[r // 64, r % 64]` of an [n, 64] buffer) whose address is
            # affine once flattened (`x[r]`): a contiguous or invariant read all the same
            flat = self.flat_index(e.buffer, e.index)
            if not affine(flat):
                return None
            step = flat.coef(var)
        if step == 1:
            return self.lanes_at(e.buffer, e.index)
        return f"st_bcast_f32({self.access(e.buffer, e.index)})" if step == 0 else None

    def lanes_at(self, name: str, index: tuple[Ix, ...]) -> str:
        """The 16 elements of buffer `name` from `index` on, as an st_vf32 lvalue: the text
        `vector_operand` gives a contiguous load, which summed_row and column_sums replace in
        `vector_expr`'s output by a vector already in a register."""
        return f"(*(st_vf32 *)&{self.access(name, index)})"


def _moves(e, var: str) -> bool:
    """Whether operand `e` (not an op) is to be read inside loop `var`: it changes along the loop, or
    it is not a plain load or literal (a gather's index is checked where the loop reads it)."""
    if isinstance(e, Lit):
        return False
    if not isinstance(e, Load):
        return True
    return var in expr_vars(e) or any(next(index_loads(ix), None) is not None for ix in e.index)


def _reached(canon: dict[int, int], order: list[tuple[int, Op]], root: int, stop: Mapping[int, str]) -> set[int]:
    """The ops (by number) the op numbered `root` reads, itself included, not looking inside those in `stop`."""
    ops = dict(order)
    seen, stack = {root}, [root]
    while stack:
        n = stack.pop()
        if n in stop:
            continue
        for a in ops[n].args:
            if isinstance(a, Op) and canon[id(a)] not in seen:
                seen.add(canon[id(a)])
                stack.append(canon[id(a)])
    return seen


def number_ops(root: Op) -> tuple[dict[int, int], list[tuple[int, Op]], dict[int, int]]:
    """Number the distinct ops of an expression: equal ops get one number whether or not they are
    one object, and each object is visited once. Returns the number of every op object (by id), the
    distinct ops operands first, and how many distinct ops read each one."""
    canon: dict[int, int] = {}
    numbers: dict[tuple, int] = {}
    order: list[tuple[int, Op]] = []
    uses: dict[int, int] = {}
    stack: list[tuple[Op, bool]] = [(root, False)]
    while stack:
        e, operands_done = stack.pop()
        if id(e) in canon:
            continue
        if not operands_done:
            stack.append((e, True))
            stack += [(a, False) for a in e.args if isinstance(a, Op) and id(a) not in canon]
            continue
        structure = (e.op, e.dtype, tuple(("op", canon[id(a)]) if isinstance(a, Op) else a for a in e.args))
        if structure not in numbers:
            numbers[structure] = len(numbers)
            order.append((numbers[structure], e))
            for a in e.args:
                if isinstance(a, Op):
                    uses[canon[id(a)]] = uses.get(canon[id(a)], 0) + 1
        canon[id(e)] = numbers[structure]
    return canon, order, uses
