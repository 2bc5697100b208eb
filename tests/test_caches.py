"""Caches that grow in place (lowering/caches.py, `stitch.compile(..., caches=)`): a generation loop
over one array per cache, each step writing only the new position, every step's outputs those of
the functional program; and every way to get it wrong refused with a message."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.extent import dim_of
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.tolerance import differences
from stitch.lowering.loops import print_loops
from stitch_testing import needs_cc

STEP = """func step[p: 1..40](q: f32[1, 4, 1, 16], past_k: f32[1, 4, p, 16], past_v: f32[1, 4, p, 16],
                        k: f32[1, 4, 1, 16], v: f32[1, 4, 1, 16])
    -> (f32[1, 4, 1, 16], f32[1, 4, p + 1, 16], f32[1, 4, p + 1, 16]) {
  keys = concat(past_k, k, axis=2)
  values = concat(past_v, v, axis=2)
  s = mul(matmul(q, transpose(keys, perm=[0, 1, 3, 2])), 0.25)
  e = exp(sub(s, max(s, axes=[3], keepdims=true)))
  return matmul(div(e, sum(e, axes=[3], keepdims=true)), values), keys, values
}
"""
CACHES = {"past_k": 1, "past_v": 2}


@needs_cc
def test_a_generation_loop_writes_only_each_new_position(tmp_path):
    grown = stitch.compile(STEP, cache_dir=tmp_path, caches=CACHES)
    text = print_loops(grown.loops)
    assert "out1[p0, p1 + p1o, p2 + p, p3] = k[" in text  # the new position alone
    assert "past_k[" not in text.split("kernel k0")[1].split("kernel")[0]  # no copy of the cache
    keys, values = grown.new_cache("past_k"), grown.new_cache("past_v")
    assert keys.shape == (1, 4, 41, 16) and not keys.any()
    rng = np.random.default_rng(0)
    keys[:, :, :1], values[:, :, :1] = rng.standard_normal((2, 1, 4, 1, 16))
    ref_k, ref_v = keys[:, :, :1].copy(), values[:, :, :1].copy()
    for p in range(1, 41):
        step = {n: rng.standard_normal((1, 4, 1, 16)).astype(np.float32) for n in ("q", "k", "v")}
        before = keys.copy()
        got = grown(**step, past_k=keys[:, :, :p], past_v=values[:, :, :p])
        want = evaluate(grown.graph, step | {"past_k": ref_k, "past_v": ref_v})
        assert differences(got, want, grown.graph) == [], p
        assert np.shares_memory(got[1], keys) and np.shares_memory(got[2], values)
        assert np.array_equal(keys[:, :, :p], before[:, :, :p])  # the past positions untouched
        assert np.array_equal(keys[:, :, p + 1:], before[:, :, p + 1:])
        ref_k, ref_v = want[1], want[2]


@needs_cc
def test_a_call_that_does_not_pass_a_view_of_the_cache_is_refused(tmp_path):
    grown = stitch.compile(STEP, cache_dir=tmp_path, caches=CACHES)
    rng = np.random.default_rng(1)
    step = {n: rng.standard_normal((1, 4, 1, 16)).astype(np.float32) for n in ("q", "k", "v")}
    own = rng.standard_normal((1, 4, 5, 16)).astype(np.float32)  # its own array: no room after position 5
    with pytest.raises(StitchError, match=r"cache 'past_k' must be a view of the first positions of an array of 41"):
        grown(**step, past_k=own, past_v=grown.new_cache("past_v")[:, :, :5])
    short = np.zeros((1, 4, 41, 16), np.float32)[:, :, :5]
    read_only = grown.new_cache("past_v")
    read_only.flags.writeable = False
    with pytest.raises(StitchError, match="no room for output|read-only"):
        grown(**step, past_k=short, past_v=read_only[:, :, :5])


def test_what_cannot_grow_in_place_is_refused():
    with pytest.raises(StitchError, match="has no parameter 'cache'"):
        stitch.compile(STEP, caches={"cache": 1})
    with pytest.raises(StitchError, match="names output 3"):
        stitch.compile(STEP, caches={"past_k": 3})
    with pytest.raises(StitchError, match="stores 'out2' as something other than 'past_k'"):
        stitch.compile(STEP, caches={"past_k": 2})
    with pytest.raises(StitchError, match="caches= runs on a cpu target"):
        stitch.compile(STEP, target="accel", caches=CACHES)
    with pytest.raises(TypeError, match="caches must be a dict"):
        stitch.compile(STEP, caches=[("past_k", 1)])
    with pytest.raises(StitchError, match="compiled without caches="):
        stitch.compile(STEP).new_cache("past_k")


def layout(caches) -> list[tuple]:
    """What a cache's layout is, its shape's dimensions apart from the size they were planned at."""
    return [(c.param, c.output, c.axis, c.capacity, tuple(map(dim_of, c.shape))) for c in caches]


@needs_cc
def test_every_size_bucket_lays_the_cache_out_alike(tmp_path):
    """A range past the size bucket (128): the bucket's program and the top's share one capacity."""
    grown = stitch.compile(STEP.replace("p: 1..40", "p: 1..300"), cache_dir=tmp_path, caches=CACHES)
    assert grown.variants and all(layout(v.loops.caches) == layout(grown.loops.caches) for _, v in grown.variants)
    keys, values = grown.new_cache("past_k"), grown.new_cache("past_v")
    assert keys.shape == (1, 4, 301, 16)
    rng = np.random.default_rng(2)
    keys[...], values[...] = rng.standard_normal((2, 1, 4, 301, 16))
    for p in (1, 100, 127, 128, 129, 299):
        step = {n: rng.standard_normal((1, 4, 1, 16)).astype(np.float32) for n in ("q", "k", "v")}
        past = {"past_k": keys[:, :, :p].copy(), "past_v": values[:, :, :p].copy()}
        got = grown(**step, past_k=keys[:, :, :p], past_v=values[:, :, :p])
        assert differences(got, evaluate(grown.graph, step | past), grown.graph) == [], p


@needs_cc
def test_the_command_line_grows_caches_in_place(tmp_path, capsys):
    from stitch.engine.cli import main

    path = tmp_path / "step.ir"
    path.write_text(STEP)
    args = ["run", str(path), "--dim", "p=7", "--cache-dir", str(tmp_path / "cc"), "--check"]
    assert main(args + ["--cache", "past_k=1", "--cache", "past_v=2"]) == 0
    assert "outputs equal the reference" in capsys.readouterr().out
    assert main(args + ["--cache", "past_k"]) == 2
    assert "--cache expects PARAM=OUTPUT" in capsys.readouterr().err
    assert main(args + ["--cache", "past_k=2"]) == 1
    assert "cannot grow in place" in capsys.readouterr().err
