#ifdef STITCH_PROFILE
#include <time.h>
int64_t stitch_profile_ns[KERNELS];
/* STITCH_PROFILE_CPU_TIME: the calling thread's CPU time, which leaves out the time it waits
   descheduled (a loaded machine); it counts only the caller's own work, so only 1 thread uses it */
#ifdef STITCH_PROFILE_CPU_TIME
#define ST_PROFILE_CLOCK CLOCK_THREAD_CPUTIME_ID
#else
#define ST_PROFILE_CLOCK CLOCK_MONOTONIC
#endif
static int64_t st_clock(void) { struct timespec t; clock_gettime(ST_PROFILE_CLOCK, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
#define ST_CALL(i, call) do { int64_t t_ = st_clock(); int e_ = (call); stitch_profile_ns[i] += st_clock() - t_; \
                              if (e_) return e_; } while (0)
#else
#define ST_CALL(i, call) do { if (call) return 1; } while (0)
#endif
