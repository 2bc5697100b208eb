"""The C prelude every generated file starts with (targets/c/prelude.h): below AVX-512, gcc 12 reads only
the intrinsics headers stitch's C uses instead of all of <immintrin.h>, so each one it uses must be there."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from stitch.targets import cc
from stitch.targets.c.micro_kernel import vector_typedefs
from stitch.targets.c.prelude import PRELUDE, STRIDED_ROW, VECTOR_EXP
from stitch_testing import needs_cc

PRINTERS = Path(cc.__file__).resolve().parent / "c"
# the SSE and AVX2 intrinsics named anywhere in the printers and their headers (AVX-512's are compiled
# only where __AVX512F__ is defined, and there the prelude reads <immintrin.h> whole)
INTRINSIC = re.compile(r"\b_mm(?:256)?_[a-z0-9_]*[a-z0-9]\b")


def test_the_printers_name_intrinsics_to_check():
    names = {n for p in PRINTERS.iterdir() if p.suffix in (".py", ".h", ".c") for n in INTRINSIC.findall(p.read_text())}
    assert {"_mm256_fmadd_ps", "_mm256_i32gather_ps", "_mm_sfence", "_mm256_madd_epi16"} <= names


@needs_cc
def test_every_intrinsic_the_printers_name_is_declared_after_the_prelude(tmp_path):
    """Each name compiled after the prelude and its vector helpers at this machine's width and with the
    flags programs are built with: an intrinsic missing from the headers the prelude reads is an error
    (`__typeof__` of an undeclared name), here rather than in the first program that uses it."""
    names = sorted({n for p in PRINTERS.iterdir() if p.suffix in (".py", ".h", ".c")
                    for n in INTRINSIC.findall(p.read_text())})
    compiler = cc.compiler()
    width = cc.vector_bytes(compiler, cc.compiler_flags())
    helpers = f"#define ST_LANES {width // 4}\n{VECTOR_EXP}{STRIDED_ROW}" if width in (32, 64) else ""
    src = tmp_path / "names.c"
    src.write_text(PRELUDE + vector_typedefs(width) + helpers
                   + "".join(f"__typeof__({n}) *st_name{i};\n" for i, n in enumerate(names)))
    flags = [f for f in cc.compiler_flags() if f != "-shared"]
    done = subprocess.run([compiler, *flags, "-c", str(src), "-o", str(tmp_path / "names.o")],
                          check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
