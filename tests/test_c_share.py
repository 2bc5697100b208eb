"""Kernels whose C is the same up to names are one function (targets/c/share.py): defined once, called
with each kernel's own buffers, each call still timed in a profile slot of its own; kernels that
differ in anything else keep functions of their own. The values are the reference interpreter's."""

from __future__ import annotations

import re

import numpy as np
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import differences
from stitch.targets import cpu
from stitch.targets.c import tuning
from stitch.targets.c.share import RenderedKernel, canonical_text, share_functions
from stitch_testing import EXAMPLES, needs_cc

DEFINED = re.compile(r'^__attribute__\(\(visibility\("hidden"\)\)\) int (kernel_\w+)\(.*\) \{$', re.M)
CALLED = re.compile(r"^  ST_CALL\((\d+), (kernel_\w+)\((.*)\)\);$", re.M)


def norms(x_cols: int, y_cols: int, rows: str = "256", symbols: str = "") -> str:
    """Two RMS norms, each on an input and a scale of its own."""
    return f"""func f{symbols}(x: f32[{rows}, {x_cols}], gx: f32[{x_cols}], y: f32[{rows}, {y_cols}], gy: f32[{y_cols}])
    -> (f32[{rows}, {x_cols}], f32[{rows}, {y_cols}]) {{
  a = mul(div(x, sqrt(add(mean(mul(x, x), axes=[1], keepdims=true), 1e-5))), gx)
  b = mul(div(y, sqrt(add(mean(mul(y, y), axes=[1], keepdims=true), 1e-5))), gy)
  return a, b
}}
"""


def layers(n: int, width: int = 512, rows: int = 64) -> str:
    """`n` dense layers of one width, each with weights of its own."""
    params = [f"x: f32[{rows}, {width}]"] + [f"w{i}: f32[{width}, {width}], b{i}: f32[{width}]" for i in range(n)]
    body = [f"  h{i} = tanh(add(matmul({f'h{i - 1}' if i else 'x'}, w{i}), b{i}))" for i in range(n)]
    return f"func f({', '.join(params)}) -> f32[{rows}, {width}] {{\n" + "\n".join(body) + f"\n  return h{n - 1}\n}}\n"


def like_the_reference(f, inputs: dict) -> None:
    assert differences(f(**inputs), evaluate(f.graph, inputs), f.graph) == []


@needs_cc
def test_two_identical_norms_are_one_function_called_on_each_ones_buffers(cache):
    f = stitch.compile(norms(1024, 1024), cache_dir=cache)
    source = f.native.source_path.read_text()
    assert DEFINED.findall(source) == ["kernel_k0"]
    assert CALLED.findall(source) == [("0", "kernel_k0", "b_x, b_gx, b_out0"), ("1", "kernel_k0", "b_y, b_gy, b_out1")]
    like_the_reference(f, random_inputs(f.graph, 0))
    rows = f.profile(runs=1, **random_inputs(f.graph, 1))  # one row per kernel, shared function or not
    assert [r.name for r in rows] == ["k0", "k1"] and all(r.seconds > 0 for r in rows)


@needs_cc
def test_kernels_of_other_shapes_keep_functions_of_their_own(cache):
    f = stitch.compile(norms(1024, 768), cache_dir=cache)
    source = f.native.source_path.read_text()
    assert DEFINED.findall(source) == ["kernel_k0", "kernel_k1"]
    assert [call[1] for call in CALLED.findall(source)] == ["kernel_k0", "kernel_k1"]
    like_the_reference(f, random_inputs(f.graph, 0))


@needs_cc
def test_the_middle_layers_of_a_stack_share_one_function(cache):
    """The first layer's matmul and the last layer's bias are kernels of their own; each kernel
    between them (a layer's bias and tanh, the next one's matmul) is the same on other weights."""
    f = stitch.compile(layers(4), cache_dir=cache)
    source = f.native.source_path.read_text()
    assert DEFINED.findall(source) == ["kernel_k0", "kernel_k1", "kernel_k3"]
    assert [call[1] for call in CALLED.findall(source)] == ["kernel_k0", "kernel_k1", "kernel_k1", "kernel_k3"]
    like_the_reference(f, random_inputs(f.graph, 0))


@needs_cc
def test_a_shared_function_reads_the_symbols_at_every_size(cache):
    f = stitch.compile(norms(1024, 1024, rows="n", symbols="[n: 1..512]"), cache_dir=cache)
    assert DEFINED.findall(f.native.source_path.read_text()) == ["kernel_k0"]
    rng = np.random.default_rng(0)
    for n in (1, 37, 300):
        x, y = (rng.standard_normal((n, 1024), np.float32) for _ in range(2))
        gx, gy = (rng.standard_normal(1024, np.float32) for _ in range(2))
        like_the_reference(f, {"x": x, "gx": gx, "y": y, "gy": gy})


@needs_cc
def test_a_shared_function_is_defined_once_over_the_parts(cache, monkeypatch):
    """Kernels are shared before they are dealt into parts: one definition in one part, the calls in part 0."""
    monkeypatch.setattr(tuning, "PART_BYTES", 200)
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 2)
    f = stitch.compile(norms(1024, 1024), cache_dir=cache)
    source = f.native.source_path.read_text()
    assert DEFINED.findall(source) == ["kernel_k0"]
    assert source.count("int kernel_k0(") == 2  # its prototype and its definition
    like_the_reference(f, random_inputs(f.graph, 2))


KERNEL = """struct kernel_k4_args { float *b_t2; float *b_out0; };
static void kernel_k4_tiles0(int64_t lo, int64_t hi, unsigned char *restrict st_scratch, float *restrict b_t2, \
float *restrict b_out0) {
  float b_k4_v0[16] __attribute__((aligned(64)));
  for (int64_t p0 = lo; p0 < hi; ++p0) b_k4_v0[p0 % 16] = b_t2[p0]; b_out0[0] = b_k4_v0[0] + b_t2x[0];
}
static void kernel_k4_tiles0_run(void *args, int64_t lo, int64_t hi, unsigned char *scratch) {
  struct kernel_k4_args *a = args;
  kernel_k4_tiles0(lo, hi, scratch, a->b_t2, a->b_out0);
}
int kernel_k4(float *restrict b_t2, float *restrict b_out0) {
  struct kernel_k4_args a = {b_t2, b_out0};
  return st_run(kernel_k4_tiles0_run, &a, 64, 1, 0, 1);
}
"""

CANONICAL = """struct st_fn_args { float *st_arg0; float *st_arg1; };
static void st_fn_tiles0(int64_t lo, int64_t hi, unsigned char *restrict st_scratch, float *restrict st_arg0, \
float *restrict st_arg1) {
  float st_loc0[16] __attribute__((aligned(64)));
  for (int64_t p0 = lo; p0 < hi; ++p0) st_loc0[p0 % 16] = st_arg0[p0]; st_arg1[0] = st_loc0[0] + b_t2x[0];
}
static void st_fn_tiles0_run(void *args, int64_t lo, int64_t hi, unsigned char *scratch) {
  struct st_fn_args *a = args;
  st_fn_tiles0(lo, hi, scratch, a->st_arg0, a->st_arg1);
}
int st_fn(float *restrict st_arg0, float *restrict st_arg1) {
  struct st_fn_args a = {st_arg0, st_arg1};
  return st_run(st_fn_tiles0_run, &a, 64, 1, 0, 1);
}
"""


def test_the_canonical_text_renames_whole_identifiers_only():
    """The function and the names built on it, the parameters and the local buffers are renamed; a
    name they begin (b_t2x) is not."""
    k4 = RenderedKernel("kernel_k4", KERNEL, ("b_t2", "b_out0"), ("b_k4_v0",))
    assert canonical_text(k4) == CANONICAL


def test_kernels_are_shared_only_where_their_canonical_texts_are_equal():
    k4 = RenderedKernel("kernel_k4", KERNEL, ("b_t2", "b_out0"), ("b_k4_v0",))
    renamed = KERNEL.replace("k4", "k9").replace("b_t2,", "b_t7,").replace("b_t2;", "b_t7;").replace("b_t2[", "b_t7[")
    k9 = RenderedKernel("kernel_k9", renamed, ("b_t7", "b_out0"), ("b_k9_v0",))
    other = RenderedKernel("kernel_k5", KERNEL.replace("k4", "k5").replace("64, 1, 0", "32, 1, 0"), ("b_t2", "b_out0"),
                           ("b_k5_v0",))
    swapped = RenderedKernel("kernel_k6", KERNEL.replace("k4", "k6"), ("b_out0", "b_t2"), ("b_k6_v0",))
    assert share_functions([k4, other, k9, swapped]) == ["kernel_k4", "kernel_k5", "kernel_k4", "kernel_k6"]


def test_a_kernel_holding_a_canonical_name_is_left_alone():
    """Its text could read the same as another kernel's after renaming without being the same."""
    k4 = RenderedKernel("kernel_k4", KERNEL, ("b_t2", "b_out0"), ("b_k4_v0",))
    clash = RenderedKernel("kernel_k8", KERNEL.replace("k4", "k8").replace("b_t2x", "st_loc0"), ("b_t2", "b_out0"),
                           ("b_k8_v0",))
    assert canonical_text(clash) is None
    assert share_functions([k4, clash, k4]) == ["kernel_k4", "kernel_k8", "kernel_k4"]



def test_a_kernel_of_the_same_nests_is_not_printed_and_the_c_is_the_same(monkeypatch):
    """nest_key: a kernel whose loop nests are another's up to buffer names calls that one's function
    without being printed; the C is byte for byte what printing every kernel gives (examples, the
    dense stack, the norms)."""
    from stitch.targets.c import source, tiles

    printed = []
    render = tiles.render_kernel
    monkeypatch.setattr(source, "render_kernel", lambda w, sig: printed.append(w.k.name) or render(w, sig))
    programs = [layers(4), norms(1024, 1024), norms(1024, 768, rows="n", symbols="[n: 1..300]")]
    programs += [p.read_text() for p in sorted(EXAMPLES.glob("*.ir"))]
    for text in programs:
        loops = stitch.compile(text, target="cpu").loops
        printed.clear()
        once = source.c_source(loops, 64, max_parts=2)
        skipped = len(loops.kernels) - len(printed)
        with monkeypatch.context() as m:
            m.setattr(source, "nest_key", lambda kernel, params, streamed: id(kernel))
            assert source.c_source(loops, 64, max_parts=2) == once
        if text == programs[0]:
            assert skipped >= 1
