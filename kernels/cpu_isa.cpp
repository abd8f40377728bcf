// CPU feature detection and the choice of kernel path (kernels/cpu_isa.h).
// Built for baseline x86-64 like everything outside the per-path copies.
#include "kernels/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kvlab {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// F16C (cpuid leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not
// know the name, gcc's does; both give the same bit.
bool HasF16c() {
#if defined(__clang__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
  return __builtin_cpu_supports("f16c");
#endif
}
#endif

uint32_t DetectFeatures() {
  uint32_t f = 1u << static_cast<int>(CpuIsa::kScalar);
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // libgcc's cpuid reader clears AVX / AVX-512 when the OS does not save
  // their registers (XGETBV), so these are the paths that can actually run.
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx2) f |= 1u << static_cast<int>(CpuIsa::kAvx2);
  if (avx512) f |= 1u << static_cast<int>(CpuIsa::kAvx512);
  if (avx512 && __builtin_cpu_supports("avx512vnni")) f |= kCpuVnni;
  if (avx512 && __builtin_cpu_supports("avx512bf16")) f |= kCpuBf16;
#endif
  return f;
}

bool Has(uint32_t features, CpuIsa isa) { return (features >> static_cast<int>(isa)) & 1u; }

std::string PathsOf(uint32_t features) {
  std::string s;
  for (int i = 0; i < kNumCpuIsas; ++i) {
    if (!Has(features, static_cast<CpuIsa>(i))) continue;
    if (!s.empty()) s += ", ";
    s += CpuIsaName(static_cast<CpuIsa>(i));
  }
  return s;
}

constexpr int kUnset = -1;
std::atomic<int>& Forced() {
  static std::atomic<int> forced{kUnset};
  return forced;
}

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

uint32_t HostCpuFeatures() {
  static const uint32_t features = DetectFeatures();
  return features;
}

CpuIsa BestCpuIsa(uint32_t features) {
  for (int i = kNumCpuIsas - 1; i > 0; --i) {
    if (Has(features, static_cast<CpuIsa>(i))) return static_cast<CpuIsa>(i);
  }
  return CpuIsa::kScalar;
}

Status ResolveCpuIsa(const char* env_value, uint32_t features, CpuIsa* isa) {
  *isa = BestCpuIsa(features);
  if (env_value == nullptr || *env_value == '\0') return Status::OK();
  for (int i = 0; i < kNumCpuIsas; ++i) {
    const CpuIsa c = static_cast<CpuIsa>(i);
    if (std::strcmp(env_value, CpuIsaName(c)) != 0) continue;
    if (!Has(features, c)) {
      return Status::InvalidArgument(std::string("KVLAB_ISA=") + env_value + ": this CPU lacks the " + env_value +
                                     " path (it has: " + PathsOf(features) + ")");
    }
    *isa = c;
    return Status::OK();
  }
  return Status::InvalidArgument(std::string("KVLAB_ISA=") + env_value +
                                 ": not a kernel path (expected scalar, avx2 or avx512)");
}

Status CheckCpuIsaEnv() {
  CpuIsa isa;
  return ResolveCpuIsa(std::getenv("KVLAB_ISA"), HostCpuFeatures(), &isa);
}

CpuIsa ActiveCpuIsa() {
  const int forced = Forced().load(std::memory_order_relaxed);
  if (forced != kUnset) return static_cast<CpuIsa>(forced);
  static const CpuIsa from_env = [] {
    const uint32_t f = HostCpuFeatures();
    CpuIsa isa;
    if (ResolveCpuIsa(std::getenv("KVLAB_ISA"), f, &isa).ok()) return isa;
    // Unchecked and invalid: the best path at or below a known request.
    const char* v = std::getenv("KVLAB_ISA");
    for (int i = 0; i < kNumCpuIsas; ++i) {
      if (std::strcmp(v, CpuIsaName(static_cast<CpuIsa>(i))) == 0) {
        return static_cast<int>(BestCpuIsa(f)) < i ? BestCpuIsa(f) : static_cast<CpuIsa>(i);
      }
    }
    return BestCpuIsa(f);
  }();
  return from_env;
}

bool ActiveCpuVnni() { return ActiveCpuIsa() == CpuIsa::kAvx512 && (HostCpuFeatures() & kCpuVnni) != 0; }

bool HostHasCpuIsa(CpuIsa isa) { return Has(HostCpuFeatures(), isa); }

void ClearCpuIsa() { Forced().store(kUnset, std::memory_order_relaxed); }

Status SetCpuIsa(CpuIsa isa) {
  const uint32_t f = HostCpuFeatures();
  if (!Has(f, isa)) {
    return Status::InvalidArgument(std::string("kernel path ") + CpuIsaName(isa) + ": this CPU lacks it (it has: " +
                                   PathsOf(f) + ")");
  }
  Forced().store(static_cast<int>(isa), std::memory_order_relaxed);
  return Status::OK();
}

std::string CpuKernelPaths() {
  const uint32_t f = HostCpuFeatures();
  const CpuIsa isa = ActiveCpuIsa();
  const char* name = CpuIsaName(isa);
  const char* env = std::getenv("KVLAB_ISA");
  std::string s;
#if defined(__AVX2__)
  s = "build: -march=native (KVLAB_NATIVE=ON): runs only on CPUs like the build host's\n";
#else
  s = "build: portable x86-64, kernel path chosen at run time\n";
#endif
  s += std::string("cpu kernel path: ") + name + " (host has: " + PathsOf(f) +
                  ((f & kCpuVnni) ? ", vnni" : "") + ((f & kCpuBf16) ? ", bf16" : "") + "; KVLAB_ISA " +
                  (env != nullptr && *env != '\0' ? std::string("is ") + env : std::string("unset")) + ")\n";
  s += std::string("  attention_cpu      ") + name + "\n";
  s += std::string("  attention_kivi_cpu ") + name + (ActiveCpuVnni() ? " (int8 scores: vnni)" : "") + "\n";
  s += std::string("  attention_quant_cpu ") + name + "\n";
  s += std::string("  linear_bf16        ") + name + "\n";
  s += std::string("  page_bounds        ") + name + "\n";
  return s;
}

}  // namespace kvlab
