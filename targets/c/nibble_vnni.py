"""nibble_dot.py's integer path: a one-row product of a 4-bit (or u8) weight and an activation
quantized to int8 per block of 32, summed with AVX-512 VNNI (`vpdpbusd`, u8 x s8 -> s32), one scale
multiply per block, as onnxruntime's accuracy_level 4 and llama.cpp's Q4_0 x Q8_0 do.

    for k reduce { for j { C[.., j] += (cast(X(k), f32) * D(k)) * ((cast(Q(j, k)) - Z) * S(j, k)) } }

X is an i8 expression of k (the quantized activation), D its block's scale (the ONNX importer writes A
so at MatMulNBits' accuracy_level 4: frontends/onnx_quantized.py). First, once per call, X is
evaluated at every k into a row of bytes laid out as the weight's vectors read it, with each block's
D and the sum of its X; that D is one value for all k of each block is checked there (its reads are
per k in the schedule the importer's form gets), and where it is not (or NaN), or the machine has no
VNNI, the loops run as written. Then, per column, GROUP blocks at a time: one 64-byte load of the
column's bytes (128 nibbles: their low and high halves masked apart, two `vpdpbusd`; or 64 bytes: one),
the integer sums of each block's lanes converted once and multiplied by the block's D * S. A zero
point Z that is an integer literal (the symmetric 8) starts the integer sum at -Z * sum(X); any other
block-invariant Z is subtracted in f32 as Z * sum(X). The integer products are exact; the sum's order
and where the scales multiply differ from the loops as written (within the reference's tolerance).
Columns left over and k past the last whole block run as written, in f32.
"""

from __future__ import annotations

import numpy as np

from ...lowering.loops import Lit, Load
from .dot import column_steps
from .emit import KernelWriter

BLOCK = 32
COLUMNS = 4  # columns side by side, sharing the activation's vectors


def emit_vnni(w: KernelWriter, plan, pad: str) -> None:
    k, j = plan.k, plan.j
    x, d = plan.act
    nibbles = plan.nibbles
    group = 4 if nibbles else 2  # blocks per 64-byte load of the weight
    lanes = 16 // group  # dword lanes per block
    n_k = k.extent
    blocks = n_k // BLOCK
    whole = blocks * BLOCK
    groups = -(-blocks // group)
    full = blocks // group
    last = blocks - full * group  # blocks in the last, partial group
    target = w.access(plan.acc.buffer, plan.acc.index)
    a_one, b_one = w.expr(plan.a), w.expr(plan.b)
    src = plan.source
    bytes_at = f"(const uint8_t *)&{w.access(src.buffer, src.index)}"
    zero = plan.zero
    literal_zero = isinstance(zero, Lit) and float(zero.value) == int(zero.value) and abs(zero.value) <= 255
    float_zero = zero is not None and not literal_zero
    span = BLOCK * group  # k per group
    p, q = pad + "  ", pad + "    "

    def position(var: str) -> str:
        """Where k's X sits in the row of bytes: nibbles' vectors hold a group's even k (low nibbles) in
        the first 64 bytes, its odd k in the next, block after block; bytes are in order."""
        if not nibbles:
            return var
        return (f"({var}) / {span} * {span} + ({var}) % 2 * 64 + ({var}) % {span} / {BLOCK} * 16 "
                f"+ ({var}) % {BLOCK} / 2")

    def plain(first: str, r: str) -> list[str]:
        return [f"{r}for (int64_t {k.var} = 0; {k.var} < {n_k}; ++{k.var}) {{",
                f"{r}  for (int64_t {j.var} = {first}; {j.var} < {j.extent}; ++{j.var}) {target} += {a_one} * {b_one};",
                f"{r}}}"]

    def per_block(expr, at_k: str) -> str:
        return f"({{ const int64_t {k.var} = {at_k}; {w.expr(expr)}; }})"

    def blockwise(expr, g: str, count: int) -> str:
        """A 16-lane vector of a block-invariant f32 expression, each lane its block's value (0 past
        the last block)."""
        flat = w.flat_index(expr.buffer, expr.index) if isinstance(expr, Load) else None
        steps = None
        if flat is not None and count == group:
            ks = np.arange(group, dtype=np.int64) * BLOCK
            from .nibble_dot import _values

            at = _values(flat, k.var, ks)
            steps = at is not None and np.array_equal(np.broadcast_to(at - at[0], ks.shape), np.arange(group))
        idx = ", ".join(str(lane // lanes) for lane in reversed(range(16)))
        if steps:  # the blocks' values one after the other: one load
            load = (f"_mm_loadu_ps(({{ const int64_t {k.var} = {g} * {span}; &{w.access(expr.buffer, expr.index)}; }}))"
                    if group == 4 else
                    f"_mm_castpd_ps(_mm_load_sd((const double *)({{ const int64_t {k.var} = {g} * {span}; "
                    f"&{w.access(expr.buffer, expr.index)}; }})))")
        else:
            vals = [per_block(expr, f"{g} * {span} + {BLOCK * i}") if i < count else "0.0f" for i in range(4)]
            load = f"_mm_set_ps({', '.join(reversed(vals))})"
        return f"_mm512_permutexvar_ps(_mm512_set_epi32({idx}), _mm512_castps128_ps512({load}))"

    def columns(count: int, r: str) -> list[str]:
        out = [f"{r}__m512 {', '.join(f's{c} = _mm512_setzero_ps()' for c in range(count))};"]

        def one_group(g: str, n_blocks: int, rr: str) -> list[str]:
            mask = "" if n_blocks == group else f"(__mmask64){(1 << (n_blocks * 64 // group)) - 1}ULL"
            stride = 128 if nibbles else 64
            body = [f"{rr}{{ const __m512i st_x0 = _mm512_load_si512((const void *)(st_aq + {g} * {stride}));"]
            if nibbles:
                body.append(f"{rr}  const __m512i st_x1 = _mm512_load_si512((const void *)(st_aq + {g} * 128 + 64));")
            body.append(f"{rr}  const __m512 st_dv = _mm512_load_ps(st_dl + {g} * 16);")
            for c in range(count):
                at = f"({{ const int64_t {j.var} = st_j + {c}, {k.var} = {g} * {span}; {bytes_at}; }})"
                load = (f"_mm512_maskz_loadu_epi8({mask}, (const void *){at})" if mask else
                        f"_mm512_loadu_si512((const void *){at})")
                init = "_mm512_load_si512((const void *)(st_init + " + g + " * 16))" if literal_zero else \
                    "_mm512_setzero_si512()"
                body += [f"{rr}  {{ const int64_t {j.var} = st_j + {c}; const __m512i v = {load};",
                         f"{rr}    __m512i t = {init};"]
                if nibbles:
                    high = "_mm512_and_si512(_mm512_srli_epi16(v, 4), st_low)"
                    body += [f"{rr}    t = _mm512_dpbusd_epi32(t, _mm512_and_si512(v, st_low), st_x0);",
                             f"{rr}    t = _mm512_dpbusd_epi32(t, {high}, st_x1);"]
                else:
                    body.append(f"{rr}    t = _mm512_dpbusd_epi32(t, v, st_x0);")
                body.append(f"{rr}    __m512 f = _mm512_cvtepi32_ps(t);")
                if float_zero:
                    body.append(f"{rr}    f = _mm512_fnmadd_ps({blockwise(zero, g, n_blocks)}, "
                                f"_mm512_load_ps(st_sumf + {g} * 16), f);")
                body.append(f"{rr}    s{c} = _mm512_fmadd_ps(f, _mm512_mul_ps({blockwise(plan.scale, g, n_blocks)}, "
                            f"st_dv), s{c}); }}")
            body.append(f"{rr}}}")
            return body

        if full:
            out.append(f"{r}for (int64_t st_g = 0; st_g < {full}; ++st_g)")
            out += one_group("st_g", group, r + "  ")
        if last:
            out += one_group(str(full), last, r)
        for c in range(count):
            out.append(f"{r}{{ const int64_t {j.var} = st_j + {c}; float t = _mm512_reduce_add_ps(s{c});")
            if whole < n_k:
                out.append(f"{r}  for (int64_t {k.var} = {whole}; {k.var} < {n_k}; ++{k.var}) t += {a_one} * {b_one};")
            out.append(f"{r}  {target} += t; }}")
        return out

    lines = [f"{pad}{{",
             "#if defined(__AVX512VNNI__) && defined(__AVX512BW__)",
             f"{p}int8_t st_aq[{groups * 128 if nibbles else groups * 64}] __attribute__((aligned(64)));",
             f"{p}float st_dl[{groups * 16}] __attribute__((aligned(64)));  /* each lane its block's D */",
             f"{p}int32_t st_init[{groups * 16}] __attribute__((aligned(64)));  /* -Z * sum(X) in its first lane */",
             f"{p}float st_sumf[{groups * 16}] __attribute__((aligned(64)));  /* sum(X) / lanes in each lane */",
             f"{p}int st_ok = 1;",
             f"{p}memset(st_aq, 0, sizeof st_aq); memset(st_dl, 0, sizeof st_dl); memset(st_init, 0, sizeof st_init);",
             f"{p}memset(st_sumf, 0, sizeof st_sumf);",
             f"{p}for (int64_t st_b = 0; st_b < {blocks}; ++st_b) {{",
             f"{q}const float st_d = {per_block(d, f'st_b * {BLOCK}')};",
             f"{q}int32_t st_sum = 0;",
             f"{q}for (int64_t st_i = st_b * {BLOCK}; st_i < st_b * {BLOCK} + {BLOCK}; ++st_i) {{",
             f"{q}  const int64_t {k.var} = st_i;",
             f"{q}  const int8_t st_v = (int8_t)({w.expr(x)});",
             f"{q}  st_ok &= {w.expr(d)} == st_d;",
             f"{q}  st_aq[{position('st_i')}] = st_v; st_sum += st_v;",
             f"{q}}}",
             f"{q}for (int st_l = 0; st_l < {lanes}; ++st_l) {{",
             f"{q}  st_dl[st_b / {group} * 16 + st_b % {group} * {lanes} + st_l] = st_d;",
             f"{q}  st_sumf[st_b / {group} * 16 + st_b % {group} * {lanes} + st_l] = (float)st_sum / {lanes};",
             f"{q}}}"]
    if literal_zero:
        lines.append(f"{q}st_init[st_b / {group} * 16 + st_b % {group} * {lanes}] = -{int(zero.value)} * st_sum;")
    lines += [f"{p}}}",
              f"{p}if (st_ok) {{",
              f"{q}const __m512i st_low = _mm512_set1_epi8(15); (void)st_low;",
              f"{q}int64_t st_j = 0;"]
    lines += column_steps(q, j.extent, [(COLUMNS, columns(COLUMNS, q + "  ")), (1, columns(1, q + "  "))])
    lines += [f"{p}}} else",
              "#endif",
              f"{p}{{"]
    lines += plain("0", q)
    lines += [f"{p}}}", f"{pad}}}"]
    w.lines += lines
