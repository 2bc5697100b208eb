"""A reduction reads a product's rows where the tile holds them (rules/forwarding.rules,
`forward-matmul-reduce`; issue 48 item 2): the log-sum-exp of logits is one kernel at its
compulsory bytes and equals the reference."""

from __future__ import annotations

import numpy as np
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import differences

LSE = """
func lse(x: f32[128, 64], w: f32[64, 512]) -> f32[128] {
  s = matmul(x, w)
  m = max(s, axes=[1], keepdims=true)
  return add(log(sum(exp(sub(s, m)), axes=[1])), reshape(m, shape=[128]))
}
"""


def test_the_log_sum_exp_of_logits_is_one_kernel_at_its_compulsory_bytes(cache):
    program = stitch.compile(LSE, cache_dir=cache)
    c = program.compiled
    assert len(c.schedule.kernels) == 1 and c.cost.global_bytes == c.cost.compulsory_bytes
    without = stitch.compile(LSE, cache_dir=cache, without_rules=("forward-matmul-reduce",))
    assert len(without.compiled.schedule.kernels) > 1  # what the rule adds
    inputs = random_inputs(program.graph, np.random.default_rng(3))
    assert differences(program(**inputs), evaluate(program.graph, inputs), program.graph, inputs) == []
