"""The system C compiler, driven: flags, a disk cache of shared libraries, time limits, probes.

The compiler is $CC when set, else cc, gcc or clang (`compiler`). A library is cached under
`cache_dir` by a hash of the source, the compiler's path, its flags and its version, beside a
checksum of the library; an entry whose checksum does not match (corrupt, truncated) is rebuilt.
The programs' C (targets/cpu.py) and the thread pool's (targets/runtime.py) are built here.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

from ..engine.ir.errors import StitchError, StitchWarning

# What the user's --cflags replace: how hard the compiler optimises and for which machine.
OPTIMIZE_FLAGS = ("-O3", "-march=native")
# What the generated C needs whatever the user asks: a loadable shared library, OpenMP simd pragmas,
# wrapping integer arithmetic (the reference's), libm calls that never set errno or trap, GNU C's
# vector types; and what it means (docs/explanation/floating-point.md): no multiply-add fused outside
# matmul's micro-kernel, every f16 (or float) operation rounded to its type, as numpy's are.
REQUIRED_FLAGS = ("-fopenmp-simd", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno", "-fno-trapping-math",
                  "-std=gnu11", "-ffp-contract=off", "-fexcess-precision=standard")
DEFAULT_FLAGS = OPTIMIZE_FLAGS + REQUIRED_FLAGS
# A compiler run (or a probe of the compiler) taking longer is stopped and reported: the 600-op
# generated program compiles in about 10 s as one unit here.
COMPILER_SECONDS = 300.0


def compiler_flags(user=None) -> tuple[str, ...]:
    """The flags to compile with: the user's (a string, split as a shell would, or a sequence of
    strings) in place of OPTIMIZE_FLAGS, followed by REQUIRED_FLAGS; the defaults without them."""
    if user is None:
        return DEFAULT_FLAGS
    if isinstance(user, str):
        try:
            user = shlex.split(user)
        except ValueError as err:
            raise StitchError(f"cannot split the compiler flags {user!r}: {err}") from None
    elif not isinstance(user, (list, tuple)) or not all(isinstance(f, str) for f in user):
        raise StitchError(f"compiler flags must be a string or a list of strings, got {user!r}")
    if any("\0" in f for f in user):  # no process argument can hold one
        raise StitchError(f"compiler flags must not contain a NUL character, got {list(user)!r}")
    return tuple(user) + REQUIRED_FLAGS


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "stitch"


def compiler(environ: Mapping[str, str] = os.environ) -> str | None:
    """The C compiler, as an absolute path: the program $CC names (a name looked up on PATH, or a
    path) when CC is set and not blank, else the first of cc, gcc and clang on PATH; None when there
    is none. A $CC that names no executable program is an error naming it, never a quiet fall back
    to another compiler. (The one place stitch reads its environment: as `make` does.)"""
    named = environ.get("CC", "")
    if named.strip():
        found = shutil.which(named)
        if found is None:
            hint = ("CC names one program; its flags go in --cflags (cflags=)" if any(c.isspace() for c in named)
                    else "set CC to an installed C compiler, or unset it to use cc, gcc or clang from PATH")
            raise StitchError(f"the C compiler in $CC, {named!r}, is not an executable program", hint=hint)
        return os.path.abspath(found)
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    return os.path.abspath(found) if found else None


def source_key(source: str, cc: str, flags: tuple[str, ...]) -> str:
    return hashlib.sha256("\0".join([source, cc, *flags, _version(cc)]).encode()).hexdigest()[:24]


def cached_library(source: str, parts: int, cc: str, flags: tuple[str, ...], cache_dir: Path) -> Path:
    """The shared library `source` compiles to, from the cache when a checked entry is there, else
    built into it. Reads only, when the entry is there; raises OSError when it must write and cannot
    (a truncated file is not left behind)."""
    key = source_key(source, cc, flags)
    lib_path, src_path, sum_path = (cache_dir / f"{key}{ext}" for ext in (".so", ".c", ".sha256"))
    try:
        # regular files only: a FIFO (or a device) in their place would block the reads forever
        if lib_path.is_file() and sum_path.is_file() and sum_path.read_text() == _digest(lib_path):
            return lib_path
    except OSError:  # unreadable: build it again
        pass
    try:
        lib_path.unlink(missing_ok=True)  # missing, corrupt or stale: build it again
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            staged = Path(tmp) / src_path.name  # renamed into place whole: another process building the
            staged.write_text(source)  # same source may be compiling src_path now (a rewrite truncated it)
            os.replace(staged, src_path)
            tmp_lib = Path(tmp) / "lib.so"
            try:
                _compile(cc, flags, src_path, tmp_lib, parts, Path(tmp))
            except CompilerCrash as crash:  # the compiler's bug, not the source's: once more without the pass
                warnings.warn(StitchWarning(f"the C compiler crashed on {src_path} ({crash.line}); built again "
                                            f"with {' '.join(CRASH_FLAGS)}"), stacklevel=2)
                _compile(cc, flags + CRASH_FLAGS, src_path, tmp_lib, parts, Path(tmp))
            staged_sum = Path(tmp) / sum_path.name
            staged_sum.write_text(_digest(tmp_lib))
            os.replace(tmp_lib, lib_path)  # each renamed into place whole, over whatever was there
            os.replace(staged_sum, sum_path)
    except OSError:
        for path in (src_path, lib_path, sum_path):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        raise
    return lib_path


def _compile(cc: str, flags: tuple[str, ...], src: Path, lib: Path, parts: int, tmp: Path) -> None:
    """One compiler run, or one per part (`c_source`'s STITCH_PART groups) at once and a link.

    The runs must finish within COMPILER_SECONDS (parts together), else they are stopped and that
    is an error. Nothing is read from stdin: a flag `-` would wait on it forever."""
    if parts == 1:
        _check(_run_compiler([cc, *flags, str(src), "-o", str(lib), "-lm"], src), src)
        return
    objects = [tmp / f"part{i}.o" for i in range(parts)]
    procs = [_spawn([cc, *flags, "-c", f"-DSTITCH_PART={i}", str(src), "-o", str(obj)])
             for i, obj in enumerate(objects)]
    deadline = time.monotonic() + COMPILER_SECONDS
    try:
        for proc in procs:
            try:
                _, stderr = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise _too_long(src) from None
            _check(subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr), src)
    finally:
        for proc in procs:  # still running after a timeout or another part's error
            _stop(proc)
    _check(_run_compiler([cc, *flags, *map(str, objects), "-o", str(lib), "-lm"], src), src)


def _spawn(cmd: list[str]) -> subprocess.Popen:
    """The compiler in a session of its own: stopping it stops the passes it started (cc1, as, ld),
    which would otherwise run on, holding a core and gigabytes, after the driver is killed."""
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    except OSError as err:
        raise StitchError(f"cannot run the C compiler {cmd[0]}: {err.strerror}") from None


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _run_compiler(cmd: list[str], src: Path) -> subprocess.CompletedProcess:
    proc = _spawn(cmd)
    try:
        stdout, stderr = proc.communicate(timeout=COMPILER_SECONDS)
    except subprocess.TimeoutExpired:
        raise _too_long(src) from None
    finally:
        _stop(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _too_long(src: Path) -> StitchError:
    return StitchError(f"the C compiler ran over {COMPILER_SECONDS:g} s on the generated source {src} and was stopped",
                       hint="lighter --cflags, or a smaller program")


# What a program the compiler crashes on is built again with. gcc 12.2 -O3 segfaults in its SLP
# vectorizer on a `#pragma omp simd reduction(max:...)` loop of i64 values inside a loop of two
# iterations (found by tests/test_cpu.py's property test: a max over a broadcast i64 scalar).
CRASH_FLAGS = ("-fno-tree-slp-vectorize",)


class CompilerCrash(StitchError):
    """The C compiler reported an internal compiler error: its own bug, not the source's."""

    def __init__(self, message: str, line: str):
        super().__init__(message)
        self.line = line


def _check(proc: subprocess.CompletedProcess, src: Path) -> None:
    if proc.returncode != 0 and "No space left on device" in proc.stderr:  # not the source's fault
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if proc.returncode != 0:
        message = f"the C compiler failed on the generated source {src}:\n{proc.stderr.strip()[:2000]}"
        crash = next((line.strip() for line in proc.stderr.splitlines() if "internal compiler error" in line), None)
        raise CompilerCrash(message, crash) if crash else StitchError(message)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_VECTOR_MATH: dict[str, tuple[str, ...]] = {}


# A program linked against libmvec with functions the generated C declares for it: on x86-64,
# logf's AVX2 and AVX-512 versions, which a shared library would leave unresolved until load.
_VECTOR_MATH_PROBE = """#include <math.h>
#if defined(__x86_64__)
void _ZGVdN8v_logf(void);
void _ZGVeN16v_logf(void);
void *st_probe[] = {(void *)_ZGVdN8v_logf, (void *)_ZGVeN16v_logf};
#endif
int main(int argc, char **argv) { (void)argv; return (int)expf((float)argc); }
"""


def vector_math(cc: str) -> tuple[str, ...]:
    """Flags for glibc's vector math library (libmvec), when this compiler can link against it."""
    if cc not in _VECTOR_MATH:
        flags = ("-DSTITCH_LIBMVEC", "-lmvec")
        try:
            with tempfile.TemporaryDirectory(prefix="stitch-probe-") as tmp:
                probe = Path(tmp) / "libmvec_probe.c"
                probe.write_text(_VECTOR_MATH_PROBE)
                proc = _probe([cc, str(probe), "-o", str(Path(tmp) / "probe"), *flags, "-lm"])
                _VECTOR_MATH[cc] = flags if proc.returncode == 0 else ()
        except OSError:  # nowhere to write the probe: do without
            return ()
    return _VECTOR_MATH[cc]


_VECTOR_BYTES: dict[tuple, int] = {}


def vector_bytes(cc: str, flags: tuple[str, ...]) -> int:
    """The widest vector registers these flags let the compiler use (AVX-512, AVX, else SSE/NEON width)."""
    key = (cc, *flags)
    if key not in _VECTOR_BYTES:
        proc = _probe([cc, *flags, "-dM", "-E", "-x", "c", os.devnull])
        macros = proc.stdout if proc.returncode == 0 else ""
        _VECTOR_BYTES[key] = 64 if "__AVX512F__ " in macros else 32 if "__AVX__ " in macros else 16
    return _VECTOR_BYTES[key]


_VERSIONS: dict[str, str] = {}


def _version(cc: str) -> str:
    if cc not in _VERSIONS:
        _VERSIONS[cc] = _probe([cc, "--version"]).stdout
    return _VERSIONS[cc]


def _probe(cmd: list[str]) -> subprocess.CompletedProcess:
    """A quick question to the compiler; one that fails, cannot start or hangs answers nothing."""
    try:
        return _run_compiler(cmd, Path(cmd[-1]))
    except StitchError:
        return subprocess.CompletedProcess(cmd, 1, "", "")
