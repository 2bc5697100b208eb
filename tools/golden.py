"""Hash what stitch emits for the examples and the ONNX fixtures: schedule, loops and C.

A refactor that must not change behaviour is checked by running this before and after and comparing
the two manifests:

    python3 tools/golden.py > /tmp/before.txt     # ... refactor ...
    python3 tools/golden.py > /tmp/after.txt && diff /tmp/before.txt /tmp/after.txt

Each line is `program target stage sha256[:16]`. The cpu target's on-chip size follows the L2 the
machine reports, so the sysfs reading is pinned here (as tests/conftest.py pins it) and a manifest
made on one machine compares with one made on another. `--only SUBSTRING` limits the programs;
`--dump DIR` also writes each text, to diff a stage that changed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "models"
BLOCKS = ("bert_layer", "gpt2_block", "llama_layer_rotary_given", "transformer_encoder_layer")
PINNED_CACHE_BYTES = {1: 48 * 1024, 2: 2 * 1024 * 1024, 3: 32 * 1024 * 1024 // 2}


def pin_caches() -> None:
    from stitch.engine.schedule import target

    target.machine_cache_bytes = lambda level, root=None: PINNED_CACHE_BYTES.get(level)
    # and the vector width op prices are chosen by (targets/cpu.toml's [op_cycles_at.32] on AVX2): AVX-512's
    target.machine_vector_bytes = lambda cpuinfo=None: 64


def cli(*argv: str) -> str:
    from stitch.engine.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    if code:
        return f"exit {code}\n{err.getvalue()}"
    return out.getvalue()


def programs(work: Path, only: str | None):
    """(name, .ir path, extra compile arguments): the examples, then every ONNX fixture imported
    with its weights as parameters, then the four blocks with their weights bound."""
    for path in sorted((ROOT / "examples").glob("*.ir")):
        yield path.stem, path, ()
    for onnx in sorted(FIXTURES.glob("*.onnx")):
        name = onnx.stem
        if only and only not in name:
            continue
        ir = work / f"{name}.ir"
        cli("import", str(onnx), "-o", str(ir), "--keep-constants")
        yield name, ir, ()
        if name.rsplit("-", 1)[0] in BLOCKS:
            bound, weights = work / f"{name}-bound.ir", work / f"{name}.npz"
            cli("import", str(onnx), "-o", str(bound), "--weights", str(weights))
            yield f"{name}+weights", bound, ("--weights", str(weights))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="only programs whose name holds this")
    parser.add_argument("--dump", type=Path, help="also write each emitted text into this folder")
    args = parser.parse_args()
    pin_caches()
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, extra in programs(Path(tmp), args.only):
            if args.only and args.only not in name:
                continue
            for target in ("cpu", "accel"):
                for stage in ("schedule", "loops", "c") if target == "cpu" else ("schedule", "loops"):
                    text = cli("compile", str(path), "--target", target, "--emit", stage, *extra)
                    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
                    print(name, target, stage, digest, flush=True)
                    if args.dump:
                        args.dump.mkdir(parents=True, exist_ok=True)
                        (args.dump / f"{name}.{target}.{stage}").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
