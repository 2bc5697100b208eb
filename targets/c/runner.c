static int st_run_here(st_tiles fn, void *args, int64_t tiles, int64_t grain, size_t scratch_bytes,
                       int parallel) {
  (void)grain; (void)parallel;
  unsigned char *scratch = aligned_alloc(64, (scratch_bytes + 64) / 64 * 64);
  if (!scratch) return 1;
  fn(args, 0, tiles, scratch);
  free(scratch);
  return 0;
}
st_runner st_run = st_run_here;
void stitch_bind(st_runner run) { st_run = run ? run : st_run_here; }
