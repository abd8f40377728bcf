// Opens one per-path copy of a CPU kernel (kernels/cpu_isa.h). The build
// compiles each vector kernel's .cpp once per path with KVLAB_ISA_LEVEL = 0
// (scalar), 1 (avx2) or 2 (avx512); this header names the copy's namespace
// (KVLAB_ISA_NS) and switches code generation to the path's instructions
// with #pragma GCC target until kernels/cpu_isa_end.h.
//
// Include it after every standard and common project header the file needs
// and before the per-path headers (attention_cpu_simd.h, attention_cpu_tiles.h,
// attention_cpu_run.h, attention_kivi_int8.h), whose code lives in
// KVLAB_ISA_NS. Inline functions and templates of the common headers are then
// compiled for baseline x86-64 in every copy, so the linker's choice among
// their identical-named copies cannot leak AVX2 or AVX-512 instructions into
// common code; per-path code has names of its own (no ODR clash).
// The pragma does not define __AVX2__ and friends in C++ (the file is
// tokenised before the pragma applies), so per-path code tests
// KVLAB_ISA_LEVEL, never __AVX2__.
// No include guard: once per translation unit, paired with cpu_isa_end.h.

#ifndef KVLAB_ISA_LEVEL
#error "KVLAB_ISA_LEVEL must be defined (0, 1 or 2) by the build for a per-path kernel copy"
#endif

// KVLAB_ISA_VECTOR: the level whose instructions the copy uses. Off x86 every
// copy is the portable code under its own name (the dispatcher only picks
// scalar there, and the build needs no x86 target).
#if defined(__x86_64__) || defined(__i386__)
#define KVLAB_ISA_VECTOR KVLAB_ISA_LEVEL
#else
#define KVLAB_ISA_VECTOR 0
#endif

#if KVLAB_ISA_LEVEL == 0
#define KVLAB_ISA_NS isa_scalar
#elif KVLAB_ISA_LEVEL == 1
#define KVLAB_ISA_NS isa_avx2
#elif KVLAB_ISA_LEVEL == 2
#define KVLAB_ISA_NS isa_avx512
#else
#error "KVLAB_ISA_LEVEL must be 0, 1 or 2"
#endif

#if defined(__clang__)
// clang ignores #pragma GCC target; its own pragma applies the path's target
// to every function up to kernels/cpu_isa_end.h (the fuzz build is clang's).
#if KVLAB_ISA_VECTOR == 1
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif KVLAB_ISA_VECTOR == 2
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"))), \
                             apply_to = function)
#define KVLAB_ISA_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#endif
#elif KVLAB_ISA_VECTOR == 1
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#elif KVLAB_ISA_VECTOR == 2
#pragma GCC push_options
// Loops the compiler vectorises itself stay 256 bits wide (the attention
// kernels' intrinsics are 8-lane; mixing in zmm copies buys nothing and costs
// clock on some Intel parts) unless the file asks for 16 lanes by defining
// KVLAB_ISA_WIDE_LOOPS first (linear_bf16.cpp, whose loops are all auto-vectorised).
#ifdef KVLAB_ISA_WIDE_LOOPS
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=256")
#endif
// Added on top of the path's target for the few functions that use VNNI; they
// run only when ActiveCpuVnni() (the CPU has it).
#define KVLAB_ISA_VNNI __attribute__((target("avx512vnni")))
#endif
