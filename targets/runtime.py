"""The CPU runtime (runtime.c): one thread pool per process, shared by every loaded program.

The runtime is a shared library of its own, compiled once into the cache like a
program and loaded once per process; `cpu.build` binds every program's library
to it (`stitch_bind`), so kernels of all programs take turns on one pool and
idle workers of one never spin against another's. A library not bound (the C
of `stitch compile --emit c`, compiled by hand) runs every tile on its caller.

Thread count: `set_threads(n)` (`stitch.set_num_threads`, `stitch run
--threads`), else the OMP_NUM_THREADS environment variable read when the
runtime loads (the knob users and benchmarks already set for OpenMP, numpy and
torch), else the cores this process may run on.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
import threading
from pathlib import Path

from ..engine.ir.errors import StitchError

SOURCE = Path(__file__).with_name("runtime.c")
FLAGS = ("-O2", "-fPIC", "-shared", "-pthread", "-std=gnu11")

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failed = False
_threads: int | None = None  # set_threads before the runtime loaded


def default_threads(environ=os.environ) -> int:
    """OMP_NUM_THREADS (its first entry, as OpenMP reads a list), else the cores this process may use."""
    first = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) > 0:
        return int(first)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def set_threads(n: int) -> None:
    """Threads that run a parallel kernel's tiles, the calling thread included (1: all on the caller)."""
    global _threads
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise StitchError(f"the thread count must be a positive integer, got {n!r}")
    with _lock:
        _threads = n
        if _library is not None:
            _library.stitch_rt_set_threads(n)


def threads() -> int:
    """The pool's size as it is (or will be, once a program is loaded)."""
    with _lock:
        if _library is not None:
            return _library.stitch_rt_threads()
        return _threads or default_threads()


def bind(lib: ctypes.CDLL, cc: str, cache_dir: Path) -> None:
    """Point a loaded program's tile runner at the process's runtime (built and loaded on first use)."""
    runtime = _load(cc, cache_dir)
    if runtime is not None:
        lib.stitch_bind.argtypes = [ctypes.c_void_p]
        lib.stitch_bind(ctypes.cast(runtime.stitch_rt_run, ctypes.c_void_p))


def _load(cc: str, cache_dir: Path) -> ctypes.CDLL | None:
    global _library, _failed
    with _lock:
        if _library is None and not _failed:
            from .cc import cached_library

            def build(home: Path) -> ctypes.CDLL:
                home.mkdir(parents=True, exist_ok=True)
                return ctypes.CDLL(str(cached_library(SOURCE.read_text(), 1, cc, FLAGS, home)))

            try:
                try:
                    library = build(Path(cache_dir) / "runtime")  # beside, not among, the programs' libraries
                except OSError:  # a read-only or full cache without it: built aside (a loaded library may go)
                    with tempfile.TemporaryDirectory(prefix="stitch-runtime-") as tmp:
                        library = build(Path(tmp))
            except (StitchError, OSError) as err:
                _failed = True
                print(f"stitch: the thread pool could not be built, kernels run on one thread: {err}",
                      file=sys.stderr)
                return None
            library.stitch_rt_set_threads.argtypes = [ctypes.c_int]
            library.stitch_rt_threads.restype = ctypes.c_int
            library.stitch_rt_set_threads(_threads or default_threads())
            _library = library
        return _library
