"""Room for deep recursion while stitch works on a program, and only then.

Programs are walked recursively: graph chains (schedule formation, extraction),
inlined expressions (a chain of elementwise ops fused into one kernel is one
expression as deep as the chain) and loop nests, in lowering, the C printer, the
executors and the printers. A chain of a few thousand ops needs more than
Python's default 1,000 frames. Importing stitch leaves the interpreter's limit
alone; the entry points (the CLI, `stitch.compile`,
calling a compiled program on the numpy executor or the simulator (compiled C
walks nothing), `compile_graph`, `lower`) raise it to LIMIT while
they run and put the caller's limit back when the outermost one returns (calls
nested or from several threads share one raise).
"""

from __future__ import annotations

import functools
import sys
import threading
from contextlib import contextmanager

LIMIT = 20_000

_lock = threading.Lock()
_active = 0  # entry points running (nested or in other threads)
_saved = 0  # the limit to restore when the last one returns


@contextmanager
def deep_recursion():
    """Python's recursion limit at least LIMIT inside the block, the caller's after it."""
    global _active, _saved
    with _lock:
        if _active == 0:
            _saved = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved, LIMIT))
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                sys.setrecursionlimit(_saved)


def allows_deep_recursion(fn):
    """Run `fn` inside `deep_recursion()`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with deep_recursion():
            try:
                return fn(*args, **kwargs)
            except RecursionError:
                from .errors import StitchError

                raise StitchError(
                    f"the program is nested too deeply for stitch: a chain of dependent ops needs more than "
                    f"{LIMIT:,} stack frames to walk (chains of a few thousand ops compile; split a longer "
                    f"one into several funcs)") from None

    return wrapper
