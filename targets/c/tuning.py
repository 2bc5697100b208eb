"""The C backend's tuning constants, one place, each with the reason for its value.

They are the C printer's tactics for x86 caches and stores, not facts the cost model prices, so
they live here rather than in a target description (cpu.toml); the measurements that chose them
are in docs/perf/2026-11-27-c-backend-tuning.md. Modules read them as `tuning.NAME` at the time
they print, so a test can set one (monkeypatch) and see the C change.
"""

from __future__ import annotations

# Generated C above this many bytes is split into parts compiled at once: gcc's time grows with the unit.
PART_BYTES = 60_000
# Element updates a thread claims at least at once: smaller tiles are claimed together.
GRAIN_WORK = 1 << 14
# A reduce loop of fewer trips is left to gcc, which unrolls it (a masked vector reduction is slower there).
SIMD_REDUCE_TRIPS = 8
# A tile's local buffers up to this many bytes in all are stack arrays (small beside a thread's stack), others scratch.
LOCAL_STACK_BYTES = 64 * 1024
# Program outputs of at least this many bytes are written with non-temporal stores (larger than the caches).
STREAM_BYTES = 8 << 20
# Rows from this many bytes are held on the stack and streamed (`stream`): rows of 4 KiB gained nothing, of 512 B lost.
STREAM_ROW = 8 << 10
# The longest row `stream` holds on the stack: 16 KiB rows, the longest measured, gained.
STREAM_ROW_BYTES = 16 << 10
# Statements that may stand between a row and its sum for `summed_row` to fuse them: a start and a few copies out.
SUMMED_ROW_BETWEEN = 4
# Bytes (modulo 4 KiB) a pipelined row's stores keep ahead of its reads: closer, a read waits on a store.
ROW_STORE_GAP = 512
# Tiles a claim of a pipelined tile loop takes at least: its first reads and last writes run alone.
PIPELINE_CLAIM = 8
# Claims a pipelined tile loop keeps at least, so every thread has some.
PIPELINE_CLAIMS = 8
# Contiguous bytes per row up to which rows are prefetched: longer runs the hardware prefetcher follows.
PREFETCH_RUN = 2048
# Bytes of rows prefetched ahead: more rows ahead share the L1's sets at a 4 KiB stride and evict each other.
PREFETCH_AHEAD = 2048
# Rows prefetched ahead at least, so that short rows are still asked for early enough to arrive in time.
PREFETCH_MIN_ROWS = 4
# Elements ahead a streamed row's long global reads are prefetched: the best of 256 to 2048 measured.
STREAM_PREFETCH = 512
# A streamed row's vectors in groups this large, each group computed before the previous one's stores (4 KiB aliasing).
STREAM_GROUP = 4
# The fewest terms a f32 sum takes four vector accumulators at (long_sum): a group norm's group is 4096.
LONG_SUM_TRIPS = 1024
# A row of exponentials sharing one op (SiLU of a group norm) in groups this large, the op of each first (vector_loop).
SHARED_GROUP = 4
# The most stack one matmul row block's precomputed A may take (as LOCAL_STACK_BYTES); longer k goes in chunks.
A_SCRATCH_BYTES = 64 * 1024
