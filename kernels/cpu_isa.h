// Which instruction-set path the CPU kernels run (runtime dispatch). The
// kernels with vector code (attention_cpu, attention_kivi_cpu,
// attention_quant_cpu, linear_bf16, page_bounds)
// are compiled once per path, each copy in its own namespace (isa_scalar,
// isa_avx2, isa_avx512; see kernels/cpu_isa_begin.h), and their public entry
// points pick a copy at run time from what the CPU reports (cpuid, through
// __builtin_cpu_supports) and the KVLAB_ISA environment variable, which may
// force a lower path. Everything outside those copies is built for baseline
// x86-64, so one binary runs on any x86-64 host.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace kvlab {

// Lowest first; a higher path needs everything a lower one does.
//   kScalar: portable C++ (no intrinsics; the compiler's own SSE2).
//   kAvx2:   AVX2 + FMA + F16C (8 fp32 lanes).
//   kAvx512: AVX-512 F/BW/VL/DQ on top of kAvx2 (EVEX encodings, 32 vector
//            registers, 16-lane loops where the kernel has them); the KIVI
//            int8 scores use VNNI (vpdpbusd) when the CPU also has it.
enum class CpuIsa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
inline constexpr int kNumCpuIsas = 3;

// "scalar", "avx2", "avx512".
const char* CpuIsaName(CpuIsa isa);

// What a CPU offers, as bits: 1 << CpuIsa for each path it can run, plus the
// optional extensions below.
inline constexpr uint32_t kCpuVnni = 1u << 8;  // AVX-512 VNNI (with VL)
inline constexpr uint32_t kCpuBf16 = 1u << 9;  // AVX512-BF16
// This host's bits (cpuid, read once; OS support of the vector state included).
uint32_t HostCpuFeatures();
// The highest path in `features`.
CpuIsa BestCpuIsa(uint32_t features);

// The path for a KVLAB_ISA value on a CPU with `features`: null or empty
// selects the best one; a name must be a path the CPU has, else
// InvalidArgument naming KVLAB_ISA, the value and the paths the CPU has.
Status ResolveCpuIsa(const char* env_value, uint32_t features, CpuIsa* isa);

// ResolveCpuIsa of this process's KVLAB_ISA on this host. Front ends (the
// kvlab CLI, the benchmarks) call it at start and refuse to run on an error.
Status CheckCpuIsaEnv();

// The path the kernels run now: the override set below if any, else the
// resolved KVLAB_ISA (read once). Library code never exits: if KVLAB_ISA is
// invalid and nobody checked it, the best path at or below the request runs
// (never one the CPU lacks).
CpuIsa ActiveCpuIsa();
// Whether the KIVI int8 scores use VNNI now (kAvx512 active and the CPU has it).
bool ActiveCpuVnni();

// Whether this host can run `isa`.
bool HostHasCpuIsa(CpuIsa isa);

// Forces `isa` for later calls (tests run every kernel on every path the host
// has). InvalidArgument, and no change, when the host lacks it. Not to be
// called while kernels run on other threads. ClearCpuIsa goes back to the
// KVLAB_ISA choice.
Status SetCpuIsa(CpuIsa isa);
void ClearCpuIsa();

// SetCpuIsa for a scope (tests): status() says whether it took.
class ScopedCpuIsa {
 public:
  explicit ScopedCpuIsa(CpuIsa isa) : status_(SetCpuIsa(isa)) {}
  ~ScopedCpuIsa() { ClearCpuIsa(); }
  ScopedCpuIsa(const ScopedCpuIsa&) = delete;
  ScopedCpuIsa& operator=(const ScopedCpuIsa&) = delete;
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// One line per dispatched kernel and the path it runs, plus the host's
// features, for `kvlab --version`.
std::string CpuKernelPaths();

}  // namespace kvlab
