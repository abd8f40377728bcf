#include "core/cache/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/cache/cache_test_util.h"
#include "kernels/append_kv.h"
#include "policies/kv_policy.h"

namespace kvlab {
namespace {

CacheShape SmallShape(int block_size, DType dtype = DType::kF32) { return TinyCacheShape(2, 2, block_size, dtype); }

TEST(KVCacheTest, ReserveAllocatesBlocksPerStream) {
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(SmallShape(4), 100, true, &c).ok());
  ASSERT_TRUE(c->AddSequence(7).ok());
  EXPECT_EQ(c->BlocksNeeded(7, 5), 4 * 2);  // 4 streams x ceil(5/4)
  auto pos = Iota(0, 5);
  ASSERT_TRUE(c->Reserve(7, 5, pos.data()).ok());
  EXPECT_EQ(c->pool().num_used(), 8);
  EXPECT_EQ(c->BlocksNeeded(7, 3), 0);  // 5 + 3 fits in 2 blocks
  EXPECT_EQ(c->BlocksNeeded(7, 4), 4);
  EXPECT_EQ(c->stream(7, 1, 1).num_tokens, 5);
  EXPECT_EQ(c->stream(7, 1, 1).positions[4], 4);
  ASSERT_TRUE(c->RemoveSequence(7).ok());
  EXPECT_EQ(c->pool().num_used(), 0);
  EXPECT_EQ(c->pool().peak_bytes_in_use(), 8 * c->shape().BlockBytes());
}

TEST(KVCacheTest, ReserveFailsWithoutChangingAnything) {
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(SmallShape(4), 6, true, &c).ok());
  ASSERT_TRUE(c->AddSequence(1).ok());
  auto pos = Iota(0, 8);
  Status s = c->Reserve(1, 8, pos.data());  // needs 8 blocks, pool has 6
  EXPECT_EQ(s.code(), Status::Code::kResourceExhausted);
  EXPECT_EQ(c->pool().num_used(), 0);
  EXPECT_EQ(c->stream(1, 0, 0).num_tokens, 0);
}

TEST(KVCacheTest, PageTableDescribesEveryStream) {
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(SmallShape(4), 100, true, &c).ok());
  ASSERT_TRUE(c->AddSequence(1).ok());
  ASSERT_TRUE(c->AddSequence(2).ok());
  auto p1 = Iota(0, 9), p2 = Iota(0, 4);
  ASSERT_TRUE(c->Reserve(1, 9, p1.data()).ok());
  ASSERT_TRUE(c->Reserve(2, 4, p2.data()).ok());
  PageTable pt;
  c->BuildPageTable({2, 1}, &pt);
  for (int l = 0; l < 2; ++l) {
    const PagedKV kv = pt.Layer(l);
    ASSERT_EQ(kv.num_streams, 4);
    EXPECT_EQ(kv.StreamLength(0), 4);  // seq 2 first in batch order
    EXPECT_EQ(kv.StreamLength(3), 9);
    EXPECT_EQ(kv.last_block_len[3], 1);
    EXPECT_EQ(kv.last_block_len[0], 4);
    // Blocks in the table are the stream's blocks, in order.
    const Stream& s = c->stream(1, l, 1);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(kv.indices[kv.indptr[3] + i], s.blocks[static_cast<size_t>(i)]);
  }
}

TEST(KVCacheTest, CompactMovesKeptSlotsAndFreesBlocks) {
  std::unique_ptr<KVCache> c;
  const CacheShape shape = SmallShape(4);
  ASSERT_TRUE(KVCache::Create(shape, 100, true, &c).ok());
  ASSERT_TRUE(c->AddSequence(1).ok());
  const int n = 10;
  auto pos = Iota(100, n);
  ASSERT_TRUE(c->Reserve(1, n, pos.data()).ok());
  PageTable pt;
  c->BuildPageTable({1}, &pt);
  // K of token t, head h, layer l = (t, h, l, 0); V = -K.
  std::vector<float> k(static_cast<size_t>(n * 2 * 4)), v(k.size());
  for (int l = 0; l < 2; ++l) {
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < 2; ++h)
        for (int d = 0; d < 4; ++d) {
          const size_t i = static_cast<size_t>((t * 2 + h) * 4 + d);
          k[i] = static_cast<float>(t * 100 + h * 10 + l + (d == 3 ? 0.5 : 0));
          v[i] = -k[i];
        }
    const int32_t qo[2] = {0, n};
    AppendKV(pt.Layer(l), qo, 1, 2, k.data(), v.data());
  }
  const int64_t used_before = c->pool().num_used();
  ASSERT_TRUE(c->Compact(1, 1, 0, {0, 3, 9}).ok());
  const Stream& s = c->stream(1, 1, 0);
  EXPECT_EQ(s.num_tokens, 3);
  EXPECT_EQ(s.blocks.size(), 1u);
  EXPECT_EQ(c->pool().num_used(), used_before - 2);
  EXPECT_EQ(s.positions, (std::vector<int32_t>{100, 103, 109}));
  c->BuildPageTable({1}, &pt);
  const PagedKV kv = pt.Layer(1);
  const float* k2 = reinterpret_cast<const float*>(kv.KeyPtr(0, 2));
  const float* v1 = reinterpret_cast<const float*>(kv.ValuePtr(0, 1));
  EXPECT_FLOAT_EQ(k2[0], 901.0f);   // token 9, head 0, layer 1
  EXPECT_FLOAT_EQ(v1[3], -301.5f);  // token 3
  // Other streams untouched.
  EXPECT_EQ(c->stream(1, 1, 1).num_tokens, n);
  EXPECT_FALSE(c->Compact(1, 0, 0, {3, 3}).ok());
  EXPECT_FALSE(c->Compact(1, 0, 0, {0, 10}).ok());
}

CacheShape KiviShape(int layers, int heads, int d, int64_t residual) {
  CacheShape s;
  s.num_layers = layers;
  s.num_kv_heads = heads;
  s.head_dim = d;
  s.block_size = 16;
  s.dtype = DType::kF32;
  s.encoded = true;
  s.enc.kind = EncodingKind::kKivi;
  s.enc.bits = 2;
  s.enc.group = 32;
  s.enc.tokens_per_block = 32;
  s.enc.head_dim = d;
  s.residual = residual;
  return s;
}

// Appends n tokens whose K/V are a function of (position, layer, head, channel).
void AppendTokens(KVCache* c, KVCache::SeqId id, int64_t start, int64_t n) {
  const CacheShape& sh = c->shape();
  auto pos = Iota(start, n);
  ASSERT_TRUE(c->Reserve(id, n, pos.data()).ok());
  PageTable pt;
  c->BuildPageTable({id}, &pt);
  std::vector<float> k(static_cast<size_t>(n * sh.num_kv_heads * sh.head_dim)), v(k.size());
  for (int l = 0; l < sh.num_layers; ++l) {
    for (int64_t t = 0; t < n; ++t)
      for (int h = 0; h < sh.num_kv_heads; ++h)
        for (int d = 0; d < sh.head_dim; ++d) {
          const size_t i = static_cast<size_t>((t * sh.num_kv_heads + h) * sh.head_dim + d);
          k[i] = std::sin(0.1f * (start + t) + d + l) * 3 + h;
          v[i] = std::cos(0.2f * (start + t) - d) - l;
        }
    const int32_t qo[2] = {0, static_cast<int32_t>(n)};
    AppendKV(pt.Layer(l), qo, 1, sh.num_kv_heads, k.data(), v.data());
  }
}

float ExpectedK(int64_t pos, int l, int h, int d) { return std::sin(0.1f * pos + d + l) * 3 + h; }

TEST(KVCacheEncodedTest, SealsGroupsOutsideTheResidual) {
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(KiviShape(2, 2, 32, 40), 200, true, &c, 200).ok());
  ASSERT_TRUE(c->AddSequence(0).ok());
  for (int64_t t = 0; t < 150; t += 5) {
    AppendTokens(c.get(), 0, t, 5);
    c->Seal(0);
    const Stream& s = c->stream(0, 1, 1);
    // Sealed whenever the plain tail holds residual + one group.
    EXPECT_EQ(s.num_encoded, std::max<int64_t>(0, (t + 5 - 40) / 32) * 32) << t;
    EXPECT_LT(s.num_plain(), 40 + 32);
  }
  const Stream& s = c->stream(0, 1, 1);
  ASSERT_EQ(s.num_encoded, 96);
  std::vector<float> k(32), v(32);
  double enc_err = 0, plain_err = 0;
  for (int64_t slot = 0; slot < 150; ++slot) {
    c->ReadSlot(0, 1, 1, slot, k.data(), v.data());
    for (int d = 0; d < 32; ++d) {
      const double e = std::abs(k[static_cast<size_t>(d)] - ExpectedK(slot, 1, 1, d));
      (slot < 96 ? enc_err : plain_err) = std::max(slot < 96 ? enc_err : plain_err, e);
    }
  }
  EXPECT_EQ(plain_err, 0.0);
  EXPECT_GT(enc_err, 0.0);
  EXPECT_LT(enc_err, 6.0 / 3 / 2 * 1.05);  // range 6 per channel, 3 steps at 2 bits, half a step
  // Bytes: 3 encoded blocks and ceil(54/16) plain blocks per stream, from the pools.
  EXPECT_EQ(c->BytesInUse(), 4 * (3 * c->shape().enc.BlockBytes() + 4 * c->shape().BlockBytes()));
}

// Compaction never re-encodes a sealed group: a group that keeps a slot
// stays whole (its other slots dead, its bytes untouched), one that keeps
// none is freed; the policies then see only the live slots.
TEST(KVCacheEncodedTest, CompactKeepsSealedGroupsWholeAndMarksEvictedSlotsDead) {
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(KiviShape(1, 1, 32, 16), 200, true, &c, 200).ok());
  ASSERT_TRUE(c->AddSequence(0).ok());
  AppendTokens(c.get(), 0, 0, 120);
  c->Seal(0);
  ASSERT_EQ(c->stream(0, 0, 0).num_encoded, 96);
  const std::vector<int32_t> enc_before = c->stream(0, 0, 0).enc_blocks;
  std::vector<std::vector<uint8_t>> bytes_before;
  for (int32_t b : enc_before) {
    const uint8_t* p = c->encoded_pool()->data() + static_cast<int64_t>(b) * c->encoded_pool()->block_bytes();
    bytes_before.emplace_back(p, p + c->encoded_pool()->block_bytes());
  }
  std::vector<std::vector<float>> k_before(120, std::vector<float>(32)), v_before = k_before;
  for (int64_t t = 0; t < 120; ++t) c->ReadSlot(0, 0, 0, t, k_before[t].data(), v_before[t].data());
  // Keep 4 sinks and the last 60: group 0 keeps 0-3, group 1 keeps 60-63,
  // group 2 and the plain tail keep everything.
  std::vector<int64_t> keep = {0, 1, 2, 3};
  for (int64_t i = 60; i < 120; ++i) keep.push_back(i);
  ASSERT_TRUE(c->Compact(0, 0, 0, keep).ok());
  {
    const Stream& s = c->stream(0, 0, 0);
    EXPECT_EQ(s.num_tokens, 120);
    EXPECT_EQ(s.num_encoded, 96);
    EXPECT_EQ(s.LiveTokens(), 64);
    EXPECT_EQ(s.enc_blocks, enc_before);
    for (int64_t t = 0; t < 120; ++t) {
      const bool kept = t < 4 || t >= 60;
      EXPECT_EQ(s.Dead(t), !kept) << t;
      EXPECT_EQ(s.positions[static_cast<size_t>(t)], t);
    }
    for (size_t g = 0; g < enc_before.size(); ++g) {
      const uint8_t* p = c->encoded_pool()->data() + static_cast<int64_t>(enc_before[g]) * c->encoded_pool()->block_bytes();
      EXPECT_TRUE(std::equal(bytes_before[g].begin(), bytes_before[g].end(), p)) << "group " << g << " was rewritten";
    }
    std::vector<float> k(32), v(32);
    for (int64_t t : keep) {
      c->ReadSlot(0, 0, 0, t, k.data(), v.data());
      EXPECT_EQ(k, k_before[static_cast<size_t>(t)]) << t;
      EXPECT_EQ(v, v_before[static_cast<size_t>(t)]) << t;
    }
  }
  // The policy sees the 64 live slots; its choice maps back to them.
  int64_t alive = -1;
  const StreamState ss = c->SelectionState(0, 0, 0, 120, nullptr, &alive);
  ASSERT_EQ(ss.num_tokens, 64);
  EXPECT_EQ(ss.positions[3], 3);
  EXPECT_EQ(ss.positions[4], 60);
  std::vector<int64_t> chosen = {0, 1, 2, 3, 24, 63};  // live indices: sinks, position 80, the newest
  ASSERT_TRUE(c->FinishKeep(0, 0, 0, alive, true, true, &chosen));
  EXPECT_EQ(chosen, (std::vector<int64_t>{0, 1, 2, 3, 80, 119}));
  // Group 1 loses its last live slots: it goes whole, nothing else moves.
  ASSERT_TRUE(c->Compact(0, 0, 0, chosen).ok());
  const Stream& s = c->stream(0, 0, 0);
  EXPECT_EQ(s.num_encoded, 64);
  EXPECT_EQ(s.enc_blocks, (std::vector<int32_t>{enc_before[0], enc_before[2]}));
  EXPECT_EQ(s.num_tokens, 64 + 1);
  EXPECT_EQ(s.LiveTokens(), 4 + 1 + 1);
  EXPECT_EQ(s.positions[32 + 16], 80);
  EXPECT_EQ(s.positions[64], 119);
  std::vector<float> k(32), v(32);
  c->ReadSlot(0, 0, 0, 64, k.data(), v.data());
  EXPECT_EQ(k, k_before[119]);
  EXPECT_EQ(c->BytesInUse(), 2 * c->shape().enc.BlockBytes() + c->shape().BlockBytes());
}

// sink over kivi, token by token as the engine runs them (append, select,
// seal): every token the stack keeps has the very K/V (bit for bit) that
// kivi alone stores for it, and its groups are bounded by the window's.
TEST(KVCacheEncodedTest, SinkOverKiviKeepsTheCodesKiviAloneSealed) {
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"sink", {{"n_sink", "4"}, {"window", "100"}}, "test"}}, &stack).ok());
  const KVPolicy* sink = stack.For(kConcernSelection);
  ASSERT_NE(sink, nullptr);
  std::unique_ptr<KVCache> alone, stacked;
  ASSERT_TRUE(KVCache::Create(KiviShape(2, 2, 32, 16), 400, true, &alone, 400).ok());
  ASSERT_TRUE(KVCache::Create(KiviShape(2, 2, 32, 16), 400, true, &stacked, 400).ok());
  ASSERT_TRUE(alone->AddSequence(0).ok());
  ASSERT_TRUE(stacked->AddSequence(0).ok());
  constexpr int64_t kTokens = 300;
  for (int64_t t = 0; t < kTokens; ++t) {
    AppendTokens(alone.get(), 0, t, 1);
    AppendTokens(stacked.get(), 0, t, 1);
    ASSERT_TRUE(stacked->ApplySelection({0}, {t + 1}, sink).ok());
    alone->Seal(0);
    stacked->Seal(0);
  }
  std::vector<float> ka(32), va(32), ks(32), vs(32);
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      const Stream& s = stacked->stream(0, l, h);
      ASSERT_EQ(s.LiveTokens(), 104);
      EXPECT_LE(static_cast<int64_t>(s.enc_blocks.size()), (104 + 31) / 32 + 2);
      int64_t live = 0, sealed_live = 0;
      for (int64_t t = 0; t < s.num_tokens; ++t) {
        if (s.Dead(t)) continue;
        const int32_t pos = s.positions[static_cast<size_t>(t)];
        EXPECT_EQ(pos, live < 4 ? live : kTokens - 104 + live) << "slot " << t;
        stacked->ReadSlot(0, l, h, t, ks.data(), vs.data());
        alone->ReadSlot(0, l, h, pos, ka.data(), va.data());  // kivi alone evicts nothing: slot = position
        EXPECT_EQ(ks, ka) << "layer " << l << " head " << h << " position " << pos;
        EXPECT_EQ(vs, va) << "layer " << l << " head " << h << " position " << pos;
        if (t < s.num_encoded) ++sealed_live;
        ++live;
      }
      EXPECT_GT(sealed_live, 4 + 32);  // the sinks and most of the window are sealed
    }
  }
}

// KIVI-2 (group 32, residual 128) at llama-3.1-8b shape: pool bytes equal the
// encoding's analytic size (2 bits per number + fp16 scale and zero per
// group, plus the bf16 residual) within 1%.
TEST(KVCacheEncodedTest, Kivi2BytesMatchTheAnalyticSizeAtLlama31_8BShape) {
  CacheShape sh = KiviShape(32, 8, 128, 128);
  sh.dtype = DType::kBF16;
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(sh, 256 * 80, true, &c, 256 * 40).ok());
  ASSERT_TRUE(c->AddSequence(0).ok());
  const int64_t S = 1024 + 128;
  AppendTokens(c.get(), 0, 0, S);
  c->Seal(0);
  const int64_t enc_tokens = 1024, plain_tokens = 128, streams = 32 * 8;
  const double per_enc_token = 2.0 * 128 * 2 / 8 + (128.0 / 32 + 128.0 / 32) * 2 * 2;  // codes + (scale, zero) pairs
  const double analytic = streams * (enc_tokens * per_enc_token + plain_tokens * 2.0 * 128 * 2);
  EXPECT_NEAR(static_cast<double>(c->BytesInUse()) / analytic, 1.0, 0.01);
  // 96 B per encoded token against 512 B in bf16: with the 128-token residual,
  // (1024 * 96 + 128 * 512) / (1152 * 512) = 0.278 of the bf16 bytes.
  EXPECT_NEAR(static_cast<double>(c->BytesInUse()) / (streams * S * 2 * 128 * 2), 0.278, 0.003);
}

// quant (int8 / fp8, per-token or per-block fp16 scales) at llama-3.1-8b
// shape: pool bytes equal the analytic size within 1%.
TEST(KVCacheEncodedTest, QuantBytesMatchTheAnalyticSizeAtLlama31_8BShape) {
  for (EncodingKind kind : {EncodingKind::kInt8, EncodingKind::kFp8}) {
    for (bool per_token : {true, false}) {
      CacheShape sh = KiviShape(32, 8, 128, 0);
      sh.dtype = DType::kBF16;
      sh.enc.kind = kind;
      sh.enc.bits = 8;
      sh.enc.tokens_per_block = 16;
      sh.enc.group = 16;
      sh.enc.scale_per_token = per_token;
      std::unique_ptr<KVCache> c;
      ASSERT_TRUE(KVCache::Create(sh, 256 * 40, false, &c, 256 * 40).ok());  // accounting only
      ASSERT_TRUE(c->AddSequence(0).ok());
      const int64_t S = 512 + 5;  // 32 sealed blocks and an open tail of 5
      auto pos = Iota(0, S);
      ASSERT_TRUE(c->Reserve(0, S, pos.data()).ok());
      c->Seal(0);
      const double streams = 256;
      const double scales = per_token ? 2.0 * 512 * 2 : 2.0 * 32 * 2;  // fp16 scales for K and V
      const double analytic = streams * (2.0 * 512 * 128 * 1 + scales + 16 * 2 * 128 * 2);
      EXPECT_NEAR(static_cast<double>(c->BytesInUse()) / analytic, 1.0, 0.01) << sh.enc.Describe();
    }
  }
}

}  // namespace
}  // namespace kvlab
