"""Deep programs work, and importing stitch leaves the interpreter's recursion limit alone."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
import stitch
from stitch.engine.cli import main
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.recursion import LIMIT, deep_recursion
from stitch.engine.ir.tolerance import differences


def chain(n: int) -> str:
    """n ops, each reading the one before: schedule formation walks them, one inlined expression holds them."""
    lines = ["func chain(x: f32[4, 8]) -> f32[4, 8] {", "  t0 = neg(x)"]
    lines += [f"  t{i} = mul(t{i - 1}, x)" for i in range(1, n)]
    return "\n".join([*lines, f"  return t{n - 1}", "}"]) + "\n"


@pytest.fixture
def default_limit():
    """Python's default limit for the test, whatever the process had."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(before)


def test_importing_stitch_leaves_the_recursion_limit_alone():
    """Regression: `import stitch` raised it to 20,000 for the whole process."""
    code = ("import sys; before = sys.getrecursionlimit()\n"
            "import stitch, stitch.engine.cli, stitch.engine.pipeline, stitch.lowering.lower, stitch.targets.cpu\n"
            "import stitch.targets.simulator, stitch.engine.rewrite.check\n"
            "print(before, sys.getrecursionlimit())\n")
    env = {**os.environ, "PYTHONPATH": str(Path(stitch.__file__).parent.parent)}  # this stitch, not another
    proc = subprocess.run([sys.executable, "-c", code + "print(stitch.__file__)"], capture_output=True, text=True,
                          timeout=300, env=env)
    before, after, where = proc.stdout.split()
    assert before == after and where == stitch.__file__, proc.stderr


def test_a_1200_op_chain_compiles_and_runs_under_the_default_limit(default_limit, tmp_path, capsys):
    text = chain(1200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # saturation of 1,200 ops stops at its time limit
        program = stitch.compile(text, target="cpu", cache_dir=tmp_path / "c")
    inputs = random_inputs(program.graph, 0)
    assert differences(program(**inputs), evaluate(program.graph, inputs), program.graph) == []
    path = tmp_path / "chain.ir"
    path.write_text(text)
    assert main(["compile", str(path), "--emit", "loops"]) == 0
    assert "mul(mul(mul(" in capsys.readouterr().out
    assert sys.getrecursionlimit() == 1000


def test_the_limit_is_raised_inside_and_restored_after_nested_threaded_and_failing_calls(default_limit):
    seen = []

    def work():
        with deep_recursion():
            seen.append(sys.getrecursionlimit())

    with deep_recursion():
        assert sys.getrecursionlimit() == LIMIT
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with deep_recursion():
            assert sys.getrecursionlimit() == LIMIT
        assert sys.getrecursionlimit() == LIMIT
    assert seen == [LIMIT] * 4 and sys.getrecursionlimit() == 1000
    with pytest.raises(ValueError), deep_recursion():
        raise ValueError
    assert sys.getrecursionlimit() == 1000
