"""How far saturation may go: its limits, apart from saturate.py so that reading their defaults (the
CLI's --help and argument parser) does not import egglog."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..ir.memory import default_budget

# The e-node and time limits a program gets unless it is given others: these, or so many per op of
# the program where that is more (a large model's e-graph grows with it; docs/explanation/saturation.md).
# The time limit is a safety net far above what saturation takes: near it, a loaded machine stops runs
# early and a program's schedule depends on the machine's load (docs/explanation/saturation.md).
NODES = 20_000
NODES_PER_OP = 8
SECONDS = 10.0
SECONDS_PER_OP = 0.005


@dataclass(frozen=True)
class Limits:
    iterations: int = 12
    nodes: int | None = None  # None: NODES, or NODES_PER_OP per op of the program where that is more
    seconds: float | None = None  # None: SECONDS, or SECONDS_PER_OP per op where that is more
    match_limit: int = 2_000
    # bytes the compiling process may hold (memory.py); saturation stops at half, leaving the rest
    # for extraction and lowering, which stop with an error beyond it
    memory: float = default_budget()

    def for_program(self, ops: int) -> "Limits":
        """These limits, with the defaults of `nodes` and `seconds` worked out for a program of `ops` ops."""
        return replace(self, nodes=max(NODES, NODES_PER_OP * ops) if self.nodes is None else self.nodes,
                       seconds=max(SECONDS, SECONDS_PER_OP * ops) if self.seconds is None else self.seconds)
