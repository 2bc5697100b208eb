/* stitch's CPU runtime: one pool of worker threads per process, shared by every compiled program.

   A parallel kernel hands its tiles to `stitch_rt_run`. The calling thread publishes the job and
   takes tiles itself, a few at a time, from atomic counters; any worker that is running takes
   them too. The call returns when every tile is done, not when every thread has checked in: a
   worker that wakes late (its core busy with another process) finds no tile left and goes back
   to sleep, where an OpenMP barrier would wait a whole scheduler tick for it. Tiles write disjoint
   outputs, so which thread ran a tile never changes a result; what a kernel does after its tile
   loop runs on the caller once all tiles are done.

   The tiles are dealt in one contiguous block per thread (the caller's first), each with its own
   counter: a thread takes its own block's tiles in order, then those left in the others' blocks.
   So a thread's next tile is, as long as nobody has to help it, the one after the tile it runs,
   and a tile can prefetch what its successor reads (a product's next block of weights,
   targets/c/micro_kernel.py): with one counter for all, the other thread took the successor one
   time in two. A thread that wakes late still finds its block taken by the others.

   Each thread's scratch (a tile's merged on-chip buffer) is a heap block owned by that thread,
   grown when a kernel needs more and reused across tiles and calls: however large a target's
   on-chip budget, no tile's buffers live on a stack.

   Waits spin briefly (kernels of one program follow each other within microseconds) and then
   sleep on a futex. One submitter at a time owns the pool; a second program called from
   another thread meanwhile runs its tiles on its own thread rather than wait or oversubscribe.
   After fork() the child has no workers: the pool forgets them and starts new ones on demand.

   Each worker is pinned to its own CPU of the process's allowed set, none of them the one the
   starting caller is on (when the set has a CPU per thread). Unpinned, Linux woke a sleeping
   worker onto the caller's own CPU (wake-affine placement) after any idle pause: both then shared
   one core while the other idled, and a 2-thread call took the 1-thread time (docs/perf/
   2026-11-27-c-backend-tuning.md). The caller stays unpinned, but a
   parallel job it submits from a worker's CPU first moves it off (`step_off_workers`: its
   affinity narrowed to the other CPUs and at once restored), since the scheduler takes
   milliseconds to move it there itself. */

#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef void (*st_tiles)(void *args, int64_t lo, int64_t hi, unsigned char *scratch);

#define MAX_THREADS 256
#define NOTHING_LEFT 0xffffffffu   /* the claim counter of a job being set up: no tile to take */
#define SPIN_NS 50000              /* how long an idle thread polls before it sleeps */

static struct {
  /* the job, written by its submitter before it publishes the epoch */
  _Atomic(st_tiles) fn;
  _Atomic(void *) args;
  _Atomic int64_t tiles, grain;
  _Atomic size_t scratch_bytes;
  _Atomic int blocks;          /* the tiles are dealt in this many contiguous blocks, one per thread */
  _Atomic uint32_t epoch;      /* bumped per job; workers sleep on it */
  _Atomic uint32_t done;       /* tiles finished; the submitter sleeps on it */
  _Atomic int submitter_asleep;
  _Atomic int sleepers;        /* workers asleep on the epoch */
  _Atomic int busy;            /* a submitter owns the pool */
  _Atomic int threads;         /* the pool's size, the calling thread included */
  _Atomic int started;         /* workers running (grown under `lock`) */
  cpu_set_t worker_cpus;       /* the CPUs workers are pinned to (grown under `lock`) */
  pthread_mutex_t lock;
} pool = {.threads = 1, .lock = PTHREAD_MUTEX_INITIALIZER};

/* per block of tiles: epoch << 32 | its next unclaimed tile (claims of an old job fail), one cache
   line each (threads claim in their own blocks at once) */
static struct { _Atomic uint64_t next; char pad[56]; } claim[MAX_THREADS] __attribute__((aligned(64)));

/* per worker, the epoch when it was started (only its submitter, owning the pool, starts workers) */
static uint32_t start_epoch[MAX_THREADS];

static long futex(_Atomic uint32_t *word, int op, uint32_t value) {
  return syscall(SYS_futex, (uint32_t *)word, op | FUTEX_PRIVATE_FLAG, value, NULL, NULL, 0);
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- per-thread scratch ---- */

typedef struct { unsigned char *data; size_t size; } scratch_t;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void free_scratch(void *p) {
  scratch_t *s = p;
  free(s->data);
  free(s);
}

static void make_scratch_key(void) { pthread_key_create(&scratch_key, free_scratch); }

/* This thread's scratch of at least `bytes` (64-byte aligned), or NULL when memory runs out. */
static unsigned char *scratch(size_t bytes) {
  pthread_once(&scratch_once, make_scratch_key);
  scratch_t *s = pthread_getspecific(scratch_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s || pthread_setspecific(scratch_key, s)) { free(s); return NULL; }
  }
  if (bytes < 64) bytes = 64;  /* a kernel without scratch still gets a valid pointer */
  if (s->size < bytes) {
    size_t size = (bytes + 4095) / 4096 * 4096;
    unsigned char *data = aligned_alloc(64, size);
    if (!data) return NULL;
    free(s->data);
    s->data = data;
    s->size = size;
  }
  return s->data;
}

/* ---- taking tiles ---- */

/* The first tile of block `b` of `blocks` over `tiles` (block `blocks` is the end). */
static int64_t block_start(int64_t tiles, int b, int blocks) { return tiles * b / blocks; }

/* Take and run tiles of job `epoch` until none is left (or the job is no longer current): those of
   block `own` first, in order, then what is left of the others'. */
static void take_tiles(uint32_t epoch, int own) {
  st_tiles fn = atomic_load_explicit(&pool.fn, memory_order_relaxed);
  void *args = atomic_load_explicit(&pool.args, memory_order_relaxed);
  int64_t tiles = atomic_load_explicit(&pool.tiles, memory_order_relaxed);
  int64_t grain = atomic_load_explicit(&pool.grain, memory_order_relaxed);
  size_t bytes = atomic_load_explicit(&pool.scratch_bytes, memory_order_relaxed);
  int blocks = atomic_load_explicit(&pool.blocks, memory_order_relaxed);
  /* the fields above may belong to a newer job being set up; its submitter marked every claim
     counter first, so the epoch check of every claim below rejects them */
  atomic_thread_fence(memory_order_acquire);
  if (blocks < 1 || blocks > MAX_THREADS) return;
  unsigned char *mine = NULL;
  for (int k = 0; k < blocks; ++k) {
    int b = (own + k) % blocks;
    int64_t end = block_start(tiles, b + 1, blocks);
    for (;;) {
      uint64_t c = atomic_load_explicit(&claim[b].next, memory_order_acquire);
      int64_t next = (int64_t)(c & 0xffffffffu);
      if ((uint32_t)(c >> 32) != epoch) return;  /* a newer job: this one is done */
      if (next >= end) break;
      if (!mine && !(mine = scratch(bytes))) return;  /* out of memory: leave the tiles to others */
      int64_t n = end - next < grain ? end - next : grain;
      if (!atomic_compare_exchange_weak_explicit(&claim[b].next, &c, c + (uint64_t)n, memory_order_acq_rel,
                                                 memory_order_relaxed))
        continue;
      fn(args, next, next + n, mine);
      uint32_t done = atomic_fetch_add(&pool.done, (uint32_t)n) + (uint32_t)n;
      if (done == (uint32_t)tiles && atomic_load(&pool.submitter_asleep)) futex(&pool.done, FUTEX_WAKE, 1);
    }
  }
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;  /* 1 .. threads - 1 */
  /* the epoch before the job its submitter is about to publish: read here instead, it could
     already be that job's, which this worker would then never run */
  uint32_t seen = start_epoch[id];
  for (;;) {
    uint32_t epoch = atomic_load(&pool.epoch);
    if (epoch == seen) {
      int64_t until = now_ns() + SPIN_NS;
      for (int i = 1; (epoch = atomic_load(&pool.epoch)) == seen; ++i) {
        relax();
        if (i % 64 == 0 && now_ns() > until) {
          atomic_fetch_add(&pool.sleepers, 1);
          if (atomic_load(&pool.epoch) == seen) futex(&pool.epoch, FUTEX_WAIT, seen);
          atomic_fetch_sub(&pool.sleepers, 1);
          until = now_ns() + SPIN_NS;
        }
      }
    }
    seen = epoch;
    if (id < atomic_load_explicit(&pool.threads, memory_order_relaxed)) take_tiles(epoch, id);
  }
  return NULL;
}

static void forget_workers(void) {
  /* in a fork()ed child: the workers and any submitter of the parent are gone */
  pool.started = 0;
  CPU_ZERO(&pool.worker_cpus);
  atomic_store(&pool.busy, 0);
  atomic_store(&pool.sleepers, 0);
  atomic_store(&pool.submitter_asleep, 0);
  pthread_mutex_init(&pool.lock, NULL);
}

/* The CPU for worker `id` (1 ..): the id-th of the calling thread's allowed CPUs other than the
   one it runs on, or -1 (no pinning) when they are fewer than the pool's threads. */
static int worker_cpu(int id, int threads) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) || CPU_COUNT(&allowed) < threads) return -1;
  int here = sched_getcpu(), seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &allowed) && cpu != here && ++seen == id) return cpu;
  return -1;
}

/* Start workers up to the pool's size; the threads that could be started, the caller included. */
static int start_workers(int threads) {
  static int registered;
  pthread_mutex_lock(&pool.lock);
  if (!registered) registered = pthread_atfork(NULL, NULL, forget_workers) == 0;
  while (pool.started < threads - 1) {
    int id = pool.started + 1, cpu = worker_cpu(id, threads), failed = 1;
    start_epoch[id] = atomic_load(&pool.epoch);  /* seen by the thread: pthread_create orders it */
    for (int pin = cpu >= 0; failed && pin >= 0; --pin) {  /* pinned, else (refused) unpinned */
      pthread_attr_t attr;
      pthread_t t;
      pthread_attr_init(&attr);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      if (pin) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_attr_setaffinity_np(&attr, sizeof one, &one);
      }
      failed = pthread_create(&t, &attr, worker, (void *)(intptr_t)id);
      pthread_attr_destroy(&attr);
      if (!failed && pin) CPU_SET(cpu, &pool.worker_cpus);
    }
    if (failed) break;
    pool.started++;
  }
  int running = pool.started + 1;
  pthread_mutex_unlock(&pool.lock);
  return running;
}

/* Move the calling thread off a CPU a worker is pinned to, if it is on one (see the top). */
static void step_off_workers(void) {
  int here = sched_getcpu();
  if (here < 0 || here >= CPU_SETSIZE || !CPU_ISSET(here, &pool.worker_cpus)) return;
  cpu_set_t mine, away;
  if (sched_getaffinity(0, sizeof mine, &mine)) return;
  CPU_XOR(&away, &mine, &pool.worker_cpus);
  CPU_AND(&away, &away, &mine);  /* mine without the workers' CPUs */
  if (CPU_COUNT(&away) == 0 || sched_setaffinity(0, sizeof away, &away)) return;
  sched_setaffinity(0, sizeof mine, &mine);
}

/* ---- the entry points ---- */

/* Run tiles [0, tiles) of `fn`, `grain` tiles per claim, each thread with `scratch_bytes` of scratch.
   Serial (on the calling thread) unless `parallel` and the pool has other threads free.
   Returns 0, or 1 when the calling thread's scratch could not be allocated. */
int stitch_rt_run(st_tiles fn, void *args, int64_t tiles, int64_t grain, size_t scratch_bytes, int parallel) {
  unsigned char *mine = scratch(scratch_bytes);
  if (!mine) return 1;
  if (grain < 1) grain = 1;
  int threads = atomic_load(&pool.threads);
  int expected = 0;
  if (!parallel || threads < 2 || tiles <= grain || tiles >= (int64_t)NOTHING_LEFT ||
      !atomic_compare_exchange_strong(&pool.busy, &expected, 1)) {
    fn(args, 0, tiles, mine);
    return 0;
  }
  if (pool.started < threads - 1 && start_workers(threads) < 2) {
    atomic_store(&pool.busy, 0);
    fn(args, 0, tiles, mine);
    return 0;
  }
  step_off_workers();
  uint32_t epoch = atomic_load(&pool.epoch) + 1;
  /* every counter an earlier job used too: a late worker may still read that job's block count */
  static int used;
  if (used < threads) used = threads;
  for (int b = 0; b < used; ++b)
    atomic_store_explicit(&claim[b].next, (uint64_t)epoch << 32 | NOTHING_LEFT, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&pool.fn, fn, memory_order_relaxed);
  atomic_store_explicit(&pool.args, args, memory_order_relaxed);
  atomic_store_explicit(&pool.tiles, tiles, memory_order_relaxed);
  atomic_store_explicit(&pool.grain, grain, memory_order_relaxed);
  atomic_store_explicit(&pool.scratch_bytes, scratch_bytes, memory_order_relaxed);
  atomic_store_explicit(&pool.blocks, threads, memory_order_relaxed);
  atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
  for (int b = 0; b < threads; ++b)
    atomic_store_explicit(&claim[b].next, (uint64_t)epoch << 32 | (uint64_t)block_start(tiles, b, threads),
                          memory_order_release);
  atomic_store(&pool.epoch, epoch);
  int asleep = atomic_load(&pool.sleepers);
  if (asleep > 0) {
    /* claims beyond the caller's first, plus workers left over from a larger pool (they may be the
       ones woken, and ignore the job) */
    int64_t spare = atomic_load(&pool.started) - (threads - 1);
    int64_t wake = (tiles + grain - 1) / grain - 1 + (spare > 0 ? spare : 0);
    futex(&pool.epoch, FUTEX_WAKE, (uint32_t)(wake < asleep ? wake : asleep));
  }
  take_tiles(epoch, 0);
  /* every tile is claimed; wait for the ones other threads hold */
  int64_t until = now_ns() + SPIN_NS;
  for (int i = 1;; ++i) {
    uint32_t done = atomic_load(&pool.done);
    if (done == (uint32_t)tiles) break;
    relax();
    if (i % 64 == 0 && now_ns() > until) {
      atomic_store(&pool.submitter_asleep, 1);
      done = atomic_load(&pool.done);
      if (done != (uint32_t)tiles) futex(&pool.done, FUTEX_WAIT, done);
      atomic_store(&pool.submitter_asleep, 0);
    }
  }
  atomic_store_explicit(&pool.busy, 0, memory_order_release);
  return 0;
}

/* The pool's size, the calling thread included (1: every kernel runs on its caller). */
void stitch_rt_set_threads(int threads) {
  atomic_store(&pool.threads, threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads);
}

int stitch_rt_threads(void) { return atomic_load(&pool.threads); }
