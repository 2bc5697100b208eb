static inline ${t} st_max_${d}(${t} a, ${t} b) { return a > b ? a : b; }
static inline ${t} st_min_${d}(${t} a, ${t} b) { return a < b ? a : b; }
static inline ${t} st_relu_${d}(${t} a) { return a > 0 ? a : 0; }
static inline ${t} st_abs_${d}(${t} a) { return a < 0 ? -a : a; }
static inline ${t} st_where_${d}(bool c, ${t} a, ${t} b) { return c ? a : b; }
static inline ${t} st_shl_${d}(${t} a, ${t} b) { return b >= 0 && b < ${bits} ? (${t})((uint64_t)a << b) : (${t})0; }
static inline ${t} st_shr_${d}(${t} a, ${t} b) { return b >= 0 && b < ${bits} ? (${t})(a >> b) : (${t})(${unsigned} || a >= 0 ? 0 : -1); }
