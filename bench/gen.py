"""Deterministic large programs for benchmarks: a random DAG of n ops."""

from __future__ import annotations

import random

UNARY = ["neg", "abs", "exp", "tanh", "sigmoid", "relu", "sqrt"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]


def random_program(n_ops: int, seed: int = 0, rows: int = 64, cols: int = 256) -> str:
    """A func of n_ops ops over [rows, cols] tensors: elementwise ops, row reductions broadcast back."""
    rng = random.Random(seed)
    lines = []
    values = ["x0", "x1", "x2", "x3"]
    for i in range(n_ops):
        r = rng.random()
        recent = values[-8:]
        if r < 0.35:
            op = rng.choice(UNARY)
            arg = rng.choice(recent)
            expr = f"{op}(abs({arg}))" if op == "sqrt" else f"{op}({arg})"
        elif r < 0.85:
            expr = f"{rng.choice(BINARY)}({rng.choice(recent)}, {rng.choice(values)})"
        else:
            expr = f"{rng.choice(['sum', 'max', 'mean'])}({rng.choice(recent)}, axes=[1], keepdims=true)"
            lines.append(f"  v{i}r = {expr}")
            expr = f"sub({rng.choice(recent)}, v{i}r)"
        lines.append(f"  v{i} = {expr}")
        values.append(f"v{i}")
    params = ", ".join(f"x{k}: f32[{rows}, {cols}]" for k in range(4))
    body = "\n".join(lines)
    return f"func big({params}) -> f32[{rows}, {cols}] {{\n{body}\n  return {values[-1]}\n}}\n"
