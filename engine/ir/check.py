"""Type and shape inference: Program -> one typed Graph per func.

Shapes follow numpy: broadcasting aligns trailing dimensions, reductions drop
(or keep) their axes, matmul broadcasts batch dimensions. Operand dtypes must
agree (no implicit promotion); a numeric literal takes the dtype of the other
operands of its call. Every error names file:line:col and shows the line.
"""

from __future__ import annotations

import difflib

from . import calls, dims
from .errors import StitchError
from .graph import Graph, Node
from .ops import ANY, FLOAT, INDEX_DTYPES, INTEGER, NUMERIC, OPS, OpGroup, OpSpec, value_positions
from .program import (
    DTYPES,
    FLOAT_DTYPES,
    INT_DTYPES,
    NOPOS,
    Call,
    Const,
    DTypeName,
    Expr,
    Func,
    Pos,
    Program,
    TensorType,
    Var,
    dtype_bytes,
    int_range,
)

# Element counts and byte offsets are int64 everywhere after checking (the e-graph's size analysis,
# the generated C's indices), so no tensor may hold more bytes than that counts.
MAX_TENSOR_BYTES = 2**63 - 1


def check_program(program: Program) -> dict[str, Graph]:
    """Check every func; return their graphs by name, in file order. A call to another func of the
    file is inlined (calls.py)."""
    funcs = calls.funcs_of(program)
    return {f.name: check_func(f, program.source, funcs) for f in program.funcs}


def check_func(func: Func, source: str = "", funcs: dict[str, Func] | None = None) -> Graph:
    """The graph of `func`; `funcs` are the funcs it may call (by name)."""
    return _Checker(func, source, funcs).run()


def broadcast_shapes(a: tuple[dims.Dim, ...], b: tuple[dims.Dim, ...]) -> tuple[dims.Dim, ...] | None:
    """numpy broadcasting of two shapes, or None if they do not broadcast. A symbolic dimension
    broadcasts only with itself and with 1 (it must hold for every value of its symbols)."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def normalize_axes(axes, rank: int) -> tuple[int, ...] | str:
    """Sorted non-negative axes, or an error message."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            return f"axis {a} is out of range for a tensor of rank {rank}"
        a = a % rank if rank else a
        if a in out:
            return f"axis {a} is given twice"
        out.append(a)
    return tuple(sorted(out))


def reduce_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | str:
    if not a or not b:
        return "operands must have rank >= 1"
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return f"inner dimensions differ ({a2[-1]} vs {b2[-2]})"
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    if batch is None:
        return f"batch dimensions {list(a2[:-2])} and {list(b2[:-2])} do not broadcast"
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


class AttrProblem(Exception):
    """A bad attribute value: the message, and the attribute (or operand index) it is about."""

    def __init__(self, message: str, where: str | int | None = None):
        super().__init__(message)
        self.message = message
        self.where = where


def normalize_axis(axis: int, rank: int) -> int:
    """A non-negative axis (raises AttrProblem about 'axis')."""
    if not -rank <= axis < rank:
        raise AttrProblem(f"axis {axis} is out of range for a tensor of rank {rank}", "axis")
    return axis % rank


def clamp_slice(dim: dims.Dim, start: dims.Dim, end: dims.Dim, step: int,
                ranges: dict[str, tuple[int, int]] | None = None) -> tuple[dims.Dim, dims.Dim, dims.Dim]:
    """numpy's x[start:end:step] for step > 0 on an axis of `dim`: (start, end, length), 0 <= start <= end <= dim.
    With symbols, each clamp must be decided the same way for every value in `ranges` (else AttrProblem)."""
    if all(isinstance(v, int) for v in (dim, start, end)):
        start = min(max(start + dim if start < 0 else start, 0), dim)
        end = min(max(end + dim if end < 0 else end, 0), dim)
        end = max(end, start)
        return start, end, -(-(end - start) // step)
    ranges = ranges or {}
    start, end = (_clamped(dim, v, what, ranges) for v, what in ((start, "start"), (end, "end")))
    if not dims.provably(0, dims.add(end, dims.mul(start, -1)), ranges):
        raise AttrProblem(f"end {end} may come before start {start} for some values of the symbols", None)
    return start, end, dims.floordiv(dims.add(dims.add(end, dims.mul(start, -1)), step - 1), step)


def _clamped(dim: dims.Dim, v: dims.Dim, what: str, ranges) -> dims.Dim:
    """A slice bound counted from the end when negative, then clamped to [0, dim]: each decided the
    same way for every value of the symbols, or an AttrProblem."""
    shown = f"{what} {v}"
    if not dims.provably(0, v, ranges):
        if dims.bounds(v, ranges)[1] >= 0:
            raise AttrProblem(f"{shown} is negative for some values of the symbols and not for others", None)
        v = dims.add(v, dim)
        shown += f" (at {v} from the axis's end {dim})"
    low, high = dims.bounds(v, ranges)
    if high <= 0:
        return 0
    if low < 0:
        raise AttrProblem(f"{shown} lies before the axis's start for some values of the symbols", None)
    rest = dims.add(dim, dims.mul(v, -1))
    if dims.provably(0, rest, ranges):
        return v
    if dims.bounds(rest, ranges)[1] <= 0:
        return dim
    raise AttrProblem(f"{shown} lies past the axis's end ({dim}) for some values of the symbols", None)


def normalize_slice(shape: tuple[int, ...], axes, starts, ends, steps=None, ranges=None):
    """slice's attributes in normal form and its result shape.

    Returns ((axes, starts, ends, steps), shape): one entry per sliced axis in
    ascending axis order, axes non-negative, starts/ends clamped as numpy does
    (0 <= start <= end <= dim), steps >= 1. Raises AttrProblem naming the
    attribute at fault.
    """
    rank = len(shape)
    steps = (1,) * len(axes) if steps is None else tuple(steps)
    for name, values in (("starts", starts), ("ends", ends), ("steps", steps)):
        if len(values) != len(axes):
            raise AttrProblem(f"{name} has {_entries(len(values))} but axes has {_entries(len(axes))}; "
                              "give one per sliced axis", name)
    entries = {}
    for a, start, end, step in zip(axes, starts, ends, steps):
        if not -rank <= a < rank:
            raise AttrProblem(f"axis {a} is out of range for a tensor of rank {rank}", "axes")
        a %= rank
        if a in entries:
            raise AttrProblem(f"axis {a} is given twice", "axes")
        if step <= 0:
            raise AttrProblem(f"step {step} (axis {a}) must be positive; negative steps are not supported", "steps")
        begin, stop, length = clamp_slice(shape[a], start, end, step, ranges)
        if isinstance(length, int) and length == 1 and isinstance(stop, int):
            step = max(stop - begin, 1)  # one element taken: any larger step is the same (and fits the e-graph's ints)
        if not dims.provably(1, length, ranges or {}):
            some = "" if isinstance(length, int) else " for some values of the symbols"
            raise AttrProblem(f"the result would be empty along axis {a}{some} (start {start}, end {end} on a "
                              f"dimension of {shape[a]}); the IR has no empty tensors", None)
        entries[a] = (begin, stop, step, length)
    out = list(shape)
    for a, (_, _, _, length) in entries.items():
        out[a] = length
    order = sorted(entries)
    attrs = (tuple(order), tuple(entries[a][0] for a in order), tuple(entries[a][1] for a in order),
             tuple(entries[a][2] for a in order))
    return attrs, tuple(out)


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def concat_shape(shapes: list[tuple[int, ...]], axis: int) -> tuple[int, tuple[int, ...]]:
    """concat's non-negative axis and result shape. Raises AttrProblem ('axis', or the index of the bad operand)."""
    first = shapes[0]
    axis = normalize_axis(axis, len(first))
    total = 0
    for k, s in enumerate(shapes):
        if len(s) != len(first):
            raise AttrProblem(f"operand {k} has rank {len(s)} but operand 0 has rank {len(first)}", k)
        for i, (d, d0) in enumerate(zip(s, first)):
            if i != axis and d != d0:
                raise AttrProblem(f"operand {k} has dimension {d} on axis {i} but operand 0 has {d0} "
                                  f"(only axis {axis}, the one concatenated, may differ)", k)
        total = dims.add(total, s[axis])
    return axis, first[:axis] + (total,) + first[axis + 1 :]


def gather_shape(x: tuple[int, ...], indices: tuple[int, ...], axis: int) -> tuple[int, tuple[int, ...]]:
    """gather's non-negative axis and result shape, as np.take's. Raises AttrProblem about 'axis'."""
    axis = normalize_axis(axis, len(x))
    return axis, x[:axis] + indices + x[axis + 1 :]


class Inference:
    """Types inferred one statement at a time by the checker's own rules: the ONNX importer types each op
    it emits with this (so importer and checker cannot disagree) and turns a StitchError into a reason."""

    def __init__(self, ranges: dict[str, tuple[int, int]] | None = None):
        """ranges: each symbol's range, the caller's own dict (it may narrow one as it goes)."""
        self._checker = _Checker(Func("", (), (), (), ()), "")
        if ranges is not None:
            self._checker.ranges = ranges

    def param(self, name: str, typ: TensorType) -> None:
        """A parameter; each symbol that is a whole dimension of it may then stand in attributes."""
        c = self._checker
        c.env[name] = c.add("param", (), (("name", name),), typ, NOPOS, name)
        c.whole |= {s for d in typ.shape if (s := dims.bare_symbol(d))}

    def assign(self, name: str, expr: Expr) -> TensorType:
        """The type of `name = expr` (raises the checker's StitchError); `name` is then defined."""
        c = self._checker
        nid = c.expr(expr, None)
        c.env[name] = nid
        return c.nodes[nid].type


class _Checker:
    def __init__(self, func: Func, source: str, funcs: dict[str, Func] | None = None):
        self.func = func  # the func whose statements are being checked (a callee while inlining)
        self.root = func.name
        self.source = source
        self.funcs = funcs or {}
        self.calls: list[calls.CallSite] = []  # the calls being inlined, outermost first
        self.nodes: list[Node] = []
        self.env: dict[str, int] = {}
        self.defined_at: dict[str, Pos] = {}
        # each symbol's inclusive range: declared after the func's name, else dims.DEFAULT_RANGE
        self.ranges: dict[str, tuple[int, int]] = {s.name: (s.low, s.high) for s in func.symbols}
        self.whole: set[str] = set()  # the symbols that are a whole dimension of a parameter (check_symbols)

    def error(self, message: str, pos: Pos, hint: str = "") -> StitchError:
        return StitchError(message, pos, self.source, hint)

    def add(self, op: str, inputs, attrs, typ: TensorType, pos: Pos, name: str = "") -> int:
        if dims.bounds(typ.nbytes, self.ranges)[1] > MAX_TENSOR_BYTES:
            most = "" if isinstance(typ.size, int) else " at the symbols' largest values (declare smaller ranges)"
            raise self.error(f"{typ} is too large{most}: {typ.size} elements of {dtype_bytes(typ.dtype)} bytes "
                             f"(stitch addresses at most 2**63 - 1 bytes per tensor)", pos)
        node = Node(len(self.nodes), op, tuple(inputs), tuple(attrs), typ, name, pos)
        self.nodes.append(node)
        return node.id

    def bind(self, name: str, pos: Pos) -> None:
        if name in self.env:
            first = self.defined_at[name]
            raise self.error(f"name '{name}' is already defined (at line {first.line}, column {first.col})", pos)
        self.defined_at[name] = pos

    def check_symbols(self) -> None:
        """Every symbol is read from an input's shape: it must be a whole dimension of a parameter.
        Every dimension of the signature is at least 1 for every value of the symbols."""
        f = self.func
        whole = {s for p in f.params for d in p.type.shape if (s := dims.bare_symbol(d))}
        self.whole = whole
        declared = {s.name: s for s in f.symbols}
        for t, pos in [(p.type, p.pos) for p in f.params] + [(t, f.results_pos) for t in f.results]:
            for d in t.shape:
                missing = sorted(dims.symbols_of((d,)) - whole)
                if missing:
                    where = declared[missing[0]].pos if missing[0] in declared else pos
                    raise self.error(f"symbol '{missing[0]}' is no whole dimension of any parameter: its value is "
                                     f"read from an input's shape", where,
                                     f"give some parameter a dimension '{missing[0]}'")
                if not dims.provably(1, d, self.ranges):
                    low = dims.bounds(d, self.ranges)[0]
                    raise self.error(f"dimension {d} of {t} can be {low}, less than 1, for values of its symbols in "
                                     f"their ranges", pos, "narrow the symbols' ranges")
        unused = [s for s in f.symbols if s.name not in whole]
        if unused:
            raise self.error(f"symbol '{unused[0].name}' is declared but is no dimension of any parameter",
                             unused[0].pos)

    def run(self) -> Graph:
        f = self.func
        self.check_symbols()
        params = []
        for p in f.params:
            self.bind(p.name, p.pos)
            pid = self.add("param", (), (("name", p.name),), p.type, p.pos, p.name)
            self.env[p.name] = pid
            params.append(pid)
        for a in f.body:
            self.bind(a.name, a.pos)
            nid = self.expr(a.expr, None)
            if not self.nodes[nid].name:
                n = self.nodes[nid]
                self.nodes[nid] = Node(n.id, n.op, n.inputs, n.attrs, n.type, a.name, n.pos)
            self.env[a.name] = nid
        outputs = [self.expr(e, None) for e in f.returns]
        if len(outputs) != len(f.results):
            raise self.error(
                f"func '{f.name}' returns {len(outputs)} value(s) but its signature declares {len(f.results)}",
                f.return_pos,
            )
        for k, (oid, declared, e) in enumerate(zip(outputs, f.results, f.returns)):
            got = self.nodes[oid].type
            if got != declared:
                raise self.error(
                    f"return value {k} has type {got} but the signature of '{f.name}' declares {declared}",
                    e.pos,
                )
        symbols = {name: self.ranges.get(name, dims.DEFAULT_RANGE) for name in sorted(self.whole)}
        return Graph(f.name, self.nodes, params, outputs, [p.name for p in f.params], symbols)

    # -- expressions --------------------------------------------------------

    def expr(self, e: Expr, literal_dtype: str | None) -> int:
        if isinstance(e, Var):
            if e.name not in self.env:
                close = difflib.get_close_matches(e.name, list(self.env), n=1)
                hint = f"did you mean '{close[0]}'?" if close else ""
                raise self.error(f"undefined name '{e.name}'", e.pos, hint)
            return self.env[e.name]
        if isinstance(e, Const):
            return self.const(e, literal_dtype)
        return self.call(e)

    def const(self, e: Const, dtype: str | None) -> int:
        v = e.value
        if dtype is None:
            dtype = "bool" if isinstance(v, bool) else "f32" if isinstance(v, float) else "i32"
        if dtype == "bool" and not isinstance(v, bool):
            raise self.error(f"literal {v} used where a bool is expected", e.pos)
        if dtype != "bool" and isinstance(v, bool):
            raise self.error(f"literal {'true' if v else 'false'} is a bool, but the operands are {dtype}", e.pos)
        if dtype in INT_DTYPES and isinstance(v, float):
            if not v.is_integer():
                raise self.error(f"literal {v} is not an integer, but the operands are {dtype}", e.pos)
            v = int(v)
        if dtype in INT_DTYPES:
            low, high = int_range(dtype)
            if not low <= v <= high:
                raise self.error(f"literal {v} does not fit in {dtype} ({low}..{high})", e.pos)
        if dtype in FLOAT_DTYPES:
            v = float(v)
        return self.add("const", (), (("value", v),), TensorType(dtype, ()), e.pos)

    def call(self, e: Call) -> int:
        spec = OPS.get(e.op)
        if spec is None and e.op in self.funcs:
            return calls.inline(self, e, self.funcs[e.op])
        if spec is None:
            close = difflib.get_close_matches(e.op, list(OPS) + list(self.funcs), n=1)
            hint = f"did you mean '{close[0]}'?" if close else ""
            raise self.error(f"unknown op '{e.op}'", e.pos, hint)
        if not spec.takes(len(e.args)):
            raise self.error(f"{e.op} takes {spec.arity_text()}, got {len(e.args)}", e.pos)
        for a in e.attrs:
            if a.name not in spec.attrs:
                allowed = ", ".join(spec.attrs) or "none"
                raise self.error(f"{e.op} has no attribute '{a.name}' (its attributes: {allowed})", a.pos)
        for name, aspec in spec.attrs.items():
            if aspec.required and e.attr(name) is None:
                raise self.error(f"{e.op} needs the attribute '{name}='", e.pos)

        # Operands that are not literals fix the dtype; literals follow it.
        inputs: list[int | None] = [None if isinstance(a, Const) else self.expr(a, None) for a in e.args]
        values = value_positions(spec, len(e.args))
        dtype = next((self.nodes[inputs[k]].type.dtype for k in values if inputs[k] is not None), None)
        for k, a in enumerate(e.args):
            if isinstance(a, Const):
                # where's condition is bool; gather's literal index is an integer (i32) by itself.
                want = "bool" if (spec.group == "select" and k == 0) else dtype if k in values else None
                inputs[k] = self.const(a, want)
        types = [self.nodes[i].type for i in inputs]
        self.check_dtypes(e, spec, types)
        attrs, out = self.infer(e, spec, types)
        return self.add(e.op, inputs, attrs, out, e.pos)

    def check_dtypes(self, e: Call, spec: OpSpec, types: list[TensorType]) -> None:
        values = [types[k] for k in value_positions(spec, len(types))]
        if spec.group == "select" and types[0].dtype != "bool":
            raise self.error(f"where's condition must be bool, got {types[0]}", e.args[0].pos)
        if e.op == "gather" and types[1].dtype not in INDEX_DTYPES:
            raise self.error(f"gather: indices must be {' or '.join(INDEX_DTYPES)}, got {types[1]}", e.args[1].pos,
                             "cast(..., dtype=i64) them")
        if e.op == "concat":
            for k, t in enumerate(types):
                if t.dtype != types[0].dtype:
                    raise self.error(f"concat: operand {k} is {t} but operand 0 is {types[0]}; operand dtypes "
                                     "must agree", e.args[k].pos, "insert a cast(..., dtype=...) on one operand")
        if spec.group in ("binary", "compare", "select", "matmul"):
            dts = {t.dtype for t in values}
            if len(dts) > 1:
                shown = " and ".join(str(t) for t in values)
                raise self.error(
                    f"{e.op}: operand dtypes differ ({shown})", e.pos, "insert a cast(..., dtype=...) on one operand"
                )
        if not values:  # iota: no operands
            return
        dt = values[0].dtype
        if spec.dtypes == FLOAT and dt not in FLOAT_DTYPES:
            raise self.error(f"{e.op} needs a float tensor, got {values[0]}", e.pos, "cast it to f32 first")
        if spec.dtypes == NUMERIC and dt == "bool":
            raise self.error(f"{e.op} needs a numeric tensor, got {values[0]}", e.pos)
        if spec.dtypes == INTEGER and dt not in INT_DTYPES:
            raise self.error(f"{e.op} needs an integer tensor ({' '.join(INT_DTYPES)}), got {values[0]}", e.pos,
                             "cast it to an integer dtype first")
        assert spec.dtypes in (ANY, FLOAT, NUMERIC, INTEGER)

    def infer(self, e: Call, spec: OpSpec, types: list[TensorType]):
        group = spec.group
        if group in ("unary",):
            return (), types[0]
        if group in ("binary", "compare", "select"):
            shape = types[0].shape
            for t in types[1:]:
                b = broadcast_shapes(shape, t.shape)
                if b is None:
                    shown = ", ".join(str(t) for t in types)
                    raise self.error(f"{e.op}: shapes do not broadcast: {shown}", e.pos)
                shape = b
            dtype = "bool" if group == "compare" else types[-1].dtype
            return (), TensorType(dtype, shape)
        if group == "matmul":
            out = matmul_shape(types[0].shape, types[1].shape)
            if isinstance(out, str):
                raise self.error(f"matmul {types[0]} @ {types[1]}: {out}", e.pos)
            return (), TensorType(types[0].dtype, out)
        if group == "reduce":
            return self.reduce(e, types[0])
        if group == OpGroup.MOVEMENT:
            return self.movement(e, types)
        if group == OpGroup.INDEX:
            return self.iota(e)
        return self.layout(e, types[0])

    def attr_value(self, e: Call, name: str, kind: str):
        a = e.attr(name)
        if a is None:
            return None
        v = a.value
        ok = {
            "axes": isinstance(v, tuple),
            "perm": isinstance(v, tuple),
            "shape": isinstance(v, tuple),
            "ints": isinstance(v, tuple),
            "int": isinstance(v, int) and not isinstance(v, bool),
            "bool": isinstance(v, bool),
            "dtype": isinstance(v, DTypeName),
        }[kind]
        if not ok:
            what = {"bool": "true or false", "dtype": "a dtype name", "int": "an integer"}.get(kind, "a list of integers")
            raise self.error(f"{e.op}: attribute '{name}' must be {what}", a.pos)
        symbolic = [d for d in v if isinstance(d, dims.Expr)] if isinstance(v, tuple) else []
        if symbolic and (kind in ("axes", "perm") or name == "steps"):
            raise self.error(f"{e.op}: attribute '{name}' must be a list of integers, not of dimensions "
                             f"({symbolic[0]})", a.pos)
        unknown = sorted(dims.symbols_of(symbolic) - self.whole)
        if unknown:
            raise self.error(f"{e.op}: symbol '{unknown[0]}' is no whole dimension of any parameter of "
                             f"'{self.func.name}'", a.pos)
        return v

    def attr_pos(self, e: Call, where) -> Pos:
        """Where an AttrProblem points: the attribute named, an operand by index, or the call."""
        if isinstance(where, int):
            return e.args[where].pos
        a = e.attr(where) if where else None
        return a.pos if a is not None else e.pos

    def movement(self, e: Call, types: list[TensorType]):
        t = types[0]
        kinds = {name: a.kind for name, a in OPS[e.op].attrs.items()}
        values = {name: self.attr_value(e, name, kind) for name, kind in kinds.items()}
        try:
            if e.op == "slice":
                (axes, starts, ends, steps), shape = normalize_slice(
                    t.shape, values["axes"], values["starts"], values["ends"], values["steps"], self.ranges)
                attrs = (("axes", axes), ("starts", starts), ("ends", ends), ("steps", steps))
                return attrs, TensorType(t.dtype, shape)
            if e.op == "concat":
                axis, shape = concat_shape([u.shape for u in types], values["axis"])
                return (("axis", axis),), TensorType(t.dtype, shape)
            assert e.op == "gather"
            axis, shape = gather_shape(t.shape, types[1].shape, values["axis"])
            return (("axis", axis),), TensorType(t.dtype, shape)
        except AttrProblem as problem:
            shown = ", ".join(str(u) for u in types)
            raise self.error(f"{e.op}: {problem.message} (the operand{'s are' if len(types) > 1 else ' is'} {shown})",
                             self.attr_pos(e, problem.where)) from None

    def iota(self, e: Call):
        """iota's type: its shape (each dimension at least 1), its axis in range (non-negative after
        checking) and its dtype, i32 unless given."""
        shape = tuple(self.attr_value(e, "shape", "shape"))
        if any(d == -1 or not dims.provably(1, d, self.ranges) for d in shape):
            raise self.error(f"iota: dimensions must be positive, got [{', '.join(map(str, shape))}]",
                             e.attr("shape").pos)
        try:
            axis = normalize_axis(self.attr_value(e, "axis", "int"), len(shape))
        except AttrProblem as problem:
            raise self.error(f"iota: {problem.message}", e.attr("axis").pos) from None
        given = self.attr_value(e, "dtype", "dtype")
        dtype = given.name if given is not None else "i32"
        if dtype not in INDEX_DTYPES:
            raise self.error(f"iota: dtype must be {' or '.join(INDEX_DTYPES)}, got {dtype}", e.attr("dtype").pos,
                             "cast(iota(...), dtype=...) for another")
        return (("shape", shape), ("axis", axis), ("dtype", dtype)), TensorType(dtype, shape)

    def reduce(self, e: Call, t: TensorType):
        axes = self.attr_value(e, "axes", "axes")
        keepdims = self.attr_value(e, "keepdims", "bool") or False
        axes = tuple(range(t.rank)) if axes is None else axes
        norm = normalize_axes(axes, t.rank)
        if isinstance(norm, str):
            raise self.error(f"{e.op}: {norm} (the operand is {t})", e.attr("axes").pos)
        out = TensorType(t.dtype, reduce_shape(t.shape, norm, keepdims))
        return (("axes", norm), ("keepdims", keepdims)), out

    def layout(self, e: Call, t: TensorType):
        if e.op == "transpose":
            perm = self.attr_value(e, "perm", "perm")
            perm = tuple(reversed(range(t.rank))) if perm is None else perm
            if sorted(perm) != list(range(t.rank)):
                raise self.error(
                    f"transpose: perm {list(perm)} is not a permutation of the {t.rank} axes of {t}", e.attr("perm").pos
                )
            return (("perm", perm),), TensorType(t.dtype, tuple(t.shape[p] for p in perm))
        if e.op == "reshape":
            shape = list(self.attr_value(e, "shape", "shape"))
            pos = e.attr("shape").pos
            shown = "[" + ", ".join(map(str, shape)) + "]"
            if shape.count(-1) > 1:
                raise self.error("reshape: at most one dimension may be -1", pos)
            if any(d != -1 and not dims.provably(1, d, self.ranges) for d in shape):
                raise self.error(f"reshape: dimensions must be positive (or one -1), got {shown}", pos)
            if -1 in shape:
                solved = dims.exact_div(t.size, dims.size(d for d in shape if d != -1))
                if solved is None:
                    raise self.error(f"reshape: cannot reshape {t} ({t.size} elements) to {shown}", pos)
                shape[shape.index(-1)] = solved
            if dims.size(shape) != t.size:
                raise self.error(f"reshape: cannot reshape {t} ({t.size} elements) to {shown} ({dims.size(shape)} "
                                 "elements)", pos)
            return (("shape", tuple(shape)),), TensorType(t.dtype, tuple(shape))
        if e.op == "broadcast_to":
            shape = tuple(self.attr_value(e, "shape", "shape"))
            pos = e.attr("shape").pos
            if any(not dims.provably(1, d, self.ranges) for d in shape) or broadcast_shapes(t.shape, shape) != shape:
                raise self.error(f"broadcast_to: cannot broadcast {t} to [{', '.join(map(str, shape))}]", pos)
            return (("shape", shape),), TensorType(t.dtype, shape)
        assert e.op == "cast"
        dtype = self.attr_value(e, "dtype", "dtype").name
        if dtype not in DTYPES:
            raise self.error(f"cast: unknown dtype '{dtype}'; expected one of {', '.join(DTYPES)}", e.attr("dtype").pos)
        return (("dtype", dtype),), TensorType(dtype, t.shape)
