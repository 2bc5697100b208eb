"""The placements: how a producer -> consumer edge is held (README, "Schedule vocabulary").

The one definition of the closed set. The rule language names placements by their values
(`global(?x)`), the e-graph prelude by their constructors (`(Global x)`), the schedule by the
enum; every other table (the search's ranks, the extraction weights, the pictures' colours) is
keyed by it.
"""

from __future__ import annotations

from enum import StrEnum


class Placement(StrEnum):
    GLOBAL = "global"  # in global memory: a kernel boundary
    SHARED = "shared"  # on chip for the whole tile
    LOCAL = "local"  # on chip, forwarded tile by tile
    INLINE = "inline"  # recomputed at each use

    @property
    def ctor(self) -> str:
        """Its constructor in the e-graph prelude (`Global`)."""
        return self.value.capitalize()


# The names the rule language and the e-graph's nodes use, for membership tests on a string.
PLACEMENT_NAMES = frozenset(p.value for p in Placement)
# By name, for the walks over e-nodes (a dict lookup, not an enum call per edge).
PLACEMENT_OF_NAME = {p.value: p for p in Placement}
