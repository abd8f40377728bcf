// Memory helpers shared by the CPU attention benchmarks (attention_bench,
// kivi_bench): the machine's read bandwidth, pools mapped like the engine's
// BlockPool, fast random bf16 fills, and how many distinct caches a benchmark
// rotates over.
#pragma once

#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/dtype.h"

namespace kvlab {

inline constexpr int64_t kBandwidthBytes = 1LL << 30;

// ---- cache rotation ----

// Bytes of distinct caches a benchmark cycles through, one per call: 256 MiB
// by default, above the 32 MiB L3, so that every call reads its cache from
// memory as a model step does once the other layers have evicted it.
// `--rotate_mib=N` sets it; 0 keeps one cache, which then stays in L2/L3 when
// it fits (the kernel's speed with its data near the core).
inline int64_t& RotateBytes() {
  static int64_t bytes = 256LL << 20;
  return bytes;
}

// Caches to rotate over for a call that reads bytes_per_call.
inline int NumCopies(int64_t bytes_per_call) {
  return static_cast<int>(std::max<int64_t>(1, (RotateBytes() + bytes_per_call - 1) / bytes_per_call));
}

// Reads --rotate_mib=N (CLI11; 0 to 1048576) and leaves every other argument
// in argv, in order, for benchmark::Initialize, which rejects flags it does
// not know. Returns 0, or CLI11's exit code after its one message naming the
// flag.
inline int ParseRotateFlag(int* argc, char** argv) {
  CLI::App app{"cache rotation"};
  app.allow_extras();
  app.set_help_flag();  // --help stays Google Benchmark's
  int64_t mib = RotateBytes() >> 20;
  app.add_option("--rotate_mib", mib, "MiB of distinct caches to rotate over (0: one cache)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  try {
    app.parse(*argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  RotateBytes() = mib << 20;
  static std::vector<std::string> rest;  // what argv points into from here on
  rest = app.remaining();
  *argc = 1;
  for (std::string& arg : rest) argv[(*argc)++] = arg.data();
  argv[*argc] = nullptr;
  return 0;
}

// ---- memory read bandwidth ----

inline const std::vector<uint64_t>& BandwidthBuffer() {
  static const std::vector<uint64_t> buf = [] {
    std::vector<uint64_t> b(static_cast<size_t>(kBandwidthBytes / 8));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < b.size(); ++i) b[i] = i;
    return b;
  }();
  return buf;
}

// Integer sum: the compiler vectorises it (no fp reassociation needed) and it
// is bound by memory, not by the adds.
inline uint64_t SumBuffer(const std::vector<uint64_t>& b) {
  uint64_t total = 0;
  const int64_t n = static_cast<int64_t>(b.size());
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) total += b[i];
  return total;
}

// All-core sequential read bandwidth in bytes per second: best of 4 passes
// over 1 GiB, measured once and cached.
inline double ReadBandwidth() {
  static const double bw = [] {
    const std::vector<uint64_t>& b = BandwidthBuffer();
    double best = 0.0;
    for (int pass = 0; pass < 4; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(SumBuffer(b));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, static_cast<double>(kBandwidthBytes) / s);
    }
    return best;
  }();
  return bw;
}

// Random bf16 in [-0.5, 0.5); xorshift because std::mt19937 takes seconds per GB.
inline void FillBF16(uint16_t* dst, int64_t n, uint64_t seed) {
#pragma omp parallel
  {
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(omp_get_thread_num()) + 1;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const uint32_t bits = 0x3f800000u | static_cast<uint32_t>(x >> 41);  // [1, 2)
      float f;
      std::memcpy(&f, &bits, 4);
      dst[i] = F32ToBF16(f - 1.5f);
    }
  }
}

// An anonymous mapping, like the engine's BlockPool, optionally on
// (transparent) huge pages; data() is null when the mapping failed.
class Mapping {
 public:
  Mapping(size_t bytes, bool huge_pages) : bytes_(std::max<size_t>(bytes, 4096)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
    if (data_ != nullptr && huge_pages) madvise(data_, bytes_, MADV_HUGEPAGE);
  }
  ~Mapping() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  uint8_t* data() const { return data_; }

 private:
  size_t bytes_;
  uint8_t* data_;
};

}  // namespace kvlab
