// SelectTopK and CompactStreams against the CPU: SelectTopK against H2O's
// rule (policies/h2o.cpp), slot for slot; CompactStreams byte for byte
// against a gather on a host copy of the pool. (The offload moves, built into
// the same test programs: offload_test.cpp.) Device tests skip without a GPU;
// argument checks run anywhere. The same file runs on the CPU emulation of
// CUDA (select_compact_emu_test), where the CUB sort inside SelectTopK is
// replaced by a host sort (select_topk.h).
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
#include "kernels/cuda/select_topk.h"

namespace kvlab {
namespace cuda_test {
namespace {

// H2OPolicy::SelectSlots (policies/h2o.cpp, not a free function) with heavy
// and recent given: the recent last slots plus the heavy highest-scored
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

// --- SelectTopK ---

enum class Scores { kRandom, kFewValues, kSpecial, kNull };

struct SelectCase {
  const char* name;
  Scores scores;
  bool one_long_stream;
};

void PrintTo(const SelectCase& c, std::ostream* os) { *os << c.name; }

class SelectTopKCudaTest : public ::testing::TestWithParam<SelectCase> {};

TEST_P(SelectTopKCudaTest, MatchesH2OPolicy) {
  SKIP_WITHOUT_GPU();
  const SelectCase& c = GetParam();
  std::mt19937 rng(11);
  std::vector<int32_t> len, heavy, recent;
  if (c.one_long_stream) {
    len = {5000};
    heavy = {1000};
    recent = {100};
  } else {
    // Chunk edges of the 256-thread scan (255, 256, 257); heavy = older - 1
    // (257: 255 + 1); budgets above n (kept whole); negative parameters (0).
    len = {0, 1, 2, 7, 64, 255, 256, 257, 600, 1500, 40, 33};
    heavy = {2, 0, 1, 4, 0, 100, 128, 255, 300, 300, -1, 10};
    recent = {2, 0, 0, 0, 4, 20, 64, 1, 1000, 1, 3, -2};
  }
  const int ns = static_cast<int>(len.size());
  // Streams' score arrays and kept lists lie apart, with gaps.
  std::vector<int64_t> attn_off, out_off;
  int64_t attn_size = 3, out_size = 5;
  for (int s = 0; s < ns; ++s) {
    attn_off.push_back(attn_size);
    attn_size += len[static_cast<size_t>(s)] + 3;
    out_off.push_back(out_size);
    out_size += len[static_cast<size_t>(s)] + 5;
  }
  std::vector<float> attn(static_cast<size_t>(attn_size), 1e30f);  // gaps: would win if read
  std::uniform_real_distribution<float> u(0.0f, 4.0f);
  std::uniform_int_distribution<int> few(0, 3), pick(0, 9);
  const float special[] = {std::nanf(""), -0.0f, 0.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), 1.0f, -1.0f, 2.0f, 1e-40f, -1e-40f};
  for (int s = 0; s < ns; ++s) {
    for (int32_t i = 0; i < len[static_cast<size_t>(s)]; ++i) {
      float& x = attn[static_cast<size_t>(attn_off[static_cast<size_t>(s)] + i)];
      switch (c.scores) {
        case Scores::kRandom: x = u(rng); break;
        case Scores::kFewValues: x = static_cast<float>(few(rng)); break;  // many ties
        case Scores::kSpecial: x = special[pick(rng)]; break;
        case Scores::kNull: x = u(rng); break;  // not passed
      }
    }
  }
  const bool null_scores = c.scores == Scores::kNull;

  DeviceBuffer d_attn, d_attn_off, d_len, d_heavy, d_recent, d_out, d_out_off, d_num;
  CUDA_ASSERT(d_attn.Upload(attn));
  CUDA_ASSERT(d_attn_off.Upload(attn_off));
  CUDA_ASSERT(d_len.Upload(len));
  CUDA_ASSERT(d_heavy.Upload(heavy));
  CUDA_ASSERT(d_recent.Upload(recent));
  CUDA_ASSERT(d_out.Upload(std::vector<int32_t>(static_cast<size_t>(out_size), -7)));
  CUDA_ASSERT(d_out_off.Upload(out_off));
  CUDA_ASSERT(d_num.Upload(std::vector<int32_t>(static_cast<size_t>(ns), -7)));

  cuda::TopKInput in;
  in.num_streams = ns;
  in.slot_attn = null_scores ? nullptr : d_attn.as<float>();
  in.slot_attn_offsets = d_attn_off.as<int64_t>();
  in.slot_attn_size = attn_size;
  in.length = d_len.as<int32_t>();
  in.heavy = d_heavy.as<int32_t>();
  in.recent = d_recent.as<int32_t>();
  cuda::KeptSlots out;
  out.slots = d_out.as<int32_t>();
  out.offsets = d_out_off.as<int64_t>();
  out.num_kept = d_num.as<int32_t>();
  out.capacity = out_size;
  ASSERT_EQ(cuda::SelectTopKCheck(in, out), "");
  size_t temp_bytes = 0;
  CUDA_ASSERT(cuda::SelectTopK(nullptr, &temp_bytes, in, out, nullptr));
  ASSERT_GT(temp_bytes, 0u);
  DeviceBuffer temp;
  CUDA_ASSERT(temp.Alloc(temp_bytes));
  CUDA_ASSERT(cudaMemset(temp.as<void>(), 0xff, temp_bytes));  // stale keys must not matter
  size_t too_small = temp_bytes - 1;
  EXPECT_EQ(cuda::SelectTopK(temp.as<void>(), &too_small, in, out, nullptr), cudaErrorInvalidValue);
  CUDA_ASSERT(cuda::SelectTopK(temp.as<void>(), &temp_bytes, in, out, nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());

  std::vector<int32_t> got, num;
  CUDA_ASSERT(d_out.Download(&got));
  CUDA_ASSERT(d_num.Download(&num));
  for (int s = 0; s < ns; ++s) {
    const size_t su = static_cast<size_t>(s);
    SCOPED_TRACE("stream " + std::to_string(s) + " length " + std::to_string(len[su]) + " heavy " +
                 std::to_string(heavy[su]) + " recent " + std::to_string(recent[su]));
    const std::vector<int32_t> want = H2OKeepReference(null_scores ? nullptr : attn.data() + attn_off[su], len[su],
                                                       heavy[su], recent[su]);
    ASSERT_EQ(num[su], static_cast<int32_t>(want.size()));
    const std::vector<int32_t> have(got.begin() + out_off[su], got.begin() + out_off[su] + num[su]);
    EXPECT_EQ(have, want);
    // Nothing written past the kept slots (up to the next stream's gap).
    for (int64_t i = out_off[su] + num[su]; i < out_off[su] + len[su] + 5; ++i) {
      EXPECT_EQ(got[static_cast<size_t>(i)], -7) << "entry " << i;
    }
  }
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], -7);
}

INSTANTIATE_TEST_SUITE_P(Scores, SelectTopKCudaTest,
                         ::testing::Values(SelectCase{"random", Scores::kRandom, false},
                                           SelectCase{"ties", Scores::kFewValues, false},
                                           SelectCase{"nan_inf_signed_zeros", Scores::kSpecial, false},
                                           SelectCase{"null_scores", Scores::kNull, false},
                                           SelectCase{"long_stream", Scores::kRandom, true},
                                           SelectCase{"long_stream_ties", Scores::kFewValues, true}),
                         [](const ::testing::TestParamInfo<SelectCase>& i) { return std::string(i.param.name); });

TEST(SelectTopKCheckTest, RejectsBadArguments) {
  cuda::TopKInput in;
  cuda::KeptSlots out;
  EXPECT_EQ(cuda::SelectTopKCheck(in, out), "");  // no streams: nothing to do
  size_t bytes = 123;
  EXPECT_EQ(cuda::SelectTopK(nullptr, &bytes, in, out, nullptr), cudaSuccess);
  EXPECT_EQ(bytes, 0u);
  in.num_streams = 2;
  EXPECT_NE(cuda::SelectTopKCheck(in, out), "");
  EXPECT_EQ(cuda::SelectTopK(nullptr, &bytes, in, out, nullptr), cudaErrorInvalidValue);
  int32_t i32[4] = {};
  int64_t i64[4] = {};
  in.slot_attn_offsets = i64;
  in.length = in.heavy = in.recent = i32;
  EXPECT_NE(cuda::SelectTopKCheck(in, out), "");  // out is null
  out.slots = out.num_kept = i32;
  out.offsets = i64;
  EXPECT_EQ(cuda::SelectTopKCheck(in, out), "");
  in.slot_attn_size = -1;
  EXPECT_NE(cuda::SelectTopKCheck(in, out), "");
  in.num_streams = -1;
  EXPECT_NE(cuda::SelectTopKCheck(in, out), "");
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

// SelectTopK's output fed to CompactStreams on the device: an H2O eviction.
TEST(SelectThenCompactCudaTest, EvictsLikeThePolicy) {
  SKIP_WITHOUT_GPU();
  const DType dtype = DType::kBF16;
  const int bs = 16, d = 64;
  std::mt19937 rng(3);
  const std::vector<int64_t> lens = {300, 17, 0, 64, 129};
  const std::vector<int32_t> len32(lens.begin(), lens.end()), heavy = {40, 4, 4, 0, 60}, recent = {24, 4, 4, 32, 8};
  HostCache hc = MakePlainCache(dtype, bs, d, lens, &rng);
  const int ns = static_cast<int>(lens.size());
  std::vector<int64_t> off;
  int64_t total = 0;
  for (int64_t n : lens) {
    off.push_back(total);
    total += n;
  }
  std::vector<float> attn(static_cast<size_t>(total));
  std::uniform_int_distribution<int> few(0, 20);
  for (float& x : attn) x = static_cast<float>(few(rng)) / 8.0f;  // ties
  std::vector<std::vector<int32_t>> want_kept;
  for (int s = 0; s < ns; ++s) {
    const size_t su = static_cast<size_t>(s);
    want_kept.push_back(H2OKeepReference(attn.data() + off[su], lens[su], heavy[su], recent[su]));
  }
  const CompactExpected want = CompactOnHost(hc, dtype, bs, d, want_kept, attn, off);

  DeviceCache dc;
  CUDA_ASSERT(dc.Upload(hc));
  DeviceBuffer d_attn, d_off, d_len, d_heavy, d_recent, d_slots, d_num, d_last, d_freed;
  CUDA_ASSERT(d_attn.Upload(attn));
  CUDA_ASSERT(d_off.Upload(off));
  CUDA_ASSERT(d_len.Upload(len32));
  CUDA_ASSERT(d_heavy.Upload(heavy));
  CUDA_ASSERT(d_recent.Upload(recent));
  CUDA_ASSERT(d_slots.Alloc(static_cast<size_t>(total) * 4));
  CUDA_ASSERT(d_num.Alloc(static_cast<size_t>(ns) * 4));
  CUDA_ASSERT(d_last.Alloc(static_cast<size_t>(ns) * 4));
  CUDA_ASSERT(d_freed.Alloc(static_cast<size_t>(ns) * 4));
  cuda::TopKInput in;
  in.num_streams = ns;
  in.slot_attn = d_attn.as<float>();
  in.slot_attn_offsets = d_off.as<int64_t>();
  in.slot_attn_size = total;
  in.length = d_len.as<int32_t>();
  in.heavy = d_heavy.as<int32_t>();
  in.recent = d_recent.as<int32_t>();
  cuda::KeptSlots ks;  // the same layout as slot_attn
  ks.slots = d_slots.as<int32_t>();
  ks.offsets = d_off.as<int64_t>();
  ks.num_kept = d_num.as<int32_t>();
  ks.capacity = total;
  const PagedKV kv = dc.View(hc, dtype, bs, d);
  cuda::CompactResult res{d_last.as<int32_t>(), d_freed.as<int32_t>()};
  size_t select_bytes = 0, compact_bytes = 0;
  CUDA_ASSERT(cuda::SelectTopK(nullptr, &select_bytes, in, ks, nullptr));
  CUDA_ASSERT(cuda::CompactStreams(nullptr, &compact_bytes, kv, ks, d_attn.as<float>(), d_off.as<int64_t>(), res,
                                   nullptr));
  size_t temp_bytes = std::max(select_bytes, compact_bytes);
  DeviceBuffer temp;
  CUDA_ASSERT(temp.Alloc(temp_bytes));
  CUDA_ASSERT(cuda::SelectTopK(temp.as<void>(), &temp_bytes, in, ks, nullptr));
  CUDA_ASSERT(cuda::CompactStreams(temp.as<void>(), &temp_bytes, kv, ks, d_attn.as<float>(), d_off.as<int64_t>(), res,
                                   nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  std::vector<uint8_t> pool;
  std::vector<float> got_attn;
  std::vector<int32_t> last, freed;
  CUDA_ASSERT(dc.pool.Download(&pool));
  CUDA_ASSERT(d_attn.Download(&got_attn));
  CUDA_ASSERT(d_last.Download(&last));
  CUDA_ASSERT(d_freed.Download(&freed));
  ExpectSameBytes(pool, want.pool, "the pool");
  EXPECT_EQ(got_attn, want.attn);
  EXPECT_EQ(last, want.last);
  EXPECT_EQ(freed, want.freed);
  EXPECT_EQ(freed, (std::vector<int32_t>{15, 1, 0, 2, 4}));  // blocks 19 -> 4, 2 -> 1, 0, 4 -> 2, 9 -> 5
}

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
