static inline ${t} st_max_${d}(${t} a, ${t} b) {
  ${u} x, y, r, gt = (${u})-(a > b), eq = (${u})-(a == b), nan = (${u})-(a != a);
  memcpy(&x, &a, sizeof x); memcpy(&y, &b, sizeof y);
  r = (x & gt) | (y & ~gt); r = (r & ~eq) | (x & y & eq); r = (r & ~nan) | (x & nan);
  memcpy(&a, &r, sizeof a); return a; }
static inline ${t} st_min_${d}(${t} a, ${t} b) {
  ${u} x, y, r, lt = (${u})-(a < b), eq = (${u})-(a == b), nan = (${u})-(a != a);
  memcpy(&x, &a, sizeof x); memcpy(&y, &b, sizeof y);
  r = (x & lt) | (y & ~lt); r = (r & ~eq) | ((x | y) & eq); r = (r & ~nan) | (x & nan);
  memcpy(&a, &r, sizeof a); return a; }
static inline ${t} st_relu_${d}(${t} a) { return a != a || a > 0 ? a : (${t})0; }
static inline ${t} st_where_${d}(bool c, ${t} a, ${t} b) { return c ? a : b; }
static inline ${t} st_pow_${d}(${t} a, ${t} b) { ${t} r = pow${sfx}(a, b); return b == (${t})0.5 && (a == 0 || a == -INFINITY) ? (${t})(a == 0 ? 0 : INFINITY) : r; }
static inline int32_t st_cast_i32_${d}(${t} a) { float_t_${d} x = a; return (int32_t)((x > ${i32_lo}) & (x < ${i32_hi}) ? x : (float_t_${d})-2147483648.0); }
static inline int64_t st_cast_i64_${d}(${t} a) { float_t_${d} x = a; return (int64_t)((x >= ${i64_lo}) & (x < ${i64_hi}) ? x : (float_t_${d})-9223372036854775808.0); }
static inline int8_t st_cast_i8_${d}(${t} a) { return (int8_t)st_cast_i32_${d}(a); }
static inline uint8_t st_cast_u8_${d}(${t} a) { return (uint8_t)st_cast_i32_${d}(a); }
static inline ${t} st_float_${d}_i8(int8_t a) { return a == 0 ? (${t})0 : (${t})a; }
static inline ${t} st_float_${d}_u8(uint8_t a) { return a == 0 ? (${t})0 : (${t})a; }
static inline ${t} st_float_${d}_i32(int32_t a) { return a == 0 ? (${t})0 : (${t})a; }
static inline ${t} st_float_${d}_i64(int64_t a) { return a == 0 ? (${t})0 : (${t})a; }
