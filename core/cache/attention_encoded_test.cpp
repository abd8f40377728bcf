// Attention over caches with sealed encoded segments (KIVI, int8, fp8) and
// with keys stored before RoPE: the CPU path and the reference against an
// independent dense computation on K/V gathered slot by slot from the cache.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include "core/cache/attention_encoded_test_util.h"
#include "core/cache/kv_cache.h"
#include "kernels/append_kv.h"
#include "kernels/attention_cpu.h"
#include "kernels/attention_encoded.h"
#include "kernels/attention_kivi_cpu.h"
#include "kernels/attention_reference.h"
#include "kernels/cpu_isa.h"

namespace kvlab {
namespace {

struct Case {
  std::string name;
  EncodingKind kind;  // kKivi, kInt8, kFp8; or plain (encoded = false) with rope
  bool encoded;
  int bits;
  int group;  // kivi tokens per block
  bool rope;
  int hq, hkv;
  // Variants (defaults: the original cases).
  int d = 64;
  int64_t residual = 24;
  std::vector<int64_t> lens = {1, 37, 300, 1000};  // one sequence each; the last gets a prefill chunk
  int chunk = 5;                                   // queries of the last sequence
  bool slot_attn = false;
  DType dtype = DType::kBF16;
  int window = 0;     // sliding window in positions (first_visible), 0: none
  bool gaps = false;  // evict some old slots first (Compact), so positions have gaps
};

// Builders for the variant cases.
Case Kivi(std::string name, int bits, int group, int hq, int hkv, int d = 64) {
  Case c{std::move(name), EncodingKind::kKivi, true, bits, group, false, hq, hkv};
  c.d = d;
  return c;
}
Case Long(Case c) {
  c.residual = 128;
  c.lens = {1, 37, 1000, 4133};
  return c;
}
Case Short(Case c) {  // ReadSlot decodes a whole block per slot: keep 128-token groups short
  c.lens = {1, 37, 300, 550};
  return c;
}
Case WithDType(Case c, DType t) {
  c.dtype = t;
  return c;
}
Case WithSlotAttn(Case c) {
  c.slot_attn = true;
  return c;
}
Case NoResidual(Case c) {  // whole groups sealed: some streams have no plain slot; the chunk's slots are encoded
  c.residual = 0;
  c.lens = {32, 64, 300, 1000};
  return c;
}

Case WithGaps(Case c) {  // evicted slots without a window: on encoded streams, dead slots in sealed groups
  c.name += "_gaps";
  c.gaps = true;
  return c;
}

// Hidden (dead) slots and live indices of a stream, for Dense.
void DeadAndLive(const Stream& st, std::vector<bool>* hidden, std::vector<int64_t>* live) {
  live->resize(static_cast<size_t>(st.num_tokens));
  int64_t n = 0;
  for (int64_t t = 0; t < st.num_tokens; ++t) {
    (*live)[static_cast<size_t>(t)] = n;
    if (st.Dead(t)) {
      (*hidden)[static_cast<size_t>(t)] = true;
    } else {
      ++n;
    }
  }
}

Case WithWindow(Case c, int window, bool gaps) {
  c.name += "_window" + std::to_string(window) + (gaps ? "_gaps" : "");
  c.window = window;
  c.gaps = gaps;
  c.chunk = 40;  // a prefill chunk longer than the window
  return c;
}

// Dense attention in double over gathered (decoded) K/V: the independent check.
// When prob is non-null, adds each slot's probability to it.
// `live` (may be null): each slot's index among the live ones, by which RoPE
// at read rotates (evicted slots of sealed groups hold places, not positions).
void Dense(const std::vector<std::vector<float>>& k, const std::vector<std::vector<float>>& v, const float* q, int d,
           int64_t visible, const float* inv_freq, float* out, std::vector<double>* prob = nullptr,
           const std::vector<bool>* hidden = nullptr, const std::vector<int64_t>* live = nullptr) {
  auto rot = [&](std::vector<double>& x, int64_t pos) {
    for (int i = 0; i < d / 2; ++i) {
      const double a = pos * static_cast<double>(inv_freq[i]), c = std::cos(a), s = std::sin(a);
      const double x1 = x[i], x2 = x[i + d / 2];
      x[i] = x1 * c - x2 * s;
      x[i + d / 2] = x2 * c + x1 * s;
    }
  };
  std::vector<double> qq(q, q + d), sc(static_cast<size_t>(visible));
  auto place = [&](int64_t t) { return live != nullptr ? (*live)[static_cast<size_t>(t)] : t; };
  if (inv_freq) rot(qq, place(visible - 1));
  double mx = -INFINITY;
  for (int64_t t = 0; t < visible; ++t) {
    std::vector<double> kk(k[t].begin(), k[t].end());
    if (inv_freq) rot(kk, place(t));
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += qq[c] * kk[c];
    sc[t] = hidden != nullptr && (*hidden)[static_cast<size_t>(t)] ? -INFINITY : dot / std::sqrt(double(d));
    mx = std::max(mx, sc[t]);
  }
  double sum = 0;
  for (double& x : sc) sum += (x = std::exp(x - mx));
  if (prob != nullptr) {
    for (int64_t t = 0; t < visible; ++t) (*prob)[static_cast<size_t>(t)] += sc[static_cast<size_t>(t)] / sum;
  }
  for (int c = 0; c < d; ++c) {
    double a = 0;
    for (int64_t t = 0; t < visible; ++t) a += sc[t] / sum * v[t][c];
    out[c] = static_cast<float>(a);
  }
}


// Every case runs on each kernel path (kernels/cpu_isa.h); a path the host
// lacks is skipped, naming it.
#define KVLAB_SKIP_OR_FORCE_ISA(isa_value)                                                              \
  const CpuIsa isa_forced = static_cast<CpuIsa>(isa_value);                                             \
  if (!HostHasCpuIsa(isa_forced)) {                                                                     \
    GTEST_SKIP() << "kernel path " << CpuIsaName(isa_forced) << " skipped: this CPU lacks it";         \
  }                                                                                                     \
  const ScopedCpuIsa scoped_isa(isa_forced);                                                            \
  ASSERT_TRUE(scoped_isa.status().ok()) << scoped_isa.status().ToString()

std::string IsaCaseName(int isa, const std::string& name) {
  return std::string(CpuIsaName(static_cast<CpuIsa>(isa))) + "_" + name;
}

const auto kAllIsas = ::testing::Values(static_cast<int>(CpuIsa::kScalar), static_cast<int>(CpuIsa::kAvx2),
                                        static_cast<int>(CpuIsa::kAvx512));

class EncodedAttentionTest : public ::testing::TestWithParam<std::tuple<int, Case>> {};

// An observation window (AttentionParams::slot_attn_last_queries = 2): the
// reference and CPU paths add only each sequence's last 2 queries' probabilities.
void ExpectObservationWindow(const KVCache* c, const PageTable& pt, const Case& cs, const std::vector<int32_t>& qo,
                             const std::vector<float>& q, AttentionParams p) {
  constexpr int kWindow = 2;
  const int d = cs.d, group = cs.hq / cs.hkv, num_seqs = static_cast<int>(qo.size()) - 1;
  std::vector<double> want;
  std::vector<float> o(q.size());
  for (int i = 0; i < num_seqs; ++i) {
    for (int h = 0; h < cs.hkv; ++h) {
      const Stream& st = c->stream(i, 0, h);
      const int64_t len = st.num_tokens;
      std::vector<std::vector<float>> k(static_cast<size_t>(len), std::vector<float>(d)), v = k;
      for (int64_t t = 0; t < len; ++t) c->ReadSlot(i, 0, h, t, k[t].data(), v[t].data());
      const int q_len = qo[i + 1] - qo[i];
      std::vector<double> prob(static_cast<size_t>(len), 0.0);
      for (int j = std::max(0, q_len - kWindow); j < q_len; ++j) {
        std::vector<bool> hidden(static_cast<size_t>(len), false);
        for (int64_t t = 0; cs.window > 0 && t < len; ++t) {
          hidden[static_cast<size_t>(t)] = st.positions[static_cast<size_t>(t)] <= st.positions[static_cast<size_t>(len - q_len + j)] - cs.window;
        }
        std::vector<int64_t> live;
        DeadAndLive(st, &hidden, &live);
        for (int g = 0; g < group; ++g) {
          const int64_t off = (static_cast<int64_t>(qo[i] + j) * cs.hq + h * group + g) * d;
          Dense(k, v, q.data() + off, d, len - q_len + j + 1, p.rope_inv_freq, o.data() + off, &prob, &hidden, &live);
        }
      }
      want.insert(want.end(), prob.begin(), prob.end());
    }
  }
  p.slot_attn_last_queries = kWindow;
  p.o = o.data();
  for (int run = 0; run < 2; ++run) {
    std::vector<float> got(want.size(), 0.0f);
    p.slot_attn = got.data();
    if (cs.encoded) {
      run == 0 ? PagedAttentionEncodedReference(pt.Layer(0), *pt.Encoded(0), p)
               : PagedAttentionEncodedCpu(pt.Layer(0), *pt.Encoded(0), p);
    } else {
      run == 0 ? PagedAttentionReference(pt.Layer(0), p) : PagedAttentionCpu(pt.Layer(0), p);
    }
    double worst = 0;
    for (size_t t = 0; t < want.size(); ++t) worst = std::max(worst, std::abs(got[t] - want[t]) / (1e-6 + 1e-4 * std::abs(want[t])));
    EXPECT_LE(worst, 1.0) << (run == 0 ? "reference" : "cpu") << " with an observation window";
  }
}

TEST_P(EncodedAttentionTest, CpuAndReferenceMatchDenseOnGatheredKV) {
  const Case cs = std::get<1>(GetParam());
  KVLAB_SKIP_OR_FORCE_ISA(std::get<0>(GetParam()));
  const int d = cs.d;
  CacheShape sh = LayerShape(cs.hkv, d, cs.dtype);
  sh.encoded = cs.encoded;
  sh.enc.kind = cs.kind;
  sh.enc.bits = cs.bits;
  sh.enc.head_dim = d;
  sh.enc.group = cs.group;
  sh.enc.tokens_per_block = cs.kind == EncodingKind::kKivi ? cs.group : 16;
  sh.residual = cs.residual;
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(sh, 4000, true, &c, 4000).ok());
  const std::vector<int64_t> lens = cs.lens;  // different lengths
  const int num_seqs = static_cast<int>(lens.size());
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < lens.size(); ++i) {
    std::vector<float> k, v;
    ASSERT_TRUE(FillSequence(c.get(), static_cast<int64_t>(i), lens[i], cs.hkv, d, &rng, &nd, &k, &v));
  }
  if (cs.gaps) {  // evict every fifth old slot (the last sequence's chunk stays: its queries' slots)
    for (size_t i = 0; i < lens.size(); ++i) {
      for (int h = 0; h < cs.hkv; ++h) {
        const int64_t n = c->stream(static_cast<int64_t>(i), 0, h).num_tokens;
        const int64_t tail = i + 1 == lens.size() ? cs.chunk : 1;
        std::vector<int64_t> keep;
        for (int64_t t = 0; t < n; ++t) {
          if (t >= n - tail || (t + h) % 5 != 2) keep.push_back(t);
        }
        ASSERT_TRUE(c->Compact(static_cast<int64_t>(i), 0, h, keep).ok());
      }
    }
  }
  if (cs.encoded) {
    ASSERT_GT(c->stream(3, 0, 0).num_encoded, 0);
  }
  std::vector<int64_t> seqs(lens.size());
  std::iota(seqs.begin(), seqs.end(), 0);
  PageTable pt;
  c->BuildPageTable(seqs, &pt);
  // Decode for every sequence but the last, a chunk of cs.chunk queries (its last slots) for the last.
  std::vector<int32_t> qo(lens.size() + 1);
  for (int i = 0; i < num_seqs; ++i) qo[i + 1] = qo[i] + (i + 1 < num_seqs ? 1 : cs.chunk);
  const int total_q = qo.back();
  std::vector<float> q(static_cast<size_t>(total_q * cs.hq * d));
  for (auto& x : q) x = nd(rng);
  std::vector<float> inv(static_cast<size_t>(d / 2));
  for (int i = 0; i < d / 2; ++i) inv[static_cast<size_t>(i)] = static_cast<float>(std::pow(10000.0, -2.0 * i / d));
  AttentionParams p = MakeParams(num_seqs, cs.hq, cs.hkv, d, qo.data(), q.data());
  p.rope_inv_freq = cs.rope ? inv.data() : nullptr;
  // The window's first visible slots, by a linear scan over the slots' positions.
  std::vector<int32_t> first(static_cast<size_t>(total_q * cs.hkv));
  for (int i = 0; cs.window > 0 && i < num_seqs; ++i) {
    for (int h = 0; h < cs.hkv; ++h) {
      const Stream& st = c->stream(i, 0, h);
      for (int j = 0; j < qo[i + 1] - qo[i]; ++j) {
        const int32_t q_pos = st.positions[static_cast<size_t>(st.num_tokens - (qo[i + 1] - qo[i]) + j)];
        int32_t f = 0;
        while (st.positions[static_cast<size_t>(f)] <= q_pos - cs.window) ++f;
        first[static_cast<size_t>((qo[i] + j) * cs.hkv + h)] = f;
      }
    }
  }
  if (cs.window > 0) p.first_visible = first.data();
  // slot_attn: one array per stream, [StreamLength(s)].
  std::vector<int64_t> sa_off;
  int64_t sa_total = 0;
  for (int i = 0; i < num_seqs; ++i) {
    for (int h = 0; h < cs.hkv; ++h) {
      sa_off.push_back(sa_total);
      sa_total += c->stream(i, 0, h).num_tokens;
    }
  }
  std::vector<float> sa_ref(static_cast<size_t>(sa_total)), sa_cpu(sa_ref.size()), sa_cpu3(sa_ref.size());
  std::vector<double> sa_dense(sa_ref.size());
  p.slot_attn_offsets = sa_off.data();
  std::vector<float> o_ref(q.size()), o_cpu(q.size()), o_cpu3(q.size()), o_dense(q.size());
  p.o = o_ref.data();
  p.slot_attn = cs.slot_attn ? sa_ref.data() : nullptr;
  if (cs.encoded) {
    PagedAttentionEncodedReference(pt.Layer(0), *pt.Encoded(0), p);
  } else {
    PagedAttentionReference(pt.Layer(0), p);
  }
  // The CPU path with the default threads, then with 3 (uneven split-K parts).
  const int saved_threads = omp_get_max_threads();
  for (int run = 0; run < 2; ++run) {
    if (run == 1) omp_set_num_threads(3);
    p.o = run == 0 ? o_cpu.data() : o_cpu3.data();
    p.slot_attn = !cs.slot_attn ? nullptr : run == 0 ? sa_cpu.data() : sa_cpu3.data();
    if (cs.encoded) {
      // The fused KIVI path takes exactly the KIVI cases without RoPE or slot_attn.
      EXPECT_EQ(KiviCpuSupports(pt.Layer(0), *pt.Encoded(0), p),
                cs.kind == EncodingKind::kKivi && !cs.rope && !cs.slot_attn);
      PagedAttentionEncodedCpu(pt.Layer(0), *pt.Encoded(0), p);
    } else {
      PagedAttentionCpu(pt.Layer(0), p);
    }
  }
  omp_set_num_threads(saved_threads);
  const int group = cs.hq / cs.hkv;
  for (int i = 0; i < num_seqs; ++i) {
    for (int h = 0; h < cs.hkv; ++h) {
      const int64_t len = c->stream(i, 0, h).num_tokens;
      std::vector<std::vector<float>> k(static_cast<size_t>(len), std::vector<float>(d)), v = k;
      for (int64_t t = 0; t < len; ++t) c->ReadSlot(i, 0, h, t, k[t].data(), v[t].data());
      const int q_len = qo[i + 1] - qo[i];
      std::vector<double> prob(static_cast<size_t>(len));
      const std::vector<int32_t>& pos = c->stream(i, 0, h).positions;
      for (int j = 0; j < q_len; ++j) {
        std::vector<bool> hidden(static_cast<size_t>(len), false);  // outside the window, by position
        for (int64_t t = 0; cs.window > 0 && t < len; ++t) {
          hidden[static_cast<size_t>(t)] = pos[static_cast<size_t>(t)] <= pos[static_cast<size_t>(len - q_len + j)] - cs.window;
        }
        std::vector<int64_t> live;
        DeadAndLive(c->stream(i, 0, h), &hidden, &live);
        for (int g = 0; g < group; ++g) {
          const int64_t off = (static_cast<int64_t>(qo[i] + j) * cs.hq + h * group + g) * d;
          Dense(k, v, q.data() + off, d, len - q_len + j + 1, p.rope_inv_freq, o_dense.data() + off, &prob, &hidden, &live);
        }
      }
      std::copy(prob.begin(), prob.end(), sa_dense.begin() + sa_off[static_cast<size_t>(i * cs.hkv + h)]);
    }
  }
  double worst_ref = 0, worst_cpu = 0, worst_cpu3 = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    const double tol = 1e-5 + 1e-4 * std::abs(o_dense[i]);
    worst_ref = std::max(worst_ref, std::abs(o_ref[i] - o_dense[i]) / tol);
    worst_cpu = std::max(worst_cpu, std::abs(o_cpu[i] - o_dense[i]) / tol);
    worst_cpu3 = std::max(worst_cpu3, std::abs(o_cpu3[i] - o_dense[i]) / tol);
  }
  EXPECT_LE(worst_ref, 1.0);
  EXPECT_LE(worst_cpu, 1.0);
  EXPECT_LE(worst_cpu3, 1.0);
  if (cs.slot_attn) {
    double worst_sa_ref = 0, worst_sa_cpu = 0, worst_sa_cpu3 = 0;
    for (size_t i = 0; i < sa_dense.size(); ++i) {
      const double tol = 1e-6 + 1e-4 * std::abs(sa_dense[i]);
      worst_sa_ref = std::max(worst_sa_ref, std::abs(sa_ref[i] - sa_dense[i]) / tol);
      worst_sa_cpu = std::max(worst_sa_cpu, std::abs(sa_cpu[i] - sa_dense[i]) / tol);
      worst_sa_cpu3 = std::max(worst_sa_cpu3, std::abs(sa_cpu3[i] - sa_dense[i]) / tol);
    }
    EXPECT_LE(worst_sa_ref, 1.0);
    EXPECT_LE(worst_sa_cpu, 1.0);
    EXPECT_LE(worst_sa_cpu3, 1.0);
    ExpectObservationWindow(c.get(), pt, cs, qo, q, p);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, EncodedAttentionTest,
    ::testing::Combine(kAllIsas, ::testing::Values(Case{"kivi2_gqa4", EncodingKind::kKivi, true, 2, 32, false, 8, 2},
                      Case{"kivi4_mha", EncodingKind::kKivi, true, 4, 32, false, 2, 2},
                      Case{"kivi2_rope_gqa8", EncodingKind::kKivi, true, 2, 64, true, 8, 1},
                      Case{"int8_gqa4", EncodingKind::kInt8, true, 8, 16, false, 8, 2},
                      Case{"fp8_gqa4", EncodingKind::kFp8, true, 8, 16, false, 8, 2},
                      Case{"plain_rope_gqa4", EncodingKind::kKivi, false, 2, 32, true, 8, 2},
                      // The fused KIVI path: GQA 1/4/8, group 16..128 (value groups per token 1..4),
                      // head_dim 64 and 128, bf16/f16/f32 plain tails.
                      Kivi("kivi2_gqa8", 2, 32, 8, 1), Kivi("kivi2_g16_gqa4", 2, 16, 8, 2),
                      Kivi("kivi2_g64_gqa4", 2, 64, 8, 2), Kivi("kivi4_g16_mha", 4, 16, 3, 3),
                      Short(Kivi("kivi2_d128_g128_gqa4", 2, 128, 8, 2, 128)), Kivi("kivi4_d128_g64_gqa8", 4, 64, 8, 1, 128),
                      WithDType(Kivi("kivi2_f16_gqa4", 2, 32, 8, 2), DType::kF16),
                      WithDType(Kivi("kivi4_f32_gqa4", 4, 32, 8, 2), DType::kF32),
                      NoResidual(Kivi("kivi2_noresidual_gqa4", 2, 32, 8, 2)),
                      // Long context: 4133 slots, 128-slot residual, head_dim 128.
                      Long(Kivi("kivi2_long_gqa4", 2, 32, 8, 2, 128)), Long(Kivi("kivi4_long_gqa8", 4, 32, 8, 1, 128)),
                      // slot_attn (the generic path) against the dense probabilities.
                      WithSlotAttn(Kivi("kivi2_slot_attn_gqa4", 2, 32, 8, 2)),
                      WithSlotAttn(Case{"int8_slot_attn_gqa4", EncodingKind::kInt8, true, 8, 16, false, 8, 2}),
                      // Sliding windows (first_visible) over encoded and plain slots: smaller than a
                      // group, spanning groups, with evicted slots; fused KIVI, generic and reference.
                      WithGaps(Kivi("kivi2_gqa4", 2, 32, 8, 2)), WithGaps(Kivi("kivi4_d128_g64_gqa8", 4, 64, 8, 1, 128)),
                      WithGaps(Case{"kivi2_rope_gqa8", EncodingKind::kKivi, true, 2, 64, true, 8, 1}),
                      WithGaps(WithSlotAttn(Kivi("kivi2_slot_attn_gqa4", 2, 32, 8, 2))),
                      WithGaps(Case{"fp8_gqa4", EncodingKind::kFp8, true, 8, 16, false, 8, 2}),
                      WithWindow(Kivi("kivi2_gqa4", 2, 32, 8, 2), 20, false),
                      WithWindow(Kivi("kivi4_gqa8", 4, 32, 8, 1), 100, true),
                      WithWindow(Long(Kivi("kivi2_long_gqa4", 2, 32, 8, 2, 128)), 1000, false),
                      WithWindow(WithSlotAttn(Kivi("kivi2_slot_attn_gqa4", 2, 32, 8, 2)), 50, true),
                      WithWindow(Case{"int8_gqa4", EncodingKind::kInt8, true, 8, 16, false, 8, 2}, 30, true),
                      WithWindow(Case{"kivi2_rope_gqa8", EncodingKind::kKivi, true, 2, 64, true, 8, 1}, 70, false),
                      WithWindow(Case{"plain_rope_gqa4", EncodingKind::kKivi, false, 2, 32, true, 8, 2}, 9, true))),
    [](const auto& info) {
      return IsaCaseName(std::get<0>(info.param), std::get<1>(info.param).name);
    });

// The kivi policy's attention = "int8" (kernels/attention_kivi_int8.h): int8
// folded queries and 8-bit value weights. Approximate by design; what it must
// hold, against the exact kernel on the same cache (o_exact) and dense
// attention on the keys and values before quantisation (o_full):
//  - it is really taken (the outputs differ from the exact kernel's);
//  - its error is small beside KIVI-2's own: rms(o_int8 - o_exact) <= 0.05 *
//    rms(o_exact - o_full), and its worst element <= 0.25 * the worst of
//    KIVI-2's own error;
//  - the same with 3 threads (uneven split-K parts) and for a prefill chunk.
struct Int8Case {
  std::string name;
  int hq, hkv;
  std::vector<int64_t> lens;
  int chunk;
  DType dtype;
};

class KiviInt8AttentionTest : public ::testing::TestWithParam<std::tuple<int, Int8Case>> {};

TEST_P(KiviInt8AttentionTest, ErrorIsSmallBesideKiviOwn) {
  const Int8Case cs = std::get<1>(GetParam());
  KVLAB_SKIP_OR_FORCE_ISA(std::get<0>(GetParam()));
  const int d = 128;
  const CacheShape sh = Kivi2LayerShape(cs.hkv, d, cs.dtype);
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(sh, 4000, true, &c, 4000).ok());
  const int num_seqs = static_cast<int>(cs.lens.size());
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> orig_k(cs.lens.size()), orig_v(cs.lens.size());  // [seq]: [t][h][d]
  for (int i = 0; i < num_seqs; ++i) {
    ASSERT_TRUE(FillSequence(c.get(), i, cs.lens[static_cast<size_t>(i)], cs.hkv, d, &rng, &nd,
                             &orig_k[static_cast<size_t>(i)], &orig_v[static_cast<size_t>(i)]));
  }
  std::vector<int64_t> seqs(cs.lens.size());
  std::iota(seqs.begin(), seqs.end(), 0);
  PageTable pt;
  c->BuildPageTable(seqs, &pt);
  std::vector<int32_t> qo(cs.lens.size() + 1);
  for (int i = 0; i < num_seqs; ++i) qo[i + 1] = qo[i] + (i + 1 < num_seqs ? 1 : cs.chunk);
  std::vector<float> q(static_cast<size_t>(qo.back() * cs.hq * d));
  for (auto& x : q) x = nd(rng);
  AttentionParams p = MakeParams(num_seqs, cs.hq, cs.hkv, d, qo.data(), q.data());
  std::vector<float> o_exact(q.size()), o_int8(q.size()), o_int8_3(q.size()), o_full(q.size());
  p.o = o_exact.data();
  PagedAttentionKiviCpu(pt.Layer(0), *pt.Encoded(0), p);
  p.int8_attention = true;  // the kivi policy's attention = "int8" (KernelOptions), as the CPU backend passes it
  p.o = o_int8.data();
  ASSERT_TRUE(KiviCpuSupports(pt.Layer(0), *pt.Encoded(0), p));
  PagedAttentionKiviCpu(pt.Layer(0), *pt.Encoded(0), p);
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(3);
  p.o = o_int8_3.data();
  PagedAttentionKiviCpu(pt.Layer(0), *pt.Encoded(0), p);
  omp_set_num_threads(saved_threads);
  // Dense attention on the original (unquantised) keys and values.
  const int group = cs.hq / cs.hkv;
  for (int i = 0; i < num_seqs; ++i) {
    const int64_t len = cs.lens[static_cast<size_t>(i)];
    for (int h = 0; h < cs.hkv; ++h) {
      std::vector<std::vector<float>> k(static_cast<size_t>(len), std::vector<float>(d)), v = k;
      for (int64_t t = 0; t < len; ++t) {
        const size_t off = static_cast<size_t>((t * cs.hkv + h) * d);
        std::copy(orig_k[static_cast<size_t>(i)].begin() + off, orig_k[static_cast<size_t>(i)].begin() + off + d,
                  k[static_cast<size_t>(t)].begin());
        std::copy(orig_v[static_cast<size_t>(i)].begin() + off, orig_v[static_cast<size_t>(i)].begin() + off + d,
                  v[static_cast<size_t>(t)].begin());
      }
      const int q_len = qo[i + 1] - qo[i];
      for (int j = 0; j < q_len; ++j) {
        for (int g = 0; g < group; ++g) {
          const int64_t off = (static_cast<int64_t>(qo[i] + j) * cs.hq + h * group + g) * d;
          Dense(k, v, q.data() + off, d, len - q_len + j + 1, nullptr, o_full.data() + off);
        }
      }
    }
  }
  double own2 = 0, own_max = 0, int8_2 = 0, int8_max = 0, int8_3_2 = 0, int8_3_max = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    const double own = o_exact[i] - o_full[i], e = o_int8[i] - o_exact[i], e3 = o_int8_3[i] - o_exact[i];
    own2 += own * own;
    own_max = std::max(own_max, std::abs(own));
    int8_2 += e * e;
    int8_max = std::max(int8_max, std::abs(e));
    int8_3_2 += e3 * e3;
    int8_3_max = std::max(int8_3_max, std::abs(e3));
  }
  const double n = static_cast<double>(q.size());
  const double own_rms = std::sqrt(own2 / n), int8_rms = std::sqrt(int8_2 / n), int8_3_rms = std::sqrt(int8_3_2 / n);
  RecordProperty("kivi2_rms_error", std::to_string(own_rms));
  RecordProperty("int8_rms_error", std::to_string(int8_rms));
  std::printf("[ %s ] KIVI-2 own error rms %.3g max %.3g; int8 beside exact rms %.3g max %.3g (3 threads: %.3g %.3g)\n",
              cs.name.c_str(), own_rms, own_max, int8_rms, int8_max, int8_3_rms, int8_3_max);
  if (isa_forced == CpuIsa::kScalar) {  // no int8 arithmetic in the scalar copy: the exact path runs
    EXPECT_EQ(int8_max, 0.0) << "the scalar path should take the exact kernel for int8_attention";
    return;
  }
  EXPECT_GT(int8_max, 0.0) << "the int8 path was not taken";
  EXPECT_LE(int8_rms, 0.05 * own_rms);
  EXPECT_LE(int8_max, 0.25 * own_max);
  EXPECT_LE(int8_3_rms, 0.05 * own_rms);
  EXPECT_LE(int8_3_max, 0.25 * own_max);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KiviInt8AttentionTest,
    ::testing::Combine(kAllIsas,
                       ::testing::Values(Int8Case{"gqa4_decode", 8, 2, {1, 37, 300, 1000, 4133}, 1, DType::kBF16},
                                         Int8Case{"gqa4_prefill_chunk", 8, 2, {200, 1000}, 37, DType::kBF16},
                                         Int8Case{"mha_f16", 3, 3, {64, 700}, 5, DType::kF16},
                                         Int8Case{"gqa8_f32", 8, 1, {2000}, 3, DType::kF32})),
    [](const auto& info) {
      return IsaCaseName(std::get<0>(info.param), std::get<1>(info.param).name);
    });

}  // namespace
}  // namespace kvlab
