"""A matmul nest (lowering/matmul.py's `match_matmul`), written as the register-blocked
micro-kernel of targets/c/micro_kernel.py."""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.loops import For
from ...lowering.matmul import MatmulNest, match_matmul
from .emit import KernelWriter
from .micro_kernel import render_matmul


@dataclass(frozen=True)
class Plan:
    nest: MatmulNest
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    nest = match_matmul(stmts[at], lambda name: w.buffers[name].dtype, lambda name: w.buffers[name].shape)
    return Plan(nest) if nest is not None else None


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    w.lines += render_matmul(plan.nest, w, pad, w.buffers[plan.nest.acc.buffer].dtype, w.vector_bytes)
