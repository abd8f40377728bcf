// Helpers shared by the encoded-attention tests (attention_encoded_test.cpp,
// kivi_cpu_plan_test.cpp): a sequence of random K/V appended and sealed, one
// layer's cache shape, and the attention parameters of a batch.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/cache/kv_cache.h"
#include "kernels/append_kv.h"
#include "kernels/paged_kv.h"

namespace kvlab {

// Adds sequence `seq` with `len` slots of K and V drawn from nd (returned in k
// and v, [t][h][d]) and seals what the cache seals.
inline ::testing::AssertionResult FillSequence(KVCache* c, int64_t seq, int64_t len, int hkv, int d, std::mt19937* rng,
                                        std::normal_distribution<float>* nd, std::vector<float>* k,
                                        std::vector<float>* v) {
  if (!c->AddSequence(seq).ok()) return ::testing::AssertionFailure() << "AddSequence " << seq;
  std::vector<int32_t> pos(static_cast<size_t>(len));
  std::iota(pos.begin(), pos.end(), 0);
  if (!c->Reserve(seq, len, pos.data()).ok()) return ::testing::AssertionFailure() << "Reserve " << len;
  PageTable pt;
  c->BuildPageTable({seq}, &pt);
  k->resize(static_cast<size_t>(len * hkv * d));
  v->resize(k->size());
  for (auto& x : *k) x = (*nd)(*rng);
  for (auto& x : *v) x = (*nd)(*rng);
  const int32_t qo[2] = {0, static_cast<int32_t>(len)};
  AppendKV(pt.Layer(0), qo, 1, hkv, k->data(), v->data());
  c->Seal(seq);
  return ::testing::AssertionSuccess();
}

// One layer of hkv KV heads of d channels, blocks of 16 slots.
inline CacheShape LayerShape(int hkv, int d, DType dtype) {
  CacheShape sh;
  sh.num_layers = 1;
  sh.num_kv_heads = hkv;
  sh.head_dim = d;
  sh.block_size = 16;
  sh.dtype = dtype;
  return sh;
}

// LayerShape with KIVI-2 sealed groups: group 32, 32 tokens a block, a
// 128-token full-precision residual.
inline CacheShape Kivi2LayerShape(int hkv, int d, DType dtype) {
  CacheShape sh = LayerShape(hkv, d, dtype);
  sh.encoded = true;
  sh.enc.kind = EncodingKind::kKivi;
  sh.enc.bits = 2;
  sh.enc.head_dim = d;
  sh.enc.group = 32;
  sh.enc.tokens_per_block = 32;
  sh.residual = 128;
  return sh;
}

inline AttentionParams MakeParams(int num_seqs, int hq, int hkv, int d, const int32_t* qo, const float* q) {
  AttentionParams p;
  p.num_seqs = num_seqs;
  p.num_qo_heads = hq;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.sm_scale = 1.0f / std::sqrt(float(d));
  p.qo_indptr = qo;
  p.q = q;
  return p;
}

}  // namespace kvlab
