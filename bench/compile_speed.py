"""Compile-time benchmark: parse, saturate, extract, lower and build C for every example and generated programs.

Prints a markdown table of median seconds per stage (several runs), the
extracted kernels, the C build with an empty cache (`C cold`, once), and the
whole `stitch.compile` (parse to loaded library) with the C cache warm.
Run: python3 bench/compile_speed.py [--runs N] [--target cpu|accel]

With --models, the per-stage compile time of whole models instead (cpu target, each
figure one run): the 12-layer GPT2Model and BertModel (with attention_mask) at
hidden 768, 12 heads, MLP 3072, sequence 128, vocabulary 1024, batch 1, and
MobileNetV2 and ResNet-18 on one 224x224 image (tools/export_models.py's
`gpt2_model_12layers`, `bert_model_12layers`, `mobilenet_v2`, `resnet18`, seeded
random parameters). Each is exported once by torch.onnx's dynamo exporter (the
TorchScript exporter, opset 17, where dynamo fails; the `exporter` column), checked
against torch eager in onnxruntime, and kept in --export-cache (default
~/.cache/stitch/exports, keyed by the torch, transformers, onnx and onnxscript
versions and the text of the two tools files). Every timing runs in a fresh
process (python3 bench/compile_speed.py --child MODE ...), so no stage finds
another's work cached:

  import s        import_onnx of the .onnx file (reading it included; lark's IR
                  parser built beforehand, as bench/models.py does)
  parse+check s   read_program and check_entry of the imported text
  fold s          binding the weights, fold_bound, and fold_values after extraction
  saturate s      loading the built-in rules and saturate_program
  serialize s     EGraphRun.data (the saturated e-graph read back)
  extract s       pipeline.extract (the schedule search)
  lower s         lower_program (loop nests, their passes, the verifier)
  C cold s        targets/cpu.py build into an empty cache: C source, compiler, load
  bind s          lowering/bind.py bind (the prologue run on the weights)
  stages s        the sum of the columns after import: what stitch.compile runs
  compile s       the whole stitch.compile(text, weights=..., cache_dir=<empty dir>)
                  in a fresh process (text and weights read from files beforehand;
                  the interpreter's start and `import stitch` not counted)
  kernels         the extracted schedule's kernels; e-nodes: the saturated e-graph's
  ort s           onnxruntime.InferenceSession on the same .onnx file (its default
                  graph optimizations; reading the file included)
  torch.compile s the first call of torch.compile(module) (Inductor, an empty
                  Inductor cache) less an eager call, GPT-2 and BERT only
  load            the 1-minute load average when the row started

A model stitch cannot import or compile has its refusal printed under the table.
`max err` is stitch's largest absolute difference from onnxruntime's output on the
export's inputs. Needs torch (`pip install torch==2.13.0`, the CPU build) and `pip
install '.[models]'`; without them --models says so and exits. Run:
python3 bench/compile_speed.py --models [NAME,...] [--export-cache DIR] [--no-torch-compile]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"  # the source tree's, wherever stitch is installed
sys.path.insert(0, str(HERE))

import stitch  # noqa: E402
from gen import random_program  # noqa: E402
from stitch.engine.ir.parse import parse_program  # noqa: E402
from stitch.engine.ir.recursion import deep_recursion  # noqa: E402
from stitch.engine.programs import check_entry  # noqa: E402
from stitch.engine.rewrite.rules import builtin_rule_files  # noqa: E402
from stitch.engine.rewrite.saturate import EGraphRun, Limits  # noqa: E402
from stitch.engine.schedule.extract import extract_schedule  # noqa: E402
from stitch.engine.schedule.target import load_target  # noqa: E402
from stitch.targets.cpu import build  # noqa: E402


def stages(text: str, target, limits: Limits) -> dict:
    t0 = time.perf_counter()
    graph = check_entry(parse_program(text))  # the first func, with the funcs it calls
    t1 = time.perf_counter()
    run = EGraphRun(graph, builtin_rule_files())
    report = run.run(limits)
    t2 = time.perf_counter()
    data = run.data()
    t3 = time.perf_counter()
    result = extract_schedule(data, target)
    t4 = time.perf_counter()
    ops = sum(1 for n in graph.nodes if n.op not in ("param", "const"))
    return {"ops": ops, "parse": t1 - t0, "saturate": t2 - t1, "serialize": t3 - t2, "extract": t4 - t3,
            "total": t4 - t0, "enodes": report.enodes, "kernels": len(result.schedule.kernels),
            "exhaustive": result.exhaustive}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--models", nargs="?", const=",".join(MODELS),
                    help=f"the whole-model table instead, of these models (default: {','.join(MODELS)})")
    ap.add_argument("--export-cache", type=Path, default=Path.home() / ".cache" / "stitch" / "exports",
                    help="where the models' exports are kept between runs")
    ap.add_argument("--no-torch-compile", action="store_true", help="leave out the torch.compile column")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)  # MODE ARGS: one timing, in this process
    args = ap.parse_args()
    if args.child:
        return run_child(args.child[0], args.child[1:])
    if args.models:
        return models_table(args.models.split(","), args.export_cache, not args.no_torch_compile)
    examples_table(args)
    return 0


def examples_table(args) -> None:
    target = load_target(args.target)
    programs = [(p.stem, p.read_text()) for p in sorted(EXAMPLES.glob("*.ir"))]
    programs += [(f"random-{n}", random_program(n)) for n in (100, 500)]
    print(f"compile stages on {target.name}, median of {args.runs} runs, seconds\n")
    print("| program | ops | e-nodes | kernels | search | parse | saturate | serialize | extract | total | "
          "C cold | compile warm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, text in programs:
        runs = [stages(text, target, Limits(seconds=10.0)) for _ in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in ("parse", "saturate", "serialize", "extract",
                                                                  "total")}
        r = runs[0]
        search = "exhaustive" if r["exhaustive"] else "greedy"
        cold, warm = c_build_times(text, args.target, args.runs)
        print(f"| {name} | {r['ops']} | {r['enodes']} | {r['kernels']} | {search} | {med['parse']:.3f} | "
              f"{med['saturate']:.3f} | {med['serialize']:.3f} | {med['extract']:.3f} | {med['total']:.3f} | "
              f"{cold} | {warm:.3f} |")


def c_build_times(text: str, target: str, runs: int) -> tuple[str, float]:
    """The C build of the lowered program with an empty cache (cpu only), and the median whole compile,
    parse to loaded library, once the cache is warm."""
    with tempfile.TemporaryDirectory() as cache:
        program = stitch.compile(text, target=target, cache_dir=cache)
        cold = "-"
        if program.native is not None:
            with tempfile.TemporaryDirectory() as empty:
                start = time.perf_counter()
                build(program.loops, empty)
                cold = f"{time.perf_counter() - start:.3f}"
        warm = []
        for _ in range(runs):
            start = time.perf_counter()
            stitch.compile(text, target=target, cache_dir=cache)
            warm.append(time.perf_counter() - start)
    return cold, statistics.median(warm)


# -- whole models (--models) ------------------------------------------------------------------------------

# tools/export_models.py's name -> the table's
MODELS = {"gpt2_model_12layers": "GPT-2, 12 layers", "bert_model_12layers": "BERT-base, 12 layers",
          "mobilenet_v2": "MobileNetV2", "resnet18": "ResNet-18"}
TORCH_COMPILED = ("gpt2_model_12layers", "bert_model_12layers")
STAGES = ("import", "parse+check", "fold", "saturate", "serialize", "extract", "lower", "C cold", "bind")


def models_table(names: list[str], cache: Path, torch_compile: bool) -> int:
    """The per-stage table of the named models, a row printed as each is done, then what failed."""
    from peers import missing_packages

    missing = missing_packages()
    if missing:
        print(f"compile_speed.py --models needs {', '.join(missing)}: pip install torch==2.13.0 (the CPU build) "
              "and pip install '.[models]'; skipped.")
        return 0
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    from importlib.metadata import version

    print(f"compile time on cpu, seconds, one run each, every timing in a fresh process; {os.cpu_count()} cores; "
          f"torch {version('torch')}, transformers {version('transformers')}, onnxruntime {version('onnxruntime')}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start\n")
    print("| model | exporter | " + " | ".join(f"{s} s" for s in STAGES) + " | stages s | compile s | kernels | "
          "e-nodes | max err | ort s | torch.compile s | load |")
    print("|---|---|" + "---|" * (len(STAGES) + 8))
    notes = []
    for name in names:
        load = os.getloadavg()[0]
        path, exporter = cached_export(name, cache)
        with tempfile.TemporaryDirectory() as save:
            staged = child("stages", str(path), save)
            whole = child("whole", save, str(path.with_suffix(".npz"))) if "error" not in staged else {}
        ort = child("ort", str(path))
        compiled = {}
        if torch_compile and name in TORCH_COMPILED:
            with tempfile.TemporaryDirectory() as inductor:  # Inductor's caches, empty: a cold compile
                compiled = child("torch-compile", name, env=os.environ | {"TORCHINDUCTOR_CACHE_DIR": inductor})
        for what, r in (("stitch", staged), ("stitch.compile", whole), ("onnxruntime", ort),
                        ("torch.compile", compiled)):
            if "error" in r:
                notes.append(f"- {MODELS[name]}, {what}" + (f" ({r['stage']})" if "stage" in r else "") +
                             f": {r['error']}")
        done = [staged.get(s) for s in STAGES]
        total = sum(done[1:]) if all(t is not None for t in done) else None  # stitch.compile's stages
        stopped = "refused" if staged.get("stage") == "import" else "failed"  # the stage an error stopped
        cells = [seconds(t, stopped if s == staged.get("stage") else "-") for s, t in zip(STAGES, done)]
        cells += [seconds(total), seconds(whole.get("compile")), str(staged.get("kernels", "-")),
                  str(staged.get("enodes", "-")), f"{whole['err']:.1e}" if "err" in whole else "-",
                  seconds(ort.get("ort")), seconds(compiled.get("torch.compile")), f"{load:.2f}"]
        print(f"| {MODELS[name]} | {exporter} | " + " | ".join(cells) + " |", flush=True)
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    if notes:
        print("\n" + "\n".join(notes))
    return 0


def seconds(t: float | None, missing: str = "-") -> str:
    return missing if t is None else f"{t:.2f}"


def child(mode: str, *args: str, env: dict | None = None) -> dict:
    """One timing in a fresh process (`--child MODE ARGS`): the JSON it prints last, or {"error": ...}."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", mode, *args],
                          capture_output=True, text=True, env=env, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        tail = " ".join(proc.stderr.strip().splitlines()[-3:])
        return {"error": f"the {mode} process exited with status {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def run_child(mode: str, args: list[str]) -> int:
    """Run one of CHILDREN, printing what it measured (with the error, if it failed) as one JSON line."""
    result: dict = {}
    try:
        CHILDREN[mode](*args, result)
    except Exception as err:  # a model stitch refuses is a row of the table, not a crash
        lines = f"{type(err).__name__}: {err}".strip().splitlines()
        result["error"] = " ".join(line.strip() for line in lines[:3])
    print(json.dumps(result))
    return 0


def time_stages(onnx_path: str, save: str, result: dict) -> None:
    """Each stage of stitch.compile on its own (pipeline.py's compile_entry written out, cpu target, a static
    program), into `result` as it goes (`stage`: the one running); then the imported text, weights and
    input names into `save` for the whole compile."""
    import pickle

    from stitch.engine import pipeline
    from stitch.engine.compiled_program import Compiled
    from stitch.engine.ir.extent import planning_values
    from stitch.engine.ir.fold import fold_bound, fold_values
    from stitch.engine.ir.interp import bind_weights
    from stitch.engine.ir.parse import ir_parser
    from stitch.frontends.onnx_import import import_onnx
    from stitch.lowering.bind import bind
    from stitch.targets.cc import compiler_flags

    def timed(stage: str, f, *args):
        result["stage"] = stage
        start = time.perf_counter()
        value = f(*args)
        result[stage] = result.get(stage, 0.0) + time.perf_counter() - start
        return value

    ir_parser()  # built once per process (about 1 s), as bench/models.py leaves it out of the import
    target = load_target("cpu")
    imported = timed("import", lambda: import_onnx(onnx_path, entry="m"))
    graph = timed("parse+check", lambda: pipeline.check_entry(pipeline.read_program(imported.text), None))
    weights = timed("fold", bind_weights, graph, imported.weights)
    folded = timed("fold", fold_bound, graph, tuple(weights))
    rule_files = timed("saturate", pipeline.load_rule_files, [], True)
    run, report = timed("saturate", pipeline.saturate_program, folded.graph, rule_files, Limits())
    data = timed("serialize", run.data)
    run.release()
    extracted = timed("extract", pipeline.extract, folded.graph, data, target)
    compiled = Compiled(folded.graph, target, report, data, extracted, 0.0)
    bound = timed("fold", lambda: weights | fold_values(folded, weights))
    loops = timed("lower", pipeline.lower_program, compiled, Limits(), tuple(bound), None,
                  planning_values(graph.symbols))
    with tempfile.TemporaryDirectory() as empty:
        timed("C cold", build, loops, Path(empty), compiler_flags(None))
    timed("bind", bind, loops, bound)
    del result["stage"]
    result |= {"kernels": len(extracted.schedule.kernels), "enodes": report.enodes}
    with open(Path(save) / "imported.pickle", "wb") as f:
        pickle.dump({"text": imported.text, "weights": imported.weights, "inputs": imported.inputs,
                     "outputs": imported.outputs}, f, protocol=pickle.HIGHEST_PROTOCOL)


def time_whole_compile(save: str, npz: str, result: dict) -> None:
    """stitch.compile of the saved import with an empty C cache, then its largest difference from
    onnxruntime's outputs on the export's inputs."""
    import pickle

    import numpy as np

    with open(Path(save) / "imported.pickle", "rb") as f:
        imported = pickle.load(f)
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        program = stitch.compile(imported["text"], weights=imported["weights"], cache_dir=cache)
        result["compile"] = time.perf_counter() - start
        with np.load(npz) as data:
            feeds = {imported["inputs"][k]: data[k] for k in data.files if k in imported["inputs"]}
            want = [data[f"output:{o}"] for o in imported["outputs"]]
        got = program(**feeds)
        result["err"] = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True))


def time_ort_session(onnx_path: str, result: dict) -> None:
    """onnxruntime's session creation from the file (its default graph optimizations, the CPU provider)."""
    import onnxruntime as ort

    start = time.perf_counter()
    ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    result["ort"] = time.perf_counter() - start


def time_torch_compile(name: str, result: dict) -> None:
    """torch.compile's (Inductor's) first call less an eager call, of the seeded module export_models builds."""
    import torch

    em = export_models()
    module, inputs = em.build(name, em.SIZES["bench"])
    args = tuple(inputs.values())
    with torch.no_grad():
        module(*args)  # warm: the eager call subtracted is a steady one
        start = time.perf_counter()
        module(*args)
        eager = time.perf_counter() - start
        torch._dynamo.reset()
        compiled = torch.compile(module, dynamic=False)
        start = time.perf_counter()
        compiled(*args)
        first = time.perf_counter() - start
    result |= {"eager": eager, "first call": first, "torch.compile": first - eager}


CHILDREN = {"stages": time_stages, "whole": time_whole_compile, "ort": time_ort_session,
            "torch-compile": time_torch_compile}


def export_models():
    """tools/export_models.py, imported (torch only inside its functions)."""
    sys.path.insert(0, str(HERE.parent / "tools"))
    import export_models as em

    return em


def export_key() -> str:
    """What an export depends on: the exporting packages' versions and the text of the tools that build the models."""
    import hashlib
    from importlib.metadata import version

    h = hashlib.sha256(" ".join(version(p) for p in ("torch", "transformers", "onnx", "onnxscript")).encode())
    for tool in ("export_models.py", "vision_models.py"):
        h.update((HERE.parent / "tools" / tool).read_bytes())
    return h.hexdigest()[:12]


def cached_export(name: str, cache: Path) -> tuple[Path, str]:
    """(NAME-EXPORTER-KEY.onnx in `cache`, the exporter), exported at the bench size by export_models (onnxruntime
    checked against torch eager) unless already there, with its inputs and onnxruntime's outputs in the .npz
    beside it. The dynamo exporter first; the TorchScript one (opset 17) where dynamo fails."""
    key = export_key()
    for exporter in ("dynamo", "torchscript"):
        path = cache / f"{name}-{exporter}-{key}.onnx"
        if path.exists():
            return path, exporter
    em = export_models()
    try:
        exporter, (data, feeds, outputs, model) = "dynamo", em.export_one(name, "dynamo", em.SIZES["bench"])
    except Exception as err:  # said, then the other exporter
        print(f"{name}: the dynamo exporter failed ({type(err).__name__}: {str(err).splitlines()[0][:300]}); "
              "exporting with the TorchScript exporter (opset 17)", file=sys.stderr)
        exporter, (data, feeds, outputs, model) = "torchscript", em.export_one(name, "torchscript",
                                                                                em.SIZES["bench"])
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{name}-{exporter}-{key}.onnx"
    em.save_npz(path.with_suffix(".npz"), feeds | {f"output:{o.name}": v for o, v in zip(model.graph.output, outputs)})
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(path)  # written last: a .onnx there has its .npz
    return path, exporter


if __name__ == "__main__":
    with deep_recursion():  # the stages are called one by one here, outside stitch's entry points
        sys.exit(main())
