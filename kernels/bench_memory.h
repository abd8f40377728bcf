// Memory helpers shared by the CPU attention benchmarks (attention_bench,
// kivi_bench): the machine's read bandwidth, pools mapped like the engine's
// BlockPool, fast random bf16 fills, and how many distinct caches a benchmark
// rotates over.
#pragma once

#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/base/dtype.h"
#include "kernels/cpu_isa.h"

namespace kvlab {

inline constexpr int64_t kBandwidthBytes = 1LL << 30;  // the read-bandwidth buffer

// ---- cache rotation ----

// Bytes of distinct caches a benchmark cycles through, one per call, so that
// every call reads its cache from memory as a model step does once the other
// layers have evicted it: by default 4x the host's L3 (HostL3Bytes), at least
// 256 MiB (ParseRotateFlag sets it). `--rotate_mib=N` sets it; 0 keeps one
// cache, which then stays in L2/L3 when it fits (the kernel's speed with its
// data near the core).
inline constexpr int64_t kMinRotateBytes = 256LL << 20;
inline int64_t& RotateBytes() {
  static int64_t bytes = kMinRotateBytes;
  return bytes;
}

// Caches to rotate over for a call that reads bytes_per_call.
inline int NumCopies(int64_t bytes_per_call) {
  return static_cast<int>(std::max<int64_t>(1, (RotateBytes() + bytes_per_call - 1) / bytes_per_call));
}

// A size as sysfs writes it ("32768K", "1M", "512"), in bytes; 0 if unreadable.
inline int64_t ReadSysfsSize(const char* path) {
  std::ifstream f(path);
  int64_t v = 0;
  char unit = 0;
  if (!(f >> v)) return 0;
  f >> unit;
  return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : unit == 'G' ? v << 30 : v;
}

// The host's L3 in bytes: the larger of what glibc reports
// (sysconf(_SC_LEVEL3_CACHE_SIZE), from cpuid; on some hosts the whole
// package's) and cpu0's sysfs cache/index3 (one CCX's or socket's), so that
// the rotation is never sized below the larger claim; `how` says both.
inline int64_t HostL3Bytes(std::string* how) {
  const long sc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const int64_t from_sysconf = sc > 0 ? static_cast<int64_t>(sc) : 0;
  const int64_t from_sysfs = ReadSysfsSize("/sys/devices/system/cpu/cpu0/cache/index3/size");
  *how = "sysconf " + std::to_string(from_sysconf >> 20) + " MiB, sysfs index3 " + std::to_string(from_sysfs >> 20) +
         " MiB";
  return std::max(from_sysconf, from_sysfs);
}

// MemAvailable of /proc/meminfo in bytes; -1 if unreadable.
inline int64_t MemAvailableBytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (f >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb << 10;
  }
  return -1;
}

// Reads --rotate_mib=N (CLI11; 0 to 1048576) and leaves every other argument
// in argv, in order, for benchmark::Initialize, which rejects flags it does
// not know. Without the flag the rotation is max(256 MiB, 4 x L3). Prints the
// rotation and where it came from, and records it (and the kernel path) in
// the benchmark context. Returns 0, or CLI11's exit code after its one
// message naming the flag, or 1 after one message when KVLAB_ISA names a path
// this CPU lacks or MemAvailable is below what the rotation needs (two
// rotations, bf16 and encoded, and the 1 GiB bandwidth buffer).
inline int ParseRotateFlag(int* argc, char** argv) {
  if (const Status st = CheckCpuIsaEnv(); !st.ok()) {
    std::fprintf(stderr, "%s: error: %s\n", argv[0], st.ToString().c_str());
    return 1;
  }
  CLI::App app{"cache rotation"};
  app.allow_extras();
  app.set_help_flag();  // --help stays Google Benchmark's
  int64_t mib = -1;
  app.add_option("--rotate_mib", mib, "MiB of distinct caches to rotate over (0: one cache; default 4 x L3)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  try {
    app.parse(*argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::string l3_how;
  const int64_t l3 = HostL3Bytes(&l3_how);
  std::string why;
  if (mib >= 0) {
    RotateBytes() = mib << 20;
    why = "--rotate_mib";
  } else {
    RotateBytes() = std::max(kMinRotateBytes, 4 * l3);
    why = RotateBytes() == kMinRotateBytes ? "the 256 MiB floor" : "4 x L3";
  }
  const int64_t need = 2 * RotateBytes() + kBandwidthBytes;
  const int64_t avail = MemAvailableBytes();
  std::printf("cache rotation: %lld MiB (%s; L3 %lld MiB: %s); MemAvailable %lld MiB\n",
              static_cast<long long>(RotateBytes() >> 20), why.c_str(), static_cast<long long>(l3 >> 20),
              l3_how.c_str(), static_cast<long long>(avail >> 20));
  std::fflush(stdout);
  if (avail >= 0 && avail < need) {
    std::fprintf(stderr,
                 "%s: error: --rotate_mib: a rotation of %lld MiB needs %lld MiB of memory (two rotations and the "
                 "1 GiB bandwidth buffer) but MemAvailable is %lld MiB; pass a smaller --rotate_mib (below 4 x L3 "
                 "the from-memory figures are partly from cache)\n",
                 argv[0], static_cast<long long>(RotateBytes() >> 20), static_cast<long long>(need >> 20),
                 static_cast<long long>(avail >> 20));
    return 1;
  }
  benchmark::AddCustomContext("rotate_MiB", std::to_string(RotateBytes() >> 20));
  benchmark::AddCustomContext("l3_MiB", std::to_string(l3 >> 20));
  benchmark::AddCustomContext("cpu_isa", CpuIsaName(ActiveCpuIsa()));
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

// A benchmark program's main: --rotate_mib (when `rotate`), Google
// Benchmark's flags, the read bandwidth and OpenMP threads as context (and
// whatever `more_context` adds), then the registered benchmarks.
inline int BenchMain(int argc, char** argv, bool rotate = true, void (*more_context)() = nullptr) {
  if (rotate) {
    if (const int rc = ParseRotateFlag(&argc, argv); rc != 0) return rc;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("read_bw_GBps", std::to_string(ReadBandwidth() / 1e9));
  benchmark::AddCustomContext("omp_threads", std::to_string(omp_get_max_threads()));
  if (more_context != nullptr) more_context();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace kvlab
