"""Kernels whose C is the same up to names share one function.

A model of n identical layers lowers to n copies of each layer's kernels, and their C differs only
in the kernel's name (the function, its argument struct, its tile functions) and the names of its
buffers (the global ones it takes as parameters, the local ones it allocates). Renaming those
consistently leaves a C function's meaning as it was, so kernels whose text is equal after renaming
them to canonical names (`canonical_text`) are one function, defined once and called with each
kernel's own buffers. Anything else that differs (an error site's number, a shape, a streamed
output) keeps the kernels apart.

A kernel whose loop nests are another's up to the names of its buffers (`nest_key`: the same
statements, buffers of the same scopes, dtypes and shapes, taken in the same order) prints that
kernel's C up to those names, so it is not printed: it calls the other's function. The printer
reads a buffer's name only to print it (no recognizer looks at what a name says).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*")
# the canonical names: no identifier of the generated C has one of these forms (`canonical_text` checks)
CANONICAL = re.compile(r"st_fn(_\w*)?|st_arg\d+|st_loc\d+")


@dataclass(frozen=True)
class RenderedKernel:
    """A kernel's C function: `function` its name (every other name the kernel defines starts with
    `function` + "_"), `params` the C names of the buffers it takes in order, `locals_` of those it
    allocates."""

    function: str
    text: str
    params: tuple[str, ...]
    locals_: tuple[str, ...]


def canonical_text(k: RenderedKernel) -> str | None:
    """The kernel's text with its names replaced, as whole identifiers, by canonical ones: the function
    by `st_fn` (`st_fn_args`, `st_fn_tiles0`, ... for the names built on it), the i-th parameter by
    `st_arg{i}`, the i-th local buffer by `st_loc{i}`. None where the text already holds a canonical
    name (two different kernels could then read the same)."""
    names = {p: f"st_arg{i}" for i, p in enumerate(k.params)}
    names.update((b, f"st_loc{i}") for i, b in enumerate(k.locals_))
    prefix = k.function + "_"

    def rename(m: re.Match) -> str:
        word = m.group(0)
        if word in names:
            return names[word]
        if word == k.function or word.startswith(prefix):
            return "st_fn" + word[len(k.function):]
        return word

    if any(CANONICAL.fullmatch(word) for word in IDENTIFIER.findall(k.text)):
        return None
    return IDENTIFIER.sub(rename, k.text)


def share_functions(kernels: list[RenderedKernel]) -> list[str]:
    """The function each kernel is called as: the first kernel's of those whose canonical text is the same."""
    first: dict[str, str] = {}
    called = []
    for k in kernels:
        canon = canonical_text(k)
        called.append(k.function if canon is None else first.setdefault(canon, k.function))
    return called


# LoopKernel fields the key leaves out: its name (the function's, renamed anyway), its tails (numbered
# below), and lowering's own notes, which the printer does not read (names of staged copies dropped
# or of temporaries forwarded: not buffers of the kernel's C).
UNPRINTED = ("name", "tails", "in_place", "forwardable")


def nest_key(kernel, params: list, streamed: set[str]) -> tuple:
    """The kernel's loop nests with its buffers numbered: its parameters (`params`, in the order the
    function takes them) first, then its own allocations. Loops the kernel lists elsewhere by
    identity (`LoopKernel.tails`) are numbered in the order the walk meets them. Two kernels of one
    key print the same C up to buffer names (with `streamed`, the outputs written with
    non-temporal stores, among what is compared)."""
    names = {b.name: i for i, b in enumerate(params)}
    for b in kernel.allocs:
        names.setdefault(b.name, len(names))
    loops: dict[int, int] = {}

    def walk(x):
        if isinstance(x, str):
            return ("buffer", names[x]) if x in names else x
        if isinstance(x, (list, tuple)):
            return tuple(map(walk, x))
        if isinstance(x, dict):
            return tuple((walk(k), walk(v)) for k, v in x.items())
        if isinstance(x, (set, frozenset)):
            return frozenset(map(walk, x))
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            if type(x).__name__ == "For":
                loops.setdefault(id(x), len(loops))
            return (type(x).__name__,) + tuple(walk(getattr(x, f.name)) for f in dataclasses.fields(x))
        return x

    fields = tuple(walk(getattr(kernel, f.name)) for f in dataclasses.fields(kernel) if f.name not in UNPRINTED)
    tails = tuple(loops.get(id(loop), -1) for loop in kernel.tails)
    return fields, tails, walk(params), frozenset(names[n] for n in streamed)
