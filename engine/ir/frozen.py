"""Frozen dataclasses that remember their hash.

The search keys dicts by kernels, instances, e-nodes and index expressions,
and a frozen dataclass's generated `__hash__` hashes every field again on each
lookup: a kernel of a few hundred instances, each with its index expressions,
was hashed over again for every price looked up (a 250-op generated program:
4 of its 30 s of extraction). `cached_hash` computes it once per object.
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
        return state

    cls.__hash__ = __hash__
    cls.__getstate__ = __getstate__
    return cls
