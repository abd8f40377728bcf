// The fused int8 / fp8 CPU kernel (kernels/attention_quant_cpu.h), on every
// kernel path the host has, against the specification
// (PagedAttentionEncodedReference: DecodeKvBlock, double accumulation) and
// against the generic decode-then-attend path it replaces, on caches the
// quant policy's encoding leaves: sealed blocks of block_size tokens, no
// residual, the open tail block plain.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cache/attention_encoded_test_util.h"
#include "core/cache/kv_cache.h"
#include "kernels/attention_encoded.h"
#include "kernels/attention_quant_cpu.h"
#include "kernels/attention_reference.h"
#include "kernels/cpu_isa.h"

namespace kvlab {
namespace {

struct QuantCase {
  std::string name;
  EncodingKind kind;
  int hq, hkv, d, bs;
  bool per_token = true;
  DType dtype = DType::kBF16;
  bool dead = false;          // evict every fifth old slot first: dead slots in sealed blocks
  bool random_codes = false;  // overwrite every code byte with a random one: every code value is read
  int chunk = 5;              // queries of the last sequence (a prefill chunk)
  int window = 0;             // first_visible = query slot - window + 1, 0: none
  std::vector<int64_t> lens = {1, 37, 300, 1000};
};

QuantCase Make(EncodingKind kind, int hq, int hkv, int d, int bs) {
  const std::string name = std::string(kind == EncodingKind::kInt8 ? "int8" : "fp8") + "_gqa" +
                           std::to_string(hq / hkv) + "_d" + std::to_string(d) + "_bs" + std::to_string(bs);
  return QuantCase{name, kind, hq, hkv, d, bs};
}

// Every kind x GQA 1/4/8 x head_dim 64/128 x block size 1/16, then variants.
std::vector<QuantCase> Cases() {
  std::vector<QuantCase> cases;
  for (EncodingKind kind : {EncodingKind::kInt8, EncodingKind::kFp8}) {
    for (const auto& [hq, hkv] : {std::pair{2, 2}, std::pair{8, 2}, std::pair{8, 1}}) {
      for (int d : {64, 128}) {
        for (int bs : {1, 16}) cases.push_back(Make(kind, hq, hkv, d, bs));
      }
    }
  }
  auto variant = [&](QuantCase c, const std::string& suffix) {
    c.name += "_" + suffix;
    cases.push_back(c);
    return &cases.back();
  };
  variant(Make(EncodingKind::kInt8, 8, 2, 128, 16), "block_scale")->per_token = false;
  variant(Make(EncodingKind::kFp8, 8, 1, 64, 16), "block_scale")->per_token = false;
  variant(Make(EncodingKind::kFp8, 8, 2, 128, 16), "f16")->dtype = DType::kF16;
  variant(Make(EncodingKind::kInt8, 8, 2, 64, 16), "f32")->dtype = DType::kF32;
  variant(Make(EncodingKind::kInt8, 8, 2, 128, 16), "dead")->dead = true;
  variant(Make(EncodingKind::kFp8, 8, 1, 64, 16), "dead")->dead = true;
  variant(Make(EncodingKind::kFp8, 2, 2, 128, 1), "dead")->dead = true;
  variant(Make(EncodingKind::kFp8, 8, 2, 128, 16), "random_codes")->random_codes = true;
  variant(Make(EncodingKind::kInt8, 8, 2, 64, 16), "random_codes")->random_codes = true;
  variant(Make(EncodingKind::kFp8, 8, 2, 128, 16), "prefill37")->chunk = 37;
  QuantCase* w = variant(Make(EncodingKind::kInt8, 8, 1, 128, 16), "window100");
  w->window = 100;
  w->chunk = 37;
  QuantCase* l = variant(Make(EncodingKind::kFp8, 8, 2, 128, 16), "long");
  l->lens = {1, 37, 4133};
  return cases;
}

CacheShape QuantShape(const QuantCase& cs) {
  CacheShape sh = LayerShape(cs.hkv, cs.d, cs.dtype);
  sh.block_size = cs.bs;
  sh.encoded = true;
  sh.enc.kind = cs.kind;
  sh.enc.bits = 8;
  sh.enc.head_dim = cs.d;
  sh.enc.tokens_per_block = cs.bs;
  sh.enc.group = cs.bs;
  sh.enc.scale_per_token = cs.per_token;
  sh.residual = 0;  // policies/quant.cpp
  return sh;
}

// Worst |got - want| / (1e-5 + 1e-4 |want|) over the outputs (the attention
// tests' tolerance); NaN when any output is not finite.
double WorstOverTolerance(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return NAN;
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / (1e-5 + 1e-4 * std::abs(want[i])));
  }
  return worst;
}

class QuantFusedAttentionTest : public ::testing::TestWithParam<std::tuple<int, QuantCase>> {};

TEST_P(QuantFusedAttentionTest, MatchesReferenceAndGenericPath) {
  const QuantCase cs = std::get<1>(GetParam());
  const CpuIsa isa = static_cast<CpuIsa>(std::get<0>(GetParam()));
  if (!HostHasCpuIsa(isa)) GTEST_SKIP() << "kernel path " << CpuIsaName(isa) << " skipped: this CPU lacks it";
  const ScopedCpuIsa scoped_isa(isa);
  ASSERT_TRUE(scoped_isa.status().ok()) << scoped_isa.status().ToString();
  const int d = cs.d;
  const int64_t blocks = 12000 / cs.bs + 64;
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(QuantShape(cs), blocks, true, &c, blocks).ok());
  const int num_seqs = static_cast<int>(cs.lens.size());
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  for (int i = 0; i < num_seqs; ++i) {
    std::vector<float> k, v;
    ASSERT_TRUE(FillSequence(c.get(), i, cs.lens[static_cast<size_t>(i)], cs.hkv, d, &rng, &nd, &k, &v));
  }
  bool any_dead = false;
  for (int i = 0; cs.dead && i < num_seqs; ++i) {  // the last sequence's chunk keeps its slots
    for (int h = 0; h < cs.hkv; ++h) {
      const int64_t n = c->stream(i, 0, h).num_tokens, tail = i + 1 == num_seqs ? cs.chunk : 1;
      std::vector<int64_t> keep;
      for (int64_t t = 0; t < n; ++t) {
        if (t >= n - tail || (t + h) % 5 != 2) keep.push_back(t);
      }
      ASSERT_TRUE(c->Compact(i, 0, h, keep).ok());
      any_dead = any_dead || c->stream(i, 0, h).HasDead();
    }
  }
  // Block size 1: an evicted slot's block is freed whole, so none is dead.
  EXPECT_EQ(any_dead, cs.dead && cs.bs > 1);
  std::vector<int64_t> seqs(cs.lens.size());
  std::iota(seqs.begin(), seqs.end(), 0);
  PageTable pt;
  c->BuildPageTable(seqs, &pt);
  const PagedKV kv = pt.Layer(0);
  const EncodedKV& enc = *pt.Encoded(0);
  ASSERT_GT(enc.StreamTokens(num_seqs * cs.hkv - 1), 0);
  if (cs.random_codes) {  // codes only: the scales stay the encoder's
    std::uniform_int_distribution<int> byte(0, 255);
    for (int s = 0; s < enc.num_streams; ++s) {
      for (int64_t b = 0; b < enc.StreamTokens(s) / cs.bs; ++b) {
        uint8_t* blk = const_cast<uint8_t*>(enc.Block(s, b));
        for (int64_t i = 0; i < 2 * enc.enc.CodeBytes(); ++i) blk[i] = static_cast<uint8_t>(byte(rng));
      }
    }
  }
  std::vector<int32_t> qo(cs.lens.size() + 1);
  for (int i = 0; i < num_seqs; ++i) qo[i + 1] = qo[i] + (i + 1 < num_seqs ? 1 : cs.chunk);
  std::vector<float> q(static_cast<size_t>(qo.back() * cs.hq * d));
  for (auto& x : q) x = nd(rng);
  AttentionParams p = MakeParams(num_seqs, cs.hq, cs.hkv, d, qo.data(), q.data());
  std::vector<int32_t> first(static_cast<size_t>(qo.back() * cs.hkv), 0);
  for (int i = 0; cs.window > 0 && i < num_seqs; ++i) {
    for (int h = 0; h < cs.hkv; ++h) {
      const int64_t len = enc.StreamTokens(i * cs.hkv + h) + kv.StreamLength(i * cs.hkv + h);
      for (int j = 0; j < qo[i + 1] - qo[i]; ++j) {
        const int64_t slot = len - (qo[i + 1] - qo[i]) + j;
        first[static_cast<size_t>((qo[i] + j) * cs.hkv + h)] =
            static_cast<int32_t>(std::max<int64_t>(0, slot - cs.window + 1));
      }
    }
  }
  if (cs.window > 0) p.first_visible = first.data();
  ASSERT_TRUE(QuantCpuSupports(kv, enc, p));
  std::vector<float> o_ref(q.size()), o_generic(q.size(), std::nanf("")), o_fused(q.size(), std::nanf("")),
      o_fused3(q.size(), std::nanf(""));
  p.o = o_ref.data();
  PagedAttentionEncodedReference(kv, enc, p);
  {
    const ScopedQuantFusedCpu generic(false);
    p.o = o_generic.data();
    PagedAttentionEncodedCpu(kv, enc, p);
  }
  p.o = o_fused.data();
  PagedAttentionEncodedCpu(kv, enc, p);
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(3);  // uneven split-K parts
  p.o = o_fused3.data();
  PagedAttentionQuantCpu(kv, enc, p);
  omp_set_num_threads(saved_threads);
  const double fused = WorstOverTolerance(o_fused, o_ref), fused3 = WorstOverTolerance(o_fused3, o_ref);
  const double generic = WorstOverTolerance(o_generic, o_ref), beside = WorstOverTolerance(o_fused, o_generic);
  EXPECT_LE(fused, 1.0) << "fused against the reference";
  EXPECT_LE(fused3, 1.0) << "fused, 3 threads, against the reference";
  EXPECT_LE(generic, 1.0) << "generic against the reference";
  EXPECT_LE(beside, 1.0) << "fused against the generic path";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QuantFusedAttentionTest,
    ::testing::Combine(::testing::Values(static_cast<int>(CpuIsa::kScalar), static_cast<int>(CpuIsa::kAvx2),
                                         static_cast<int>(CpuIsa::kAvx512)),
                       ::testing::ValuesIn(Cases())),
    [](const auto& info) {
      return std::string(CpuIsaName(static_cast<CpuIsa>(std::get<0>(info.param)))) + "_" +
             std::get<1>(info.param).name;
    });

// Which path takes what: the fused kernel only int8 / fp8 without RoPE at
// read or slot_attn, and only where head_dim is a multiple of 16; KIVI is
// the KIVI kernel's or the generic path's.
TEST(QuantCpuSupportsTest, OnlyItsShapes) {
  QuantCase cs = Make(EncodingKind::kFp8, 8, 2, 64, 16);
  EncodedKV enc;
  enc.enc = QuantShape(cs).enc;
  enc.block_bytes = enc.enc.BlockBytes();
  PagedKV kv;
  kv.head_dim = 64;
  const int32_t qo[2] = {0, 1};
  AttentionParams p = MakeParams(1, 8, 2, 64, qo, nullptr);
  EXPECT_TRUE(QuantCpuSupports(kv, enc, p));
  enc.enc.kind = EncodingKind::kInt8;
  EXPECT_TRUE(QuantCpuSupports(kv, enc, p));
  const float inv_freq[32] = {};
  p.rope_inv_freq = inv_freq;
  EXPECT_FALSE(QuantCpuSupports(kv, enc, p)) << "RoPE at read takes the generic path";
  p.rope_inv_freq = nullptr;
  float slot_attn[1];
  p.slot_attn = slot_attn;
  EXPECT_FALSE(QuantCpuSupports(kv, enc, p)) << "slot_attn takes the generic path";
  p.slot_attn = nullptr;
  enc.block_bytes -= 1;
  EXPECT_FALSE(QuantCpuSupports(kv, enc, p)) << "blocks smaller than the encoding's";
  enc.block_bytes += 1;
  enc.enc.kind = EncodingKind::kKivi;
  enc.enc.bits = 2;
  EXPECT_FALSE(QuantCpuSupports(kv, enc, p));
  cs.d = 40;
  enc.enc = QuantShape(cs).enc;
  enc.block_bytes = enc.enc.BlockBytes();
  kv.head_dim = 40;
  p.head_dim = 40;
  EXPECT_FALSE(QuantCpuSupports(kv, enc, p)) << "head_dim 40 is not whole 16-channel chunks";
}

}  // namespace
}  // namespace kvlab
