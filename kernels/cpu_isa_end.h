// Closes a per-path kernel copy opened by kernels/cpu_isa_begin.h.
// No include guard: once per translation unit.
#if KVLAB_ISA_VECTOR >= 1
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
