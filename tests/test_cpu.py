"""The CPU target: generated C, the compile cache, `stitch run`, and the Python API."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
import stitch
import stitch_testing
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.cli import main
from stitch.engine.ir.errors import StitchError, StitchWarning
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.printer import print_func
from stitch.engine.ir.tolerance import compare
from stitch.engine.schedule.target import parse_target
from stitch.targets import cc, cpu
from stitch.targets.c import tuning
from stitch_testing import EXAMPLES, compile_text, dim_args, needs_cc, programs, target_text


def libraries(cache: Path) -> list[Path]:
    """The cached program libraries (each with its checksum; not the libmvec probe a first build leaves)."""
    return [p for p in cache.glob("*.so") if p.with_suffix(".sha256").exists()]


@needs_cc
@settings(max_examples=20)
@given(program=programs(dtypes=("f16", "f32", "f64", "i8", "u8", "i32", "i64", "bool"), max_ops=8, max_rank=3, max_dim=5,
                        movement=True),
       seed=st.integers(0, 99))
def test_compiled_c_equals_the_reference(program, seed, tmp_path_factory):
    text = print_func(program.funcs[0])
    compiled = stitch.compile(text, cache_dir=tmp_path_factory.getbasetemp() / "cache")
    assert compiled.executor == "c"
    inputs = random_inputs(compiled.graph, seed)
    for got, want in zip(compiled(**inputs), evaluate(compiled.graph, inputs)):
        assert compare(got, want) == "", text


@needs_cc
@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_every_example_runs_checked_compiled(path, cache, capsys):
    assert main(["run", str(path), "--check", "--cache-dir", str(cache), *dim_args(path)]) == 0
    out = capsys.readouterr().out
    assert "ran on c" in out and "check: outputs equal the reference" in out


# the examples the numpy executor takes 5-8 s to run: with --long only
SLOW_ON_NUMPY = {"bias_gelu", "layernorm_large", "rmsnorm"}


@pytest.mark.parametrize("path", [p for p in sorted(EXAMPLES.glob("*.ir"))
                                  if stitch_testing.LONG or p.stem not in SLOW_ON_NUMPY], ids=lambda p: p.stem)
def test_every_example_runs_checked_on_the_numpy_fallback(path, cache, capsys, monkeypatch):
    monkeypatch.setattr(cpu, "compiler", lambda: None)
    assert main(["run", str(path), "--check", "--cache-dir", str(cache), *dim_args(path)]) == 0
    captured = capsys.readouterr()
    assert "ran on numpy" in captured.out and "no C compiler found" in captured.err


@needs_cc
def test_cache_hit_corrupt_entry_and_changed_flags(cache, monkeypatch):
    text = (EXAMPLES / "softmax.ir").read_text()
    first = stitch.compile(text, cache_dir=cache)
    (lib,) = libraries(cache)
    builds = _recording_builds(monkeypatch)
    hit = stitch.compile(text, cache_dir=cache)
    assert builds == [] and hit.native.source_path == first.native.source_path
    lib.unlink()  # a corrupt entry (a new file: the loaded library stays mapped in this process)
    lib.write_bytes(b"not a shared library")
    rebuilt = stitch.compile(text, cache_dir=cache)
    assert len(builds) == 1 and lib.read_bytes()[:4] == b"\x7fELF"
    x = np.random.default_rng(0).random((4096, 1024), dtype=np.float32)
    np.testing.assert_array_equal(rebuilt(x=x)[0], first(x=x)[0])
    other = stitch.compile(text, cache_dir=cache, cflags=("-O1", "-fopenmp", "-fPIC", "-shared", "-fwrapv"))
    assert len(builds) == 2 and other.native.source_path != first.native.source_path
    assert len(libraries(cache)) == 2


@needs_cc
def test_compiler_errors_name_the_generated_source(cache, capsys):
    code = main(["run", str(EXAMPLES / "mlp.ir"), "--cache-dir", str(cache), "--cflags", "-shared --no-such-flag"])
    err = capsys.readouterr().err
    assert code == 1 and "the C compiler failed" in err and ".c" in err and "Traceback" not in err


def _builds_runtime(cmd: list[str]) -> bool:
    from stitch.targets import runtime

    sources = [Path(a) for a in cmd if a.endswith(".c")]
    return any(src.read_text() == runtime.SOURCE.read_text() for src in sources if src.exists())


def _recording_builds(monkeypatch) -> list[list[str]]:
    """Every compiler command that builds a library (`-o ....so`), as run."""
    builds = []
    real_spawn = cc._spawn

    def recording_spawn(cmd):
        # a program's library, not the thread pool's (built once per process, by whichever test is first)
        if "-o" in cmd and cmd[cmd.index("-o") + 1].endswith("lib.so") and not _builds_runtime(cmd):
            builds.append(cmd)
        return real_spawn(cmd)

    monkeypatch.setattr(cc, "_spawn", recording_spawn)
    return builds


@needs_cc
@pytest.mark.parametrize("cflags", ["-O2", "-O2 -g", ["-O2"], ("-O2",)])
def test_api_cflags_replace_only_the_optimisation_flags(cflags, cache, monkeypatch):
    """A string is split as a shell would (it was iterated character by character: `cc - O 2`
    then waited on stdin forever); the flags the generated C needs are always added."""
    builds = _recording_builds(monkeypatch)
    f = stitch.compile(EXAMPLES / "mlp.ir", cache_dir=cache, cflags=cflags)
    (cmd,) = builds
    assert "-O2" in cmd and "-O3" not in cmd and "-march=native" not in cmd
    assert set(cc.REQUIRED_FLAGS) <= set(cmd)
    inputs = random_inputs(f.graph, 0)
    assert compare(f(**inputs)[0], evaluate(f.graph, inputs)[0]) == ""


@needs_cc
@pytest.mark.parametrize("argv", [["--cflags=-O2"], ["--cflags", "-O2"], ["--cflags", "-O1 -g"]])
def test_cli_cflags_starting_with_a_dash_add_to_the_required_flags(argv, cache, capsys, monkeypatch):
    """`--cflags=-O2` replaced -shared -fPIC too (no main at link); `--cflags -O2` was refused by argparse."""
    builds = _recording_builds(monkeypatch)
    assert main(["run", str(EXAMPLES / "mlp.ir"), "--check", "--cache-dir", str(cache), *argv]) == 0
    assert "check: outputs equal the reference" in capsys.readouterr().out
    (cmd,) = builds
    assert "-O3" not in cmd and {"-shared", "-fPIC", "-fopenmp-simd"} <= set(cmd)


@pytest.mark.parametrize("cflags, message", [(3, "must be a string or a list of strings"),
                                             (["-O2", 2], "must be a string or a list of strings"),
                                             ("-DX='unclosed", "cannot split the compiler flags"),
                                             (["-O2", "-D\x00"], "must not contain a NUL character")])
def test_malformed_cflags_are_clear_errors(cflags, message):
    with pytest.raises(StitchError, match=message):
        cc.compiler_flags(cflags)


@pytest.mark.parametrize("parts", [1, 3])
def test_a_compiler_that_hangs_is_stopped_at_the_time_limit(parts, cache, tmp_path, monkeypatch):
    """A compiler over COMPILER_SECONDS is killed and reported (one unit, and parts built at once),
    with the passes it started (a gcc driver's cc1 ran on, holding a core, after the driver was killed)."""
    fake = tmp_path / "slow-cc"
    fake.write_text(f"#!/bin/sh\nsleep 60 &\necho $! >> {tmp_path}/passes\nwait\n")
    fake.chmod(0o755)
    monkeypatch.setattr(cc, "COMPILER_SECONDS", 0.5)
    monkeypatch.setattr(tuning, "PART_BYTES", 200 if parts > 1 else tuning.PART_BYTES)
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: parts)
    compiled = stitch.compile(EXAMPLES / "attention.ir", target="accel")  # lowered only: built below
    with pytest.raises(StitchError, match=r"the C compiler ran over 0.5 s on the generated source .*\.c"):
        cpu.build(compiled.loops, cache, cc=str(fake))
    passes = [int(pid) for pid in (tmp_path / "passes").read_text().split()]
    assert passes
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in passes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in passes)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_compiler_that_fails_is_a_clear_error(cache, tmp_path):
    fake = tmp_path / "broken-cc"
    fake.write_text("#!/bin/sh\necho 'cc: fatal error: out of disk' >&2\nexit 1\n")
    fake.chmod(0o755)
    compiled = stitch.compile(EXAMPLES / "mlp.ir", target="accel")
    with pytest.raises(StitchError, match=r"the C compiler failed on the generated source .*\.c:\ncc: fatal error"):
        cpu.build(compiled.loops, cache, cc=str(fake))


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"x": np.zeros((1, 48), np.float32), "w": np.zeros((48, 64), np.float32)}, "missing input"),
        ({"x": np.zeros((1, 48), np.float32), "w": np.zeros((48, 64), np.float32),
          "bias": np.zeros(64, np.float32), "z": np.zeros(1)}, "no parameter(s) named z"),
        ({"x": np.zeros((2, 48), np.float32), "w": np.zeros((48, 64), np.float32),
          "bias": np.zeros(64, np.float32)}, "input 'x' has shape [2, 48]"),
        ({"x": np.zeros((1, 48), np.float64), "w": np.zeros((48, 64), np.float32),
          "bias": np.zeros(64, np.float32)}, "input 'x' has dtype float64"),
    ],
)
def test_bad_inputs_are_clear_errors(arrays, message, tmp_path, capsys):
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    assert main(["run", str(EXAMPLES / "mlp.ir"), "--inputs", str(path), "--cache-dir", str(tmp_path / "c")]) == 1
    assert message in capsys.readouterr().err


@needs_cc
def test_api_reuses_output_buffers(cache):
    f = stitch.compile(EXAMPLES / "rmsnorm.ir", cache_dir=cache)
    rng = np.random.default_rng(1)
    x = rng.random((4096, 4096), dtype=np.float32)
    w = rng.random(4096, dtype=np.float32)
    out = [np.empty((4096, 4096), np.float32)]
    (y,) = f(x=x, weight=w, out=out)
    assert y is out[0]
    assert compare(y, evaluate(f.graph, {"x": x, "weight": w})[0]) == ""


def test_run_json_reports_run_seconds(tmp_path, capsys):
    import json

    assert main(["run", str(EXAMPLES / "two_outputs.ir"), "--json", "--check",
                 "--cache-dir", str(tmp_path / "c")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run_seconds"] > 0 and out["check"] == "ok" and len(out["kernels"]) == 1
    assert out["kernels"][0]["writes"] == ["out0", "out1"]  # both outputs from one row loop


@needs_cc
def test_the_arrays_a_program_owns_start_a_cache_line(cache):
    """Bound weights and their blocks, global temporaries and the outputs a call allocates start on
    a 64-byte boundary (numpy's start 16 bytes past one: every 64-byte load of a product's weight
    read two lines, the four transformer blocks 7-9% slower)."""
    from stitch.engine.ir.interp import aligned_empty

    text = ("func f(x: f32[64, 96], w: f32[96, 80], v: f32[80, 48]) -> f32[64, 48] {\n"
            "  h = relu(matmul(x, w))\n  return matmul(h, v)\n}\n")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 80)).astype(np.float32)
    v = np.ascontiguousarray(rng.standard_normal((80, 48)).astype(np.float32))
    f = stitch.compile(text, cache_dir=cache, weights={"w": w, "v": v})
    assert f.bound and all(a.ctypes.data % 64 == 0 for a in f.bound.values())
    x = rng.standard_normal((64, 96)).astype(np.float32)
    (y,) = f(x=x)
    assert y.ctypes.data % 64 == 0 and all(a.ctypes.data % 64 == 0 for a in f.native.scratch.values())
    assert compare(y, evaluate(f.graph, {"x": x, "w": w, "v": v})[0]) == ""
    for shape, dtype in (((3, 5), np.float32), ((), np.float64), ((7,), np.int64), ((2, 3), np.bool_)):
        a = aligned_empty(shape, dtype)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.ctypes.data % 64 == 0


@needs_cc
def test_only_kernels_with_enough_work_start_threads(cache):
    """Waking workers costs more than a tiny kernel: the plan runs its tiles on the calling thread
    (`threaded`, from the target's `parallel_work`), prices it on one core, and st_run's last argument
    says whether the pool may share them."""
    tiny = stitch.compile(EXAMPLES / "mlp.ir", cache_dir=cache)
    big = stitch.compile(EXAMPLES / "softmax.ir", cache_dir=cache)
    assert [p.threaded for p in tiny.compiled.cost.plans] == [False]
    assert [p.threaded for p in big.compiled.cost.plans] == [True]
    assert re.findall(r"st_run\(.*, (\d)\)\) goto fail;", tiny.native.source_path.read_text()) == ["0"]
    assert re.findall(r"st_run\(.*, (\d)\)\) goto fail;", big.native.source_path.read_text()) == ["1"]
    text = (EXAMPLES / "mlp.ir").read_text()
    spread = compile_text(text, parse_target(target_text("cpu", parallel_work=0)))
    (one,), (two,) = [k.price for k in tiny.compiled.cost.kernels], [k.price for k in spread.cost.kernels]
    assert spread.cost.plans[0].threaded and one.tiles == two.tiles > 1
    assert one.vector_cycles == pytest.approx(2 * two.vector_cycles)  # one core of the two


@needs_cc
def test_where_with_a_load_in_one_arm(cache):
    """gcc 12.2 -O3 -march=native miscompiled this (the ONNX PRelu case) when only one arm loaded `s`."""
    f = stitch.compile("func f(x: f32[3, 4, 5], s: f32[3, 4, 5]) -> f32[3, 4, 5] "
                       "{ return where(less(x, 0.0), mul(x, s), x) }", cache_dir=cache)
    rng = np.random.default_rng(0)
    x = rng.random((3, 4, 5), dtype=np.float32) - 0.5
    s = rng.random((3, 4, 5), dtype=np.float32)
    (got,) = f(x=x, s=s)
    np.testing.assert_array_equal(got, np.where(x < 0, x * s, x))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_benchmark_torch_translation_equals_the_reference(path):
    """The torch.compile column times the same program: its torch function, run eagerly, gives the same outputs."""
    torch = pytest.importorskip("torch")
    import sys

    sys.path.insert(0, str(EXAMPLES.parent / "bench"))
    from peers import torch_function

    graph = stitch.compile(path).graph
    if graph.symbols:  # (the torch column times static programs)
        pytest.skip("the torch translation takes static shapes")
    inputs = random_inputs(graph, 2)
    wants = evaluate(graph, inputs)
    outs = [torch.from_numpy(np.empty_like(w)) for w in wants]
    torch_function(graph)(*[torch.from_numpy(inputs[n]) for n in graph.param_names], *outs)
    for got, want in zip(outs, wants):
        assert compare(got.numpy(), want) == ""


@needs_cc
def test_large_sources_build_in_parts_at_once(cache, monkeypatch):
    """Above PART_BYTES the kernels are dealt into one unit per core, compiled together, linked."""
    monkeypatch.setattr(tuning, "PART_BYTES", 200)
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 3)
    started = []
    real_popen = cc.subprocess.Popen

    def counting_popen(cmd, *args, **kwargs):
        started.extend(a for a in cmd if a.startswith("-DSTITCH_PART="))  # run() uses Popen too
        return real_popen(cmd, *args, **kwargs)

    monkeypatch.setattr(cc.subprocess, "Popen", counting_popen)
    text = (EXAMPLES / "attention.ir").read_text()  # 2 kernels: parts 0 and 1, part 2 holds nothing
    compiled = stitch.compile(text, cache_dir=cache)
    assert sorted(started) == ["-DSTITCH_PART=0", "-DSTITCH_PART=1", "-DSTITCH_PART=2"]
    source = compiled.native.source_path.read_text()
    assert source.count("STITCH_PART == ") == 4  # two kernels, an empty part, stitch_main
    inputs = random_inputs(compiled.graph, 1)
    for got, want in zip(compiled(**inputs), evaluate(compiled.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
def test_emit_c_prints_the_unit_build_compiles(cache, capsys):
    assert main(["compile", str(EXAMPLES / "mlp.ir"), "--emit", "c"]) == 0
    printed = capsys.readouterr().out
    built = stitch.compile(EXAMPLES / "mlp.ir", cache_dir=cache).native.source_path.read_text()
    assert printed == built and "int stitch_main(void **b)" in printed
    assert main(["compile", str(EXAMPLES / "mlp.ir"), "--emit", "c", "--target", "accel"]) == 1
    assert "C is generated for cpu targets" in capsys.readouterr().err


@needs_cc
def test_global_temporaries_are_allocated_once_and_reused(cache):
    """A kernel-to-kernel temporary is scratch the program keeps: no page faults after the first call."""
    compiled = stitch.compile(EXAMPLES / "attention_block.ir", cache_dir=cache)
    assert compiled.loops.intermediates, "the attention block is 3 kernels with global temporaries between them"
    first_inputs, second_inputs = random_inputs(compiled.graph, 1), random_inputs(compiled.graph, 2)
    compiled(**first_inputs)
    held = {name: arr.ctypes.data for name, arr in compiled.native.scratch.items()}
    assert set(held) == {b.name for b in compiled.loops.intermediates}
    for got, want in zip(compiled(**second_inputs), evaluate(compiled.graph, second_inputs)):
        assert compare(got, want) == ""
    assert {name: arr.ctypes.data for name, arr in compiled.native.scratch.items()} == held


@needs_cc
def test_a_max_gcc_12_crashes_on_is_built_again_without_the_crashing_pass(cache):
    """gcc 12.2 -O3 segfaulted in its SLP vectorizer on this program's i64 max (found by the property
    test above). Another compiler may not crash; either way the program runs and is right."""
    f = stitch.compile("func f(x: i64[]) -> i64[1] { return max(broadcast_to(x, shape=[2, 1, 2]), axes=[0, 2]) }",
                       cache_dir=cache)
    (got,) = f(x=np.array(-7, np.int64))
    np.testing.assert_array_equal(got, [-7])


@needs_cc
def test_a_compiler_crash_builds_once_more_with_the_crash_flags_then_is_an_error(cache, tmp_path, monkeypatch):
    """A compiler that reports an internal compiler error: built again with cc.CRASH_FLAGS, with a
    warning; one that crashes either way is the compiler's message as a StitchError."""
    real = cpu.compiler()
    for survives, name in ((True, "cc-crashing-once"), (False, "cc-crashing-always")):
        wrapper = tmp_path / name
        spared = " ".join(cc.CRASH_FLAGS) if survives else "never-given"
        wrapper.write_text(f'#!/bin/sh\ncase " $* " in *" -shared "*) case " $* " in *" {spared} "*) ;; *)\n'
                           f'  echo "f.c:1:1: internal compiler error: Segmentation fault" >&2; exit 1;; esac;; esac\n'
                           f'exec {real} "$@"\n')
        wrapper.chmod(0o755)
        monkeypatch.setattr(cpu, "compiler", lambda: str(wrapper))
        text = f"func f(x: f32[4]) -> f32[4] {{ return mul(x, {2.0 if survives else 3.0}) }}"
        if survives:
            with pytest.warns(StitchWarning, match="crashed on .* built again with -fno-tree-slp-vectorize"):
                f = stitch.compile(text, cache_dir=cache)
            np.testing.assert_array_equal(f(x=np.ones(4, np.float32))[0], np.full(4, 2.0, np.float32))
        else:
            with pytest.raises(StitchError, match="internal compiler error"), pytest.warns(StitchWarning):
                stitch.compile(text, cache_dir=cache)


@needs_cc
def test_the_tanh_gelu_runs_as_a_sigmoid_and_agrees_with_the_reference_at_its_edges(cache):
    """GPT-2's GELU compiles to x / (1 + exp(-2z)) (rules/algebra.rules, `gelu-tanh-sigmoid`) and
    gives the tanh form's values: ordinary ones, where exp(-2z) overflows (x < -6), where tanh
    rounds to -1, at +-inf (inf and NaN, as 0.5 x (1 + tanh z)), NaN, -0.0 and subnormals."""
    f = stitch.compile("func g(x: f32[4, 48]) -> f32[4, 48] { return mul(mul(x, 0.5), add(tanh(mul(add(x, "
                       "mul(pow(x, 3.0), 0.044715)), 0.7978845608)), 1.0)) }", cache_dir=cache)
    source = f.native.source_path.read_text()
    kernels = source[source.index("kernel_k0"):]  # (the prelude defines every helper)
    assert "st_tanh" not in kernels
    # (16-lane exponentials are AVX-512's; elsewhere gcc vectorizes st_expf)
    if cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) == 64:
        assert "st_expv_f32(" in kernels
    x = np.linspace(-12, 12, 4 * 48, dtype=np.float32).reshape(4, 48)
    x[0, :8] = [np.inf, -np.inf, np.nan, -0.0, 1e-40, -1e-40, 3e38, -3e38]
    (got,) = f(x=x)
    (want,) = evaluate(f.graph, {"x": x})
    assert compare(got, want) == ""
    assert got[0, 0] == np.inf and np.isnan(got[0, 1:3]).all() and got[0, 3] == 0 and np.signbit(got[0, 3])
