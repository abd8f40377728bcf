// The KV cache at a real model's shape: the pools against the closed-form
// per-token formula (model/ sits above cache/, so this test lives here).
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "core/cache/kv_cache.h"
#include "core/cache/cache_test_util.h"
#include "core/model/model_config.h"
#include "kernels/append_kv.h"
#include "policies/kv_policy.h"

namespace kvlab {
namespace {

// The engine's pools hold exactly 2*L*H_kv*d_h*S*b for the full policy when
// S is a multiple of block_size, and only the unfilled part of the last
// block more otherwise (llama-3.1-8b shape, random K/V, no weights).
TEST(KVCacheTest, FullPolicyBytesMatchTheFormulaAtLlama31_8BShape) {
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"full", {}, "test"}}, &stack).ok());
  CacheShape shape;
  shape.num_layers = static_cast<int>(mc.num_hidden_layers);
  shape.num_kv_heads = stack.StoredKvHeads(static_cast<int>(mc.num_key_value_heads));
  shape.head_dim = static_cast<int>(mc.head_dim);
  shape.block_size = 16;
  shape.dtype = stack.StorageDType(DType::kBF16);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int64_t S : {256, 300, 17}) {
    std::unique_ptr<KVCache> c;
    ASSERT_TRUE(KVCache::Create(shape, 32 * 8 * 20, true, &c).ok());
    ASSERT_TRUE(c->AddSequence(0).ok());
    auto pos = Iota(0, S);
    ASSERT_TRUE(c->Reserve(0, S, pos.data()).ok());
    PageTable pt;
    c->BuildPageTable({0}, &pt);
    std::vector<float> k(static_cast<size_t>(S * 8 * 128)), v(k.size());
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    const int32_t qo[2] = {0, static_cast<int32_t>(S)};
    for (int l = 0; l < 32; ++l) AppendKV(pt.Layer(l), qo, 1, 8, k.data(), v.data());
    const int64_t formula = 2LL * 32 * 8 * 128 * S * 2;
    const int64_t padded = 2LL * 32 * 8 * 128 * ((S + 15) / 16 * 16) * 2;
    EXPECT_EQ(c->pool().bytes_in_use(), padded) << "S=" << S;
    if (S % 16 == 0) {
      EXPECT_EQ(c->pool().bytes_in_use(), formula);
    }
    EXPECT_EQ(c->pool().bytes_in_use() - formula, 2LL * 32 * 8 * 128 * 2 * ((16 - S % 16) % 16)) << "S=" << S;
    if (S == 256) {
      EXPECT_EQ(c->pool().bytes_in_use(), 131072LL * 256);
    }
  }
}

}  // namespace
}  // namespace kvlab
