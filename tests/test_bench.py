"""The benchmark scripts run against an installed stitch, as after the README's `pip install .`.

`pip install .` ships the packages and data files pyproject.toml lists, not
`examples/` or `bench/`: a script run from the source tree must find its
programs beside itself, not beside the installed package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "bench").glob("*.py"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """An environment whose `import stitch` finds a copy of exactly what pyproject.toml ships."""
    site = tmp_path_factory.mktemp("site-packages")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package in config["packages"]:
        parts = package.split(".")[1:]  # stitch.engine -> engine (the repository root is `stitch`)
        src, dst = ROOT.joinpath(*parts), site.joinpath("stitch", *parts)
        dst.mkdir(parents=True)
        for pattern in ["*.py", *config.get("package-data", {}).get(package, [])]:
            for f in src.glob(pattern):
                shutil.copy(f, dst)
    assert not (site / "stitch" / "examples").exists()
    return {**os.environ, "PYTHONPATH": str(site)}


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_copy_is_what_python_imports(installed, tmp_path):
    proc = run(["-c", "import stitch; print(stitch.__file__)"], installed, tmp_path)
    assert proc.stdout.startswith(installed["PYTHONPATH"]), proc.stdout + proc.stderr


def test_accel_report_runs_against_an_installed_stitch(installed, tmp_path):
    """Regression: it looked for site-packages/stitch/examples/."""
    proc = run([str(ROOT / "bench" / "accel_report.py"), "--only", "mlp"], installed, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "forwarding: " in proc.stdout and "x fewer cycles" in proc.stdout


def test_every_bench_script_loads_and_finds_its_examples(installed, tmp_path):
    """Each script's module body (imports, paths) against the installed copy; EXAMPLES, where a script
    has it, holds the example programs."""
    check = (
        "import pathlib, runpy, sys\n"
        "for script in sys.argv[1:]:\n"
        "    if 'onnx' in script:\n"
        "        try:\n"
        "            import onnx\n"
        "        except ImportError:\n"
        "            print('skipped', pathlib.Path(script).name)  # the onnx extra is not installed\n"
        "            continue\n"
        "    sys.path.insert(0, str(pathlib.Path(script).parent))\n"
        "    ns = runpy.run_path(script, run_name='bench')\n"
        "    examples = ns.get('EXAMPLES')\n"
        "    assert examples is None or sorted(pathlib.Path(examples).glob('*.ir')), (script, examples)\n"
        "    print('ok', pathlib.Path(script).name, examples is not None)\n"
    )
    proc = run(["-c", check, *map(str, SCRIPTS)], installed, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == len(SCRIPTS)
    for name in ("accel_report.py", "compile_speed.py", "run_speed.py"):
        assert f"ok {name} True" in proc.stdout


def test_interleaved_medians_alternates_the_engines_in_blocks_after_an_untimed_call(monkeypatch):
    """Round by round, each engine gets one untimed call then `block` timed ones, so a drift of the
    machine hits every engine alike, each round starting one engine later (no engine always in the
    same place of the round); the medians are of the timed calls only."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import peers
    finally:
        sys.path.remove(str(ROOT / "bench"))
    calls: list[str] = []
    clock = iter(range(10**6))
    monkeypatch.setattr(peers.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(peers.time, "sleep", lambda s: calls.append(f"pause {s}"))
    engines = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    medians = peers.interleaved_medians(engines, runs=2, pause=0, block=3)
    assert calls == ["a", "b"] + ["a"] * 4 + ["b"] * 4 + ["b"] * 4 + ["a"] * 4
    assert medians == {"a": 1, "b": 1}  # each timed call spans one tick of the fake clock
    calls.clear()
    peers.interleaved_medians(engines, runs=1)
    assert calls == ["a", "b", f"pause {peers.SETTLE_SECONDS}", "a", "a", f"pause {peers.SETTLE_SECONDS}", "b", "b"]
