typedef void (*st_tiles)(void *args, int64_t lo, int64_t hi, unsigned char *scratch);
typedef int (*st_runner)(st_tiles fn, void *args, int64_t tiles, int64_t grain, size_t scratch_bytes, int parallel);
__attribute__((visibility("hidden"))) extern st_runner st_run;
