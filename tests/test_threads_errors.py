"""Error reports under threads (issue 52, item 2): two compiled programs of the same source share one
loaded library; calls through them from two threads at once each get their own outcome (an index
out of range is reported on the call that had it, and only there)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import stitch
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import random_inputs
from stitch_testing import needs_cc

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "embedding_layernorm.ir"
CALLS = 1500


@needs_cc
def test_calls_through_two_programs_of_one_library_from_two_threads_report_their_own_errors(cache):  # noqa: F811
    text = EXAMPLE.read_text()
    good_program, bad_program = stitch.compile(text, cache_dir=cache), stitch.compile(text, cache_dir=cache)
    assert good_program.native.library._handle == bad_program.native.library._handle  # one library
    good = random_inputs(good_program.graph, 0)
    bad = {**good, "ids": good["ids"].copy()}
    bad["ids"][0, 0] = 100  # wte has 100 rows
    outcomes = {"good": [], "bad": []}

    def call(program, inputs, key):
        for _ in range(CALLS):
            try:
                program(**inputs)
                outcomes[key].append("ok")
            except StitchError as err:
                outcomes[key].append("out of range" if "out of range" in err.message else err.message)

    threads = [threading.Thread(target=call, args=(good_program, good, "good")),
               threading.Thread(target=call, args=(bad_program, bad, "bad"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes["good"] == ["ok"] * CALLS
    assert outcomes["bad"] == ["out of range"] * CALLS


@needs_cc
@pytest.mark.parametrize("same_source", [True, False])
def test_programs_of_one_source_share_their_library_lock_and_others_do_not(same_source, cache):  # noqa: F811
    a = stitch.compile("func f(x: f32[4]) -> f32[4] {\n  return exp(x)\n}\n", cache_dir=cache)
    b = stitch.compile(f"func f(x: f32[4]) -> f32[4] {{\n  return {'exp' if same_source else 'log'}(x)\n}}\n",
                       cache_dir=cache)
    assert (a.native.lock is b.native.lock) == same_source
    np.testing.assert_array_equal(a(x=np.zeros(4, np.float32))[0], np.ones(4, np.float32))
