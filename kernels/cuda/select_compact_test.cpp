// CompactStreams against the CPU, byte for byte against a gather on a host
// copy of the pool, with kept sets that include H2O's (policies/h2o.cpp's
// rule, copied below). (The offload moves, built into the same test
// programs: offload_test.cpp.) Device tests skip without a GPU; argument
// checks run anywhere. The same file runs on the CPU emulation of CUDA
// (select_compact_emu_test).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/compact.h"
#include "kernels/cuda/cuda_test_util.h"

namespace kvlab {
namespace cuda_test {
namespace {

// A kept set as H2O chooses it: H2OPolicy::SelectSlots (policies/h2o.cpp,
// not a free function) with heavy and recent given: the recent last slots plus the heavy highest-scored
// others, NaN as -inf, ties to the lower slot; everything when n <= heavy +
// recent. Same comparator and the same nth_element + sort.
std::vector<int32_t> H2OKeepReference(const float* score, int64_t n, int64_t heavy, int64_t recent) {
  heavy = std::max<int64_t>(heavy, 0);
  recent = std::max<int64_t>(recent, 0);
  std::vector<int32_t> keep;
  if (n <= heavy + recent) {
    for (int64_t i = 0; i < n; ++i) keep.push_back(static_cast<int32_t>(i));
    return keep;
  }
  const int64_t older = n - recent;
  std::vector<int64_t> cand(static_cast<size_t>(older));
  std::iota(cand.begin(), cand.end(), 0);
  auto key = [score](int64_t i) {
    if (score == nullptr) return 0.0f;
    const float v = score[i];
    return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
  };
  auto better = [&key](int64_t a, int64_t b) {
    const float ka = key(a), kb = key(b);
    return ka != kb ? ka > kb : a < b;
  };
  if (heavy < older) {
    std::nth_element(cand.begin(), cand.begin() + heavy, cand.end(), better);
    cand.resize(static_cast<size_t>(heavy));
  }
  std::sort(cand.begin(), cand.end());
  for (int64_t c : cand) keep.push_back(static_cast<int32_t>(c));
  for (int64_t i = older; i < n; ++i) keep.push_back(static_cast<int32_t>(i));
  return keep;
}

// --- CompactStreams ---

struct CompactCase {
  DType dtype;
  int block_size;
  int head_dim;  // 64: 16-byte words; 3: 4-byte (fp32) or 1-byte (fp16, bf16) words
};

void PrintTo(const CompactCase& c, std::ostream* os) {
  *os << DTypeName(c.dtype) << " block_size " << c.block_size << " head_dim " << c.head_dim;
}

class CompactCudaTest : public ::testing::TestWithParam<CompactCase> {};

// Kept slots of a stream of n slots, by a rule that cycles with s: all, none,
// the first, the last, a random subset, a contiguous tail, H2O on random scores.
std::vector<int32_t> KeptFor(int s, int64_t n, std::mt19937* rng) {
  std::vector<int32_t> k;
  switch (s % 7) {
    case 0:
      for (int64_t i = 0; i < n; ++i) k.push_back(static_cast<int32_t>(i));
      break;
    case 1: break;
    case 2:
      if (n > 0) k.push_back(0);
      break;
    case 3:
      if (n > 0) k.push_back(static_cast<int32_t>(n - 1));
      break;
    case 4: {
      std::bernoulli_distribution b(0.4);
      for (int64_t i = 0; i < n; ++i) {
        if (b(*rng)) k.push_back(static_cast<int32_t>(i));
      }
      break;
    }
    case 5:
      for (int64_t i = n / 2; i < n; ++i) k.push_back(static_cast<int32_t>(i));
      break;
    default: {
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      std::vector<float> sc(static_cast<size_t>(n));
      for (float& x : sc) x = u(*rng);
      k = H2OKeepReference(sc.data(), n, 5, 3);
    }
  }
  return k;
}

// The expected pool, slot_attn, new last-block lengths and freed-block counts.
struct CompactExpected {
  std::vector<uint8_t> pool;
  std::vector<float> attn;
  std::vector<int32_t> last, freed;
};

CompactExpected CompactOnHost(const HostCache& hc, DType dtype, int bs, int d,
                              const std::vector<std::vector<int32_t>>& kept, const std::vector<float>& attn,
                              const std::vector<int64_t>& attn_off) {
  CompactExpected e;
  e.pool = hc.pool;
  e.attn = attn;
  HostCache copy = hc;
  copy.pool = e.pool;
  const PagedKV src = HostView(hc, dtype, bs, d);
  const PagedKV dst = HostView(copy, dtype, bs, d);
  const size_t row = static_cast<size_t>(d) * static_cast<size_t>(DTypeBytes(dtype));
  for (int s = 0; s < src.num_streams; ++s) {
    const std::vector<int32_t>& k = kept[static_cast<size_t>(s)];
    const int64_t n = src.StreamLength(s);
    for (size_t i = 0; i < k.size(); ++i) {
      std::memcpy(dst.KeyPtr(s, static_cast<int64_t>(i)), src.KeyPtr(s, k[i]), row);
      std::memcpy(dst.ValuePtr(s, static_cast<int64_t>(i)), src.ValuePtr(s, k[i]), row);
      e.attn[static_cast<size_t>(attn_off[static_cast<size_t>(s)]) + i] =
          attn[static_cast<size_t>(attn_off[static_cast<size_t>(s)] + k[i])];
    }
    for (int64_t i = static_cast<int64_t>(k.size()); i < n; ++i) {
      e.attn[static_cast<size_t>(attn_off[static_cast<size_t>(s)] + i)] = 0.0f;
    }
    const int32_t nk = static_cast<int32_t>(k.size());
    e.last.push_back(nk == 0 ? 0 : (nk - 1) % bs + 1);
    e.freed.push_back(src.indptr[s + 1] - src.indptr[s] - (nk + bs - 1) / bs);
  }
  e.pool = copy.pool;
  return e;
}

// The device copies of a host cache's page table and pool.
TEST_P(CompactCudaTest, MatchesHostGather) {
  SKIP_WITHOUT_GPU();
  const CompactCase& c = GetParam();
  std::mt19937 rng(5 + c.block_size + c.head_dim);
  // Partial and full last blocks, an empty stream, more than one block.
  const std::vector<int64_t> lens = {0, 1, 16, 17, 33, 100, 5, 48, 31, 64, 7, 50, 2, 40};
  HostCache hc = MakePlainCache(c.dtype, c.block_size, c.head_dim, lens, &rng);
  const int ns = static_cast<int>(lens.size());
  std::vector<std::vector<int32_t>> kept;
  std::vector<int32_t> flat(3, -1), num;
  std::vector<int64_t> kept_off, attn_off;
  int64_t attn_size = 2;
  for (int s = 0; s < ns; ++s) {
    kept.push_back(KeptFor(s, lens[static_cast<size_t>(s)], &rng));
    kept_off.push_back(static_cast<int64_t>(flat.size()));
    flat.insert(flat.end(), kept.back().begin(), kept.back().end());
    flat.push_back(-1);  // a gap
    num.push_back(static_cast<int32_t>(kept.back().size()));
    attn_off.push_back(attn_size);
    attn_size += lens[static_cast<size_t>(s)] + 2;
  }
  std::vector<float> attn(static_cast<size_t>(attn_size));
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : attn) x = u(rng);

  for (bool with_attn : {true, false}) {
    SCOPED_TRACE(with_attn ? "with slot_attn" : "without slot_attn");
    const CompactExpected want = CompactOnHost(hc, c.dtype, c.block_size, c.head_dim, kept, attn, attn_off);
    DeviceCache dc;
    CUDA_ASSERT(dc.Upload(hc));
    DeviceBuffer d_flat, d_kept_off, d_num, d_attn, d_attn_off, d_last, d_freed;
    CUDA_ASSERT(d_flat.Upload(flat));
    CUDA_ASSERT(d_kept_off.Upload(kept_off));
    CUDA_ASSERT(d_num.Upload(num));
    CUDA_ASSERT(d_attn.Upload(attn));
    CUDA_ASSERT(d_attn_off.Upload(attn_off));
    CUDA_ASSERT(d_last.Upload(std::vector<int32_t>(static_cast<size_t>(ns), -9)));
    CUDA_ASSERT(d_freed.Upload(std::vector<int32_t>(static_cast<size_t>(ns), -9)));
    const PagedKV kv = dc.View(hc, c.dtype, c.block_size, c.head_dim);
    cuda::KeptSlots ks;
    ks.slots = d_flat.as<int32_t>();
    ks.offsets = d_kept_off.as<int64_t>();
    ks.num_kept = d_num.as<int32_t>();
    ks.capacity = static_cast<int64_t>(flat.size());
    cuda::CompactResult res;
    res.new_last_block_len = d_last.as<int32_t>();
    res.num_freed_blocks = d_freed.as<int32_t>();
    float* sa = with_attn ? d_attn.as<float>() : nullptr;
    const int64_t* sa_off = with_attn ? d_attn_off.as<int64_t>() : nullptr;
    ASSERT_EQ(cuda::CompactStreamsCheck(kv, ks, sa, sa_off), "");
    size_t temp_bytes = 0;
    CUDA_ASSERT(cuda::CompactStreams(nullptr, &temp_bytes, kv, ks, sa, sa_off, res, nullptr));
    DeviceBuffer temp;
    CUDA_ASSERT(temp.Alloc(temp_bytes));
    CUDA_ASSERT(cudaMemset(temp.as<void>(), 0x7f, temp_bytes));
    CUDA_ASSERT(cuda::CompactStreams(temp.as<void>(), &temp_bytes, kv, ks, sa, sa_off, res, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());

    std::vector<uint8_t> pool;
    std::vector<float> got_attn;
    std::vector<int32_t> last, freed;
    CUDA_ASSERT(dc.pool.Download(&pool));
    CUDA_ASSERT(d_attn.Download(&got_attn));
    CUDA_ASSERT(d_last.Download(&last));
    CUDA_ASSERT(d_freed.Download(&freed));
    ExpectSameBytes(pool, want.pool, "the pool");
    EXPECT_EQ(got_attn, with_attn ? want.attn : attn);
    EXPECT_EQ(last, want.last);
    EXPECT_EQ(freed, want.freed);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypesBlocks, CompactCudaTest,
                         ::testing::Values(CompactCase{DType::kF32, 1, 64}, CompactCase{DType::kF32, 16, 64},
                                           CompactCase{DType::kF16, 1, 64}, CompactCase{DType::kF16, 16, 64},
                                           CompactCase{DType::kBF16, 1, 64}, CompactCase{DType::kBF16, 16, 64},
                                           CompactCase{DType::kF32, 16, 3}, CompactCase{DType::kF16, 16, 3},
                                           CompactCase{DType::kBF16, 1, 3}),
                         [](const ::testing::TestParamInfo<CompactCase>& i) {
                           return std::string(DTypeName(i.param.dtype)) + "_bs" + std::to_string(i.param.block_size) +
                                  "_d" + std::to_string(i.param.head_dim);
                         });

TEST(CompactStreamsCheckTest, RejectsBadArgumentsAndSizesTemp) {
  PagedKV kv;
  cuda::KeptSlots ks;
  size_t bytes = 5;
  EXPECT_EQ(cuda::CompactStreams(nullptr, &bytes, kv, ks, nullptr, nullptr, {}, nullptr), cudaSuccess);  // no streams
  EXPECT_EQ(bytes, 0u);
  kv.num_streams = 2;
  kv.block_size = 16;
  kv.head_dim = 64;
  kv.dtype = DType::kBF16;
  kv.block_bytes = 2 * 16 * 64 * 2;
  EXPECT_NE(cuda::CompactStreamsCheck(kv, ks, nullptr, nullptr), "");
  uint8_t byte = 0;
  int32_t i32[3] = {};
  int64_t i64[2] = {};
  kv.base = &byte;
  kv.indptr = kv.indices = kv.last_block_len = i32;
  EXPECT_NE(cuda::CompactStreamsCheck(kv, ks, nullptr, nullptr), "");  // kept is null
  ks.slots = ks.num_kept = i32;
  ks.offsets = i64;
  ks.capacity = 1000;
  EXPECT_EQ(cuda::CompactStreamsCheck(kv, ks, nullptr, nullptr), "");
  float f = 0.0f;
  EXPECT_NE(cuda::CompactStreamsCheck(kv, ks, &f, nullptr), "");  // slot_attn without offsets
  EXPECT_EQ(cuda::CompactStreams(nullptr, &bytes, kv, ks, &f, nullptr, {}, nullptr), cudaErrorInvalidValue);
  // The temp size is host arithmetic: 1000 kept rows of K and V (256 bytes
  // each) plus 1000 floats, each part rounded up to 256 bytes.
  EXPECT_EQ(cuda::CompactStreams(nullptr, &bytes, kv, ks, nullptr, nullptr, {}, nullptr), cudaSuccess);
  EXPECT_EQ(bytes, 1000u * 2 * 128 + 4096u);
  kv.block_bytes -= 1;
  EXPECT_NE(cuda::CompactStreamsCheck(kv, ks, nullptr, nullptr), "");
}

}  // namespace
}  // namespace cuda_test
}  // namespace kvlab
