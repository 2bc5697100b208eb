"""What `pip install .` gives: every module stitch imports is a declared dependency, except the extras'."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Imported only by `stitch import` and the ONNX frontend, which say how to install the onnx extra.
EXTRAS = {"onnx": "onnx", "google": "onnx"}  # google.protobuf comes with onnx


def imported_modules() -> dict[str, set[str]]:
    """Top-level modules the installed packages import (lazily too), outside the standard library."""
    found: dict[str, set[str]] = {}
    for package in PYPROJECT["tool"]["setuptools"]["packages"]:
        for path in ROOT.joinpath(*package.split(".")[1:]).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "stitch":
                        found.setdefault(top, set()).add(path.name)
    return found


def _dist(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_module_stitch_imports_is_a_declared_dependency():
    """Regression: `stitch rules check` needed hypothesis, which only the test extra installed."""
    required = {_dist(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = PYPROJECT["project"]["optional-dependencies"]
    distributions = packages_distributions()
    for module, users in imported_modules().items():
        if module in EXTRAS:
            assert EXTRAS[module] in extras, f"{module} needs the {EXTRAS[module]} extra"
            continue
        dists = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        assert dists & required, f"{module} (imported by {', '.join(sorted(users))}) is not in [project.dependencies]"
