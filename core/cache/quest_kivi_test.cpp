// Quest over KIVI's sealed groups in the cache: a seal keeps the plain
// blocks' key bounds exact; a group is a page ranked by its own key scales
// and zeros, and the groups read are the top ones by that bound; a page
// table listing every page gives kivi-alone's attention bit for bit (the
// reference and the CPU path); on a subset the CPU path equals the
// reference and both equal attention over only the picked slots, dead slots
// of sealed groups included; bytes read count encoded blocks. The same for
// int8, fp8 and ThinK sealed blocks, which carry no key range of their own:
// each keeps the channel-wise min / max of its decoded keys from its seal
// (Stream::enc_key_min), moved with it when a compaction drops a block.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/cache/attention_encoded_test_util.h"
#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"
#include "core/cache/read_selection.h"
#include "kernels/append_kv.h"
#include "kernels/attention_encoded.h"
#include "kernels/cpu_isa.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

// The block key bounds of a bf16 cache are bf16 (exact: they are keys).
float Bf16At(const void* p, int64_t i) {
  float f = 0;
  ConvertToF32(DType::kBF16, static_cast<const uint8_t*>(p) + 2 * i, &f, 1);
  return f;
}
std::vector<float> Bf16Row(const void* p, int64_t n) {
  std::vector<float> f(static_cast<size_t>(n));
  ConvertToF32(DType::kBF16, p, f.data(), n);
  return f;
}

constexpr int kD = 64, kHkv = 2, kHq = 8, kGroup = 32, kBs = 16;

std::unique_ptr<KVPolicy> Quest(const std::string& budget) {
  std::unique_ptr<KVPolicy> p;
  EXPECT_TRUE(PolicyRegistry::Global()
                  .Create(PolicySpec{"quest", {{"token_budget", budget}, {"dense_layers", "0"}}, "t"}, &p)
                  .ok());
  return p;
}

// A read policy that lists every page: the subset path with nothing left out.
class EveryPage : public KVPolicy {
 public:
  EveryPage() : KVPolicy(PolicyParams()) {}
  const char* Name() const override { return "every-page"; }
  uint32_t Concerns() const override { return kConcernRead; }
  bool NeedsBlockKeyBounds() const override { return true; }
  bool SelectReadBlocks(const StreamReadState& s, std::vector<int32_t>* blocks) const override {
    blocks->clear();
    for (int64_t b = 0; b < s.num_blocks; ++b) blocks->push_back(static_cast<int32_t>(b));
    return true;
  }
};

// One layer, KIVI-2 groups of 32 with a 128-token residual, bf16 plain blocks.
// Sequence 0: a 600-token prompt (14 groups sealed, 152 plain) then one decode
// token (10 plain blocks, the last with 9 slots); sequence 1: a 40-token
// prompt, then a prefill chunk of 3 (reads everything).
struct KiviQuest {
  CacheShape shape;
  std::unique_ptr<KVCache> cache;
  std::mt19937 rng{9};
  PageTable pt;
  std::vector<int32_t> qo = {0, 1, 4};
  std::vector<float> q, o;
  AttentionParams p;

  explicit KiviQuest(const CacheShape& sh = Kivi2LayerShape(kHkv, kD, DType::kBF16)) : shape(sh) {
    EXPECT_TRUE(KVCache::Create(shape, 400, true, &cache, 400).ok());
    cache->EnableKeyBounds();
  }
  int Tpb() const { return shape.enc.tokens_per_block; }
  // n tokens of random K/V; keys shifted by their group, so pages differ.
  void Write(int64_t id, int64_t n, bool seal) {
    const int64_t start = cache->stream(id, 0, 0).num_tokens;
    const std::vector<int32_t> pos = Iota(start, n);
    ASSERT_TRUE(cache->Reserve(id, n, pos.data()).ok());
    PageTable t;
    cache->BuildPageTable({id}, &t);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> k(static_cast<size_t>(n * kHkv * kD)), v(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      const int64_t slot = start + static_cast<int64_t>(i) / (kHkv * kD);
      k[i] = g(rng) + static_cast<float>((slot / kGroup) % 5) * 0.7f;
      v[i] = g(rng);
    }
    const int32_t qo1[2] = {0, static_cast<int32_t>(n)};
    AppendKV(t.Layer(0), qo1, 1, kHkv, k.data(), v.data());
    cache->UpdateKeyBounds({id});
    if (seal) cache->Seal(id);
  }
  void Build() {
    ASSERT_TRUE(cache->AddSequence(0).ok());
    ASSERT_TRUE(cache->AddSequence(1).ok());
    Write(0, 600, true);
    Write(1, 40, true);
    Write(0, 1, false);
    const std::vector<int32_t> pos = Iota(40, 3);
    ASSERT_TRUE(cache->Reserve(1, 3, pos.data()).ok());
    if (shape.enc.kind == EncodingKind::kKivi) {
      ASSERT_EQ(cache->stream(0, 0, 0).num_encoded, 14 * kGroup);
      ASSERT_EQ(cache->stream(0, 0, 0).num_plain(), 153);
    }
    Tables();
    // Positive-leaning queries: the groups whose keys are shifted most rank first, not the oldest.
    std::normal_distribution<float> g(0.0f, 1.0f);
    q.resize(static_cast<size_t>(4 * kHq * kD));
    for (float& x : q) x = 0.3f + std::fabs(g(rng));
    o.assign(q.size(), 0.0f);
    p = MakeParams(2, kHq, kHkv, kD, qo.data(), q.data());
    p.o = o.data();
  }
  void Tables() {
    cache->BuildPageTable({0, 1}, &pt);
    cache->AttachKeyBounds({0, 1}, &pt);
  }
};

// The plain blocks' bounds after a seal dropped the blocks it encoded: each
// row is its own block's channel-wise min / max (the seal shifts them).
TEST(QuestKiviTest, ASealKeepsThePlainBlocksBoundsExact) {
  KiviQuest f;
  f.Build();
  std::vector<float> k(kD), v(kD);
  for (int h = 0; h < kHkv; ++h) {
    const Stream& s = f.cache->stream(0, 0, h);
    ASSERT_EQ(s.bounded_tokens, s.num_plain());
    for (int64_t b = 0; b < s.bounded_tokens / kBs; ++b) {
      for (int c = 0; c < kD; ++c) {
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t t = b * kBs; t < (b + 1) * kBs; ++t) {
          f.cache->ReadSlot(0, 0, h, s.num_encoded + t, k.data(), v.data());
          mn = std::min(mn, k[static_cast<size_t>(c)]);
          mx = std::max(mx, k[static_cast<size_t>(c)]);
        }
        ASSERT_EQ(Bf16At(s.key_min.data(), b * kD + c), mn) << "head " << h << " block " << b;
        ASSERT_EQ(Bf16At(s.key_max.data(), b * kD + c), mx) << "head " << h << " block " << b;
      }
    }
  }
}

// Groups given scale 1 and zero top - 3 on every channel (2 bits: keys in
// [top - 3, top]) and queries of all ones rank by their top: 64 * top, far
// above any plain page here. A budget of the recent page and 4 groups reads
// the 4 groups of the largest tops; 16 tokens more add one plain page (no
// group fits); every group and 2 pages more: every group, 2 plain pages.
TEST(QuestKiviTest, TheGroupsReadAreTheTopGroupsByTheirScalesAndZeros) {
  KiviQuest f;
  f.Build();
  const EncodedKV& enc = *f.pt.Encoded(0);
  const int tops[14] = {5, 1, 9, 3, 12, 7, 2, 11, 4, 8, 13, 6, 10, 0};
  for (int h = 0; h < kHkv; ++h) {
    for (int g = 0; g < 14; ++g) {
      uint16_t* params = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(enc.Block(h, g)) + 2 * enc.enc.CodeBytes());
      for (int c = 0; c < kD; ++c) {
        params[c] = F32ToF16(1.0f);
        params[kD + c] = F32ToF16(static_cast<float>(40 + tops[g] - 3));
      }
    }
  }
  std::fill(f.q.begin(), f.q.begin() + kHq * kD, 1.0f);  // sequence 0's decode query
  const PagedKV kv = f.pt.Layer(0);
  // Sequence 0's plain pages by their bound (all ones: the sum of the channel maxima).
  for (int h = 0; h < kHkv; ++h) {
    const void *lo16, *hi16;
    ASSERT_EQ(f.pt.KeyBounds(0, h, &lo16, &hi16), 9);
    const std::vector<float> hi = Bf16Row(hi16, 9 * kD);
    for (int b = 0; b < 9; ++b) {
      float sum = 0;
      for (int c = 0; c < kD; ++c) sum += hi[b * kD + c];
      ASSERT_LT(sum, 64.0f * 37) << "a plain page outranks a group";
    }
  }
  const int64_t row2 = 2 * kD * 2, enc_bytes = enc.block_bytes;
  struct Want {
    const char* budget;
    std::vector<int32_t> groups;
    int plain_pages;  // besides the recent one
  };
  std::vector<int32_t> all(14);
  for (int g = 0; g < 14; ++g) all[static_cast<size_t>(g)] = g;
  for (const Want& w : {Want{"144", {4, 7, 10, 12}, 0}, Want{"160", {4, 7, 10, 12}, 1}, Want{"500", all, 2},
                        Want{"32", {}, 1}}) {
    SCOPED_TRACE(w.budget);
    ReadSelection sel;
    SelectLayerReads(f.pt, 0, Quest(w.budget).get(), f.p, &sel);
    ASSERT_TRUE(sel.subset);
    int64_t read = 0;
    for (int h = 0; h < kHkv; ++h) {
      std::vector<int32_t> want_enc;
      for (int32_t g : w.groups) want_enc.push_back(enc.indices[enc.indptr[h] + g]);
      EXPECT_EQ(std::vector<int32_t>(sel.enc_indices.begin() + sel.enc_indptr[h], sel.enc_indices.begin() + sel.enc_indptr[h + 1]),
                want_enc)
          << "head " << h;
      // The plain pages: the recent one last, the best-bounded ones before it.
      const void *lo16, *hi16;
      f.pt.KeyBounds(0, h, &lo16, &hi16);
      const std::vector<float> lo = Bf16Row(lo16, 9 * kD), hi = Bf16Row(hi16, 9 * kD);
      std::vector<std::pair<float, int32_t>> ranked;
      for (int32_t b = 0; b < 9; ++b) {
        float sum = 0;
        for (int c = 0; c < kD; ++c) sum += std::max(lo[b * kD + c], hi[b * kD + c]);
        ranked.push_back({-sum, b});
      }
      std::sort(ranked.begin(), ranked.end());
      std::vector<int32_t> want_plain;
      for (int i = 0; i < w.plain_pages; ++i) want_plain.push_back(ranked[static_cast<size_t>(i)].second);
      std::sort(want_plain.begin(), want_plain.end());
      want_plain.push_back(9);
      std::vector<int32_t> want_ids;
      for (int32_t b : want_plain) want_ids.push_back(kv.indices[kv.indptr[h] + b]);
      EXPECT_EQ(std::vector<int32_t>(sel.indices.begin() + sel.indptr[h], sel.indices.begin() + sel.indptr[h + 1]), want_ids)
          << "head " << h;
      read += static_cast<int64_t>(w.groups.size()) * enc_bytes + (w.plain_pages * kBs + 9) * row2;
    }
    // Bytes: encoded blocks whole, plain rows by slot; the dense read is every group and slot.
    EXPECT_EQ(sel.stats.kv_read_bytes, read);
    EXPECT_EQ(sel.stats.kv_dense_bytes, kHkv * (14 * enc_bytes + 153 * row2));
    // The plain blocks' bounds are bf16 (2 bytes a channel), the groups' ranges their scales and zeros.
    EXPECT_EQ(sel.stats.bound_read_bytes, kHkv * (14 * KiviKeyRangeBytes(enc.enc) + 9 * 2 * kD * 2));
  }
  // 16 * 10 + 32 * 14 = 608 tokens of pages: a budget of them reads everything.
  ReadSelection sel;
  SelectLayerReads(f.pt, 0, Quest("608").get(), f.p, &sel);
  EXPECT_FALSE(sel.subset);
  EXPECT_EQ(sel.stats.kv_read_bytes, sel.stats.kv_dense_bytes);
  SelectLayerReads(f.pt, 0, Quest("607").get(), f.p, &sel);
  EXPECT_TRUE(sel.subset);
}

// A page table that lists every page (sealed groups and plain blocks) gives
// kivi-alone's attention bit for bit, on the reference and on every CPU path.
void ExpectEveryPageIsTheDenseRead(KiviQuest& f) {
  EveryPage every;
  ReadSelection sel;
  SelectLayerReads(f.pt, 0, &every, f.p, &sel);
  ASSERT_TRUE(sel.subset);
  EXPECT_EQ(sel.stats.kv_read_bytes, sel.stats.kv_dense_bytes);
  const PagedKV kv = f.pt.Layer(0), view = sel.View(kv);
  const EncodedKV enc = *f.pt.Encoded(0), enc_view = sel.EncodedView(enc);
  std::vector<float> dense(f.o.size()), listed(f.o.size());
  f.p.o = dense.data();
  PagedAttentionEncodedReference(kv, enc, f.p);
  f.p.o = listed.data();
  PagedAttentionEncodedReference(view, enc_view, f.p);
  EXPECT_EQ(std::memcmp(dense.data(), listed.data(), dense.size() * sizeof(float)), 0) << "reference";
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!HostHasCpuIsa(isa)) continue;
    const ScopedCpuIsa scoped(isa);
    f.p.o = dense.data();
    PagedAttentionEncodedCpu(kv, enc, f.p);
    f.p.o = listed.data();
    PagedAttentionEncodedCpu(view, enc_view, f.p);
    EXPECT_EQ(std::memcmp(dense.data(), listed.data(), dense.size() * sizeof(float)), 0) << CpuIsaName(isa);
  }
}

TEST(QuestKiviTest, EveryPageListedGivesKiviAlonesAttentionBitForBit) {
  KiviQuest f;
  f.Build();
  ExpectEveryPageIsTheDenseRead(f);
}

// Sequence 0's decode attention over the picked slots only (double), from
// the cache's decoded slots; dead slots get none.
std::vector<double> AttendOver(const KVCache& c, int head, const std::vector<int64_t>& slots, const float* q) {
  std::vector<double> out;
  std::vector<float> k(kD), v(kD);
  const int group = kHq / kHkv;
  const Stream& st = c.stream(0, 0, head);
  for (int g = 0; g < group; ++g) {
    const float* qh = q + (head * group + g) * kD;
    std::vector<double> w;
    double mx = -1e300, sum = 0;
    std::vector<double> acc(kD, 0.0);
    for (int64_t t : slots) {
      c.ReadSlot(0, 0, head, t, k.data(), v.data());
      double dot = 0;
      for (int i = 0; i < kD; ++i) dot += static_cast<double>(qh[i]) * k[static_cast<size_t>(i)];
      w.push_back(st.Dead(t) ? -INFINITY : dot / std::sqrt(static_cast<double>(kD)));
      mx = std::max(mx, w.back());
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      c.ReadSlot(0, 0, head, slots[i], k.data(), v.data());
      const double e = std::exp(w[i] - mx);
      sum += e;
      for (int j = 0; j < kD; ++j) acc[static_cast<size_t>(j)] += e * v[static_cast<size_t>(j)];
    }
    for (double a : acc) out.push_back(a / sum);
  }
  return out;
}

void ExpectSubsetAttention(KiviQuest* f, const std::string& budget) {
  ReadSelection sel;
  SelectLayerReads(f->pt, 0, Quest(budget).get(), f->p, &sel);
  ASSERT_TRUE(sel.subset);
  const PagedKV kv = f->pt.Layer(0), view = sel.View(kv);
  const EncodedKV enc = *f->pt.Encoded(0), enc_view = sel.EncodedView(enc);
  std::vector<float> ref(f->o.size());
  f->p.o = ref.data();
  PagedAttentionEncodedReference(view, enc_view, f->p);
  bool later_group = false;
  for (int h = 0; h < kHkv; ++h) {
    // The slots listed, as stream slots: picked groups' tokens, then picked plain blocks' slots.
    std::vector<int64_t> slots;
    const Stream& st = f->cache->stream(0, 0, h);
    for (int32_t i = sel.enc_indptr[h]; i < sel.enc_indptr[h + 1]; ++i) {
      for (int32_t g = 0; g < enc.indptr[h + 1] - enc.indptr[h]; ++g) {
        if (enc.indices[enc.indptr[h] + g] != sel.enc_indices[static_cast<size_t>(i)]) continue;
        for (int64_t t = 0; t < f->Tpb(); ++t) slots.push_back(int64_t{g} * f->Tpb() + t);
        later_group = later_group || g != i - sel.enc_indptr[h];
      }
    }
    for (int32_t i = sel.indptr[h]; i < sel.indptr[h + 1]; ++i) {
      for (int32_t b = 0; b < kv.indptr[h + 1] - kv.indptr[h]; ++b) {
        if (kv.indices[kv.indptr[h] + b] != sel.indices[static_cast<size_t>(i)]) continue;
        for (int64_t t = int64_t{b} * kBs; t < std::min<int64_t>(st.num_plain(), (b + 1) * kBs); ++t) {
          slots.push_back(st.num_encoded + t);
        }
      }
    }
    ASSERT_LT(static_cast<int64_t>(slots.size()), st.num_tokens);
    const std::vector<double> want = AttendOver(*f->cache, h, slots, f->q.data());
    for (size_t i = 0; i < want.size(); ++i) {
      const size_t at = static_cast<size_t>(h * (kHq / kHkv) * kD) + i;
      ASSERT_NEAR(ref[at], want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << "head " << h << " at " << i;
    }
  }
  EXPECT_TRUE(later_group) << "the groups read should not all be the oldest ones";
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!HostHasCpuIsa(isa)) continue;
    const ScopedCpuIsa scoped(isa);
    std::vector<float> cpu(f->o.size());
    f->p.o = cpu.data();
    CpuDecodePlan plan;
    PlanCpuDecodeLayer(view, &enc_view, f->p, &plan);
    PagedAttentionEncodedCpu(view, enc_view, f->p, plan);
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i) worst = std::max(worst, std::fabs(cpu[i] - ref[i]) / (1e-4 + 1e-4 * std::fabs(ref[i])));
    EXPECT_LE(worst, 1.0) << CpuIsaName(isa);
  }
}

TEST(QuestKiviTest, OnASubsetTheCpuPathEqualsTheReferenceAndAttentionOverThePickedSlots) {
  KiviQuest f;
  f.Build();
  ExpectSubsetAttention(&f, "160");
  ExpectSubsetAttention(&f, "272");
}

// Evicted slots inside sealed groups (a selection policy stacked on kivi):
// their flags follow the groups read.
// Evicts every fifth sealed slot of sequence 0 (shifted per head): each
// sealed block keeps live slots, so all stay, with dead flags.
void EvictSomeSealedSlots(KiviQuest* f) {
  for (int h = 0; h < kHkv; ++h) {
    const Stream& s = f->cache->stream(0, 0, h);
    std::vector<int64_t> keep;
    for (int64_t t = 0; t < s.num_tokens; ++t) {
      if (t >= s.num_encoded || (t + h) % 5 != 2) keep.push_back(t);
    }
    ASSERT_TRUE(f->cache->Compact(0, 0, h, keep).ok());
    ASSERT_TRUE(f->cache->stream(0, 0, h).HasDead());
  }
  f->cache->UpdateKeyBounds({0});
  f->Tables();
  ASSERT_NE(f->pt.Encoded(0)->dead, nullptr);
}

TEST(QuestKiviTest, DeadSlotsOfTheGroupsReadStayDead) {
  KiviQuest f;
  f.Build();
  EvictSomeSealedSlots(&f);
  ExpectSubsetAttention(&f, "160");
  ExpectSubsetAttention(&f, "272");
}

// int8 / fp8 per token (16-token blocks sealed past a 128-token residual)
// and ThinK (40 of 64 key channels kept, 32 recent tokens whole), bf16 plain
// blocks. Sequence 0 holds 29 sealed blocks and 137 plain slots (8 full
// blocks, then 9 slots) for int8 / fp8.
CacheShape EncodedShape(EncodingKind kind) {
  CacheShape sh = LayerShape(kHkv, kD, DType::kBF16);
  sh.encoded = true;
  sh.enc.kind = kind;
  sh.enc.head_dim = kD;
  sh.enc.tokens_per_block = kBs;
  sh.enc.dtype = DType::kBF16;
  if (kind == EncodingKind::kThink) {
    sh.enc.key_channels = 40;
    sh.residual = 32;
  } else {
    sh.enc.bits = 8;
    sh.residual = 128;
  }
  EXPECT_EQ(sh.enc.Validate(), "");
  return sh;
}

class QuestEncodedTest : public ::testing::TestWithParam<EncodingKind> {};

// Each sealed block's bounds are the channel-wise min / max of its decoded
// keys, from the seal on; a compaction that empties blocks moves the rows of
// those that stay with them.
TEST_P(QuestEncodedTest, SealedBlocksKeepTheirDecodedKeysBounds) {
  KiviQuest f(EncodedShape(GetParam()));
  f.Build();
  std::vector<float> k(kD), v(kD);
  auto expect_rows = [&](const char* when) {
    for (int h = 0; h < kHkv; ++h) {
      const Stream& s = f.cache->stream(0, 0, h);
      ASSERT_GT(s.enc_blocks.size(), 4u) << when;
      ASSERT_EQ(s.enc_key_min.size(), s.enc_blocks.size() * kD) << when;
      ASSERT_EQ(s.enc_key_max.size(), s.enc_key_min.size()) << when;
      for (size_t g = 0; g < s.enc_blocks.size(); ++g) {
        for (int c = 0; c < kD; ++c) {
          float mn = INFINITY, mx = -INFINITY;
          for (int64_t t = static_cast<int64_t>(g) * f.Tpb(); t < static_cast<int64_t>(g + 1) * f.Tpb(); ++t) {
            f.cache->ReadSlot(0, 0, h, t, k.data(), v.data());
            mn = std::min(mn, k[static_cast<size_t>(c)]);
            mx = std::max(mx, k[static_cast<size_t>(c)]);
          }
          ASSERT_EQ(s.enc_key_min[g * kD + static_cast<size_t>(c)], mn) << when << " head " << h << " block " << g;
          ASSERT_EQ(s.enc_key_max[g * kD + static_cast<size_t>(c)], mx) << when << " head " << h << " block " << g;
        }
      }
    }
  };
  expect_rows("after the seal");
  // Evict every slot of sealed blocks 1 and 3 and some of others: those two go, the rest move down.
  size_t before = 0;
  for (int h = 0; h < kHkv; ++h) {
    const Stream& s = f.cache->stream(0, 0, h);
    before = s.enc_blocks.size();
    std::vector<int64_t> keep;
    for (int64_t t = 0; t < s.num_tokens; ++t) {
      const int64_t g = t / f.Tpb();
      if (t >= s.num_encoded || (g != 1 && g != 3 && (t + h) % 5 != 2)) keep.push_back(t);
    }
    ASSERT_TRUE(f.cache->Compact(0, 0, h, keep).ok());
    ASSERT_EQ(f.cache->stream(0, 0, h).enc_blocks.size(), before - 2);
  }
  expect_rows("after a compaction");
}

// Every page listed gives the encoding's own attention bit for bit; on a
// subset, attention equals attention over the picked slots (dead ones too),
// and the CPU path the reference.
TEST_P(QuestEncodedTest, SubsetsReadTheirSlotsAndEveryPageIsTheDenseRead) {
  KiviQuest f(EncodedShape(GetParam()));
  f.Build();
  ExpectEveryPageIsTheDenseRead(f);
  ExpectSubsetAttention(&f, "160");
  ExpectSubsetAttention(&f, "272");
  EvictSomeSealedSlots(&f);
  ExpectSubsetAttention(&f, "160");
}

// With queries of all ones a page's Quest bound is the sum of its channel
// maxima: the pages read are the recent one and the top (budget / 16 - 1)
// of the others by that sum, sealed blocks ranked by the bounds of their
// decoded keys, plain ones by theirs; bound bytes count fp32 rows for the
// sealed blocks.
TEST_P(QuestEncodedTest, ThePagesReadAreTheTopByTheirBounds) {
  KiviQuest f(EncodedShape(GetParam()));
  f.Build();
  std::fill(f.q.begin(), f.q.begin() + kHq * kD, 1.0f);  // sequence 0's decode query
  const PagedKV kv = f.pt.Layer(0);
  const EncodedKV& enc = *f.pt.Encoded(0);
  for (const char* budget : {"64", "160", "400"}) {
    SCOPED_TRACE(budget);
    ReadSelection sel;
    SelectLayerReads(f.pt, 0, Quest(budget).get(), f.p, &sel);
    ASSERT_TRUE(sel.subset);
    int64_t bound_bytes = 0;
    for (int h = 0; h < kHkv; ++h) {
      const Stream& s = f.cache->stream(0, 0, h);
      const int64_t groups = static_cast<int64_t>(s.enc_blocks.size()), full = s.num_plain() / kBs;
      std::vector<std::pair<float, int32_t>> ranked;  // (-bound, page): sealed pages first, then full plain ones
      for (int64_t g = 0; g < groups; ++g) {
        float sum = 0;
        for (int c = 0; c < kD; ++c) sum += s.enc_key_max[static_cast<size_t>(g * kD + c)];
        ranked.push_back({-sum, static_cast<int32_t>(g)});
      }
      const std::vector<float> hi = Bf16Row(s.key_max.data(), full * kD);
      for (int64_t b = 0; b < full; ++b) {
        float sum = 0;
        for (int c = 0; c < kD; ++c) sum += hi[static_cast<size_t>(b * kD + c)];
        ranked.push_back({-sum, static_cast<int32_t>(groups + b)});
      }
      std::stable_sort(ranked.begin(), ranked.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      const size_t pages = static_cast<size_t>(std::stoi(budget) / kBs - 1);
      std::vector<int32_t> want_enc, want_plain;
      for (size_t i = 0; i < std::min(pages, ranked.size()); ++i) {
        const int32_t page = ranked[i].second;
        if (page < groups) want_enc.push_back(page);
        else want_plain.push_back(page - static_cast<int32_t>(groups));
      }
      std::sort(want_enc.begin(), want_enc.end());
      std::sort(want_plain.begin(), want_plain.end());
      want_plain.push_back(static_cast<int32_t>(full));  // the recent, partly filled page
      std::vector<int32_t> enc_ids, plain_ids;
      for (int32_t g : want_enc) enc_ids.push_back(enc.indices[enc.indptr[h] + g]);
      for (int32_t b : want_plain) plain_ids.push_back(kv.indices[kv.indptr[h] + b]);
      EXPECT_EQ(std::vector<int32_t>(sel.enc_indices.begin() + sel.enc_indptr[h], sel.enc_indices.begin() + sel.enc_indptr[h + 1]),
                enc_ids) << "head " << h;
      EXPECT_EQ(std::vector<int32_t>(sel.indices.begin() + sel.indptr[h], sel.indices.begin() + sel.indptr[h + 1]), plain_ids)
          << "head " << h;
      bound_bytes += groups * 2 * kD * 4 + full * 2 * kD * 2;
    }
    EXPECT_EQ(sel.stats.bound_read_bytes, bound_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Encodings, QuestEncodedTest,
                         ::testing::Values(EncodingKind::kInt8, EncodingKind::kFp8, EncodingKind::kThink),
                         [](const ::testing::TestParamInfo<EncodingKind>& i) {
                           return std::string(i.param == EncodingKind::kInt8   ? "int8"
                                              : i.param == EncodingKind::kFp8 ? "fp8"
                                                                               : "think");
                         });

}  // namespace
}  // namespace kvlab
