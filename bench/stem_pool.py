"""ResNet-18's stem (a 7x7 stride-2 conv of 3 -> 64 channels, its bias and ReLU, then a 3x3 stride-2 max
pool padded by 1; 224x224 in, [1, 64, 56, 56] out) as stitch compiles it, against hand-written C of the
forms a conv and the max pool reading it could take in one kernel (issue 49, item 3). A measurement for
the design of that form, not a form stitch has.

The hand-written conv is stitch's own for this program (its kernel's staging of A per tile of 2 conv
rows, its 6-row by 2-vector register blocks, the same order of sums), so every hand form's output equals
stitch's bit for bit (checked). It runs slower than stitch's kernel here (1.3x, the same inner loop: code
placement), so the hand forms are compared with each other. The forms, all on one thread:

- two: the conv writes its 112 rows (3.2 MB), then a pool kernel reads them where they are (no padded
  copy: the window's rows and columns past the edge are skipped). Also timed apart: the conv alone.
- tile R: per tile of R pool rows, the conv's 2R + 1 rows that tile reads (its footprint, the one row it
  shares with the tile before it recomputed) into a buffer, then the tile's pool rows from it. Recomputes
  1/(2R) of the conv's FLOPs (plus the tail of the last tile); the buffer is (2R + 1) x 28 KB.
- carry C: per chunk of C pool rows (a thread's share: 28 rows for 2 threads), conv rows made two at a
  time, the shared row carried to the next pool row in a buffer of 4 rows (115 KB); 1 row recomputed
  per chunk.

Each round profiles stitch's kernels (`CompiledProgram.profile`, the calling thread's CPU time) and then
times each hand form (the calling thread's CPU time around the call), --calls calls each; the medians of
every round's figures are printed, and the median over rounds of each form's time over the hand two-kernel
form's in the same round (which load drifts touch alike), with the load before and after. Needs onnx.
With --batch B each hand form makes B images a call (stitch's one-image program is not timed then): the two
kernels' conv rows, 3.2 MB an image, stop fitting the last-level cache (32 MB here) past 8 or so.
Run: python3 bench/stem_pool.py [--rounds N] [--calls N] [--size 224] [--batch B]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time

import numpy as np

HAND_C = r"""
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
typedef __m256 vf;  /* 8 lanes: the AVX2 width this was written for; -march=native compiles it anywhere x86-64-v3 */

/* one register block: `rows` positions (from a, a row of A every ld) by 16 channels from p3, over the 147 taps */
static inline __attribute__((always_inline)) void block(int rows, const float *a, int ld, const float *W,
                                                        const float *B, int p3, float *out) {
  vf c[6][2];
  for (int i = 0; i < rows; ++i) c[i][0] = c[i][1] = _mm256_setzero_ps();
  for (int r0 = 0; r0 < 147; ++r0) {
    vf b0 = _mm256_load_ps(W + 64 * r0 + p3), b1 = _mm256_load_ps(W + 64 * r0 + p3 + 8);
    const float *ar = a + (size_t)ld * r0;
    for (int i = 0; i < rows; ++i) {
      vf ai = _mm256_set1_ps(ar[i]);
      c[i][0] = _mm256_fmadd_ps(ai, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(ai, b1, c[i][1]);
    }
  }
  vf z = _mm256_setzero_ps(), bb0 = _mm256_loadu_ps(B + p3), bb1 = _mm256_loadu_ps(B + p3 + 8);
  for (int i = 0; i < rows; ++i) {
    _mm256_store_ps(out + 64 * i + p3, _mm256_max_ps(_mm256_add_ps(c[i][0], bb0), z));
    _mm256_store_ps(out + 64 * i + p3 + 8, _mm256_max_ps(_mm256_add_ps(c[i][1], bb1), z));
  }
}

/* conv rows [row0, row0 + n), n <= 2, of the padded input t12 [3][P][P] into dst [n][WO][64] = relu(acc + B),
   A staged per tile as stitch's kernel does ([147][n][WO]), register blocks of 6 positions by 16 channels */
static void conv_pair(const float *t12, int P, int WO, const float *W, const float *B, int row0, int n, float *dst,
                      float *stage) {
  for (int c = 0; c < 3; ++c)
    for (int dy = 0; dy < 7; ++dy)
      for (int dx = 0; dx < 7; ++dx)
        for (int p1 = 0; p1 < n; ++p1) {
          const float *src = t12 + (size_t)P * P * c + (size_t)P * (2 * (row0 + p1) + dy) + dx;
          float *d = stage + (size_t)(49 * c + 7 * dy + dx) * n * WO + WO * p1;
          for (int p2 = 0; p2 < WO; ++p2) d[p2] = src[2 * p2];
        }
  for (int p1 = 0; p1 < n; ++p1) {
    float *out = dst + (size_t)p1 * WO * 64;
    const float *a = stage + WO * p1;
    for (int p3 = 0; p3 < 64; p3 += 16) {
      int p2 = 0;
      for (; p2 + 6 <= WO; p2 += 6) block(6, a + p2, n * WO, W, B, p3, out + 64 * p2);
      switch (WO - p2) {  /* the last block of rows, its size a constant in each case */
        case 5: block(5, a + p2, n * WO, W, B, p3, out + 64 * p2); break;
        case 4: block(4, a + p2, n * WO, W, B, p3, out + 64 * p2); break;
        case 3: block(3, a + p2, n * WO, W, B, p3, out + 64 * p2); break;
        case 2: block(2, a + p2, n * WO, W, B, p3, out + 64 * p2); break;
        case 1: block(1, a + p2, n * WO, W, B, p3, out + 64 * p2); break;
      }
    }
  }
}

/* conv rows [row0, row0 + n) in tiles of 2, as lowering would make a producer over a footprint */
static void conv_rows(const float *t12, int P, int WO, const float *W, const float *B, int row0, int n, float *dst,
                      float *stage) {
  for (int i = 0; i < n; i += 2)
    conv_pair(t12, P, WO, W, B, row0 + i, n - i < 2 ? n - i : 2, dst + (size_t)i * WO * 64, stage);
}

/* pool row t (3x3, stride 2, pad 1) from conv rows 2t-1, 2t, 2t+1 at rows[0..2] (NULL past the edge), written
   channels first to out [64][PH][PW] through tmp [PW][64] */
static void pool_row(float *const rows[3], int WO, int PH, int PW, int t, float *out, float *tmp) {
  for (int j = 0; j < PW; ++j)
    for (int c = 0; c < 64; c += 8) {
      vf m = _mm256_set1_ps(-INFINITY);
      for (int k = 0; k < 3; ++k) {
        if (!rows[k]) continue;
        for (int x = 2 * j - 1; x <= 2 * j + 1; ++x)
          if (x >= 0 && x < WO) m = _mm256_max_ps(m, _mm256_load_ps(rows[k] + 64 * x + c));
      }
      _mm256_store_ps(tmp + 64 * j + c, m);
    }
  for (int c = 0; c < 64; ++c)
    for (int j = 0; j < PW; ++j) out[(size_t)c * PH * PW + (size_t)PW * t + j] = tmp[64 * j + c];
}

void stem_conv(const float *t12, int P, int HO, const float *W, const float *B, float *t13, float *stage) {
  conv_rows(t12, P, HO, W, B, 0, HO, t13, stage);
}

void stem_pool(const float *t13, int HO, float *out, float *tmp) {
  int PH = (HO - 1) / 2 + 1;
  for (int t = 0; t < PH; ++t) {
    float *rows[3];
    for (int k = 0; k < 3; ++k) {
      int y = 2 * t - 1 + k;
      rows[k] = y >= 0 && y < HO ? (float *)t13 + (size_t)y * HO * 64 : 0;
    }
    pool_row(rows, HO, PH, PH, t, out, tmp);
  }
}

void stem_tiles(int R, const float *t12, int P, int HO, const float *W, const float *B, float *buf, float *out,
                float *stage, float *tmp) {
  int PH = (HO - 1) / 2 + 1;
  for (int t0 = 0; t0 < PH; t0 += R) {
    int r = R < PH - t0 ? R : PH - t0;
    int lo = 2 * t0 - 1 < 0 ? 0 : 2 * t0 - 1, hi = 2 * (t0 + r) + 1 > HO ? HO : 2 * (t0 + r) + 1;
    conv_rows(t12, P, HO, W, B, lo, hi - lo, buf, stage);
    for (int t = t0; t < t0 + r; ++t) {
      float *rows[3];
      for (int k = 0; k < 3; ++k) {
        int y = 2 * t - 1 + k;
        rows[k] = y >= 0 && y < HO ? buf + (size_t)(y - lo) * HO * 64 : 0;
      }
      pool_row(rows, HO, PH, PH, t, out, tmp);
    }
  }
}

void stem_carry(int chunk, const float *t12, int P, int HO, const float *W, const float *B, float *ring, float *out,
                float *stage, float *tmp) {
  int PH = (HO - 1) / 2 + 1;
  size_t row = (size_t)HO * 64;
  for (int t0 = 0; t0 < PH; t0 += chunk) {
    int t1 = t0 + chunk < PH ? t0 + chunk : PH;
    float *cur = ring, *prev = ring + 2 * row;  /* prev: conv row 2t - 1 */
    if (t0 > 0) conv_rows(t12, P, HO, W, B, 2 * t0 - 1, 1, prev, stage);
    for (int t = t0; t < t1; ++t) {
      int n = 2 * t + 1 < HO ? 2 : 1;
      conv_rows(t12, P, HO, W, B, 2 * t, n, cur, stage);
      float *rows[3] = {t > 0 ? prev : 0, cur, n == 2 ? cur + row : 0};
      pool_row(rows, HO, PH, PH, t, out, tmp);
      if (n == 2) memcpy(prev, cur + row, row * sizeof *prev);
    }
  }
}
"""


TWO = "hand: two kernels (conv, then the pool reading its rows)"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=9)
    ap.add_argument("--size", type=int, default=224, help="the image's height and width (a multiple of 4)")
    ap.add_argument("--batch", type=int, default=1,
                    help="images a hand form's call makes, one after another (the two kernels: every image's conv, "
                         "then every image's pool); stitch's kernels are timed at 1 only")
    return ap.parse_args(argv)


def stem_model(size: int, seed: int = 0):
    """The stem as ONNX: Conv 7x7/2 pad 3 (3 -> 64, bias) + Relu + MaxPool 3x3/2 pad 1."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((64, 3, 7, 7)) * 0.1).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[7, 7], strides=[2, 2], pads=[3, 3, 3, 3]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w, b


def hand_library():
    from stitch.targets.cc import (
        cached_library,
        compiler,
        compiler_flags,
        default_cache_dir,
    )

    lib = ctypes.CDLL(str(cached_library(HAND_C, 1, compiler(), compiler_flags(), default_cache_dir())))
    f, i = ctypes.c_void_p, ctypes.c_int
    lib.stem_conv.argtypes = [f, i, i, f, f, f, f]
    lib.stem_pool.argtypes = [f, i, f, f]
    lib.stem_tiles.argtypes = [i, f, i, i, f, f, f, f, f, f]
    lib.stem_carry.argtypes = [i, f, i, i, f, f, f, f, f, f]
    return lib


def aligned(shape) -> np.ndarray:
    n = int(np.prod(shape))
    raw = np.zeros(n + 16, np.float32)
    start = (-raw.ctypes.data % 64) // 4
    return raw[start:start + n].reshape(shape)


def main(argv=None) -> int:
    args = parse_args(argv)
    import stitch
    from stitch.frontends.onnx_import import import_onnx

    stitch.set_num_threads(1)
    size = args.size
    ho, ph, pad = size // 2, size // 4, size + 6
    model, w, b = stem_model(size)
    imported = import_onnx(model)
    program = stitch.compile(imported.text, weights=imported.weights)
    x = np.random.default_rng(1).standard_normal((1, 3, size, size)).astype(np.float32)
    feeds = {imported.inputs["x"]: x}
    (want,) = program(**feeds)

    lib = hand_library()
    t12 = aligned((3, pad, pad))
    t12[:, 3:3 + size, 3:3 + size] = x[0]
    wm, bias = aligned((147, 64)), aligned((64,))
    wm[:] = w.reshape(64, 147).T  # row 49c + 7dy + dx: the taps' order of stitch's A
    bias[:] = b
    n = args.batch  # each image the same input, its conv rows and its output its own
    t13, buf, ring = aligned((n, ho, ho, 64)), aligned((2 * ph + 1, ho, 64)), aligned((4, ho, 64))
    stage, tmp, out = aligned((147, 2, ho)), aligned((ph, 64)), aligned((n, 64, ph, ph))
    p = lambda a: a.ctypes.data
    conv = lambda: [lib.stem_conv(p(t12), pad, ho, p(wm), p(bias), p(t13[i]), p(stage)) for i in range(n)]
    pool = lambda: [lib.stem_pool(p(t13[i]), ho, p(out[i]), p(tmp)) for i in range(n)]
    forms = {TWO: lambda: (conv(), pool()), "hand: the conv alone": conv,
             "hand: the pool alone (its input as the conv left it)": pool}
    for r in (2, 4, 8, 14, 28):
        if r <= ph:
            forms[f"hand: tile R={r} ({2 * r + 1} conv rows for {2 * r}, buffer {(2 * r + 1) * ho * 256 // 1024} KB)"] = \
                (lambda r=r: [lib.stem_tiles(r, p(t12), pad, ho, p(wm), p(bias), p(buf), p(out[i]), p(stage), p(tmp))
                              for i in range(n)])
    for c in (ph // 2, ph):
        forms[f"hand: carry, chunks of {c} pool rows (buffer {4 * ho * 256 // 1024} KB)"] = \
            (lambda c=c: [lib.stem_carry(c, p(t12), pad, ho, p(wm), p(bias), p(ring), p(out[i]), p(stage), p(tmp))
                          for i in range(n)])
    for name, call in forms.items():  # each form's output equals stitch's, bit for bit
        out[:] = 0
        call()
        if "alone" not in name and not all(np.array_equal(o, want[0]) for o in out):
            raise SystemExit(f"{name}: differs from stitch's output by {np.abs(out - want).max():.3g}")

    load = os.getloadavg()
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        if n == 1:
            rows = program.profile(runs=args.calls, cpu_time=True, **feeds)
            for k in rows:
                times.setdefault(f"stitch: {k.name}", []).append(k.seconds)
            times.setdefault("stitch: its kernels", []).append(sum(k.seconds for k in rows))
        for name, call in forms.items():
            spent = []
            for _ in range(args.calls):
                start = time.thread_time()
                call()
                spent.append(time.thread_time() - start)
            times.setdefault(name, []).append(statistics.median(spent))
    print(f"stem {size}x{size}, {n} image(s) a call, 1 thread, calling thread's CPU time, medians of {args.rounds} rounds x {args.calls} "
          f"calls; load {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after; every hand form equals stitch's output")
    two = times[TWO]
    print("| form | ms | / hand two kernels, same round |\n|---|---|---|")
    for name, ts in times.items():
        ratio = statistics.median(t / base for t, base in zip(ts, two))
        print(f"| {name} | {statistics.median(ts) * 1e3:.3f} | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
