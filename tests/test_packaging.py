"""What `pip install .` gives: every module stitch imports is a declared dependency, except the extras';
and the compiler's modules import each other without a cycle."""

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


def stitch_imports(folders: tuple[str, ...]) -> dict[str, set[str]]:
    """Each module of `folders` -> the modules of `folders` it imports, at the top or inside a function.

    Left out: imports a type checker alone reads (under `if TYPE_CHECKING:`), and packages'
    `__init__` (Python imports a module's package before the module anyway)."""
    modules = {f"{folder}.{path.stem}": path for folder in folders
               for path in ROOT.joinpath(folder).glob("*.py") if path.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(
            node.test) for n in ast.walk(node)}
        graph[name] = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or id(node) in typing_only or node.level == 0:
                continue
            base = name.split(".")[:-node.level] + (node.module.split(".") if node.module else [])
            for target in [".".join(base)] + [".".join(base + [a.name]) for a in node.names]:
                if target in modules:
                    graph[name].add(target)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of the graph (its modules in import order), or [] when there is none."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_compiler_stages_import_no_cycle():
    """Regression: pipeline.py imported cli.py, which imported it back (issue 16). The stages, parse to
    lowering, with the pipeline, the API and the CLI over them, form no cycle, lazy imports included."""
    graph = stitch_imports(("engine", "lowering"))
    assert "engine.pipeline" in graph["engine.cli"] and "lowering.lower" in graph["engine.pipeline"]
    assert cycle(graph) == []
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check finds one
