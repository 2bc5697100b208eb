"""Frozen dataclasses that remember their hash.

The search keys dicts by kernels, instances, e-nodes and index expressions,
and a frozen dataclass's generated `__hash__` hashes every field again on each
lookup: a kernel of a few hundred instances, each with its index expressions,
was hashed over again for every price looked up (a 250-op generated program:
4 of its 30 s of extraction). `cached_hash` computes it once per object.

Index expressions are also ordered by the text of their div/mod atoms (schedule/index.py `_order`),
and a dataclass's generated `__repr__` writes every nested expression again on each call: a conv's
windows through a reshape nest atoms deep, and writing them was two thirds of ResNet-18's index
simplification. `cached_repr` writes each object once.
"""

from __future__ import annotations

import dataclasses


def cached_hash(cls):
    """Give the frozen dataclass `cls` a `__hash__` over its compared fields, computed once."""
    names = tuple(f.name for f in dataclasses.fields(cls) if f.compare and f.hash is not False)

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = hash(tuple(getattr(self, n) for n in names))
            object.__setattr__(self, "_hash", h)
            return h

    def __getstate__(self) -> dict:
        """Pickled without the remembered hash: a string's hash differs from process to process."""
        state = dict(self.__dict__)
        state.pop("_hash", None)
        state.pop("_repr", None)  # (kept out too: `cached_repr`'s, made again when asked)
        return state

    cls.__hash__ = __hash__
    cls.__getstate__ = __getstate__
    return cls


def cached_repr(cls):
    """Give the frozen dataclass `cls` its generated `__repr__`'s text, written once per object (the
    same text: nested objects of such classes answer from their own)."""
    made = cls.__repr__

    def __repr__(self) -> str:
        try:
            return self.__dict__["_repr"]
        except KeyError:
            text = made(self)
            object.__setattr__(self, "_repr", text)
            return text

    cls.__repr__ = __repr__
    return cls
