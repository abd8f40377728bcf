// Helpers of the CUDA kernels' tests (paged_decode_test.cpp, append_kv_test.cpp,
// select_compact_test.cpp, offload_test.cpp): GPU detection and skipping, CUDA
// error assertions, device buffers, a byte-for-byte comparison, and a
// host-side paged cache with shuffled block ids and NaN outside the streams.
// Compiled against real CUDA or against the emulation in emu/.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"

namespace kvlab {
namespace cuda_test {

inline bool HaveGpu() {
  static const bool have = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      std::fprintf(stderr, "cudaGetDeviceCount: %s: CUDA tests will be skipped\n", cudaGetErrorString(err));
      (void)cudaGetLastError();  // clear the sticky error
    }
    return err == cudaSuccess && n > 0;
  }();
  return have;
}

#define SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                     \
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): CUDA test skipped"; \
  } while (0)

#define CUDA_ASSERT(expr)                                                          \
  do {                                                                             \
    const cudaError_t cuda_assert_err = (expr);                                    \
    ASSERT_EQ(cuda_assert_err, cudaSuccess) << #expr << ": " << cudaGetErrorString(cuda_assert_err); \
  } while (0)

// Device memory owned by the test.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  cudaError_t Alloc(size_t bytes) {
    bytes_ = bytes;
    return cudaMalloc(&ptr_, std::max<size_t>(bytes, 1));
  }
  template <typename T>
  cudaError_t Upload(const std::vector<T>& v) {
    const cudaError_t err = Alloc(v.size() * sizeof(T));
    if (err != cudaSuccess || v.empty()) return err;
    return cudaMemcpy(ptr_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  template <typename T>
  cudaError_t Download(std::vector<T>* v) const {
    v->resize(bytes_ / sizeof(T));
    return bytes_ == 0 ? cudaSuccess : cudaMemcpy(v->data(), ptr_, bytes_, cudaMemcpyDeviceToHost);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Equal byte for byte; on a difference, names `what`, the first differing
// byte (as block and byte within it when block_bytes > 0) and both values.
inline void ExpectSameBytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                            const std::string& what, int64_t block_bytes = 0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const size_t first_bad = static_cast<size_t>(std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin());
  if (first_bad == got.size()) return;
  std::string where = "byte " + std::to_string(first_bad);
  if (block_bytes > 0) {
    const int64_t i = static_cast<int64_t>(first_bad);
    where = "block " + std::to_string(i / block_bytes) + " byte " + std::to_string(i % block_bytes) + " of " +
            std::to_string(block_bytes);
  }
  EXPECT_EQ(first_bad, got.size()) << "first differing byte of " << what << ": " << where << ", got "
                                   << static_cast<int>(got[first_bad]) << ", expected "
                                   << static_cast<int>(want[first_bad]);
}

// rtol by storage dtype (atol + rtol * |ref|, llm.c's checker). Both sides read
// the same stored values, so what differs is fp32 accumulation (dot products
// over head_dim, sums over up to 32K slots, split merges) against double.
inline double Rtol(DType t) {
  switch (t) {
    case DType::kF32: return 1e-4;
    case DType::kF16: return 2e-4;
    case DType::kBF16: return 2e-4;
  }
  return 1e-4;
}
constexpr double kAtol = 2e-5;

// Counts elements outside atol + rtol * |want|, skipping non-finite
// references, and reports the first few.
inline int CountMismatches(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                    const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (!std::isfinite(want[i])) continue;
    const double tol = atol + rtol * std::abs(static_cast<double>(want[i]));
    if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= tol)) {  // NaN fails
      if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected " << want[i];
    }
  }
  return bad;
}

// A host-side paged cache: plain pool (+ optional KIVI pool, filled by the
// decode test), shuffled block ids, NaN in every slot no stream owns so that a
// stray read shows.
struct HostCache {
  int64_t block_bytes = 0;
  std::vector<uint8_t> pool;
  std::vector<int32_t> indptr, indices, last;
  std::vector<int64_t> plain_len, enc_len;
  KvEncoding enc;
  std::vector<uint8_t> enc_pool;
  std::vector<int32_t> enc_indptr, enc_indices;
};

inline PagedKV HostView(const HostCache& hc, DType dtype, int block_size, int d) {
  PagedKV kv;
  kv.base = const_cast<uint8_t*>(hc.pool.data());
  kv.block_bytes = hc.block_bytes;
  kv.dtype = dtype;
  kv.block_size = block_size;
  kv.head_dim = d;
  kv.num_streams = static_cast<int>(hc.plain_len.size());
  kv.indptr = hc.indptr.data();
  kv.indices = hc.indices.data();
  kv.last_block_len = hc.last.data();
  return kv;
}

inline void FillNaN(DType dtype, uint8_t* p, int64_t n) {
  std::vector<float> nan(static_cast<size_t>(n), std::nanf(""));
  ConvertFromF32(dtype, nan.data(), p, n);
}

// Plain segments only: streams of `plain_len` slots.
inline HostCache MakePlainCache(DType dtype, int block_size, int d, const std::vector<int64_t>& plain_len, std::mt19937* rng) {
  HostCache hc;
  const int es = DTypeBytes(dtype);
  hc.block_bytes = 2LL * block_size * d * es;
  hc.plain_len = plain_len;
  hc.indptr.push_back(0);
  for (int64_t len : plain_len) {
    hc.indptr.push_back(hc.indptr.back() + static_cast<int32_t>((len + block_size - 1) / block_size));
    hc.last.push_back(len == 0 ? 0 : static_cast<int32_t>((len - 1) % block_size + 1));
  }
  const int num_blocks = hc.indptr.back() + 3;  // spares stay NaN
  hc.indices.resize(static_cast<size_t>(num_blocks));
  std::iota(hc.indices.begin(), hc.indices.end(), 0);
  std::shuffle(hc.indices.begin(), hc.indices.end(), *rng);
  hc.pool.resize(static_cast<size_t>(num_blocks * hc.block_bytes));
  FillNaN(dtype, hc.pool.data(), num_blocks * hc.block_bytes / es);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(d));
  const PagedKV kv = HostView(hc, dtype, block_size, d);
  for (int s = 0; s < kv.num_streams; ++s) {
    for (int64_t t = 0; t < plain_len[static_cast<size_t>(s)]; ++t) {
      for (float& x : row) x = u(*rng);
      ConvertFromF32(dtype, row.data(), kv.KeyPtr(s, t), d);
      for (float& x : row) x = u(*rng);
      ConvertFromF32(dtype, row.data(), kv.ValuePtr(s, t), d);
    }
  }
  return hc;
}

// A HostCache's pool, block table and last-block lengths on the device, and a
// view of them (On: the host view with the device pointers put in).
struct DeviceCache {
  DeviceBuffer pool, indptr, indices, last;
  cudaError_t Upload(const HostCache& hc) {
    cudaError_t err = pool.Upload(hc.pool);
    if (err == cudaSuccess) err = indptr.Upload(hc.indptr);
    if (err == cudaSuccess) err = indices.Upload(hc.indices);
    if (err == cudaSuccess) err = last.Upload(hc.last);
    return err;
  }
  PagedKV On(const PagedKV& host_kv) const {
    PagedKV kv = host_kv;
    kv.base = pool.as<uint8_t>();
    kv.indptr = indptr.as<int32_t>();
    kv.indices = indices.as<int32_t>();
    kv.last_block_len = last.as<int32_t>();
    return kv;
  }
  PagedKV View(const HostCache& hc, DType dtype, int bs, int d) const { return On(HostView(hc, dtype, bs, d)); }
};

}  // namespace cuda_test
}  // namespace kvlab
