"""Which C compiler builds the programs (P24): $CC when set, else cc, gcc or clang from PATH."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import stitch
from stitch.engine.cli import main
from stitch.engine.ir.errors import StitchError
from stitch.targets import cc
from stitch_testing import EXAMPLES, needs_cc

PROGRAM = "func f(x: f32[16]) -> f32[16] { return exp(x) }"


def test_without_cc_the_compiler_is_the_first_of_cc_gcc_clang_on_path_P24():
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    want = os.path.abspath(found) if found else None
    assert cc.compiler({}) == want
    assert cc.compiler({"CC": "  "}) == want  # blank is unset, as make reads it


@needs_cc
def test_cc_names_the_compiler_by_name_or_path_P24():
    real = cc.compiler({})
    assert cc.compiler({"CC": real}) == real
    assert cc.compiler({"CC": os.path.basename(real)}) == shutil.which(os.path.basename(real))


def test_a_cc_that_does_not_exist_is_an_error_naming_it_P24(tmp_path, monkeypatch, capsys):
    """P24: `CC=/nonexistent/cc stitch run` still ran on c, with cc from PATH."""
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert main(["run", str(EXAMPLES / "two_outputs.ir"), "--cache-dir", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the C compiler in $CC, '/nonexistent/cc', is not an executable program"), err
    assert "unset it to use cc, gcc or clang" in err


def test_a_cc_with_flags_is_refused_with_a_pointer_to_cflags_P24():
    with pytest.raises(StitchError, match=r"\$CC, 'gcc -O2', is not an executable program") as err:
        cc.compiler({"CC": "gcc -O2"})
    assert "--cflags" in err.value.hint


@needs_cc
def test_the_program_is_built_with_cc_and_cached_apart_from_the_default_P24(tmp_path, monkeypatch):
    """$CC builds the program, and is part of the cache key: the same program built with the default
    compiler and with $CC is two libraries in one cache."""
    cache = tmp_path / "cache"
    monkeypatch.delenv("CC", raising=False)
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    (want,) = stitch.compile(PROGRAM, cache_dir=cache)(x=x)
    default_libraries = set(cache.glob("*.so"))
    log = tmp_path / "cc.log"
    wrapper = tmp_path / "my-cc"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{cc.compiler({})}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    (got,) = stitch.compile(PROGRAM, cache_dir=cache)(x=x)
    np.testing.assert_array_equal(got, want)
    assert log.exists() and "-shared" in log.read_text()
    assert set(cache.glob("*.so")) - default_libraries  # a library of its own
