"""The compile memory budget: how much more this process may hold while it compiles.

Saturation checks it between iterations (and stops there, as at the node
limit); later stages check it where they might grow (extraction's search,
lowering) and stop with an error naming the stage. Measured as the growth of
the resident set size since the compile began, so it counts egglog's memory
(Rust, invisible to Python) too, and not what the caller's process already
held (its models, its other compiled programs).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .errors import StitchError

GIB = 2**30


def default_budget() -> int:
    """Bytes a compile may use by default: half the machine's memory, at most 8 GiB."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 16 * GIB
    return min(8 * GIB, physical // 2)


def resident_bytes() -> int:
    """This process's resident set size now (its peak where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if os.uname().sysname == "Darwin" else peak * 1024


def held_bytes() -> int:
    """What this process holds beyond what it held when the compile in progress began (outside a
    compile, `memory_budget`: all it holds)."""
    return resident_bytes() - (_BASELINE.get() or 0)


def over_budget(budget: float) -> bool:
    return held_bytes() > budget


def check_memory(budget: float, stage: str) -> None:
    """StitchError if the compile in progress holds more than `budget` bytes, naming the stage it was in."""
    held = held_bytes()
    if held > budget:
        raise StitchError(
            f"compiling needs more memory than the budget: {held / GIB:.2f} GiB held during {stage}, "
            f"budget {budget / GIB:.2f} GiB",
            hint="raise it with --memory-limit GIB (limits=Limits(memory=...)), lower --node-limit, "
                 "or split the program")


# The budget of the compile running in this context (None: no compile is checking), so that a stage
# deep inside extraction can check without every signature on the way taking it.
_BUDGET: ContextVar[float | None] = ContextVar("stitch_memory_budget", default=None)
# The resident size when the outermost compile in this context began: what the caller already held
# (its models) is not the compile's, or a process holding several GB stops every saturation at once.
_BASELINE: ContextVar[int | None] = ContextVar("stitch_memory_baseline", default=None)


@contextmanager
def memory_budget(budget: float) -> Iterator[None]:
    """Check `budget` inside: bytes held beyond what the process held when the outermost of these began."""
    token = _BUDGET.set(budget)
    base = _BASELINE.set(resident_bytes()) if _BASELINE.get() is None else None
    try:
        yield
    finally:
        if base is not None:
            _BASELINE.reset(base)
        _BUDGET.reset(token)


# A stage calling checkpoint in a loop (the schedule search, once per kernel formed) reads the
# resident size at most this often after its first call (a read of /proc costs tens of microseconds).
CHECK_SECONDS = 0.05
_last_check: tuple[str, float] = ("", 0.0)


def checkpoint(stage: str) -> None:
    """check_memory against the budget of the compile in progress, if any: at a stage's first call,
    then at most every CHECK_SECONDS."""
    global _last_check
    budget = _BUDGET.get()
    if budget is None:
        return
    now = time.monotonic()
    if _last_check[0] == stage and now - _last_check[1] < CHECK_SECONDS:
        return
    _last_check = (stage, now)
    check_memory(budget, stage)
