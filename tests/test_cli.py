"""The command line's own behaviour: --version, warnings, input files."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import stitch
from stitch.engine.cli import main
from stitch.engine.errors import StitchWarning
from stitch.engine.saturate import Limits

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_version_names_stitch_and_what_it_stands_on(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"stitch {stitch.__version__} (egglog ") and "numpy" in out and "Python" in out


@pytest.mark.parametrize("argv, option", [
    (["compile", "--time-limit", "0.000001"], "--time-limit"),
    (["compile", "--iter-limit", "1"], "--iter-limit"),
    (["compile", "--iter-limit", "1", "--emit", "egraph"], "--iter-limit"),
    (["compile", "--node-limit", "5"], "--node-limit"),
])
def test_saturation_stopped_by_a_limit_warns_on_stderr(argv, option, capsys):
    """Regression: `--time-limit 0.001` silently gave a worse schedule."""
    assert main([argv[0], str(EXAMPLES / "layernorm.ir"), *argv[1:]]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("warning: saturation of 'layernorm' stopped at its ") and option in captured.err
    assert "warning" not in captured.out
    assert main([argv[0], str(EXAMPLES / "layernorm.ir"), *argv[1:]]) == 0  # every time, not once
    assert "warning: saturation" in capsys.readouterr().err


def test_a_saturated_run_does_not_warn(capsys):
    assert main(["compile", str(EXAMPLES / "layernorm.ir"), "--time-limit", "600"]) == 0
    assert capsys.readouterr().err == ""


def test_the_api_warns_with_a_stitch_warning(tmp_path):
    with pytest.warns(StitchWarning, match=r"iteration limit \(1 iteration\(s\)\).*limits=Limits\(iterations=...\)"):
        program = stitch.compile(EXAMPLES / "softmax.ir", target="accel", limits=Limits(iterations=1))
    x = np.ones((4096, 1024), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        program(x=x)  # running warns nothing
