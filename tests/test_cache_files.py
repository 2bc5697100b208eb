"""The compile cache with entries that are not regular files, and cache paths the system refuses
(issue 52, item 5): a FIFO where a library or its checksum should be is replaced, never read (a read
would block forever); a path too long is a clean error naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from stitch_testing import needs_cc

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "layernorm.ir"


def run(cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stitch.engine.cli", "run", str(EXAMPLE), "--check", "--cache-dir",
                           str(cache)], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@needs_cc
@pytest.mark.parametrize("replaced", [(".so",), (".sha256",), (".so", ".sha256")])
def test_a_fifo_in_place_of_a_cache_entry_is_built_again_not_read(replaced, tmp_path):
    cache = tmp_path / "cache"
    assert run(cache).returncode == 0
    entries = [p for p in cache.glob("*.so") if p.with_suffix(".sha256").exists()]
    assert len(entries) == 1
    for ext in replaced:
        path = entries[0].with_suffix(ext)
        path.unlink()
        os.mkfifo(path)
    again = run(cache)  # (a read of a FIFO blocks: the timeout would fail the test)
    assert again.returncode == 0 and "check: outputs equal the reference" in again.stdout, again.stderr
    assert all(entries[0].with_suffix(ext).is_file() for ext in (".so", ".sha256"))


def test_a_cache_path_too_long_is_an_error_naming_it(tmp_path):
    cache = tmp_path / ("a" * 300)
    proc = run(cache)
    assert proc.returncode == 1 and proc.stderr.startswith(f"error: the cache directory {cache} cannot be used"), \
        proc.stderr
