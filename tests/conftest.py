"""Test-wide setup: the `--long` option (the hypothesis profile `long` and every ONNX node case on
both targets; the default is the quick profile CI runs), and the caches the built-in cpu target
reads, pinned.

The cpu target's on-chip size is a share (`onchip_share`, a half) of the L2 per core the machine
reports (`onchip_cache = "l2"`), and tile sizes and chunking follow it: the suite's plans were
written for 1 MiB on chip (the whole L2 of the Zen 4 machines they were written on, half of the
Xeons' 2 MiB), and on a 2 MiB budget a softmax tile held 128 rows, not 64. The tests price for
one machine, whatever runs them: the sysfs reading is pinned to these sizes (a fake sysfs tree
given as `root` is still read, as test_target does)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the tests' own helpers: stitch_testing

from stitch.engine.schedule import target as _target  # noqa: E402
from stitch_testing import load_profile  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true",
                     help="stitch: the long hypothesis profile (100 examples, new each run) and every ONNX node case "
                          "on both targets")


def pytest_configure(config):
    load_profile(config.getoption("long"))


def pytest_sessionfinish(session):
    """Once a process's tests are done, hypothesis's gc callback (its timing of collections) is
    dropped: when an xdist worker takes over 5 s to exit, execnet interrupts it with SIGINT, and a
    KeyboardInterrupt landing inside that callback printed a traceback at the end of a passing run
    (issue 51 item 8, the newcomer's P7)."""
    drop_hypothesis_gc_callbacks()


def drop_hypothesis_gc_callbacks() -> None:
    import gc

    gc.callbacks[:] = [cb for cb in gc.callbacks if not getattr(cb, "__module__", "").startswith("hypothesis")]


PINNED_CACHE_BYTES = {1: 48 * 1024, 2: 2 * 1024 * 1024, 3: 32 * 1024 * 1024 // 2}
_machine_cache_bytes = _target.machine_cache_bytes


def _pinned(level: int, root=_target.SYSFS_CPU):
    if root == _target.SYSFS_CPU:
        return PINNED_CACHE_BYTES.get(level)
    return _machine_cache_bytes.__wrapped__(level, root)


_pinned.__wrapped__ = _machine_cache_bytes.__wrapped__
_target.machine_cache_bytes = _pinned
# and the vector width the op prices are chosen by ([op_cycles_at.32] on AVX2): AVX-512's, the
# width the suite's estimates were written at (a fake cpuinfo given is still read)
PINNED_VECTOR_BYTES = 64
_machine_vector_bytes = _target.machine_vector_bytes


def _pinned_width(cpuinfo=_target.CPUINFO):
    return PINNED_VECTOR_BYTES if cpuinfo == _target.CPUINFO else _machine_vector_bytes.__wrapped__(cpuinfo)


_pinned_width.__wrapped__ = _machine_vector_bytes.__wrapped__
_target.machine_vector_bytes = _pinned_width


@pytest.fixture
def cache(tmp_path):
    """A compile cache of the test's own (so a test sees what it built, and nothing else)."""
    return tmp_path / "cache"
