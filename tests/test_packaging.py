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
# Imported only by `stitch import` and the ONNX frontend, which say how to install the onnx extra; torch only
# by the torch.compile backend and its frontend (engine/torch_backend.py, frontends/torch_*.py).
EXTRAS = {"onnx": "onnx", "google": "onnx", "torch": "torch"}  # google.protobuf comes with onnx


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


# The package's folders, bottom to top: a module imports only from its own folder or one below it
# (grammar/ and rules/ hold data only).
# The stage packages of engine/ sit under lowering/ and targets/; engine/'s own files (the pipeline,
# the API, the CLI) drive all of them, and the root package re-exports the API. The C backend (targets/c/) sits
# under targets/'s own files: cpu.py compiles what it prints; the rule checker (engine/rewrite/check/) over
# the rule language it checks.
LAYERS = ("grammar", "rules", "engine.ir", "engine.rewrite", "engine.rewrite.check", "engine.schedule", "lowering",
          "targets.c", "targets", "frontends", "engine", "")
MAX_MODULE_LINES = 700
MAX_FOLDER_SHARE = 0.30  # of the package's Python lines, held by one folder's own files


def package_modules() -> dict[str, tuple[Path, str]]:
    """Every module of the shipped package, by dotted name under `stitch` ('' for the package
    itself) -> (its file, the folder it is in, dotted the same way)."""
    modules = {}
    for package in PYPROJECT["tool"]["setuptools"]["packages"]:
        folder = package.partition(".")[2]
        for path in ROOT.joinpath(*folder.split(".") if folder else ()).glob("*.py"):
            name = folder if path.stem == "__init__" else ".".join(filter(None, (folder, path.stem)))
            modules[name] = (path, folder)
    return modules


MODULES = package_modules()


def stitch_imports() -> dict[str, set[str]]:
    """Each module of the package -> the modules of the package it imports: at the top, inside a
    function, or under `if TYPE_CHECKING:` (a type a module names is a dependency all the same)."""
    graph: dict[str, set[str]] = {}
    for name, (path, folder) in MODULES.items():
        package = folder.split(".") if folder else []
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[:len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "stitch":
                base = node.module.split(".")[1:]
            else:
                continue
            for target in [".".join(base)] + [".".join(base + [a.name]) for a in node.names]:
                if target in MODULES and target != name:
                    graph[name].add(target)
    return graph


def layer(module: str) -> int:
    """The index in LAYERS of the folder a module is in."""
    return LAYERS.index(MODULES[module][1])


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


def test_the_package_imports_no_cycle():
    """Regression: pipeline.py imported cli.py, which imported it back (issue 16); three circles
    later crossed folders (pipeline <-> lowering/lower, the ONNX importer and its op tables, the C
    compiler cache and the thread pool). No module reaches itself, lazy and typing imports included."""
    graph = stitch_imports()
    assert "engine.pipeline" in graph["engine.cli"] and "lowering.lower" in graph["engine.pipeline"]
    assert cycle(graph) == []
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check finds one


def test_every_folder_imports_only_its_own_layer_or_below():
    graph = stitch_imports()
    folders = {layer(m) for m in graph}
    assert folders == set(range(len(LAYERS))), "LAYERS names a folder with no module, or misses one"
    upward = sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets if layer(t) > layer(m))
    assert upward == []


def test_only_targets_reach_into_the_c_backend():
    """targets/c/'s modules are the C backend's own: outside targets/, the package reaches the backend
    through targets/cpu.py only (`build`, `c_for_target`)."""
    graph = stitch_imports()
    inside = {m for m in graph if m == "targets" or m.startswith("targets.")}
    backend = {m for m in graph if m == "targets.c" or m.startswith("targets.c.")}
    assert backend and "targets.c.source" in graph["targets.cpu"]
    assert sorted(f"{m} -> {t}" for m, found in graph.items() if m not in inside for t in found & backend) == []


def test_no_module_is_long_and_no_folder_holds_most_of_the_package():
    lines = {m: len(path.read_text().splitlines()) for m, (path, _) in MODULES.items()}
    assert {m: n for m, n in lines.items() if n > MAX_MODULE_LINES} == {}
    total = sum(lines.values())
    by_folder: dict[int, int] = {}
    for m, n in lines.items():
        by_folder[layer(m)] = by_folder.get(layer(m), 0) + n
    crowded = {LAYERS[f]: round(n / total, 2) for f, n in by_folder.items() if n > MAX_FOLDER_SHARE * total}
    assert crowded == {}


def test_the_test_strategies_are_not_shipped():
    """hypothesis strategies the tests draw programs with live in tests/, not in the package users
    install (the package uses hypothesis only for `stitch rules check`)."""
    assert not any("testing" in m.split(".") for m in MODULES)


def test_the_suite_runs_the_quick_hypothesis_profile_unless_asked_for_the_long_one():
    """The README's test command is the one CI runs (issue 43): no environment variable picks the
    profile; `pytest --long` does."""
    import stitch_testing
    from hypothesis import settings

    want = ("long", 100, False) if stitch_testing.LONG else ("quick", 25, True)
    assert (settings.get_current_profile_name(), settings.default.max_examples, settings.default.derandomize) == want


def test_lowering_and_the_backends_read_the_plan_not_the_price():
    """The cost model's plan (engine/schedule/plan.py) is its one contract with lowering and the
    backends: they import no price, so decide nothing by one; the C micro-kernel's shape comes from
    the module the price reads it from (engine/schedule/machine.py)."""
    graph = stitch_imports()
    readers = [m for m in graph if MODULES[m][1].split(".")[0] in ("lowering", "targets")]
    assert "engine.schedule.plan" in graph["lowering.lower"]
    assert sorted(f"{m} -> {t}" for m in readers for t in graph[m] if t == "engine.schedule.price") == []
    assert "engine.schedule.machine" in graph["engine.schedule.price"]
    assert any("engine.schedule.machine" in graph[m] for m in readers if m.startswith("targets"))
