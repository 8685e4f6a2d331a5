/* hlofuse_rt.h: the runtime library's entry points, as generated modules declare them.
 *
 * hlofuse_rt.c (dot, Threefry) and hlofuse_linalg.c (the batched factorisations and solves)
 * are compiled once into a shared library loaded with global symbols; every generated module
 * calls into it through these prototypes (pointers as void: a module passes its arrays' storage
 * pointers, whatever their element type). tests/codegen/test_runtime_header.py checks each
 * prototype against its definition in the preprocessed sources: the same functions, the same
 * number of parameters, a pointer where the definition has one and the same integer type
 * elsewhere. The text after this comment is copied into every generated C file.
 */
void hlofuse_rt_dot_f32(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void hlofuse_rt_dot_f64(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void hlofuse_rt_dot_u8(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void hlofuse_rt_dot_u16(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void hlofuse_rt_dot_u32(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void hlofuse_rt_dot_u64(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void hlofuse_rt_dot_pred(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void hlofuse_rt_threefry2x32(const void *, const void *, const void *, const void *, void *, void *, int64_t);
void hlofuse_rt_potrf_f32(const void *, void *, void *, int64_t, int64_t, int32_t, int32_t);
void hlofuse_rt_potrf_f64(const void *, void *, void *, int64_t, int64_t, int32_t, int32_t);
void hlofuse_rt_trsm_f32(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t, int32_t, int32_t, int32_t, int32_t);
void hlofuse_rt_trsm_f64(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t, int32_t, int32_t, int32_t, int32_t);
void hlofuse_rt_getrf_f32(const void *, void *, void *, void *, int64_t, int64_t, int64_t);
void hlofuse_rt_getrf_f64(const void *, void *, void *, void *, int64_t, int64_t, int64_t);
void hlofuse_rt_geqrf_f32(const void *, void *, void *, int64_t, int64_t, int64_t);
void hlofuse_rt_geqrf_f64(const void *, void *, void *, int64_t, int64_t, int64_t);
void hlofuse_rt_orgqr_f32(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t);
void hlofuse_rt_orgqr_f64(const void *, const void *, void *, int64_t, int64_t, int64_t, int64_t);
void hlofuse_rt_syevd_f32(const void *, void *, void *, void *, int64_t, int64_t, int32_t, int32_t);
void hlofuse_rt_syevd_f64(const void *, void *, void *, void *, int64_t, int64_t, int32_t, int32_t);
void hlofuse_rt_svd_f32(const void *, void *, void *, void *, void *, void *, int64_t, int64_t, int64_t, int64_t, int64_t, int32_t, int32_t);
void hlofuse_rt_svd_f64(const void *, void *, void *, void *, void *, void *, int64_t, int64_t, int64_t, int64_t, int64_t, int32_t, int32_t);
void hlofuse_rt_lu_permutation(const void *, void *, int64_t, int64_t, int64_t);
