"""The C backend: a LoopProgram as one C file that runs its kernels on stitch's runtime.

Tile loops become tile functions handed to the runtime's thread pool (tiles.py); statements are
printed by a plain printer (emit.py) that offers each one to a table of recognizers first
(recognizers.py: summed rows, pipelined rows and passes, column sums, 16-lane loops, streamed
stores, prefetches, matmul micro-kernels, vectorized reductions, concat splits, read order), one
module each; elementwise ops come from one table (ops.py) and the C every file starts with from
the `.h`/`.c` files beside this one (prelude.py). Scalar ops follow numpy's definitions (NaN
propagation in maximum/minimum, integer wraparound via -fwrapv).

The entry points are source.py's `c_source` and `buffer_order` (what targets/cpu.py uses); the
rest is the backend's own. This file imports nothing: its modules import each other (`from .
import tuning`), which would otherwise import the package back.
"""
