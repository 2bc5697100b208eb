"""The command line's own behaviour: --version, warnings, input files."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import stitch
from stitch.engine.cli import main
from stitch.engine.ir.errors import StitchWarning
from stitch.engine.rewrite.saturate import Limits
from stitch_testing import EXAMPLES



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


# -- input files ---------------------------------------------------------------


def _write_zip(path: Path, members: dict[str, bytes]) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


MLP_INPUTS = {"x": np.zeros((1, 48), np.float32), "w": np.zeros((48, 64), np.float32), "bias": np.zeros(64, np.float32)}


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_text("x = 1\n"), "not an .npz file (np.savez writes a zip archive of arrays)"),
    (lambda p: p.write_bytes(b""), "not an .npz file"),
    (lambda p: p.write_bytes(_npy_bytes(np.zeros(3))), "this is an .npy file (one array), not an .npz"),
    (lambda p: p.write_bytes(b"PK\x03\x04 truncated"), "not a readable .npz file (BadZipFile"),
    (lambda p: _write_zip(p, {"x.npy": _npy_bytes(np.array([{}], dtype=object))}),
     "array 'x' holds Python objects (pickled data)"),
    (lambda p: _write_zip(p, {"notes.txt": b"hi"}), "'notes.txt' in the archive is not a numpy array"),
    (lambda p: np.savez(p, x=MLP_INPUTS["x"]), "missing input for parameter(s) w, bias of 'mlp'"),
    (lambda p: np.savez(p, **MLP_INPUTS, z=np.zeros(1)), "'mlp' has no parameter(s) named z"),
    (lambda p: np.savez(p, **{**MLP_INPUTS, "x": np.zeros((2, 48), np.float32)}), "input 'x' has shape [2, 48]"),
])
@pytest.mark.parametrize("command", ["eval", "run"])
def test_input_file_errors_name_the_file(command, make, message, tmp_path, capsys):
    """Regression: a file that was not an npz showed numpy's allow_pickle text; errors about the arrays
    did not say which file held them."""
    path = tmp_path / "in.npz"
    make(path)
    code = main([command, str(EXAMPLES / "mlp.ir"), "--inputs", str(path), "--cache-dir", str(tmp_path / "c")]
                if command == "run" else [command, str(EXAMPLES / "mlp.ir"), "--inputs", str(path)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"{path}: error: ") and message in err, err
    assert "allow_pickle" not in err and "hint: " in err


def test_a_missing_input_file_is_one_line(tmp_path, capsys):
    assert main(["eval", str(EXAMPLES / "mlp.ir"), "--inputs", str(tmp_path / "none.npz")]) == 1
    assert capsys.readouterr().err == f"{tmp_path / 'none.npz'}: error: no such file\n"
