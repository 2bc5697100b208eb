"""Kernels whose C is the same up to names share one function.

A model of n identical layers lowers to n copies of each layer's kernels, and their C differs only
in the kernel's name (the function, its argument struct, its tile functions) and the names of its
buffers (the global ones it takes as parameters, the local ones it allocates). Renaming those
consistently leaves a C function's meaning as it was, so kernels whose text is equal after renaming
them to canonical names (`canonical_text`) are one function, defined once and called with each
kernel's own buffers. Anything else that differs (an error site's number, a shape, a streamed
output) keeps the kernels apart.
"""

from __future__ import annotations

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
