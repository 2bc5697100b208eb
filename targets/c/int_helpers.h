static inline ${t} st_max_${d}(${t} a, ${t} b) { return a > b ? a : b; }
static inline ${t} st_min_${d}(${t} a, ${t} b) { return a < b ? a : b; }
static inline ${t} st_relu_${d}(${t} a) { return a > 0 ? a : 0; }
static inline ${t} st_abs_${d}(${t} a) { return a < 0 ? -a : a; }
static inline ${t} st_where_${d}(bool c, ${t} a, ${t} b) { return c ? a : b; }
