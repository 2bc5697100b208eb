"""The program IR: frozen dataclasses for what a `.ir` file says.

Source positions are kept on every node but excluded from equality, so
`parse(print(p)) == p` compares structure only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Union

from .dims import Dim

DTYPES = ("f16", "f32", "f64", "i8", "u8", "i32", "i64", "bool")
FLOAT_DTYPES = ("f16", "f32", "f64")
INT_DTYPES = ("i8", "u8", "i32", "i64")


@dataclass(frozen=True)
class Pos:
    """A place in a source file (1-based line and column)."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NOPOS = Pos("<none>", 0, 0)


def _pos() -> Pos:
    return field(default=NOPOS, compare=False, repr=False)


@dataclass(frozen=True)
class Comments:
    """The `#` comments kept with a statement for the printer (`stitch fmt`): whole lines above it, and
    one at the end of its line. Never part of a node's equality: comments are not structure."""

    before: tuple[str, ...] = ()
    after: str = ""


NO_COMMENTS = Comments()


def _comments() -> Comments:
    return field(default=NO_COMMENTS, compare=False, repr=False)


@dataclass(frozen=True)
class TensorType:
    dtype: str
    shape: tuple[Dim, ...]  # ints, or symbolic dimensions (dims.py) in a func that declares symbols

    @property
    def rank(self) -> int:
        return len(self.shape)

    @cached_property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @cached_property
    def nbytes(self) -> int:
        return self.size * dtype_bytes(self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


def dtype_bytes(dtype: str) -> int:
    return _BYTES[dtype]


_BYTES = {"f16": 2, "f32": 4, "f64": 8, "i8": 1, "u8": 1, "i32": 4, "i64": 8, "bool": 1}


def int_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of an integer dtype."""
    bits = 8 * _BYTES[dtype]
    return (0, 2 ** bits - 1) if dtype.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


@dataclass(frozen=True)
class DTypeName:
    """An attribute value naming a dtype, as in `cast(x, dtype=f16)`."""

    name: str

    def __str__(self) -> str:
        return self.name


# An attribute value: a scalar, a list of ints, a boolean or a dtype name.
AttrValue = Union[int, float, bool, tuple[int, ...], DTypeName]


@dataclass(frozen=True)
class Var:
    name: str
    pos: Pos = _pos()


@dataclass(frozen=True)
class Const:
    """A scalar literal. Its dtype comes from the other operands of its call."""

    value: Union[int, float, bool]
    pos: Pos = _pos()

    def __eq__(self, other: object) -> bool:
        # 1 and 1.0 are different literals; True and 1 too.
        return (
            isinstance(other, Const)
            and type(self.value) is type(other.value)
            and (self.value == other.value or (self.value != self.value and other.value != other.value))
        )

    def __hash__(self) -> int:
        return hash((type(self.value), self.value))


@dataclass(frozen=True)
class Attr:
    name: str
    value: AttrValue
    pos: Pos = _pos()

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Attr)
            and self.name == other.name
            and type(self.value) is type(other.value)
            and self.value == other.value
        )

    def __hash__(self) -> int:
        return hash((self.name, type(self.value), self.value))


@dataclass(frozen=True)
class Call:
    op: str
    args: tuple["Expr", ...]
    attrs: tuple[Attr, ...] = ()
    pos: Pos = _pos()

    def attr(self, name: str) -> Attr | None:
        for a in self.attrs:
            if a.name == name:
                return a
        return None


Expr = Union[Var, Const, Call]


@dataclass(frozen=True)
class SymbolDecl:
    """`n: 1..4096` after a func's name: a symbolic dimension and its inclusive range."""

    name: str
    low: int
    high: int
    pos: Pos = _pos()


@dataclass(frozen=True)
class Param:
    name: str
    type: TensorType
    pos: Pos = _pos()


@dataclass(frozen=True)
class Assign:
    name: str
    expr: Expr
    pos: Pos = _pos()
    comments: Comments = _comments()


@dataclass(frozen=True)
class Func:
    name: str
    params: tuple[Param, ...]
    results: tuple[TensorType, ...]
    body: tuple[Assign, ...]
    returns: tuple[Expr, ...]
    pos: Pos = _pos()
    return_pos: Pos = _pos()
    results_pos: Pos = _pos()
    comments: Comments = _comments()  # above the func, and at the end of its `{` line
    return_comments: Comments = _comments()
    end_comments: Comments = _comments()  # above its closing `}`, and at the end of that line
    symbols: tuple[SymbolDecl, ...] = ()  # declared after its name, in order


@dataclass(frozen=True)
class Program:
    funcs: tuple[Func, ...]
    source: str = field(default="", compare=False, repr=False)
    filename: str = field(default="<string>", compare=False, repr=False)
    end_comments: tuple[str, ...] = field(default=(), compare=False, repr=False)  # after the last func

    def func(self, name: str | None = None) -> Func:
        """The named func, or the first one."""
        if name is None:
            return self.funcs[0]
        for f in self.funcs:
            if f.name == name:
                return f
        raise KeyError(name)
