"""Symbolic programs compiled once and run at every size (issue 44, items 3, 4 and 6): scheduling at
the planning value with Extents (engine/ir/extent.py), remainder tiles (lowering/remainder.py), C
that reads the sizes at run time, the numpy executor and the simulator on the loops instantiated at
the call's sizes. Every stage is checked against the reference interpreter at several sizes from
one compile, on random programs (a random static program with one of its dimensions made a
symbol) and on the programs a user writes."""

from __future__ import annotations

import re

import numpy as np
import pytest
import stitch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from stitch.engine.ir.check import check_program
from stitch.engine.ir.dims import symbol
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.extent import Extent, at, instantiate, planning_values
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.parse import parse_program
from stitch.engine.ir.printer import print_program
from stitch.engine.ir.tolerance import differences
from stitch.lowering.loops import print_loops
from stitch.lowering.verify import verify
from stitch_testing import needs_cc, programs

ROWS = """
func rows[n: 1..300](x: f32[n, 96], w: f32[96, 80], b: f32[80], g: f32[80]) -> f32[n, 80] {
  h = add(matmul(x, w), b)
  m = mean(h, axes=[1], keepdims=true)
  d = sub(h, m)
  v = mean(mul(d, d), axes=[1], keepdims=true)
  return mul(div(d, sqrt(add(v, 1e-5))), g)
}
"""
ATTENTION = """
func attn[n: 1..200](q: f32[2, n, 16], k: f32[2, n, 16], v: f32[2, n, 16]) -> f32[2, n, 16] {
  s = mul(matmul(q, transpose(k, perm=[0, 2, 1])), 0.25)
  later = greater(iota(shape=[n, n], axis=1, dtype=i32), iota(shape=[n, n], axis=0, dtype=i32))
  s2 = where(later, -inf, s)
  e = exp(sub(s2, max(s2, axes=[2], keepdims=true)))
  return matmul(div(e, sum(e, axes=[2], keepdims=true)), v)
}
"""
STEP = """
func step[p: 1..130](past: f32[2, p, 16], new: f32[2, 1, 16], q: f32[2, 1, 16]) -> (f32[2, p + 1, 16], f32[2, 1, 16]) {
  k = concat(past, new, axis=1)
  s = matmul(q, transpose(k, perm=[0, 2, 1]))
  e = exp(sub(s, max(s, axes=[2], keepdims=true)))
  return k, matmul(div(e, sum(e, axes=[2], keepdims=true)), k)
}
"""
HEADS = """
func heads[n: 1..100](x: f32[1, n, 64], w: f32[64, 64]) -> f32[1, 4, n, 16] {
  y = reshape(matmul(reshape(x, shape=[n, 64]), w), shape=[1, n, 4, 16])
  return transpose(y, perm=[0, 2, 1, 3])
}
"""
PROGRAMS = {"rows": ROWS, "attention": ATTENTION, "step": STEP, "heads": HEADS}
SIZES = {"rows": (1, 7, 33, 256, 300), "attention": (1, 5, 64, 65, 200), "step": (1, 2, 63, 127, 130),
         "heads": (1, 3, 32, 100)}


def graph_of(text: str):
    return next(iter(check_program(parse_program(text, "t.ir")).values()))


def static_copy(text: str, name: str, value: int) -> str:
    """`text` with symbol `name` given the number `value` (the program a static compile would take)."""
    declared = r"\b" + name + r"\s*:\s*\d+\s*\.\.\s*\d+\s*"
    text = re.sub(declared + r",\s*|,\s*" + declared + "|" + declared, "", text, count=1)
    text = re.sub(r"^(func \w+)\[\s*\]", r"\1", text, count=1, flags=re.M)
    return re.sub(r"\b" + name + r"\b", str(value), text)


def check_at_sizes(program, text: str, sizes, seed: int = 0) -> None:
    """`program` (one compile of `text`) against the reference at each size: an int for a program of
    one symbol, else a dict of every symbol's value."""
    graph = graph_of(text)
    for size in sizes:
        values = size if isinstance(size, dict) else dict.fromkeys(graph.symbols, size)
        static = text
        for name, value in values.items():
            static = static_copy(static, name, value)
        static = graph_of(static)
        inputs = random_inputs(static, seed + sum(values.values()))
        with np.errstate(all="ignore"):
            want = evaluate(static, inputs)
        got = program(**inputs)
        assert [g.shape for g in got] == [w.shape for w in want], values
        assert differences(got, want, static, inputs) == [], f"at {values}"


@pytest.mark.parametrize("which", sorted(PROGRAMS))
@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_one_compile_runs_every_size_like_the_reference(which, target):
    text = PROGRAMS[which]
    program = stitch.compile(text, target=target)
    sizes = SIZES[which] if target == "cpu" else SIZES[which][:3]  # (the simulator is slow)
    check_at_sizes(program, text, sizes)


def test_the_loops_take_the_symbol_and_a_remainder_tile_follows_the_whole_ones():
    program = stitch.compile(ROWS)
    assert program.loops.symbols == ("n",)
    text = program.loops_text() if hasattr(program, "loops_text") else None
    from stitch.lowering.loops import print_loops

    text = print_loops(program.loops)
    assert "alloc global out0: f32[n, 80]" in text
    assert re.search(r"for p0o in 0\.\.n // \d+ parallel", text)  # the whole tiles
    assert re.search(r"for p0 in 0\.\.n - \(n // \d+\) \* \d+ serial", text)  # what is left
    # the C reads n at run time: no size of n is written in it
    from stitch.targets.cpu import c_for_target

    c = c_for_target(program.loops, program.compiled.target)
    assert "st_sym_n = st_dims[0];" in c and "int stitch_main(void **b, const long long *st_dims)" in c
    assert "const long long st_dim_n = st_sym_n;" in c  # (each function's own copy)


def _fixture(name: str) -> tuple[str, dict]:
    pytest.importorskip("onnx")
    from stitch.frontends.onnx_import import import_onnx
    from test_onnx_symbolic import DYNAMIC

    imported = import_onnx(DYNAMIC / f"{name}.onnx")
    return imported.text, imported.weights


@pytest.mark.parametrize("which", [*sorted(PROGRAMS), "gpt2_step_dynamic_past-dynamo"])
def test_the_loops_instantiated_at_any_size_verify(which):
    """The on-chip layout is computed once with symbolic offsets: it must hold (no two live buffers
    overlapping, every buffer inside the merged one) at every size, not only at the planning one (a
    decode step's [3, 64] buffer and [3, past + 1] one once shared an offset and a merged size that
    held at the planning size only)."""
    text, weights = (PROGRAMS[which], None) if which in PROGRAMS else _fixture(which)
    for target in ("cpu", "accel"):
        top = stitch.compile(text, target=target, weights=weights)
        for program in [top] + [p for _, p in top.variants]:  # (the size buckets' programs too)
            (name,) = program.compiled.graph.symbols
            low, high = program.compiled.graph.symbols[name]
            for size in sorted({low, low + 1, (low + high) // 2, high - 1, high}):
                verify(instantiate(program.loops, {name: size}), capacity=program.compiled.target.onchip_bytes)


def test_a_call_runs_the_schedule_of_the_smallest_size_bucket_it_fits():
    """ROWS (n in 1..300) is scheduled at 300 and at the bucket 64 (engine/ir/extent.py BUCKETS): a
    call at n <= 64 runs the bucket's program, one above runs the top's; both from one compile."""
    from stitch.engine.schedule.schedule_print import planning_sizes

    program = stitch.compile(ROWS)
    ((tops, small),) = program.variants
    assert tops == {"n": 64} and planning_sizes(small.compiled.schedule) == {"n": 64}
    assert planning_sizes(program.compiled.schedule) == {"n": 300}
    assert program.bucket({"n": 64}) is small and program.bucket({"n": 65}) is program
    assert small.loops.symbols == ("n",)  # (a symbolic program too: every size up to its top)
    check_at_sizes(program, ROWS, (64, 65))


@needs_cc
def test_every_size_bucket_reads_the_one_copy_of_a_weight():
    """A weight read as it is: the bucket's program and its native library read the top's copy."""
    program = stitch.compile("func f[n: 1..1024](x: f32[n, 256], b: f32[256]) -> f32[n, 256] { return add(x, b) }",
                             weights={"b": np.ones(256, np.float32)})
    ((_, small),) = program.variants
    assert small.bound["b"] is program.bound["b"] and small.native.bound["b"] is program.bound["b"]


def test_a_size_above_the_planning_value_is_refused_and_inputs_must_agree():
    program = stitch.compile(HEADS)
    with pytest.raises(StitchError, match="outside its range 1..100"):
        program(x=np.zeros((1, 101, 64), np.float32), w=np.zeros((64, 64), np.float32))
    unbounded = stitch.compile("func f(x: f32[n, 8]) -> f32[n, 8] {\n  return exp(x)\n}\n")
    assert planning_values(unbounded.graph.symbols) == {"n": 8192}
    assert unbounded(x=np.zeros((8192, 8), np.float32))[0].shape == (8192, 8)
    with pytest.raises(StitchError, match=r"compiled for sizes up to n = 8192: 'n' is 8193"):
        unbounded(x=np.zeros((8193, 8), np.float32))
    if unbounded.executor == "c":  # (the profile checks the sizes as a call does)
        with pytest.raises(StitchError, match=r"compiled for sizes up to n = 8192: 'n' is 8193"):
            unbounded.profile(1, x=np.zeros((8193, 8), np.float32))


def test_an_extent_carries_its_dimension_and_refuses_to_become_a_number():
    n = Extent(symbol("n"), 64)
    assert str(n * 12 + 1) == "n * 12 + 1" and (n * 12 + 1).value == 769
    assert str(-(-n // 32)) == "(n + 31) // 32"
    assert n // n == 1 and (n * 4) // n == 4
    assert n != 64 and n == Extent(symbol("n"), 64) and n < 65  # decided at the planning value
    assert at(n * 3 + 2, {"n": 5}) == 17
    for convert in (int, lambda x: x & 1, lambda x: x << 2):
        with pytest.raises(TypeError, match="symbolic extent n"):
            convert(n)
    assert bool(n - 64)  # truthy: "may be nonzero", though it is 0 at the planning value


# -- random programs: a static one with a dimension made a symbol ----------------------------------

TYPED = re.compile(r"\b(f16|f32|f64|i32|i64|bool)\[([^\]]*)\]|\bshape=\[([^\]]*)\]")


def symbolize(text: str, names: dict[int, str]) -> str:
    """`text` with every dimension of a value in `names` in a type or a shape attribute made that symbol."""
    def one(m: re.Match) -> str:
        return re.sub(r"\b(" + "|".join(map(str, names)) + r")\b", lambda v: names[int(v.group(1))], m.group(0))

    out = TYPED.sub(one, text)
    ranges = ", ".join(f"{name}: 1..200" for name in sorted(names.values()))
    return re.sub(r"^func (\w+)\(", rf"func \1[{ranges}](", out, count=1, flags=re.M)


@st.composite
def symbolic_programs(draw):
    """A random program with one or two of its dimension values made symbols (`n`, `m`)."""
    program = draw(programs(max_dim=6, max_funcs=1, dtypes=("f32", "i32", "bool")))
    text = print_program(program)
    values = sorted({int(v) for m in TYPED.finditer(text) for v in re.findall(r"\d+", m.group(0))} & {4, 5, 6})
    assume(values)
    chosen = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2, unique=True))
    names = dict(zip(chosen, ("n", "m")))
    out = symbolize(text, names)
    try:
        graph = graph_of(out)
    except StitchError:
        assume(False)
    assume(graph.symbols)
    return out, {name: value for value, name in names.items() if name in graph.symbols}


def sizes_to_check(values: dict[str, int], target: str) -> list[dict[str, int]]:
    """Sizes in the bucket of 128 and above it (both programs of a one-symbol compile), the drawn ones,
    and the symbols apart (one small while the other is large)."""
    picks = (1, 3, 17, 130, 200) if target == "cpu" else (1, 150)
    out = [dict(values)] + [dict.fromkeys(values, k) for k in picks]
    if len(values) == 2:
        a, b = sorted(values)
        out += [{a: 1, b: 150}, {a: 150, b: 2}]
    return out


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(symbolic_programs(), st.sampled_from(["cpu", "accel"]))
def test_random_programs_with_symbols_run_at_every_size_from_one_compile(case, target):
    text, values = case
    try:
        program = stitch.compile(text, target=target)
    except StitchError as err:  # (a program no schedule fits on the target: the static one says so too)
        assume("fits target" not in str(err))
        raise
    check_at_sizes(program, text, sizes_to_check(values, target))


# -- the dynamic exports (tests/fixtures/models/dynamic): one compile, onnxruntime's outputs at every size --


@pytest.mark.parametrize("target", ["cpu", "accel"])
@pytest.mark.parametrize("name", ["gpt2_model_dynamic_seq-dynamo", "gpt2_model_dynamic_seq-torchscript",
                                  "gpt2_step_dynamic_past-dynamo", "gpt2_step_dynamic_past-torchscript",
                                  "gpt2_model_dynamic_batch_seq-dynamo"])
def test_a_dynamic_export_compiles_once_and_matches_onnxruntime_at_every_stored_size(name, target):
    pytest.importorskip("onnx")
    from stitch.frontends.onnx_import import import_onnx
    from test_onnx_symbolic import DYNAMIC, RANGES, stored

    imported = import_onnx(DYNAMIC / f"{name}.onnx", dim_ranges=RANGES.get(name))
    program = stitch.compile(imported.text, target=target, weights=imported.weights)
    assert program.graph.symbols  # (one compile, symbolic)
    for size, (feeds, want) in stored(name).items():
        got = program(**{imported.inputs[k]: v for k, v in feeds.items()})
        for g, o in zip(got, imported.outputs, strict=True):
            np.testing.assert_allclose(g, want[o], rtol=1e-3, atol=1e-4, err_msg=f"{name} {size} {o} on {target}")


def test_a_merged_layout_of_a_static_and_a_symbolic_buffer_holds_at_every_size():
    """Two shared buffers never live together, [3, 64] and [3, n + 1]: first fit at the planning size
    (n = 128) put both at offset 0 and took the symbolic one's end for the merged size, which at n = 2
    is 36 bytes for a 768-byte buffer (a decode step's wrong answer at past 1 to 3)."""
    from stitch.lowering.alloc import merge_allocations
    from stitch.lowering.loops import Buffer, For, Ix, Lit, Load, LoopKernel, LoopProgram, Store

    m = Extent(symbol("n") + 1, 129)
    p0, p1 = Ix.var("p0"), Ix.var("p1")

    def nest(extent, buffer, value):
        return For("p0", 3, "serial", [For("p1", extent, "serial", [Store(buffer, (p0, p1), value)])])

    kernel = LoopKernel("k0", [Buffer("a", "shared", "f32", (3, 64)), Buffer("b", "shared", "f32", (3, m))], [
        For("t", 2, "parallel", [nest(64, "a", Lit(1.0, "f32")), nest(64, "y", Load("a", (p0, p1))),
                                 nest(m, "b", Lit(2.0, "f32")), nest(m, "z", Load("b", (p0, p1)))])])
    outputs = [Buffer("y", "global", "f32", (3, 64)), Buffer("z", "global", "f32", (3, m))]
    program = merge_allocations(LoopProgram("f", [], ["y", "z"], [], [kernel], outputs, symbols=("n",)), 64)
    for n in (1, 2, 64, 128):
        verify(instantiate(program, {"n": n}))


def test_the_cli_prints_pictures_and_json_of_a_symbolic_program(tmp_path, capsys):
    import json

    from stitch.engine.cli import main

    path = tmp_path / "rows.ir"
    path.write_text(ROWS)
    assert main(["compile", str(path), "--dot", str(tmp_path / "s.dot")]) == 0
    assert "n, 80" in (tmp_path / "s.dot").read_text()  # (its tensors' shapes as written)
    capsys.readouterr()
    assert main(["compile", str(path), "--json"]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    assert any("n" in k["parallel_axes"] for k in kernels)  # (not the planning size's 300)
    assert main(["run", str(path), "--dim", "n=9", "--json", "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["check"] == "ok"


SPLIT_SUM = """
func f[m: 1..2048](x0: bool[1, 1, 1], x1: f32[m, 2, 200]) -> f32[] {
  return sum(where(x0, neg(x1), x1), axes=[0, 1, 2])
}
"""


def test_a_sum_split_across_tiles_of_a_symbolic_axis_counts_its_remainder_tile_in_every_bucket():
    """The sum is tiled along `m` (512 rows a tile at the top, 2048), each tile writing a partial. Two
    defects this guards: the partials were `m // 512`, so the remainder tile wrote one past them and
    the combine left its sum out (m = 700: 512 rows summed); and the bucket of 128 took the top's
    split kernel from a cache keyed by extents equal in dimension only (its tile loop ran m // 512 =
    0 times: garbage at m = 1 and 5)."""
    program = stitch.compile(SPLIT_SUM)
    assert "k0_part0: f32[m // 512 + 1]" in print_loops(program.loops)
    check_at_sizes(program, SPLIT_SUM, (1, 5, 128, 129, 511, 512, 700, 2048))
    assert Extent(symbol("m"), 128) != Extent(symbol("m"), 2048)


LAYER_NORM = """
func norm[n: 1..1024](x: f32[1, n, 768], g: f32[768], b: f32[768]) -> f32[1, n, 768] {
  m = mean(x, axes=[2], keepdims=true)
  d = sub(x, m)
  v = mean(mul(d, d), axes=[2], keepdims=true)
  return add(mul(mul(d, rsqrt(add(v, 1e-5))), g), b)
}
"""


@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_a_layer_norm_over_a_symbolic_number_of_rows_keeps_its_remainder_tiles_known(target):
    """lowering/collapse.py rebuilt every loop after the remainder tiles were made, and the verifier,
    which knows those tiles by identity (LoopKernel.tails), took them for whole tiles: two buffers
    the merged layout overlaps (never live together in a tile) were 'live together' and the
    compile failed (an imported dynamic GPT-2's layer norms too)."""
    program = stitch.compile(LAYER_NORM, target=target)
    check_at_sizes(program, LAYER_NORM, (1, 63, 64, 65, 300) if target == "cpu" else (1, 65))


TWO_SYMBOL_ATTENTION = """
func attention[b: 2..32, t: 2..32](x: f32[b, t, 16], w: f32[16, 48], mask: f32[b, t], o: f32[16, 16]) -> f32[b, t, 16] {
  h = reshape(matmul(reshape(x, shape=[b * t, 16]), w), shape=[b, t, 48])
  q = slice(h, axes=[2], starts=[0], ends=[16])
  k = slice(h, axes=[2], starts=[16], ends=[32])
  v = slice(h, axes=[2], starts=[32], ends=[48])
  s = add(div(matmul(q, transpose(k, perm=[0, 2, 1])), 4.0), mul(sub(1.0, reshape(mask, shape=[b, 1, t])), -10000.0))
  e = exp(sub(s, max(s, axes=[2], keepdims=true)))
  a = reshape(matmul(div(e, sum(e, axes=[2], keepdims=true)), v), shape=[b * t, 16])
  return reshape(matmul(a, o), shape=[b, t, 16])
}
"""


@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_a_batch_and_length_attention_compiles_with_symbolic_key_columns(target):
    """The attention torch.compile hands over once batch and length are both dynamic (issue 50): the
    scores' columns are the symbol t, and the C micro-kernel took its register block's vector count
    from them (`t // 16`, a TypeError); the cost model divided two extents that do not divide
    (`t * 1024` by `t * 16384`, the rows of a product read through the reshape)."""
    program = stitch.compile(TWO_SYMBOL_ATTENTION, target=target)
    check_at_sizes(program, TWO_SYMBOL_ATTENTION, [{"b": 2, "t": 2}, {"b": 3, "t": 17}, {"b": 5, "t": 31},
                                                   {"b": 32, "t": 32}])
