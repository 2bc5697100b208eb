"""The C every generated file starts with, read from the `.h`/`.c` files beside this module.

- prelude.h: includes, the gather index check (st_index), the non-temporal row store (st_stream_*),
  and the branch-free expf, erff and tanhf every f32 loop calls (so such loops vectorize);
- float_helpers.h, int_helpers.h: one small function per (op, dtype) for the ops that are not one C
  operator, as `string.Template`s filled once per dtype (`${t}` the C type, `${d}` the dtype name);
- vector_math.h: st_expf and st_tanhf on 16 lanes (AVX-512) or 8 (AVX2), and the partial-line stores beside
  non-temporal ones (`vector_loop`, `summed_row`, `pipelined_rows`);
- strided_row.h: a gather and the NaN-aware max and min on one st_vf32, AVX2's or AVX-512's (strided_row.py);
- runner.h / runner.c: how tiles reach the runtime (targets/runtime.c's stitch_rt_run has this
  signature): bound by stitch_bind when the library is loaded; compiled on its own, the file runs
  every tile on the calling thread with one scratch block per call;
- profile.h: -DSTITCH_PROFILE times each kernel call (`stitch run --profile`), KERNELS its count;
- error_slot.c: the one slot a gather's out-of-range index is reported in.
"""

from __future__ import annotations

from pathlib import Path
from string import Template

from ...engine.ir.program import INT_DTYPES, dtype_bytes

HERE = Path(__file__).resolve().parent
C_TYPES = {"f16": "_Float16", "f32": "float", "f64": "double", "i8": "int8_t", "u8": "uint8_t", "i32": "int32_t",
           "i64": "int64_t", "bool": "bool"}


def _read(name: str) -> str:
    return (HERE / name).read_text()


PRELUDE_HEAD = _read("prelude.h")
VECTOR_EXP = _read("vector_math.h")
STRIDED_ROW = _read("strided_row.h")
RUNNER = _read("runner.h")
RUNNER_DEFINITION = _read("runner.c")
PROFILE = _read("profile.h")
ERROR_SLOT = _read("error_slot.c")
_FLOAT_HELPERS = Template(_read("float_helpers.h"))
_BITS = {"f16": "uint16_t", "f32": "uint32_t", "f64": "uint64_t"}  # a float's bits, for max and min
_INT_HELPERS = Template(_read("int_helpers.h"))


def prelude() -> str:
    """Includes and one small function per (op, dtype) for the ops that are not one C operator.

    Functions, not macros: a macro repeating its argument's text (through __typeof__, say) doubles
    the preprocessed source at every level of nesting. `where` takes both arms evaluated (a load in
    only one arm becomes an AVX-512 masked load, which gcc 12.2 -O3 -march=native miscompiles).
    Float -> int casts are defined as numpy's on x86-64 (README, "Floating-point semantics"): truncate
    toward zero, and NaN or a value outside the integer type's range gives its minimum; to i8 and u8
    the i32 cast's low byte (the value chosen first, then converted: no condition on the result). A
    float's max and min are masks of its bits from the comparisons, without a branch (NaN from either
    operand, max(-0, +0) = +0, min(-0, +0) = -0): gcc's vectorizer takes them inside long expressions
    (a dynamic quantization's clamps), where nested conditionals became selects of booleans it would not
    vectorize. Shifts by a count outside 0..bits-1 give 0 (-1 for a negative value
    shifted right), as numpy's do. pow is C99's:
    gcc's vectorizer turns pow(x, 0.5) into sqrt(x), which differs at -0.0 and -inf, so st_pow puts
    those two back."""
    out = [PRELUDE_HEAD]
    for d in ("f16", "f32", "f64"):
        # the range test runs in a type that holds every value of the source exactly
        wide = "double" if d == "f64" else "float"
        out.append(f"typedef {wide} float_t_{d};\n")
        out.append(_FLOAT_HELPERS.substitute(
            t=C_TYPES[d], d=d, u=_BITS[d], sfx="" if d == "f64" else "f", i32_lo="-2147483649.0" if d == "f64" else "-2147483904.0f",
            i32_hi="2147483648.0" if d == "f64" else "2147483648.0f",
            i64_lo="-9223372036854775808.0" if d == "f64" else "-9223372036854775808.0f",
            i64_hi="9223372036854775808.0" if d == "f64" else "9223372036854775808.0f"))
    for d in INT_DTYPES:
        out.append(_INT_HELPERS.substitute(t=C_TYPES[d], d=d, bits=8 * dtype_bytes(d), unsigned=int(d.startswith("u"))))
    out.append("static inline bool st_where_bool(bool c, bool a, bool b) { return c ? a : b; }\n")
    return "".join(out)


PRELUDE = prelude()
