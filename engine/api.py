"""The Python API: compile a program once, call it many times with numpy arrays.

    import stitch
    layernorm = stitch.compile("examples/layernorm.ir", target="cpu")
    (y,) = layernorm(x=x, gamma=g, beta=b)          # or layernorm(..., out=[y])
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .compiled_program import CompiledProgram
from .ir.errors import StitchError
from .ir.recursion import allows_deep_recursion

if TYPE_CHECKING:
    from .rewrite.limits import Limits


@allows_deep_recursion
def compile(source: str | Path, target: str = "cpu", rules: list[str] = (), builtin_rules: bool = True,
            entry: str | None = None, cache_dir: str | Path | None = None, cflags: str | list[str] | None = None,
            limits: Limits | None = None, without_rules: tuple[str, ...] = (),
            unsafe_fp: bool = False, weights: dict | None = None, trust_rules: bool = False,
            caches: dict[str, int] | None = None) -> CompiledProgram:
    """Compile `.ir` text or a path to a `.ir` file for `target` (cpu, accel or a .toml path).

    `weights` ({parameter name: array}) binds those parameters at compile time, as a model's
    weights: calls then take only the other parameters, and what the kernels derive from the
    weights alone (tiles laid out for the products) is made once, here (lowering/bind.py).
    The program keeps its own copies: changing the arrays afterwards changes nothing.
    `cflags` (a string or a list of flags) replaces the optimisation flags (`-O3 -march=native`); the
    flags the generated C needs are always added (`targets/cpu.py`, REQUIRED_FLAGS).
    `without_rules` drops built-in rule files (`forwarding`) or built-in rules by name pattern (`stitch-*`);
    `unsafe_fp` also uses rules tagged [unsafe-fp] (they may change results at NaN, inf, -0.0, overflow).
    Each file of `rules` is checked for soundness as it loads (as `stitch rules check`, fewer instances,
    verdicts cached): an unsound rule is a StitchError with its counterexample; `trust_rules=True` skips it.
    On an accel target calls run on the simulator and leave its report in `.report`.
    `caches` ({parameter name: output position}) grows each such parameter in place into that output
    (a decoder step's key/value cache, `concat(past, new)` along a symbolic axis): a call passes the
    parameter as a view of the filled prefix of an array of the largest length
    (`program.new_cache(name)` makes one), the program writes only the new positions into that
    array and returns the output as a view of it (lowering/caches.py; cpu target).
    The stages are pipeline.py's (`compile_source`)."""
    from .pipeline import compile_source

    _check_arguments(source, target, rules, builtin_rules, entry, cache_dir, cflags, limits, without_rules)
    for name, value in (("unsafe_fp", unsafe_fp), ("trust_rules", trust_rules)):
        if not isinstance(value, bool):
            _wrong(name, "True or False", value)
    if caches is not None and not (isinstance(caches, dict) and all(isinstance(k, str) for k in caches)):
        _wrong("caches", "a dict of parameter names to output positions", caches)
    return compile_source(source, target, rules, builtin_rules, entry, cache_dir, cflags, limits, without_rules,
                          unsafe_fp, weights, trust_rules, caches)


def _check_arguments(source, target, rules, builtin_rules, entry, cache_dir, cflags, limits, without_rules) -> None:
    """TypeError naming the argument for a value of the wrong kind (a bare int would otherwise be read
    as a file descriptor, a bare string as a list of one-letter names)."""
    from .rewrite.limits import Limits

    path = (str, os.PathLike)
    if not isinstance(source, path):
        _wrong("source", ".ir text or the path of a .ir file", source)
    if not isinstance(target, path):
        _wrong("target", "'cpu', 'accel' or the path of a .toml file", target)
    for name, value, what in (("rules", rules, "rule file paths"), ("without_rules", without_rules, "names"),
                              ("cflags", cflags, "compiler flags (or one string of them)")):
        if name == "cflags" and (value is None or isinstance(value, str)):
            continue
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not all(
                isinstance(v, path if name == "rules" else str) for v in value):
            _wrong(name, f"a list of {what}", value)
    if not isinstance(builtin_rules, bool):
        _wrong("builtin_rules", "True or False", builtin_rules)
    if entry is not None and not isinstance(entry, str):
        _wrong("entry", "a func name", entry)
    if cache_dir is not None and not isinstance(cache_dir, path):
        _wrong("cache_dir", "a directory path", cache_dir)
    if limits is not None:
        if not isinstance(limits, Limits):
            _wrong("limits", "a stitch.engine.rewrite.saturate.Limits", limits)
        for field in dataclasses.fields(limits):
            value = getattr(limits, field.name)
            if value is None and field.name in ("nodes", "seconds"):  # (worked out for the program)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise StitchError(f"limits.{field.name} must be a positive number, got {value!r}")


def _wrong(name: str, want: str, got) -> None:
    raise TypeError(f"stitch.compile: {name} must be {want}, not {type(got).__name__} {got!r:.60}")
