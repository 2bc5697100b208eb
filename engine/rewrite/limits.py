"""How far saturation may go: its limits, apart from saturate.py so that reading their defaults (the
CLI's --help and argument parser) does not import egglog."""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.memory import default_budget


@dataclass(frozen=True)
class Limits:
    iterations: int = 12
    nodes: int = 20_000
    seconds: float = 1.0
    match_limit: int = 2_000
    # bytes the compiling process may hold (memory.py); saturation stops at half, leaving the rest
    # for extraction and lowering, which stop with an error beyond it
    memory: float = default_budget()
