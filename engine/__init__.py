"""The front and middle of stitch: IR, checker, interpreter, rules, e-graph, cost, extraction, CLI."""

import sys

# Programs are walked recursively (expressions, kernels); a chain of a few
# thousand ops needs more than Python's default 1000 frames.
if sys.getrecursionlimit() < 20_000:
    sys.setrecursionlimit(20_000)
