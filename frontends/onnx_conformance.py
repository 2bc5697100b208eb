"""The ONNX node test cases as a conformance suite: import, compile, run on each target, compare.

The cases are the onnx package's own (`onnx.backend.test.case.node.collect_testcases`),
generated offline from the installed package; collecting them takes ~20 s, so
they are cached by onnx version (`load_cases(cache_dir=...)`). A case is
*skipped* only when the importer refuses it for an unsupported op, dtype or
dynamic shape; anything else that goes wrong is a *failure*, reported with
whether the reference interpreter agrees with ONNX (an import error) or not
(a compiler error).
"""

from __future__ import annotations

import functools
import os
import pickle
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..engine.ir.errors import StitchError
from .onnx_import import OnnxImportError, import_onnx

SKIP_KINDS = {"op", "dtype", "shape", "input"}


@dataclass(frozen=True)
class Case:
    name: str
    model: bytes  # a serialized ModelProto
    data_sets: list  # [(inputs, expected outputs)], inputs in graph input order
    rtol: float
    atol: float


@dataclass(frozen=True)
class Result:
    case: str
    target: str  # "cpu", "accel", or "-" for a case skipped before compiling
    status: str  # passed | failed | skipped
    reason: str = ""
    seconds: float = 0.0


def load_cases(cache_dir: str | Path | None = None) -> list[Case]:
    """Every node test case of the installed onnx, from the cache when it holds this version's."""
    import onnx

    cache = Path(cache_dir or Path.home() / ".cache" / "stitch") / f"onnx-node-cases-{onnx.__version__}.pickle"
    if cache.exists():
        try:
            return pickle.loads(cache.read_bytes())
        except Exception:  # a corrupt or foreign cache entry: collect again
            pass
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = [Case(c.name, c.model.SerializeToString(), list(c.data_sets or []), c.rtol, c.atol)
                 for c in collect_testcases(None)]
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")  # two processes collecting at once (pytest -n) write apart
    tmp.write_bytes(pickle.dumps(cases))
    tmp.replace(cache)
    return cases


def as_array(value) -> np.ndarray:
    """A data set value as numpy (some cases store TensorProtos, as the ONNX backend runner accepts)."""
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)


def graph_inputs(model) -> list[str]:
    """The graph inputs a data set feeds, in order (inputs that are initializers have defaults)."""
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def import_case(case: Case):
    """The imported program, or a skip Result. Inputs read as shapes or axes are fixed to the first data set's."""
    import onnx

    model = onnx.load_model_from_string(case.model)
    names = graph_inputs(model)
    feeds = dict(zip(names, case.data_sets[0][0])) if case.data_sets else {}  # sequences stay lists
    try:
        try:
            return import_onnx(model)
        except OnnxImportError as err:
            fixable = [n for n in err.fixable_inputs if n in feeds]
            if not fixable or len(fixable) != len(err.fixable_inputs):
                raise
            return import_onnx(model, constant_inputs={n: as_array(feeds[n]) for n in fixable})
    except OnnxImportError as err:
        if {p.kind for p in err.problems} <= SKIP_KINDS:
            return Result(case.name, "-", "skipped", skip_reason(err))
        raise


KIND_LABELS = {"op": "unsupported op", "dtype": "unsupported dtype", "shape": "unsupported shape",
               "input": "dynamic shape", "lowering": "not lowered"}

# The data-movement ops, which compile once the kernel model reads them through index maps.
MOVEMENT_OPS = frozenset({"slice", "concat", "gather"})
MOVEMENT_PROBE = """func probe(x: f32[4, 8], i: i64[3]) -> (f32[4, 4], f32[4, 3], f32[8, 8]) {
  return slice(x, axes=[1], starts=[0], ends=[8], steps=[2]), gather(x, i, axis=1), concat(x, x, axis=0)
}
"""


@functools.cache
def movement_lowered(target: str) -> bool:
    """Whether slice, concat and gather compile and run correctly on `target` (a probe program, once)."""
    import stitch

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    i = np.array([0, 7, -1], np.int64)
    try:
        outs = stitch.compile(MOVEMENT_PROBE, target=target)(x=x, i=i)
    except Exception:
        return False
    want = [x[:, ::2], np.take(x, i, axis=1), np.concatenate([x, x])]
    return all(np.array_equal(o, w) for o, w in zip(outs, want))


def not_lowered(graph, target: str) -> str:
    """'' when the program compiles on `target`; else why not (movement ops not lowered there yet)."""
    used = sorted(MOVEMENT_OPS & {n.op for n in graph.nodes})
    if used and not movement_lowered(target):
        return (f"{KIND_LABELS['lowering']}: {', '.join(used)} on {target} (slice, concat and gather wait on "
                "the kernel model's index maps)")
    return ""


def skip_reason(err: OnnxImportError) -> str:
    return "; ".join(dict.fromkeys(f"{KIND_LABELS[p.kind]}: {p.reason}" for p in err.problems))


def program_inputs(imported, names: list[str], values) -> dict[str, np.ndarray]:
    feeds = {imported.inputs[n]: as_array(v) for n, v in zip(names, values) if n in imported.inputs}
    return feeds | imported.weights


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str:
    """'' when equal at ONNX's tolerance (np.testing.assert_allclose; exact for ints and bools)."""
    got, want = np.asarray(got), as_array(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
    try:
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(got, want)
    except AssertionError as err:
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        return " ".join(ln for ln in lines if ln.startswith(("Mismatched", "Max absolute", "Max relative")))
    return ""


def run_case(case: Case, targets: tuple[str, ...]) -> list[Result]:
    """Import the case once, then compile and run it on each target against every data set."""
    import onnx

    start = time.perf_counter()
    try:
        got = import_case(case)
    except StitchError as err:
        return [Result(case.name, t, "failed", f"import: {first_line(err)}") for t in targets]
    except Exception as err:  # a bug in the importer
        return [Result(case.name, t, "failed", f"import crashed: {type(err).__name__}: {err}") for t in targets]
    if isinstance(got, Result):
        return [got]
    imported = got
    names = graph_inputs(onnx.load_model_from_string(case.model))
    seconds = time.perf_counter() - start
    return [run_on(case, imported, names, target, seconds) for target in targets]


def run_on(case: Case, imported, names: list[str], target: str, import_seconds: float) -> Result:
    import stitch

    from ..engine.ir.check import check_program
    from ..engine.ir.interp import evaluate

    start = time.perf_counter()
    graph = next(iter(check_program(imported.program).values()))
    reason = not_lowered(graph, target)
    if reason:  # the import is still checked, on the reference interpreter
        for values, expected in case.data_sets:
            with np.errstate(all="ignore"):
                outputs = evaluate(graph, program_inputs(imported, names, values))
            for k, (out, want) in enumerate(zip(outputs, expected)):
                problem = compare(out, want, case.rtol, case.atol)
                if problem:
                    return Result(case.name, target, "failed", f"output {k} on the reference interpreter: {problem}")
        return Result(case.name, target, "skipped", reason, import_seconds + time.perf_counter() - start)
    try:
        program = stitch.compile(imported.text, target=target)
        for values, expected in case.data_sets:
            inputs = program_inputs(imported, names, values)
            with np.errstate(all="ignore"):
                outputs = program(**inputs)
            for k, (out, want) in enumerate(zip(outputs, expected)):
                problem = compare(out, want, case.rtol, case.atol)
                if problem:
                    with np.errstate(all="ignore"):
                        ref = evaluate(program.graph, inputs)[k]
                    verdict = "the reference interpreter agrees with ONNX" if not compare(
                        ref, want, case.rtol, case.atol) else "the reference interpreter differs too"
                    return Result(case.name, target, "failed", f"output {k}: {problem} ({verdict})",
                                  import_seconds + time.perf_counter() - start)
    except StitchError as err:
        return Result(case.name, target, "failed", f"{first_line(err)}", time.perf_counter() - start)
    except Exception as err:
        return Result(case.name, target, "failed", f"crashed: {type(err).__name__}: {first_line(err)}",
                      time.perf_counter() - start)
    return Result(case.name, target, "passed", "", import_seconds + time.perf_counter() - start)


def first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def run_suite(cases: list[Case], targets: tuple[str, ...] = ("cpu", "accel")) -> list[Result]:
    return [r for case in cases for r in run_case(case, targets)]


def counts(results: list[Result]) -> dict[str, dict[str, int]]:
    """{target: {passed, failed, skipped}}; a skipped case counts as skipped on every target."""
    targets = sorted({r.target for r in results if r.target != "-"}) or ["cpu", "accel"]
    out = {t: {"passed": 0, "failed": 0, "skipped": 0} for t in targets}
    for r in results:
        for t in (targets if r.target == "-" else [r.target]):
            out[t][r.status] += 1
    return out


def report(results: list[Result]) -> str:
    """A markdown report: counts per target, then every failure and every skip with its reason."""
    lines = ["| target | passed | failed | skipped |", "|---|---|---|---|"]
    for t, c in counts(results).items():
        lines.append(f"| {t} | {c['passed']} | {c['failed']} | {c['skipped']} |")
    for status in ("failed", "skipped", "passed"):
        chosen = [r for r in results if r.status == status]
        lines += ["", f"## {status} ({len(chosen)})", ""]
        lines += [f"- `{r.case}`" + (f" [{r.target}]" if r.target != "-" else "")
                  + (f": {r.reason}" if r.reason else f" ({r.seconds:.2f} s)") for r in chosen]
    return "\n".join(lines)
