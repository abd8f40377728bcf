// The read concern in the cache: block key bounds kept exactly as blocks fill
// and after compaction; the page table a decode step's kernel gets lists
// exactly the blocks quest picks (prefill and window-free rules as
// documented); attention over that table equals attention over only those
// slots, and with a budget of every page equals the dense read bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"
#include "core/cache/read_selection.h"
#include "kernels/append_kv.h"
#include "kernels/attention_cpu.h"
#include "kernels/attention_reference.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

constexpr int kD = 32, kBs = 4, kHkv = 2, kHq = 8, kLayers = 2;

std::unique_ptr<KVPolicy> MakePolicy(const std::string& name, std::map<std::string, std::string> params) {
  std::unique_ptr<KVPolicy> p;
  EXPECT_TRUE(PolicyRegistry::Global().Create(PolicySpec{name, std::move(params), "t"}, &p).ok());
  return p;
}

struct Fixture {
  std::unique_ptr<KVCache> cache;
  std::mt19937 rng{7};
  DType dtype;
  explicit Fixture(DType t = DType::kF32) : dtype(t) {
    CacheShape shape;
    shape.num_layers = kLayers;
    shape.num_kv_heads = kHkv;
    shape.head_dim = kD;
    shape.block_size = kBs;
    shape.dtype = t;
    EXPECT_TRUE(KVCache::Create(shape, 512, true, &cache).ok());
    cache->EnableKeyBounds();
  }
  // Appends n tokens of random K/V to sequence `id` (pages differ in their mean).
  void Write(int64_t id, int64_t n) {
    const int64_t start = cache->stream(id, 0, 0).num_tokens;
    const std::vector<int32_t> pos = Iota(start, n);
    ASSERT_TRUE(cache->Reserve(id, n, pos.data()).ok());
    PageTable pt;
    cache->BuildPageTable({id}, &pt);
    std::normal_distribution<float> g(0.0f, 1.0f);
    const std::vector<int32_t> qo = {0, static_cast<int32_t>(n)};
    for (int l = 0; l < kLayers; ++l) {
      std::vector<float> k(static_cast<size_t>(n * kHkv * kD)), v(k.size());
      for (size_t i = 0; i < k.size(); ++i) {
        const int64_t slot = start + static_cast<int64_t>(i) / (kHkv * kD);
        k[i] = g(rng) + static_cast<float>((slot / kBs) % 5) * 0.7f;
        v[i] = g(rng);
      }
      AppendKV(pt.Layer(l), qo.data(), 1, kHkv, k.data(), v.data());
    }
    cache->UpdateKeyBounds({id});
  }
  // Bounds recomputed from the stream's keys must equal the kept ones (kept
  // in the cache's dtype, one row of kD values per block).
  void ExpectExactBounds(int64_t id) {
    std::vector<float> k(kD), v(kD);
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kHkv; ++h) {
        const Stream& st = cache->stream(id, l, h);
        ASSERT_EQ(st.bounded_tokens, st.num_tokens);
        const int64_t blocks = (st.num_tokens + kBs - 1) / kBs;
        ASSERT_EQ(static_cast<int64_t>(st.key_min.size()), blocks * kD * DTypeBytes(dtype));
        ASSERT_EQ(st.key_max.size(), st.key_min.size());
        std::vector<float> lo(static_cast<size_t>(blocks * kD)), hi(lo.size());
        ConvertToF32(dtype, st.key_min.data(), lo.data(), blocks * kD);
        ConvertToF32(dtype, st.key_max.data(), hi.data(), blocks * kD);
        for (int64_t t = 0; t < st.num_tokens; ++t) {
          cache->ReadSlot(id, l, h, t, k.data(), v.data());
          for (int c = 0; c < kD; ++c) {
            const size_t at = static_cast<size_t>((t / kBs) * kD + c);
            EXPECT_LE(lo[at], k[static_cast<size_t>(c)]);
            EXPECT_GE(hi[at], k[static_cast<size_t>(c)]);
          }
        }
        for (int64_t b = 0; b * kBs < st.num_tokens; ++b) {  // each bound is reached by a key of its block
          for (int c = 0; c < kD; ++c) {
            bool lo_hit = false, hi_hit = false;
            for (int64_t t = b * kBs; t < std::min(st.num_tokens, (b + 1) * kBs); ++t) {
              cache->ReadSlot(id, l, h, t, k.data(), v.data());
              lo_hit = lo_hit || k[static_cast<size_t>(c)] == lo[static_cast<size_t>(b * kD + c)];
              hi_hit = hi_hit || k[static_cast<size_t>(c)] == hi[static_cast<size_t>(b * kD + c)];
            }
            EXPECT_TRUE(lo_hit && hi_hit) << "layer " << l << " head " << h << " block " << b << " channel " << c;
          }
        }
      }
    }
  }
};

TEST(ReadSelectionTest, BlockKeyBoundsFollowWritesAndCompaction) {
  Fixture f;
  ASSERT_TRUE(f.cache->AddSequence(0).ok());
  f.Write(0, 10);  // a partly filled block
  f.ExpectExactBounds(0);
  for (int i = 0; i < 7; ++i) f.Write(0, 1);  // decode steps, one slot each
  f.ExpectExactBounds(0);
  std::vector<int64_t> keep;
  for (int64_t t = 0; t < 17; ++t) {
    if (t % 3 != 1) keep.push_back(t);
  }
  ASSERT_TRUE(f.cache->Compact(0, 1, 0, keep).ok());
  f.cache->UpdateKeyBounds({0});
  f.ExpectExactBounds(0);
}

// A bf16 or fp16 cache keeps its bounds in 16 bits (half fp32's bytes, and
// counted so), each one a key of its block exactly, through decode steps and
// compaction.
TEST(ReadSelectionTest, SixteenBitCachesKeepExactSixteenBitBounds) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(t));
    Fixture f(t);
    ASSERT_TRUE(f.cache->AddSequence(0).ok());
    f.Write(0, 10);
    f.ExpectExactBounds(0);
    for (int i = 0; i < 7; ++i) f.Write(0, 1);
    f.ExpectExactBounds(0);
    std::vector<int64_t> keep;
    for (int64_t x = 0; x < 17; ++x) {
      if (x % 4 != 2) keep.push_back(x);
    }
    ASSERT_TRUE(f.cache->Compact(0, 0, 1, keep).ok());
    f.cache->UpdateKeyBounds({0});
    f.ExpectExactBounds(0);
    // A decode step past a few blocks: the bounds ranked are 2 bytes a value.
    f.Write(0, 30);
    f.ExpectExactBounds(0);
    PageTable pt;
    f.cache->BuildPageTable({0}, &pt);
    f.cache->AttachKeyBounds({0}, &pt);
    std::vector<float> q(static_cast<size_t>(kHq * kD), 0.5f), o(q.size());
    const std::vector<int32_t> qo = {0, 1};
    AttentionParams p;
    p.num_seqs = 1;
    p.num_qo_heads = kHq;
    p.num_kv_heads = kHkv;
    p.head_dim = kD;
    p.qo_indptr = qo.data();
    p.q = q.data();
    p.o = o.data();
    auto quest = MakePolicy("quest", {{"token_budget", "8"}, {"dense_layers", "0"}});
    ReadSelection sel;
    SelectLayerReads(pt, 0, quest.get(), p, &sel);
    ASSERT_TRUE(sel.subset);
    int64_t bound_bytes = 0;
    for (int h = 0; h < kHkv; ++h) {
      const int64_t len = f.cache->stream(0, 0, h).num_tokens;
      bound_bytes += ((len + kBs - 1) / kBs - 1) * 2 * kD * 2;
    }
    EXPECT_EQ(sel.stats.bound_read_bytes, bound_bytes);
  }
}

// Queries [total_q][kHq][kD] of a step of sequences 0 (decode) and 1 (prefill of 3).
struct Step {
  PageTable pt;
  std::vector<int32_t> qo = {0, 1, 4};
  std::vector<float> q, o;
  AttentionParams p;
  Step(Fixture* f) {
    f->cache->BuildPageTable({0, 1}, &pt);
    f->cache->AttachKeyBounds({0, 1}, &pt);
    std::normal_distribution<float> g(0.0f, 1.0f);
    q.resize(static_cast<size_t>(4 * kHq * kD));
    for (float& x : q) x = g(f->rng);
    o.assign(q.size(), 0.0f);
    p.num_seqs = 2;
    p.num_qo_heads = kHq;
    p.num_kv_heads = kHkv;
    p.head_dim = kD;
    p.sm_scale = 1.0f / std::sqrt(static_cast<float>(kD));
    p.qo_indptr = qo.data();
    p.q = q.data();
    p.o = o.data();
  }
};

void TwoSequences(Fixture* f) {
  ASSERT_TRUE(f->cache->AddSequence(0).ok());
  ASSERT_TRUE(f->cache->AddSequence(1).ok());
  f->Write(0, 61);
  f->Write(1, 40);
  f->Write(0, 1);  // sequence 0's decode token: 62 slots, 16 blocks, the last with 2
  const std::vector<int32_t> pos = Iota(40, 3);
  ASSERT_TRUE(f->cache->Reserve(1, 3, pos.data()).ok());  // sequence 1's prefill chunk (written below)
}

TEST(ReadSelectionTest, DecodeStreamsListExactlyTheBlocksQuestPicks) {
  Fixture f;
  TwoSequences(&f);
  Step st(&f);
  auto quest = MakePolicy("quest", {{"token_budget", "20"}, {"dense_layers", "1"}});
  ReadSelection sel;
  SelectLayerReads(st.pt, 1, quest.get(), st.p, &sel);
  ASSERT_TRUE(sel.subset);
  const PagedKV kv = st.pt.Layer(1);
  for (int s = 0; s < kv.num_streams; ++s) {
    const int64_t nb = kv.indptr[s + 1] - kv.indptr[s];
    std::vector<int32_t> listed(sel.indices.begin() + sel.indptr[s], sel.indices.begin() + sel.indptr[s + 1]);
    EXPECT_EQ(sel.last_block_len[s], kv.last_block_len[s]);
    std::vector<int32_t> want;
    if (s < kHkv) {  // sequence 0 decodes: the policy's blocks for its own queries
      StreamReadState r;
      ASSERT_EQ(st.pt.KeyBounds(1, s, &r.key_min, &r.key_max), nb - 1);
      r.layer = 1;
      r.kv_head = s;
      r.block_size = kBs;
      r.head_dim = kD;
      r.num_blocks = nb;
      r.queries = st.q.data() + s * (kHq / kHkv) * kD;
      r.num_queries = kHq / kHkv;
      std::vector<int32_t> picked;
      ASSERT_TRUE(quest->SelectReadBlocks(r, &picked));
      ASSERT_EQ(picked.size(), 5u);
      for (int32_t b : picked) want.push_back(kv.indices[kv.indptr[s] + b]);
    } else {  // sequence 1 is in prefill: every block
      want.assign(kv.indices + kv.indptr[s], kv.indices + kv.indptr[s + 1]);
    }
    EXPECT_EQ(listed, want) << "stream " << s;
  }
  // Bytes: sequence 0 reads 4 full pages + the last (2 slots) per head of 62 slots; prefill is not counted.
  const int64_t row2 = 2 * kD * 4;
  EXPECT_EQ(sel.stats.kv_read_bytes, kHkv * (4 * kBs + 2) * row2);
  EXPECT_EQ(sel.stats.kv_dense_bytes, kHkv * 62 * row2);
  EXPECT_EQ(sel.stats.bound_read_bytes, kHkv * 15 * 2 * kD * 4);
  // Layer 0 is dense (dense_layers 1): every block, the same bytes both ways.
  SelectLayerReads(st.pt, 0, quest.get(), st.p, &sel);
  EXPECT_FALSE(sel.subset);
  EXPECT_EQ(sel.stats.kv_read_bytes, sel.stats.kv_dense_bytes);
}

// Attention of sequence 0's decode query heads over the slots of `blocks`
// only (double precision), from the cache's own slots.
std::vector<double> AttendOver(const KVCache& c, int layer, int head, const std::vector<int32_t>& blocks, int64_t len,
                               const float* q, double scale) {
  std::vector<double> out;
  std::vector<float> k(kD), v(kD);
  const int group = kHq / kHkv;
  for (int g = 0; g < group; ++g) {
    const float* qh = q + (head * group + g) * kD;
    std::vector<double> w, acc(kD, 0.0);
    std::vector<int64_t> slots;
    for (int32_t b : blocks) {
      for (int64_t t = int64_t{b} * kBs; t < std::min<int64_t>(len, (b + 1) * kBs); ++t) slots.push_back(t);
    }
    double mx = -1e300, sum = 0;
    for (int64_t t : slots) {
      c.ReadSlot(0, layer, head, t, k.data(), v.data());
      double dot = 0;
      for (int i = 0; i < kD; ++i) dot += static_cast<double>(qh[i]) * k[static_cast<size_t>(i)];
      w.push_back(dot * scale);
      mx = std::max(mx, w.back());
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      c.ReadSlot(0, layer, head, slots[i], k.data(), v.data());
      const double e = std::exp(w[i] - mx);
      sum += e;
      for (int j = 0; j < kD; ++j) acc[static_cast<size_t>(j)] += e * v[static_cast<size_t>(j)];
    }
    for (double a : acc) out.push_back(a / sum);
  }
  return out;
}

TEST(ReadSelectionTest, AttentionReadsOnlyTheSelectedSlots) {
  Fixture f;
  TwoSequences(&f);
  Step st(&f);
  auto quest = MakePolicy("quest", {{"token_budget", "20"}, {"dense_layers", "0"}});
  ReadSelection sel;
  SelectLayerReads(st.pt, 0, quest.get(), st.p, &sel);
  ASSERT_TRUE(sel.subset);
  const PagedKV kv = st.pt.Layer(0);
  const PagedKV view = sel.View(kv);
  ASSERT_TRUE(AttentionParamsCheck(view, st.p).ok());
  PagedAttentionReference(view, st.p);
  const std::vector<float> ref = st.o;
  std::vector<float> cpu(st.o.size());
  st.p.o = cpu.data();
  PagedAttentionCpu(view, st.p);
  for (int h = 0; h < kHkv; ++h) {
    // The blocks listed, as indices into the stream's own block list.
    std::vector<int32_t> blocks;
    for (int32_t i = sel.indptr[h]; i < sel.indptr[h + 1]; ++i) {
      for (int32_t b = 0; b < kv.indptr[h + 1] - kv.indptr[h]; ++b) {
        if (kv.indices[kv.indptr[h] + b] == sel.indices[static_cast<size_t>(i)]) blocks.push_back(b);
      }
    }
    const std::vector<double> want = AttendOver(*f.cache, 0, h, blocks, 62, st.q.data(), st.p.sm_scale);
    for (size_t i = 0; i < want.size(); ++i) {
      const size_t at = static_cast<size_t>(h * (kHq / kHkv) * kD) + i;
      EXPECT_NEAR(ref[at], want[i], 1e-5 + 1e-5 * std::fabs(want[i]));
      EXPECT_NEAR(cpu[at], want[i], 1e-4 + 1e-4 * std::fabs(want[i]));
    }
  }
}

TEST(ReadSelectionTest, EveryPageReadEqualsTheDenseReadBitForBit) {
  Fixture f;
  TwoSequences(&f);
  Step st(&f);
  auto quest = MakePolicy("quest", {{"token_budget", "64"}, {"dense_layers", "0"}});  // 16 pages: all of them
  for (int l = 0; l < kLayers; ++l) {
    ReadSelection sel;
    SelectLayerReads(st.pt, l, quest.get(), st.p, &sel);
    EXPECT_FALSE(sel.subset);
    EXPECT_EQ(sel.stats.kv_read_bytes, sel.stats.kv_dense_bytes);
    const PagedKV view = sel.View(st.pt.Layer(l));
    std::vector<float> dense(st.o.size()), read(st.o.size());
    st.p.o = dense.data();
    PagedAttentionCpu(st.pt.Layer(l), st.p);
    st.p.o = read.data();
    PagedAttentionCpu(view, st.p);
    EXPECT_EQ(std::memcmp(dense.data(), read.data(), dense.size() * sizeof(float)), 0) << "layer " << l;
  }
}

}  // namespace
}  // namespace kvlab
