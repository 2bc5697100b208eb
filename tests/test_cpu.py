"""The CPU target: generated C, the compile cache, `stitch run`, and the Python API."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.cli import main
from stitch.engine.ir.errors import StitchError, StitchWarning
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.printer import print_func
from stitch.engine.ir.tolerance import compare
from stitch.targets import c_source, cc, cpu
from stitch_testing import programs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HAVE_CC = cpu.compiler() is not None
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler on this machine")


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


def libraries(cache: Path) -> list[Path]:
    """The cached program libraries (each with its checksum; not the libmvec probe a first build leaves)."""
    return [p for p in cache.glob("*.so") if p.with_suffix(".sha256").exists()]


@needs_cc
@settings(max_examples=20)
@given(program=programs(dtypes=("f16", "f32", "f64", "i32", "i64", "bool"), max_ops=8, max_rank=3, max_dim=5,
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
    assert main(["run", str(path), "--check", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "ran on c" in out and "check: outputs equal the reference" in out


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_every_example_runs_checked_on_the_numpy_fallback(path, cache, capsys, monkeypatch):
    monkeypatch.setattr(cpu, "compiler", lambda: None)
    assert main(["run", str(path), "--check", "--cache-dir", str(cache)]) == 0
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
    monkeypatch.setattr(c_source, "PART_BYTES", 200 if parts > 1 else c_source.PART_BYTES)
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


MATMULS = [
    "func f(a: {t}[{i}, {k}], b: {t}[{k}, {j}]) -> {t}[{i}, {j}] {{ return matmul(a, b) }}",
    "func f(a: {t}[3, {i}, {k}], b: {t}[3, {k}, {j}]) -> {t}[3, {i}, {j}] {{ return relu(matmul(exp(a), b)) }}",
    "func f(a: {t}[{k}, {i}], b: {t}[{j}, {k}]) -> {t}[{j}, {i}] {{ return matmul(b, a) }}",
]


@needs_cc
@pytest.mark.parametrize("vector_bytes", [16, 32, 64])
@pytest.mark.parametrize("template", MATMULS)
@pytest.mark.parametrize("t, i, k, j", [("f32", 7, 5, 37), ("f64", 13, 3, 70), ("f32", 1, 9, 16),
                                        ("f32", 33, 17, 130), ("f64", 2, 1, 9)])
def test_register_blocked_matmul_equals_the_reference(template, t, i, k, j, vector_bytes, cache, monkeypatch):
    """Odd row counts, vector leftovers and scalar leftover columns, at every vector width."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: vector_bytes)
    f = stitch.compile(template.format(t=t, i=i, k=k, j=j), cache_dir=cache)
    if j >= 70 and template == MATMULS[0]:
        assert f"st_vf{t[1:]} c0_0" in f.native.source_path.read_text()  # the micro-kernel is what ran
    inputs = random_inputs(f.graph, 3)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize("t, k", [("f32", 2100), ("f64", 1100), ("f32", 5000)])
def test_a_computed_a_too_long_for_the_stack_is_precomputed_one_chunk_of_k_at_a_time(t, k, vector_bytes, cache,
                                                                                      monkeypatch):
    """8 rows of exp(a) over all of k would pass A_SCRATCH_BYTES (a grouped Conv's windows: 6,144
    k): the micro-kernel still runs, precomputing A for one chunk of k after the other (the last
    chunk short), the sums carried in the accumulator between chunks."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: vector_bytes)
    f = stitch.compile(f"func f(a: {t}[9, {k}], b: {t}[{k}, 24]) -> {t}[9, 24] {{ return matmul(exp(mul(a, 0.01)), b) }}",
                       cache_dir=cache)
    source = f.native.source_path.read_text()
    assert f"st_vf{t[1:]} c0_0" in source and "st_k0 += " in source
    inputs = random_inputs(f.graph, 5)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("cols, rows, vectors", [(144, 8, 3), (128, 8, 3), (64, 6, 4), (112, 6, 4), (256, 6, 4)])
def test_a_products_register_blocks_are_8_by_3_unless_a_lone_vector_is_left(cols, rows, vectors, cache,
                                                                               monkeypatch):
    """With 32 registers (16-lane vectors) a block is 8 rows x 3 vectors (B's panel read once per 8
    rows) unless 3 leaves one vector over where 4 does not: 9 and 8 vectors take 3, 4, 7 and 16 take
    4 (6 rows). The values are the reference's either way."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: 64)
    f = stitch.compile(f"func f(a: f32[48, 96], b: f32[96, {cols}]) -> f32[48, {cols}] {{ return matmul(a, b) }}",
                       cache_dir=cache)
    source = f.native.source_path.read_text()
    assert f"c{rows - 1}_{vectors - 1} = st_fma_f32" in source and f"c{rows}_0 = st_fma_f32" not in source
    assert f"c0_{vectors} = st_fma_f32" not in source
    inputs = random_inputs(f.graph, 1)
    assert compare(f(**inputs)[0], evaluate(f.graph, inputs)[0]) == ""


@needs_cc
def test_a_plain_a_is_walked_panel_by_panel_and_a_computed_one_block_of_rows_by_block(cache, monkeypatch):
    """A read where it is: for each panel of B's columns every block of rows (the panel stays in the
    nearest cache); computed (made once per block of rows): for each block of rows every panel.
    Leftover rows, vectors and columns (13 rows, 83 columns: 48 + 2 vectors + 3) give the reference's values."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: 64)
    for a, rows_first in (("a", False), ("exp(a)", True)):
        f = stitch.compile(f"func f(a: f32[13, 37], b: f32[37, 83]) -> f32[13, 83] {{ return matmul({a}, b) }}",
                           cache_dir=cache)
        source = f.native.source_path.read_text()
        rows, cols = source.index("; p0 += "), source.index("; p1 += 48)")
        assert (rows < cols) == rows_first, a
        inputs = random_inputs(f.graph, 2)
        assert compare(f(**inputs)[0], evaluate(f.graph, inputs)[0]) == ""


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
def test_a_large_output_is_streamed_out_whatever_its_alignment(cache):
    """Rows of 16 KiB of a 16 MiB output are written with non-temporal stores (from the registers
    on AVX-512, else from a row on the stack), the partial lines at each end by plain stores: an
    output array starting anywhere (here 4 bytes past a line) gets every element; a small output
    keeps plain stores."""
    text = "func f(x: f32[1024, 4096], b: f32[4096]) -> f32[1024, 4096] {\n  return tanh(add(x, b))\n}\n"
    f = stitch.compile(text, cache_dir=cache)
    source = f.native.source_path.read_text()
    assert "st_stream_f32(&b_out0[" in source and "_mm512_stream_ps(st_o + p1, ST_ROW(p1))" in source
    inputs = random_inputs(f.graph, 6)
    (want,) = evaluate(f.graph, inputs)
    block = np.empty(1024 * 4096 + 32, np.float32)
    start = (-block.ctypes.data % 64) // 4 + 1  # one element past a 64-byte boundary
    out = block[start:start + 1024 * 4096].reshape(1024, 4096)
    f(out=[out], **inputs)
    assert compare(out, want) == ""
    small = stitch.compile(text.replace("1024, 4096", "16, 4096"), cache_dir=cache)
    assert "st_stream_f32(&" not in small.native.source_path.read_text()


@needs_cc
@pytest.mark.parametrize("text, prefetched", [
    ("func f(x: f32[8, 2048], b: f32[2048]) -> f32[8, 2048] { return tanh(add(x, b)) }", True),
    # the row read by its sum first (in the cache when it is streamed out)
    ("func f(x: f32[8, 2048]) -> f32[8, 2048] { return mul(x, rsqrt(mean(mul(x, x), axes=[1], keepdims=true))) }",
     False),
    ("func f(x: f32[32, 512], b: f32[512]) -> f32[32, 512] { return tanh(add(x, b)) }", False),  # rows too short
])
def test_a_streamed_rows_long_reads_are_prefetched_ahead(text, prefetched, cache, monkeypatch):
    """A row streamed out from the registers prefetches its global reads STREAM_PREFETCH elements
    ahead where they run along it for twice that, move with the rows (not the bias every row
    reads) and nothing else in the row's loop reads them; the values are the reference's."""
    monkeypatch.setattr(c_source, "STREAM_BYTES", 64)  # (outputs of 8 MiB and more, at full size)
    f = stitch.compile(text, cache_dir=cache)
    source = f.native.source_path.read_text()
    if cc.vector_bytes(cpu.compiler(), cc.DEFAULT_FLAGS) == 64:
        assert "_mm512_stream_ps(st_o" in source
        ahead = re.findall(r"__builtin_prefetch\(&(b_\w+)\[[^\]]*p1 \+ (\d+)\], 0, 0\)", source)
        # (a vector at a time, and each vector of a group of STREAM_GROUP)
        group = {("b_x", str(c_source.STREAM_PREFETCH + 16 * k)) for k in range(c_source.STREAM_GROUP)}
        assert set(ahead) == (group if prefetched else set())
    inputs = random_inputs(f.graph, 4)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("text, ahead", [
    # the row stored and summed at once (summed_row): its global read's next row
    ("func f(x: f32[64, 1024]) -> f32[64, 1024] {\n  e = exp(sub(x, max(x, axes=[1], keepdims=true)))\n"
     "  return div(e, sum(e, axes=[1], keepdims=true))\n}", [("b_x", 1024)]),
    # a sum of exponentials alone (vector_sum)
    ("func f(x: f32[64, 512]) -> f32[64] { return log(sum(exp(sub(x, max(x, axes=[1], keepdims=true))), axes=[1])) }",
     [("b_x", 512)]),
    # one row: no row after it
    ("func f(x: f32[1, 1024]) -> f32[1] { return sum(exp(x), axes=[1]) }", []),
])
def test_a_row_of_exponentials_prefetches_the_next_row(text, ahead, cache):
    """A row of exponentials prefetches, vector by vector, the line its contiguous global reads
    take in the next iteration of the loop around the row; the values are the reference's."""
    f = stitch.compile(text, cache_dir=cache)
    source = f.native.source_path.read_text()
    if cc.vector_bytes(cpu.compiler(), cc.DEFAULT_FLAGS) == 64:
        found = re.findall(r"__builtin_prefetch\(&(b_\w+)\[[^\]]* \+ (\d+)\], 0, 3\); st_", source)
        assert sorted({(name, int(n)) for name, n in found}) == ahead  # (softmax's rows: pipelined, and as before)
    inputs = random_inputs(f.graph, 5)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


SOFTMAX = "func f(x: f32[{r}, {c}]) -> f32[{r}, {c}] {{\n  e = exp(sub(x, max(x, axes=[1], keepdims=true)))\n" \
          "  return div(e, sum(e, axes=[1], keepdims=true))\n}}"


@needs_cc
@pytest.mark.parametrize("rows, cols, streamed, gap", [
    (24, 64, True, None), (24, 64, False, None), (12, 1024, True, None), (10, 16, True, None),
    (24, 256, True, None), (24, 256, False, None),
    (24, 256, True, 4096),  # the division run ahead by all but the row's last line, wherever the arrays fall
])
def test_pipelined_rows_compute_the_rows_one_after_the_other_do(rows, cols, streamed, gap, cache, monkeypatch):
    """Softmax with each row's division in the loop of the next row's exponentials: bit for bit
    what the rows one after the other give, wherever the input and the output start (every 4 bytes
    of a line, and the output's stores just ahead of the input's reads modulo 4 KiB, where the
    division runs ahead), with -inf, NaN and large values in rows; nothing written outside. (Rows
    of 64 read a copy of the input, rows of 256 and 1024 the input itself.)"""
    if streamed:
        monkeypatch.setattr(c_source, "STREAM_BYTES", 64)  # (outputs of 8 MiB and more, at full size)
    if gap is not None:
        monkeypatch.setattr(c_source, "ROW_STORE_GAP", gap)
    text = SOFTMAX.format(r=rows, c=cols)
    f = stitch.compile(text, cache_dir=cache)
    source = f.native.source_path.read_text()
    if cc.vector_bytes(cpu.compiler(), cc.DEFAULT_FLAGS) == 64:
        assert "st_sum = " in source and ("_mm512_stream_ps(st_o + st_q" in source) == streamed
    monkeypatch.setattr(c_source._Kernel, "pipelined_rows", lambda self, *args: False)
    plain = stitch.compile(text, cache_dir=cache)
    assert "st_sum = " not in plain.native.source_path.read_text()
    rng = np.random.default_rng(3)
    n = rows * cols
    x_block, out_block = np.empty(n + 1024, np.float32), np.empty(n + 2048, np.float32)
    for x_at, gap in [(0, 0), (4, 0), (12, 16), (16, 48), (0, 1024), (60, 4032), (8, 4), (16, 2000), (8, 272), (0, 256),
                      (4, 4080), (0, 4048), (12, 4064)]:  # (the output just behind the input: run ahead too)
        x = x_block[x_at:x_at + n].reshape(rows, cols)
        x[...] = rng.standard_normal((rows, cols)).astype(np.float32) * 20
        x[1, 3] = np.nan
        x[2] = -np.inf
        x[3, :5] = 3e38
        out_at = x_at + ((x.ctypes.data + gap - out_block.ctypes.data) % 4096) // 4
        out = out_block[out_at:out_at + n].reshape(rows, cols)
        (want,) = plain(x=x)
        out_block[...] = 7.0
        f(out=[out], x=x)
        np.testing.assert_array_equal(out, want)
        assert (out_block[:out_at] == 7.0).all() and (out_block[out_at + n:] == 7.0).all()
        (ref,) = evaluate(f.graph, {"x": x})
        assert compare(out, ref) == ""


@needs_cc
@pytest.mark.parametrize("text, pipelined", [
    (SOFTMAX.format(r=64, c=1024), True),
    (SOFTMAX.format(r=64, c=1000), False),  # rows not a multiple of 16 long
    # the output row reads the row maximum too, which the next row's first pass overwrites
    ("func f(x: f32[64, 1024]) -> f32[64, 1024] {\n  m = max(x, axes=[1], keepdims=true)\n  e = exp(sub(x, m))\n"
     "  return mul(div(e, sum(e, axes=[1], keepdims=true)), m)\n}", False),
])
def test_rows_are_pipelined_only_where_the_division_reads_the_row_and_its_sum(text, pipelined, cache):
    """(and the build without the 16-lane exponentials, -DST_NO_VECTOR_EXP, runs the rows one after
    the other: the reference's values too)"""
    f = stitch.compile(text, cache_dir=cache)
    if cc.vector_bytes(cpu.compiler(), cc.DEFAULT_FLAGS) == 64:
        assert ("st_sum = " in f.native.source_path.read_text()) == pipelined
    scalar = stitch.compile(text, cache_dir=cache, cflags="-O3 -march=native -DST_NO_VECTOR_EXP")
    inputs = random_inputs(f.graph, 8)
    for program in (f, scalar):
        for got, want in zip(program(**inputs), evaluate(f.graph, inputs)):
            assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("cols", [16, 23, 40, 127, 129, 256, 300, 383, 1040])
def test_streamed_rows_are_the_same_wherever_the_output_starts(cols, cache, monkeypatch):
    """Rows streamed from the registers: the lines a row covers whole take non-temporal stores, the
    partial ones at its ends plain stores of the lanes inside it; rows of two groups and more in
    groups of STREAM_GROUP vectors, each computed before the group before it is stored. At each of the 16
    starting offsets in a line, and 48 bytes past the input in its page, the output holds every
    element, bit for bit the same (one vector code for all, tanh included) and the same as a
    vector at a time, and nothing is written before or after it."""
    monkeypatch.setattr(c_source, "STREAM_BYTES", 64)  # (outputs of 8 MiB and more, at full size)
    text = f"func f(x: f32[6, {cols}], b: f32[{cols}]) -> f32[6, {cols}] {{ return tanh(add(mul(x, x), b)) }}"
    f = stitch.compile(text, cache_dir=cache)
    grouped = cols >= 32 * c_source.STREAM_GROUP
    monkeypatch.setattr(c_source, "STREAM_GROUP", 1)
    single = stitch.compile(text, cache_dir=cache)
    if cc.vector_bytes(cpu.compiler(), cc.DEFAULT_FLAGS) == 64:
        assert "_mm512_stream_ps(st_o" in f.native.source_path.read_text()
        assert ("__m512 st_b0 = " in f.native.source_path.read_text()) == grouped
        assert "__m512 st_b0 = " not in single.native.source_path.read_text()
    inputs = random_inputs(f.graph, 2)
    (want,) = evaluate(f.graph, inputs)
    (one_at_a_time,) = single(**inputs)
    x = inputs["x"]
    past_input = (x.ctypes.data + 48) % 4096  # (a load there waits on the store before it)
    for offset in [*range(16), None]:
        block = np.full(6 * cols + 1056, np.nan, np.float32)
        start = ((-block.ctypes.data % 64) // 4 + offset if offset is not None
                 else (past_input - block.ctypes.data) % 4096 // 4)
        out = block[start:start + 6 * cols].reshape(6, cols)
        f(out=[out], **inputs)
        assert compare(out, want) == ""
        np.testing.assert_array_equal(out, one_at_a_time)
        assert np.isnan(block[:start]).all() and np.isnan(block[start + 6 * cols:]).all()


@needs_cc
def test_a_product_whose_columns_span_two_loops_runs_in_vectors(cache, tmp_path):
    """A product stored transposed by heads keeps its columns as two loops (4 heads x 16); every
    access walks them as one span of 64, which the micro-kernel takes as one loop (it ran the two
    loops one element at a time: a GPT-2 projection so tiled took 9.4 ms instead of 1.4)."""
    from stitch_testing import target_text

    target = tmp_path / "small.toml"
    target.write_text(target_text(onchip_bytes=32768, name='"small"'))
    text = ("func f(x: f32[32, 64], w: f32[64, 64]) -> f32[4, 16, 32] {\n"
            "  return transpose(reshape(matmul(x, w), shape=[32, 4, 16]), perm=[1, 2, 0])\n}\n")
    f = stitch.compile(text, target=str(target), cache_dir=cache)
    source = f.native.source_path.read_text()
    assert "for (int64_t p0_p1 = 0; p0_p1 < 64;" in source and "st_vf32 c0_0" in source
    inputs = random_inputs(f.graph, 4)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("j, vector", [(8, "st_vf32_32 c0_0"), (4, "st_vf32_16 c0_0"), (12, "st_vf32_32 c0_0")])
def test_a_product_narrower_than_a_vector_runs_in_narrower_vectors(j, vector, cache, monkeypatch):
    """Fewer columns than a 64-byte vector holds: the widest vectors that fit (not every column
    one by one, at a tenth of the speed); 12 columns are one 8-lane vector and 4 scalar columns."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc, flags: 64)
    f = stitch.compile(MATMULS[0].format(t="f32", i=13, k=40, j=j), cache_dir=cache)
    assert vector in f.native.source_path.read_text()
    inputs = random_inputs(f.graph, 3)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("t", ["f32", "f64", "i32", "i64"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("n", [37, 53])
def test_vectorized_extrema_propagate_nan_like_numpy(t, op, n, cache):
    """gcc's vector reduction, or for f32 rows on AVX-512 two 16-lane vectors a step (37 = 32 + 5
    one by one, 53 = 32 + 16 + 5): NaN wherever it stands, infinities beside it."""
    f = stitch.compile(f"func f(x: {t}[6, {n}]) -> {t}[6, 1] {{ return {op}(mul(x, x), axes=[1], keepdims=true) }}",
                       cache_dir=cache)
    source = f.native.source_path.read_text()
    assert f"reduction({op}:acc)" in source or f"st_m0 = _mm512_{op}_ps(st_v0, st_m0)" in source
    x = random_inputs(f.graph, 5)["x"]
    if t[0] == "f":
        x[1, n - 10] = np.nan  # NaN in the middle, at the end, beside an infinity, and at the start
        x[2, n - 1] = np.nan
        x[3, 0], x[3, 10] = np.inf, np.nan
        x[4, 0] = np.nan
        x[5, :] = -np.inf
    (got,) = f(x=x)
    (want,) = evaluate(f.graph, {"x": x})
    assert compare(got, want) == ""
    if t[0] == "f":
        assert np.isnan(got[1:5, 0]).all() and not np.isnan(got[[0, 5], 0]).any()


@needs_cc
def test_only_kernels_with_enough_work_start_threads(cache):
    """Waking workers costs more than a tiny kernel: its tiles run on the calling thread (st_run's last
    argument says whether the pool may share them)."""
    tiny = stitch.compile(EXAMPLES / "mlp.ir", cache_dir=cache)
    big = stitch.compile(EXAMPLES / "softmax.ir", cache_dir=cache)
    assert re.findall(r"st_run\(.*, (\d)\)\) goto fail;", tiny.native.source_path.read_text()) == ["0"]
    assert re.findall(r"st_run\(.*, (\d)\)\) goto fail;", big.native.source_path.read_text()) == ["1"]


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


@needs_cc
def test_rows_far_apart_are_prefetched_and_contiguous_rows_are_not(cache):
    """Runs of 512 B, 64 KiB apart, are prefetched, the output's too; not a streamed output's (the
    prefetch would read lines the non-temporal stores write whole), nor contiguous rows."""
    text = (EXAMPLES / "layernorm_large.ir").read_text()
    strided = stitch.compile(text.replace("64, 256]", "8, 256]"), cache_dir=cache)  # a 4 MiB output
    streamed = stitch.compile(text, cache_dir=cache)  # 32 MiB
    contiguous = stitch.compile(EXAMPLES / "softmax.ir", cache_dir=cache)
    for f in (strided, streamed):
        assert "__builtin_prefetch(&b_x[" in f.native.source_path.read_text()
    assert "__builtin_prefetch(&b_out0[" in strided.native.source_path.read_text()
    assert "__builtin_prefetch(&b_out0[" not in streamed.native.source_path.read_text()
    # (softmax's rows of exponentials prefetch their next row, test_a_row_of_exponentials_...)
    assert not re.search(r"\{ for \(int64_t \w+ = 0;[^\n]*__builtin_prefetch", contiguous.native.source_path.read_text())
    # each row's last element is prefetched too: a row starting mid-line spans a line more than
    # the line-sized steps reach
    rows = re.findall(r"for \(int64_t (\w+) = 0; \w+ < (\d+); \w+ \+= \d+\) __builtin_prefetch\(&b_x\[([^\]]*)\], 0, 3\); "
                      r"__builtin_prefetch\(&b_x\[([^\]]*)\], 0, 3\);", streamed.native.source_path.read_text())
    assert rows
    for var, extent, first, last in rows:
        names = {v: 7 for v in re.findall(r"[a-z]\w*", first)}
        assert eval(last, {}, names) == eval(first, {}, {**names, var: int(extent) - 1})


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_benchmark_torch_translation_equals_the_reference(path):
    """The torch.compile column times the same program: its torch function, run eagerly, gives the same outputs."""
    torch = pytest.importorskip("torch")
    import sys

    sys.path.insert(0, str(EXAMPLES.parent / "bench"))
    from peers import torch_function

    graph = stitch.compile(path).graph
    inputs = random_inputs(graph, 2)
    wants = evaluate(graph, inputs)
    outs = [torch.from_numpy(np.empty_like(w)) for w in wants]
    torch_function(graph)(*[torch.from_numpy(inputs[n]) for n in graph.param_names], *outs)
    for got, want in zip(outs, wants):
        assert compare(got.numpy(), want) == ""


@needs_cc
def test_large_sources_build_in_parts_at_once(cache, monkeypatch):
    """Above PART_BYTES the kernels are dealt into one unit per core, compiled together, linked."""
    monkeypatch.setattr(c_source, "PART_BYTES", 200)
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


@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_f16_matmul_rounds_once_per_element_as_numpy_does(target, cache):
    """numpy's f16 matmul multiplies and sums in float and rounds each output once; so do the C
    micro-nest and the numpy executor (rounding at every step drifted by several ulp)."""
    text = "func f(a: f16[4, 3, 96], b: f16[4, 96, 40]) -> f16[4, 3, 40] { return matmul(a, b) }"
    compiled = stitch.compile(text, target=target, cache_dir=cache)
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((4, 3, 96), (4, 96, 40)))
    np.testing.assert_array_equal(compiled(a=a, b=b)[0], a @ b)


@needs_cc
@pytest.mark.parametrize("k, j, bound", [(1024, 256, True), (1024, 256, False)])
def test_a_product_prefetches_the_next_block_of_a_weight_laid_out_at_bind(k, j, bound, cache, tmp_path):
    """Read from a block bind.py laid out (tiles, or chunks of K, one after the other), each register
    block prefetches its share of the region after its own; read from a staged copy, nothing."""
    from stitch_testing import target_text

    target = tmp_path / "small.toml"
    target.write_text(target_text(onchip_bytes=65536, name='"small"'))  # 4 tiles of 64 columns, 8 chunks of K
    text = f"func f(a: f32[24, {k}], b: f32[{k}, {j}], r: f32[24, {j}]) -> f32[24, {j}] {{ return add(matmul(a, b), r) }}"
    inputs = random_inputs(stitch.compile(text, target=str(target), cache_dir=cache).graph, 5)
    weights = {"b": inputs.pop("b")} if bound else {}
    f = stitch.compile(text, target=str(target), cache_dir=cache, weights=weights)
    source = f.native.source_path.read_text()
    assert ("__builtin_prefetch(st_ahead" in source) == bound
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs | weights)):
        assert compare(got, want) == ""


@needs_cc
def test_two_products_of_bound_weights_in_one_tile_each_prefetch_their_own(cache):
    """Attention's scores from x's two projections (Whisper's encoder layer): one kernel holds both
    products, each reading its weight laid out at bind and prefetching the block after its own, each
    pointer in a block of its own (the C once declared both in one scope and did not compile). At
    hidden 384: at 768 a tile of three heads' columns has panels past half of a 1 MiB L2, and the
    plan stores the projections apart."""
    text = """func m(x: f32[1, 128, 384], wq: f32[384, 384], wk: f32[384, 384]) -> f32[1, 6, 128, 128] {
      q = transpose(reshape(matmul(x, wq), shape=[1, 128, 6, 64]), perm=[0, 2, 1, 3])
      k = transpose(reshape(matmul(x, wk), shape=[1, 128, 6, 64]), perm=[0, 2, 3, 1])
      return matmul(q, k)
    }"""
    rng = np.random.default_rng(0)
    weights = {n: (rng.standard_normal((384, 384)) / 19.6).astype(np.float32) for n in ("wq", "wk")}
    x = rng.standard_normal((1, 128, 384)).astype(np.float32)
    f = stitch.compile(text, target="cpu", cache_dir=cache, weights=weights)
    assert len(f.compiled.schedule.kernels) == 1
    assert f.native.source_path.read_text().count("const char *st_ahead =") == 2
    (got,) = f(x=x)
    assert compare(got, evaluate(f.graph, {"x": x} | weights)[0]) == ""


@needs_cc
@pytest.mark.parametrize("t", ["f32", "f64"])
def test_a_matmul_walked_in_chunks_equals_the_reference(t, cache, tmp_path):
    """A 32 KB target forces K = 1024 into chunks; the epilogue (bias, residual, relu) runs once
    after the last chunk, the accumulator is set once before the first."""
    from stitch_testing import loops_of, target_text

    target = tmp_path / "small.toml"
    target.write_text(target_text(onchip_bytes=32768, name='"small"'))
    text = (f"func f(a: {t}[24, 1024], b: {t}[1024, 48], bias: {t}[48], r: {t}[24, 48]) -> {t}[24, 48] {{ "
            "return relu(add(add(matmul(a, b), bias), r)) }")
    f = stitch.compile(text, target=str(target), cache_dir=cache)
    kc = next(kc for kc in f.compiled.cost.kernels if kc.chunked)
    assert f"{kc.chunked}o in 0..{1024 // kc.tile[kc.chunked]} serial" in loops_of(text, f.compiled.target)
    inputs = random_inputs(f.graph, 7)
    inputs["a"] = inputs["a"] - 1.25  # both signs, so relu and the sums' order both matter
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
def test_a_packed_right_operand_walked_in_chunks_packs_one_chunk_at_a_time(cache, tmp_path):
    """A weight read through a transpose (OPT's fc2, exported as Linear's [out, in] weight) is packed
    before the product; where the plan walks K in chunks, each chunk's rows are packed in the chunk
    loop, so the pack is the chunk's size, as the cost model counted it (it once held all of K, and
    the kernel failed the verifier's capacity check)."""
    from stitch_testing import loops_of, target_text

    target = tmp_path / "small.toml"
    target.write_text(target_text(onchip_bytes=131072, name='"small"'))
    text = ("func f(a: f32[32, 1024], w: f32[128, 1024], r: f32[32, 128]) -> f32[32, 128] { "
            "return add(matmul(a, transpose(w, perm=[1, 0])), r) }")
    f = stitch.compile(text, target=str(target), cache_dir=cache)
    kc = next(kc for kc in f.compiled.cost.kernels if kc.chunked)
    assert kc.packed and kc.footprint <= 131072
    loops = loops_of(text, f.compiled.target)
    assert f"{kc.chunked}o in 0..{1024 // kc.tile[kc.chunked]} serial" in loops
    pack = next(line for line in loops.splitlines() if "alloc local" in line and "_pack" in line)
    assert f"[{kc.tile[kc.chunked]}, " in pack, pack  # one chunk of K
    inputs = random_inputs(f.graph, 3)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


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
            with pytest.raises(StitchError, match="internal compiler error"):
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
    assert "st_expv_f32(" in kernels and "st_tanh" not in kernels
    x = np.linspace(-12, 12, 4 * 48, dtype=np.float32).reshape(4, 48)
    x[0, :8] = [np.inf, -np.inf, np.nan, -0.0, 1e-40, -1e-40, 3e38, -3e38]
    (got,) = f(x=x)
    (want,) = evaluate(f.graph, {"x": x})
    assert compare(got, want) == ""
    assert got[0, 0] == np.inf and np.isnan(got[0, 1:3]).all() and got[0, 3] == 0 and np.signbit(got[0, 3])


@needs_cc
@pytest.mark.parametrize("op, swapped", [("erf", True), ("neg", False)])
def test_a_transcendental_of_a_transpose_loops_along_what_it_reads(op, swapped, tmp_path):
    """erf(transpose(x)) reads x along its outer loop: the two loops are swapped so the inner one
    reads contiguously and the C compiler vectorizes erf (wav2vec2's GELU over a transposed
    product: 24.6 -> 4.2 ms); a transpose without such an op keeps its loops (writing in order)."""
    text = ("func t(x: f32[1, 40, 48], b: f32[1, 48, 1]) -> f32[1, 48, 40] {\n"
            f"  return {op}(add(mul(transpose(x, perm=[0, 2, 1]), 0.5), b))\n}}\n")
    f = stitch.compile(text, cache_dir=tmp_path)
    source = f.native.source_path.read_text()
    inner = re.search(r"for \(int64_t (\w+) = 0; \w+ < (\d+); \+\+\w+\) \{\n[^\n]*b_out0", source)
    assert inner is not None and inner.group(1) == ("p1" if swapped else "p2"), source  # p1: x's last axis
    inputs = random_inputs(f.graph, 2)
    (got,) = f(**inputs)
    assert compare(got, evaluate(f.graph, inputs)[0]) == ""
