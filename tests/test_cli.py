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
from stitch_testing import EXAMPLES, needs_cc


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


def exit_code(argv: list[str]) -> int:
    """`stitch ARGV`'s exit code: argparse's own usage errors exit through SystemExit."""
    try:
        return main(argv)
    except SystemExit as exited:
        return exited.code


MLP = str(EXAMPLES / "mlp.ir")
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"


@pytest.mark.parametrize("argv", [
    ["compile", MLP, "--node-limit", "0"], ["compile", MLP, "--iter-limit", "-5"],
    ["compile", MLP, "--time-limit", "nan"], ["compile", MLP, "--memory-limit", "0"],
    ["compile", MLP, "--match-limit", "0"], ["run", MLP, "--threads", "0"], ["run", MLP, "--seed", "-1"],
    ["run", MLP, "--runs", "0", "--profile"], ["eval", MLP, "--dim", "n"], ["eval", MLP, "--dim", "n=x"],
])
def test_P14_every_option_value_out_of_range_is_bad_usage(argv, capsys):
    """One exit code per kind of mistake: an option's value out of its range is bad usage (2) with the
    command's usage line, whether argparse or stitch refuses it."""
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: stitch {argv[0]} ") and f"stitch {argv[0]}: error: " in err


def test_P15_an_unknown_option_prints_its_commands_usage(capsys):
    assert exit_code(["run", MLP, "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: stitch run ") and "unrecognized arguments: --bogus" in err


@pytest.mark.parametrize("argv, says", [
    (["run", MLP, "--runs", "5"], "--runs counts --profile's timed calls"),
    (["compile", MLP, "--emit", "c", "--json"], "--json prints the compile figures and --emit c a stage"),
])
def test_P16_an_option_that_would_do_nothing_is_bad_usage(argv, says, capsys):
    assert exit_code(argv) == 2
    assert says in capsys.readouterr().err


def test_P16_threads_on_the_simulator_warns_that_it_does_nothing(capsys):
    assert main(["run", MLP, "--target", "accel", "--threads", "2"]) == 0
    assert "warning: --threads does nothing here: the program runs on the simulator" in capsys.readouterr().err


def test_P17_output_goes_to_exactly_the_name_given_and_says_so(tmp_path, capsys):
    assert exit_code(["eval", MLP, "-o", str(tmp_path)]) == 2  # a directory
    assert "-o names a directory" in capsys.readouterr().err and not (tmp_path.parent / f"{tmp_path.name}.npz").exists()
    out = tmp_path / "result"
    assert main(["eval", MLP, "-o", str(out)]) == 0
    assert capsys.readouterr().err == f"wrote {out} (out0)\n"
    with np.load(out) as saved:
        assert list(saved) == ["out0"] and saved["out0"].shape == (1, 64)


@needs_cc
def test_P27_the_profile_estimates_at_the_threads_it_runs_on(capsys):
    from stitch.targets import runtime

    before = runtime.threads()
    try:
        assert main(["run", str(EXAMPLES / "softmax.ir"), "--profile", "--threads", "1", "--runs", "1"]) == 0
        one = capsys.readouterr().out
        assert main(["run", str(EXAMPLES / "softmax.ir"), "--profile", "--threads", "2", "--runs", "1"]) == 0
        two = capsys.readouterr().out
    finally:
        runtime.set_threads(before)
    assert "at 1 thread(s) (the cost model's bytes, and its estimate at 1 thread(s))" in one
    estimate = [float(line.split()[-2]) for text in (one, two) for line in text.splitlines() if line.startswith("k0")]
    assert estimate[0] > estimate[1]  # softmax's kernel is threaded: its compute spreads over two at 2


def test_P27_a_stop_warning_says_its_limit_once(capsys):
    assert main(["compile", str(EXAMPLES / "layernorm.ir"), "--iter-limit", "1"]) == 0
    err = capsys.readouterr().err
    assert "stopped at its iteration limit (1 iteration(s)) with " in err and "after 1 iteration(s)" not in err


def test_P28_import_says_what_it_wrote(tmp_path, capsys):
    pytest.importorskip("onnx")
    ir, npz = tmp_path / "block.ir", tmp_path / "block.npz"
    assert main(["import", str(FIXTURES / "gpt2_block-dynamo.onnx"), "-o", str(ir), "--weights", str(npz)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"wrote {ir}: func ") and "inputs keyed hidden_states" in err[0]
    assert err[1].startswith(f"wrote {npz} (") and ir.exists() and npz.exists()


# Commands that need no e-graph start without the compiler: egglog (0.6 s of a process's start on
# this machine), hypothesis (the rule checker's) and numpy where it is not used. Each command runs in
# a fresh interpreter, which then lists what it imported.
LIGHT_COMMANDS = {
    "check": (["check", "{ir}"], ("egglog", "hypothesis", "numpy")),
    "fmt": (["fmt", "{ir}"], ("egglog", "hypothesis", "numpy")),
    "eval": (["eval", "{ir}"], ("egglog", "hypothesis")),
    "--version": (["--version"], ("egglog", "hypothesis", "numpy")),
    "--help": (["--help"], ("egglog", "hypothesis", "numpy")),
}


@pytest.mark.parametrize("command", sorted(LIGHT_COMMANDS))
def test_commands_without_an_egraph_do_not_import_the_compiler(command, tmp_path):
    import json
    import subprocess
    import sys

    ir = tmp_path / "f.ir"
    ir.write_text("func f(x: f32[4]) -> f32[4] {\n  return abs(neg(x))\n}\n")
    argv, absent = LIGHT_COMMANDS[command]
    argv = [a.format(ir=ir) for a in argv]
    code = ("import json, sys\nfrom stitch.engine.cli import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))\n" % argv)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert not loaded & set(absent), (command, sorted(loaded & set(absent)))
