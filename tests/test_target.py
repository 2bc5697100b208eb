"""Target descriptions (`engine/schedule/target.py`): every number checked, and mutated files never crash.

A target file either loads, and then every program compiles and runs checked on
it (or is refused because no schedule fits), or it is one error naming the file
and the key: never an internal error (exit 3).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stitch.engine.cli import main
from stitch.engine.ir.errors import StitchError
from stitch.engine.schedule.target import TARGET_DIR, parse_target
from stitch.targets import cpu
from stitch_testing import EXAMPLES

BUILTIN = {name: (TARGET_DIR / f"{name}.toml").read_text() for name in ("cpu", "accel")}


@pytest.mark.parametrize("key, value, message", [
    ("global_bandwidth", "nan", "'global_bandwidth' must be a number from 1e-09 to 1e+12, got nan"),
    ("clock_ghz", "inf", "'clock_ghz' must be a number from 1e-09 to 1e+12, got inf"),
    ("launch_cycles", "-inf", "'launch_cycles' must be a finite number of at least 0"),
    ("launch_cycles", "nan", "'launch_cycles' must be a finite number of at least 0"),
    ("onchip_bytes", "0", "'onchip_bytes' must be a positive integer"),
    ("onchip_bytes", "9223372036854775807", "'onchip_bytes' must be a positive integer (at most 2**40)"),
    ("cores", "1.5", "'cores' must be an integer"),
    ("fma_per_lane", "0", "'fma_per_lane' must be a number from 1e-09 to 1e+12"),
    ("global_bandwidth", "5e-324", "'global_bandwidth' must be a number from 1e-09 to 1e+12, got 5e-324"),
    ("exp", "1e300", "[op_cycles] 'exp' must be a number from 1e-09 to 1e+12"),
    ("tile_n", "nan", "[matrix] 'tile_n' must be a positive integer"),
    ("tile_m", "0.5", "[matrix] 'tile_m' must be a positive integer"),
    ("tile_k", "16.0", "[matrix] 'tile_k' must be a positive integer"),
    ("cycles_per_tile", "inf", "[matrix] 'cycles_per_tile' must be a number from 1e-09 to 1e+12"),
    ("exp", "nan", "[op_cycles] 'exp' must be a number from 1e-09 to 1e+12"),
    ("resident_share", "0", "'resident_share' must be a number above 0 and at most 1 (a share)"),
    ("resident_share", "1.5", "'resident_share' must be a number above 0 and at most 1"),
    ("resident_share", "nan", "'resident_share' must be a number above 0 and at most 1"),
    ("resident_share", "true", "'resident_share' must be a number"),
    ("tiles_per_core", "0", "'tiles_per_core' must be a positive integer"),
    ("tiles_per_core", "2.5", "'tiles_per_core' must be an integer"),
])
def test_numbers_must_be_finite_positive_and_integral_where_counted(key, value, message):
    text = BUILTIN["accel"]
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.startswith(f"{key} ="))
    lines = text.splitlines()
    lines[line - 1] = f"{key} = {value}"
    with pytest.raises(StitchError) as err:
        parse_target("\n".join(lines), "t.toml")
    assert message in str(err.value) and f"t.toml:{line}:" in str(err.value)


def test_a_nan_tile_is_a_clear_error_on_the_command_line(tmp_path, capsys):
    """Regression: `tile_n = nan` reached int(nan) (ValueError, exit 3)."""
    path = tmp_path / "nan.toml"
    path.write_text(BUILTIN["accel"].replace("tile_n = 16", "tile_n = nan"))
    assert main(["run", str(EXAMPLES / "mlp.ir"), "--target", str(path)]) == 1
    assert f"{path}:" in capsys.readouterr().err


# -- capacity policies ---------------------------------------------------------------


def _without(text: str, *keys: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(tuple(f"{k} =" for k in keys)))


@pytest.mark.parametrize("name", ["cpu", "accel"])
def test_capacity_policies_default_to_an_eighth_and_two_tiles_per_core(name):
    """A description without them keeps the figures every target had before they were keys."""
    bare = parse_target(_without(BUILTIN[name], "resident_share", "tiles_per_core"), "t.toml")
    assert bare.resident_bytes == bare.onchip_bytes // 8 and bare.min_tiles == 2 * bare.cores
    assert bare == parse_target(BUILTIN[name], "t.toml")


def test_capacity_policies_are_what_tiling_reads():
    """A norm weight (1 KiB) is held whole at an eighth of 512 KiB, not at a thousandth; softmax's
    4,096 rows make 128 tiles (the on-chip buffer's limit, with exp held for the tile), 256 when
    128 tiles per core are asked for."""
    from stitch.engine.ir.check import check_func
    from stitch.engine.ir.parse import parse_program
    from stitch.engine.pipeline import compile_graph
    from stitch.engine.rewrite.rules import builtin_rule_files
    from stitch.engine.schedule.cost import kernel_cost
    from stitch_testing import target_text

    def priced(text: str, **keys):
        """The cost of the program's one kernel on a 512 KiB cpu, and its cost with `keys` changed."""
        graph = check_func(parse_program(text).funcs[0])
        c = compile_graph(graph, builtin_rule_files(), parse_target(target_text(onchip_bytes=524288), "cpu.toml"))
        changed = target_text(onchip_bytes=524288, **keys)
        (kernel,) = c.schedule.kernels
        return c.cost.kernels[0], kernel_cost(kernel, c.data.types, parse_target(changed, "t.toml"))

    scale = "func f(x: f32[4096, 256], g: f32[256]) -> f32[4096, 256] {\n  return mul(x, g)\n}\n"
    default, small = priced(scale, resident_share=0.001)
    assert len(default.plan.resident) == 1 and not small.plan.resident  # g
    default, many = priced((EXAMPLES / "softmax.ir").read_text(), tiles_per_core=128)
    assert (default.price.tiles, many.price.tiles) == (128, 256)


def fake_caches(root: Path, caches: list[tuple[int, str, str, str]]) -> Path:
    """A sysfs cpu tree whose cpu0 has these (level, type, size, shared_cpu_list) caches."""
    for i, (level, kind, size, shared) in enumerate(caches):
        d = root / "cpu0" / "cache" / f"index{i}"
        d.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (d / name).write_text(f"{value}\n")
    return root


def test_op_prices_follow_the_machines_vector_width(tmp_path, monkeypatch):
    """[op_cycles] prices AVX-512's forms; where the machine's vectors are 32 bytes (AVX2), the
    built-in cpu's [op_cycles_at.32] entries replace it, and other ops keep [op_cycles]'s price.
    The width comes from the CPU's flags, as the compiler's -march=native sees them."""
    from stitch.engine.schedule import target
    from stitch.targets import cc

    flags = {"avx512": "fpu avx avx2 fma avx512f avx512bw", "avx2": "fpu avx avx2 fma", "sse": "fpu sse2"}
    for name, line in flags.items():
        (tmp_path / name).write_text(f"processor\t: 0\nflags\t\t: {line}\n")
    assert [target.machine_vector_bytes.__wrapped__(tmp_path / n) for n in flags] == [64, 32, 16]
    assert target.machine_vector_bytes.__wrapped__(tmp_path / "none") is None
    here = target.machine_vector_bytes.__wrapped__()
    assert here in (None, cc.vector_bytes(cpu.compiler(), cc.compiler_flags()))
    monkeypatch.setattr(target, "machine_vector_bytes", lambda: 64)
    wide = parse_target(BUILTIN["cpu"], "cpu.toml")
    monkeypatch.setattr(target, "machine_vector_bytes", lambda: 32)
    narrow = parse_target(BUILTIN["cpu"], "cpu.toml")
    assert (wide.op_cycles["pow"], wide.op_cycles["erf"]) == (20, 10)
    assert narrow.op_cycles["pow"] > wide.op_cycles["pow"] and narrow.op_cycles["erf"] > wide.op_cycles["erf"]
    assert narrow.op_cycles["sqrt"] == wide.op_cycles["sqrt"]
    with pytest.raises(StitchError, match=r"t.toml:\d+:\d+: .*\[op_cycles_at.32\] names an unknown op 'expp'"):
        parse_target(BUILTIN["cpu"].replace("[op_cycles_at.32]\n", "[op_cycles_at.32]\nexpp = 3\n"), "t.toml")
    with pytest.raises(StitchError, match=r"\[op_cycles_at\] holds tables named by a vector width in bytes"):
        parse_target(BUILTIN["cpu"].replace("[op_cycles_at.32]", "[op_cycles_at.wide]"), "t.toml")


def test_onchip_cache_reads_the_machines_cache_per_core(tmp_path):
    """The built-in cpu's on-chip size is onchip_share of the L2 per core the machine reports (a
    shared cache divided among the CPUs sharing it); onchip_bytes where it reports none."""
    from stitch.engine.schedule.target import machine_cache_bytes

    root = fake_caches(tmp_path / "a", [(1, "Data", "48K", "0"), (1, "Instruction", "32K", "0"),
                                        (2, "Unified", "1024K", "0"), (3, "Unified", "32768K", "0-1,4-5")])
    assert machine_cache_bytes.__wrapped__(1, root) == 48 * 1024  # the data cache, not the instruction one
    assert machine_cache_bytes.__wrapped__(2, root) == 1024 * 1024
    assert machine_cache_bytes.__wrapped__(3, root) == 32 * 1024 * 1024 // 4
    assert machine_cache_bytes.__wrapped__(2, tmp_path / "none") is None
    assert machine_cache_bytes.__wrapped__(4, root) is None
    reported = machine_cache_bytes(2)
    cpu = parse_target(BUILTIN["cpu"], "cpu.toml")
    assert cpu.onchip_bytes == (reported // 2 if reported else 524288)
    whole = parse_target(BUILTIN["cpu"].replace("onchip_share = 0.5", "onchip_share = 1.0"), "t.toml")
    assert whole.onchip_bytes == (reported or 524288)
    with pytest.raises(StitchError, match=r"t.toml:\d+:1: .*'onchip_share' must be a number above 0 and at most 1"):
        parse_target(BUILTIN["cpu"].replace("onchip_share = 0.5", "onchip_share = 1.5"), "t.toml")
    assert parse_target(BUILTIN["cpu"].replace('onchip_cache = "l2"\n', ""), "t.toml").onchip_bytes == 524288
    with pytest.raises(StitchError, match=r"t.toml:\d+:1: .*'onchip_cache' must be one of 'l1', 'l2', 'l3', got 'l9'"):
        parse_target(BUILTIN["cpu"].replace('onchip_cache = "l2"', 'onchip_cache = "l9"'), "t.toml")


# -- mutated target files ----------------------------------------------------------

VALUES = ["nan", "inf", "-inf", "+nan", "0", "-1", "0.0", "0.5", "1", "3", "7", "16", "64", "1e-300", "1e300",
          "9223372036854775807", "-9223372036854775808", "1099511627776", "1099511627777", "16.0", "1.5e3",
          '"x"', '""', "true", "false", "[1, 2]", "{ a = 1 }", "2024-01-01"]
KEYS = ["name", "kind", "clock_ghz", "cores", "onchip_bytes", "global_bandwidth", "launch_cycles", "vector_lanes",
        "alignment", "fma_per_lane", "overlap_dma", "tile_m", "tile_n", "tile_k", "cycles_per_tile", "exp", "relu",
        "bogus"]


@st.composite
def mutated_targets(draw) -> str:
    """A built-in target file after one to three edits: a value replaced, a line dropped, duplicated or
    added, a table header moved, the kind swapped, or a few characters deleted or inserted."""
    lines = BUILTIN[draw(st.sampled_from(sorted(BUILTIN)))].splitlines()
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines) - 1))
        edit = draw(st.sampled_from(["value", "value", "value", "drop", "duplicate", "add", "table", "kind", "chars"]))
        if edit == "value" and "=" in lines[at]:
            lines[at] = lines[at].split("=")[0] + "= " + draw(st.sampled_from(VALUES))
        elif edit == "drop":
            del lines[at]
        elif edit == "duplicate":
            lines.insert(at, lines[at])
        elif edit == "add":
            lines.insert(at, f"{draw(st.sampled_from(KEYS))} = {draw(st.sampled_from(VALUES))}")
        elif edit == "table":
            lines.insert(at, draw(st.sampled_from(["[matrix]", "[op_cycles]", "[bogus]"])))
        elif edit == "kind":
            lines = [s.replace('"cpu"', '"accel"') if s.startswith("kind") else s for s in lines]
        elif edit == "chars" and lines[at]:
            i = draw(st.integers(0, len(lines[at])))
            lines[at] = lines[at][:i] + draw(st.sampled_from(["", "=", "[", '"', "x", " ", "\\"])) + lines[at][i + 1:]
        if not lines:
            lines = [""]
    return "\n".join(lines) + "\n"


def _run_cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=mutated_targets(), program=st.sampled_from(["mlp.ir", "layernorm.ir"]))
def test_mutated_target_files_load_and_run_or_are_clear_errors(text, program, tmp_path):
    path = tmp_path / "mutated.toml"
    path.write_text(text)
    try:
        parse_target(text, str(path))
    except StitchError as err:
        assert str(err).startswith(f"{path}"), str(err)
        loads = False
    else:
        loads = True
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu, "compiler", lambda: None)  # the target's numbers reach lowering, not the C compiler
        code, err = _run_cli("run", str(EXAMPLES / program), "--target", str(path), "--check")
    if loads:  # it runs, checked against the reference, or no schedule of the program fits it
        assert code == 0 or (code == 1 and "fits target" in err), err
    else:
        assert code == 1 and f"{path}" in err, err


def test_the_executor_defaults_by_kind_and_is_checked():
    """What runs a lowered program is a key: C on a cpu target, the simulator on an accel one, unless
    the description says; the simulator runs only accel targets."""
    from stitch.engine.schedule.target import load_target

    assert (load_target("cpu").executor, load_target("accel").executor) == ("c", "simulator")
    with pytest.raises(StitchError, match="'executor' must be one of 'c', 'simulator', got 'gpu'"):
        parse_target('executor = "gpu"\n' + BUILTIN["cpu"], "t.toml")
    with pytest.raises(StitchError, match="the simulator runs accel targets only"):
        parse_target('executor = "simulator"\n' + BUILTIN["cpu"], "t.toml")


def test_row_fusion_and_weights_read_in_place_are_target_keys():
    """The passes for a cache (lowering/fuse.py's row fusion, lowering/bind.py reading a bound weight
    where it is) run where the target's keys say, whatever its kind."""
    from stitch.engine.schedule.target import load_target
    from stitch_testing import loops_of, target_text

    softmax = (EXAMPLES / "softmax.ir").read_text()
    fused = loops_of(softmax, load_target("cpu"))
    plain = loops_of(softmax, parse_target(target_text(fuse_rows="false"), "t.toml"))
    assert fused != plain and fused.count("for ") < plain.count("for ")
    assert load_target("cpu").weights_in_place and not load_target("accel").weights_in_place
