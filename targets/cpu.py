"""Build a LoopProgram for the CPU and call it: C source, compiled and cached (targets/cc.py), ctypes.

A cached library that fails to load is rebuilt.
Without a compiler, `build` warns once and the program runs on the numpy
executor (lowering/execute.py) instead.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from ..engine.ir.errors import StitchError
from ..engine.ir.extent import at, is_symbolic
from ..engine.ir.interp import aligned_empty_at, np_dtype, outputs_fit
from ..engine.schedule.target import Target
from ..lowering.loops import Buffer, LoopProgram
from . import runtime
from .c.source import buffer_order, c_source
from .cc import DEFAULT_FLAGS, cached_library, compiler, default_cache_dir, vector_bytes, vector_math


@dataclass
class Native:
    """A loaded library and the buffer layout its `stitch_main` expects."""

    program: LoopProgram
    library: ctypes.CDLL | None
    source_path: Path | None
    # global temporaries between kernels, allocated on the first call and reused (no page faults
    # after it); the lock keeps two threads calling at once from sharing them
    scratch: dict[str, np.ndarray] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    flags: tuple[str, ...] = DEFAULT_FLAGS  # what it was built with, before the additions `build` makes
    cache_dir: Path | None = None
    # the program's own arrays a call passes besides its inputs (the blocks made from bound weights,
    # lowering/bind.py): their addresses are taken once, not on every call
    bound: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self):
        if self.library is not None:  # one lock per loaded library: its error slot is the library's
            self.lock = library_lock(self.library)

    def run(self, inputs: dict[str, np.ndarray], out: list[np.ndarray] | None = None,
            sizes: dict[str, int] | None = None) -> list[np.ndarray]:
        """One call; `sizes` gives the symbols' values (a program with symbolic dimensions)."""
        with self.lock:
            return self._run(inputs, out, sizes or {})

    @cached_property
    def layout(self) -> tuple[list[Buffer], set[str], set[str]]:
        """(the buffers stitch_main takes, in order; the global temporaries; the parameters)."""
        temporaries = {b.name for b in self.program.intermediates} - set(self.program.outputs)
        return buffer_order(self.program), temporaries, {b.name for b in self.program.params}

    @cached_property
    def cache_of(self) -> dict[str, object]:
        """Each cache (lowering/caches.py) by its parameter's name and by its output's."""
        return {c.param: c for c in self.program.caches} | {c.output: c for c in self.program.caches}

    @cached_property
    def cache_strides(self) -> dict[str, tuple[int, ...]]:
        """The byte strides of each cache parameter's layout (its capacity along the cache's axis)."""
        return {b.name: tuple(math.prod(b.shape[i + 1:]) * np_dtype(b.dtype).itemsize for i in range(len(b.shape)))
                for b in self.program.params if b.name in self.cache_of}

    @cached_property
    def call_plan(self) -> CallPlan:
        """The argument vector stitch_main takes, filled once with the addresses that are the same on
        every call (the bound arrays, the static temporaries), and the slots each call fills."""
        order, temporaries, params = self.layout
        symbolic = bool(self.program.symbols)
        argv = (ctypes.c_void_p * max(1, len(order)))()
        slots, shapes = [], {}  # (each symbolic shape evaluated once a call: buffers share them)
        for index, b in enumerate(order):
            name, dtype = b.name, np_dtype(b.dtype)
            varies = symbolic and any(map(is_symbolic, b.shape))
            shape = shapes.setdefault(tuple(map(str, b.shape)), (len(shapes), b.shape))[0] if varies else b.shape
            if name in self.cache_of:
                kind = CACHE
            elif name in params:
                if name in self.bound:
                    argv[index] = self.bound[name].ctypes.data
                    if name not in self.program.outputs:
                        continue
                    kind = BOUND  # (returned: the call's outputs hold it)
                else:
                    kind = INPUT
            elif name in temporaries:
                if not varies:  # allocated now, reused by every call (no page faults after the first)
                    arr, argv[index] = aligned_empty_at((max(math.prod(b.shape), 1),), dtype)
                    self.scratch[name] = arr
                    continue
                kind = SCRATCH  # the largest size called yet, its front used at this one
            else:
                kind = OUTPUT
            slots.append((index, kind, name, b, dtype, varies, shape))
        symbol_values = (ctypes.c_longlong * len(self.program.symbols))() if symbolic else None
        return CallPlan(argv, tuple(slots), tuple(shape for _, shape in shapes.values()), symbol_values)

    def _run(self, inputs: dict[str, np.ndarray], out: list[np.ndarray] | None,
             sizes: dict[str, int]) -> list[np.ndarray]:
        plan = self.call_plan
        argv = plan.argv
        arrays: dict[str, np.ndarray] = {}  # each input and output (kept alive through the call)
        provided: dict[str, np.ndarray] = {}  # the out= array the kernels write each output into
        for name, arr in zip(self.program.outputs, out or ()):
            provided.setdefault(name, arr)  # (an output returned twice is copied into its second array)
        shapes = [tuple([at(d, sizes) for d in shape]) for shape in plan.shapes]
        for index, kind, name, b, dtype, varies, shape in plan.slots:
            if varies:
                shape = shapes[shape]
            if kind is INPUT:
                arr = inputs[name]
                flags = arr.flags
                if not (flags.c_contiguous and flags.aligned):
                    arr = np.require(arr, requirements="CA")  # (ascontiguousarray makes 0-d 1-d)
                    flags = arr.flags
                address = data_address(arr, flags)
            elif kind is OUTPUT:
                arr = provided.get(name)
                if arr is None:
                    arr, address = aligned_empty_at(shape, dtype)
                else:
                    flags = arr.flags
                    if arr.shape != shape or arr.dtype != dtype or not (flags.c_contiguous and flags.aligned):
                        raise StitchError(f"out= array for {name} must be a C-contiguous, aligned "
                                          f"{b.dtype}{list(shape)}")
                    address = data_address(arr, flags)
            elif kind is BOUND:
                arrays[name] = self.bound[name]
                continue
            elif kind is CACHE:  # a cache parameter as the caller's view, its output the same memory
                cache = self.cache_of[name]
                arr = cache_view(cache, b, inputs, provided, sizes, self.cache_strides[cache.param])
                address = arr.ctypes.data
            else:  # SCRATCH: a temporary of symbolic size (a temporary is no output: no array kept)
                count = math.prod(shape)
                held = self.scratch.get(name)
                if held is None or held.size < count:
                    self.scratch[name], argv[index] = aligned_empty_at((max(count, 1),), dtype)
                continue
            arrays[name] = arr
            argv[index] = address
        if plan.symbol_values is not None:
            plan.symbol_values[:] = [sizes[n] for n in self.program.symbols]
            rc = self.library.stitch_main(argv, plan.symbol_values)
        else:
            rc = self.library.stitch_main(argv)
        if rc:
            self._failed(rc)
        return _outputs(self.program.outputs, arrays, self.layout[2], out)

    def _failed(self, rc: int) -> None:
        """Raise what stitch_main's non-zero return `rc` means."""
        if rc == 2:  # a gather's index out of range (the first one found)
            site = self.library.stitch_error_site()
            value = self.library.stitch_error_value()
            checks = self.program.checks
            message = checks[site] if 0 <= site < len(checks) else "gather: index {value} is out of range"
            raise StitchError(message.format(value=value))
        raise MemoryError(f"{self.program.name}: a kernel's buffers could not be allocated")

    def quick_call(self, params: tuple[tuple[str, np.dtype, tuple[int, ...]], ...],
                   outputs: tuple[tuple[np.dtype, tuple[int, ...]], ...]):
        """A call of the common kind in one function, or None where the program has none: `call(inputs,
        out)` runs the program when `inputs` are exactly `params` (name, dtype, static shape: every
        parameter not bound) as plain C-contiguous aligned arrays and `out` is None or `outputs`' plain
        arrays as `check_outputs` accepts them, and returns None, having done nothing, for any other
        call (the general path then decides and words). For programs without symbols, caches or symbolic
        temporaries whose outputs are distinct values computed by the kernels. After another program has
        run, the general path took 15-25 us more around the kernel (docs/perf/2026-11-29-group-norm.md)."""
        program, plan = self.program, self.call_plan
        slots = {name: (index, kind) for index, kind, name, *_ in plan.slots}
        if (program.symbols or program.caches or any(kind not in (INPUT, OUTPUT) for _, kind in slots.values())
                or len(set(program.outputs)) != len(program.outputs)
                or any(slots.get(name, (0, None))[1] is not OUTPUT for name in program.outputs)):
            return None
        names = frozenset(name for name, _, _ in params)
        ins = tuple((name, dtype, shape, slots[name][0] if name in slots else -1) for name, dtype, shape in params)
        outs = tuple((slots[name][0], dtype, shape) for name, (dtype, shape) in zip(program.outputs, outputs))
        argv, lock, main = plan.argv, self.lock, self.library.stitch_main

        def call(inputs: dict, out) -> list[np.ndarray] | None:
            if inputs.keys() != names:
                return None
            at = []  # (the argument vector's slots with their addresses)
            for name, dtype, shape, index in ins:
                arr = inputs[name]
                if type(arr) is not np.ndarray or arr.dtype != dtype or arr.shape != shape:
                    return None
                flags = arr.flags
                if not (flags.c_contiguous and flags.aligned):
                    return None
                if index >= 0:
                    at.append((index, data_address(arr, flags)))
            if out is None:
                results = []
                for index, dtype, shape in outs:
                    arr, address = aligned_empty_at(shape, dtype)
                    results.append(arr)
                    at.append((index, address))
            else:
                if not outputs_fit(outputs, out, inputs):
                    return None
                for (index, _, _), arr in zip(outs, out):
                    at.append((index, data_address(arr, arr.flags)))
                results = list(out)
            with lock:
                for index, address in at:
                    argv[index] = address
                rc = main(argv)
                if rc:
                    self._failed(rc)
            return results

        return call


def data_address(arr: np.ndarray, flags) -> int:
    """The address of a C-contiguous array's first element (`flags`: its flags). A writable array's
    through the buffer protocol: `arr.ctypes.data` builds numpy's ctypes glue on each call, 1.5-3 us
    warm and about 10 us right after another program has run (docs/perf/2026-11-29-group-norm.md)."""
    if flags.writeable and arr.size:
        return ctypes.addressof(ctypes.c_char.from_buffer(arr))
    return arr.ctypes.data  # (a read-only or empty array: from_buffer refuses it)


# what a call does for one of stitch_main's buffers (Native.call_plan)
INPUT, OUTPUT, BOUND, CACHE, SCRATCH = "input", "output", "bound", "cache", "scratch"


@dataclass(frozen=True)
class CallPlan:
    """stitch_main's argument vector (reused by every call, under the Native's lock) with the fixed
    addresses in place; `slots`, the (index, kind, name, buffer, numpy dtype, whether its shape is
    symbolic, its shape or else the index of its symbolic shape in `shapes`) of each buffer a call
    fills; the distinct symbolic shapes, each evaluated once a call; the symbols' values, for a
    program that has symbols."""

    argv: ctypes.Array
    slots: tuple[tuple, ...]
    shapes: tuple[tuple, ...]
    symbol_values: ctypes.Array | None


def cache_view(cache, b: Buffer, inputs: dict, provided: dict, sizes: dict, want: tuple[int, ...]) -> np.ndarray:
    """The array of a cache's parameter (the caller's view of its array of the cache's capacity, whose
    byte strides are `want`) or of its output (that array, from the same first element, over the
    output's positions)."""
    param = inputs[cache.param]
    if param.strides != want or not param.flags.aligned:
        raise StitchError(
            f"cache '{cache.param}' must be a view of the first positions of an array of {cache.capacity} along "
            f"axis {cache.axis} (program.new_cache('{cache.param}') makes one: pass cache[..., :n, ...]); got "
            f"strides {param.strides}, want {want}")
    if b.name == cache.param:
        return param
    shape = tuple(at(d, sizes) for d in cache.shape)
    view = np.lib.stride_tricks.as_strided(param, shape=shape, strides=param.strides, writeable=True)
    root = param
    while isinstance(root.base, np.ndarray):
        root = root.base
    low, high = byte_bounds(root)
    end = view.ctypes.data + sum((n - 1) * s for n, s in zip(shape, view.strides)) + view.itemsize
    if view.ctypes.data < low or end > high or not param.flags.writeable:
        raise StitchError(f"cache '{cache.param}' has no room for output '{b.name}' {list(shape)}: its array holds "
                          f"fewer than {cache.capacity} positions along axis {cache.axis}, or is read-only")
    given = provided.get(b.name)
    if given is not None and (given.ctypes.data != view.ctypes.data or given.strides != view.strides
                              or given.shape != view.shape):
        raise StitchError(f"out= array for cache output '{b.name}' must be the cache '{cache.param}' itself, one "
                          "position longer (the program writes the new position into it)")
    return view


try:  # (numpy 2; numpy 1 has it as np.byte_bounds)
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # pragma: no cover
    byte_bounds = np.byte_bounds

_LIBRARY_LOCKS: dict[int, threading.Lock] = {}
_LIBRARY_LOCKS_LOCK = threading.Lock()


def library_lock(library: ctypes.CDLL) -> threading.Lock:
    """The lock every call into `library` holds. Programs compiled from the same source load the same
    library (one dlopen handle), whose gather error slot (`st_error_site`, set during a call and read
    after it) is one for the library: calls from two threads through two programs would race on it."""
    with _LIBRARY_LOCKS_LOCK:
        return _LIBRARY_LOCKS.setdefault(library._handle, threading.Lock())


def _outputs(names: list[str], arrays: dict[str, np.ndarray], params: set[str],
             out: list[np.ndarray] | None) -> list[np.ndarray]:
    """Each output its own array: an input returned, or a value returned twice, is copied; with
    `out=`, every array given holds its output (the kernels wrote the first of each value)."""
    results, seen = [], set()
    for k, name in enumerate(names):
        arr = arrays[name]
        if out is not None:
            if out[k] is not arr:
                np.copyto(out[k], arr)
            results.append(out[k])
        else:
            results.append(arr.copy() if name in params or name in seen else arr)
        seen.add(name)
    return results


def c_for_target(program: LoopProgram, target: Target, flags: tuple[str, ...] = DEFAULT_FLAGS) -> str:
    """The C `build` would compile for `program` (`stitch compile --emit c`), as one unit."""
    if target.executor != "c":
        raise StitchError(f"C is generated for cpu targets; '{target.name}' is an {target.kind} target, run on the "
                          f"{target.executor} (run it with stitch run --target ...)")
    cc = compiler()
    return c_source(program, vector_bytes(cc, tuple(flags)) if cc else 32)[0]


def build(program: LoopProgram, cache_dir: Path | None = None, flags: tuple[str, ...] = DEFAULT_FLAGS,
          cc: str | None = None) -> Native:
    """Compile (or fetch from the cache) and load `program`; None library when there is no compiler.

    A cache that cannot be written (read-only, full) still serves what it holds; a library it lacks
    is built in a temporary directory instead, with a warning, and loaded from there."""
    cc = cc or compiler()
    if cc is None:
        print("stitch: no C compiler found; running on the numpy executor", file=sys.stderr)
        return Native(program, None, None)
    cache_dir = Path(cache_dir or default_cache_dir())
    try:
        exists, is_dir = cache_dir.exists(), cache_dir.is_dir()
    except OSError as err:  # a path the system refuses (too long, a loop of links)
        raise StitchError(f"the cache directory {cache_dir} cannot be used: {err.strerror or err}",
                          hint="name another directory with --cache-dir (cache_dir=)") from None
    if exists and not is_dir:
        raise StitchError(f"the cache directory {cache_dir} is a file, not a directory",
                          hint="name a directory with --cache-dir (cache_dir=), or move the file away")
    width = vector_bytes(cc, tuple(flags))
    source, parts = c_source(program, width, max_parts=os.cpu_count() or 1)
    # gcc's default on AVX-512 machines is 256-bit loops; 512 doubles the throughput of
    # vectorized transcendentals
    wide = ("-mprefer-vector-width=512",) if width == 64 else ()
    requested = tuple(flags)
    flags = requested + wide + vector_math(cc)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        lib_path = cached_library(source, parts, cc, flags, cache_dir)
        try:
            library = _load(lib_path, cc, cache_dir, len(program.symbols))
        except OSError:  # checked but does not load: build it again
            lib_path.unlink(missing_ok=True)
            library = _load(cached_library(source, parts, cc, flags, cache_dir), cc, cache_dir, len(program.symbols))
        return Native(program, library, lib_path.with_suffix(".c"), flags=requested, cache_dir=cache_dir)
    except OSError as err:
        print(f"stitch: cannot write to the cache directory {cache_dir} ({err.strerror or err}); building in a "
              "temporary directory instead", file=sys.stderr)
    try:
        with tempfile.TemporaryDirectory(prefix="stitch-") as tmp:  # a loaded library may be deleted
            lib_path = cached_library(source, parts, cc, flags, Path(tmp))
            library = _load(lib_path, cc, cache_dir, len(program.symbols))
    except OSError as err:
        raise StitchError(f"cannot build the C library: {err.strerror or err} (in the cache directory {cache_dir} "
                          f"and in {tempfile.gettempdir()})", hint="free some disk space, or pass --cache-dir "
                          "(cache_dir=) naming a writable directory") from None
    return Native(program, library, lib_path.with_suffix(".c"), flags=requested, cache_dir=cache_dir)


def _load(path: Path, cc: str, cache_dir: Path, symbols: int = 0) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.stitch_main.argtypes = [ctypes.POINTER(ctypes.c_void_p)] + [ctypes.POINTER(ctypes.c_longlong)] * bool(symbols)
    lib.stitch_main.restype = ctypes.c_int
    runtime.bind(lib, cc, cache_dir)
    lib.stitch_error_site.restype = ctypes.c_int
    lib.stitch_error_value.restype = ctypes.c_longlong
    return lib


