#ifdef STITCH_PROFILE
#include <time.h>
int64_t stitch_profile_ns[KERNELS];
static int64_t st_clock(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
#define ST_CALL(i, call) do { int64_t t_ = st_clock(); int e_ = (call); stitch_profile_ns[i] += st_clock() - t_; \
                              if (e_) return e_; } while (0)
#else
#define ST_CALL(i, call) do { if (call) return 1; } while (0)
#endif
