// Every attention backend against an independent dense attention computed here,
// in double, on K/V gathered from the pages by this file's own address
// arithmetic (FlashInfer's test shape). Also AppendKV, DenseAttention and the
// argument check.
#include <gtest/gtest.h>
#include <omp.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/append_kv.h"
#include "kernels/attention_cpu.h"
#include "kernels/attention_reference.h"
#include "kernels/cpu_isa.h"
#include "kernels/dense_attention.h"

namespace kvlab {
namespace {

struct SeqSpec {
  int len;    // stream length, new tokens included
  int q_len;  // queries in this call (the last q_len slots)
};

struct Case {
  std::string name;
  DType dtype;
  int block_size, hq, hkv, d;
  float q_scale;  // large values make the softmax peaky, so the running max moves
  bool rope;      // keys stored before RoPE, rotated by the kernel (rope_inv_freq)
  std::vector<SeqSpec> seqs;
  int window = 0;     // sliding window in positions (0: none), passed as first_visible
  bool gaps = false;  // slot positions with gaps (evicted slots), different in each stream
};

// The storage values are rounded to the dtype and both sides compute on the
// same rounded values, so storage precision does not enter the comparison:
// only the backend's fp32 arithmetic (dot products over head_dim, sums over up
// to 8K slots) does, and the same tight bound fits every dtype.
constexpr double kAtol = 1e-5, kRtol = 1e-4;

// A test-owned pool and page table. Blocks are handed out in shuffled order and
// the pool is filled with NaN first, so a kernel that reads a slot outside its
// stream (the unused tail of a last block, a spare block) poisons its output.
class TestCache {
 public:
  TestCache(const Case& c, std::mt19937* rng) : c_(c), es_(DTypeBytes(c.dtype)) {
    block_bytes_ = 2LL * c.block_size * c.d * es_;
    const int streams = static_cast<int>(c.seqs.size()) * c.hkv;
    indptr_.push_back(0);
    for (int s = 0; s < streams; ++s) {
      const int len = c.seqs[s / c.hkv].len;
      indptr_.push_back(indptr_.back() + (len + c.block_size - 1) / c.block_size);
      last_block_len_.push_back(len == 0 ? 0 : (len - 1) % c.block_size + 1);
    }
    const int num_blocks = indptr_.back() + 3;  // spares stay NaN
    indices_.resize(static_cast<size_t>(num_blocks));
    std::iota(indices_.begin(), indices_.end(), 0);
    std::shuffle(indices_.begin(), indices_.end(), *rng);
    pool_.resize(static_cast<size_t>(num_blocks * block_bytes_));
    const float nan = std::nanf("");
    std::vector<float> nan_row(static_cast<size_t>(c.d), nan);
    for (int64_t row = 0; row < num_blocks * 2LL * c.block_size; ++row) {
      ConvertFromF32(c.dtype, nan_row.data(), pool_.data() + row * c.d * es_, c.d);
    }
  }

  PagedKV View() {
    PagedKV kv;
    kv.base = pool_.data();
    kv.block_bytes = block_bytes_;
    kv.dtype = c_.dtype;
    kv.block_size = c_.block_size;
    kv.head_dim = c_.d;
    kv.num_streams = static_cast<int>(last_block_len_.size());
    kv.indptr = indptr_.data();
    kv.indices = indices_.data();
    kv.last_block_len = last_block_len_.data();
    return kv;
  }

  // Address of slot t's key (value) row of stream s, by the layout comment in paged_kv.h.
  uint8_t* Row(int s, int64_t t, bool value) {
    const int32_t block = indices_[indptr_[s] + t / c_.block_size];
    const int64_t row = (value ? c_.block_size : 0) + t % c_.block_size;
    return pool_.data() + block * block_bytes_ + row * c_.d * es_;
  }

  void Fill(std::mt19937* rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(c_.d));
    for (int s = 0; s < static_cast<int>(last_block_len_.size()); ++s) {
      for (int64_t t = 0; t < c_.seqs[s / c_.hkv].len; ++t) {
        for (int value = 0; value < 2; ++value) {
          for (float& x : row) x = u(*rng);
          ConvertFromF32(c_.dtype, row.data(), Row(s, t, value), c_.d);
        }
      }
    }
  }

  // Stream s's keys or values as dense fp32 [len][d], read back from the pages.
  std::vector<float> Gather(int s, bool value) {
    const int len = c_.seqs[s / c_.hkv].len;
    std::vector<float> out(static_cast<size_t>(len) * c_.d);
    for (int64_t t = 0; t < len; ++t) ConvertToF32(c_.dtype, Row(s, t, value), out.data() + t * c_.d, c_.d);
    return out;
  }

 private:
  Case c_;
  int es_;
  int64_t block_bytes_;
  std::vector<uint8_t> pool_;
  std::vector<int32_t> indptr_, indices_, last_block_len_;
};

struct Inputs {
  std::vector<int32_t> qo_indptr;
  std::vector<float> q;
  std::vector<float> inv_freq;  // Llama's RoPE frequencies (base 10000), used when the case has rope
  std::vector<int64_t> slot_offsets;
  int64_t total_slots = 0;
  std::vector<std::vector<int32_t>> positions;  // per stream: each slot's original position
  std::vector<int32_t> first_visible;           // [total_q * hkv], when the case has a window
};

// Whether a key at position key_pos is in the window of a query at q_pos
// (Hugging Face's rule: q_pos - window < key_pos).
bool InWindow(const Case& c, int64_t q_pos, int64_t key_pos) { return c.window == 0 || key_pos > q_pos - c.window; }

Inputs MakeInputs(const Case& c, std::mt19937* rng) {
  Inputs in;
  in.qo_indptr.push_back(0);
  for (const SeqSpec& s : c.seqs) in.qo_indptr.push_back(in.qo_indptr.back() + s.q_len);
  std::uniform_real_distribution<float> u(-c.q_scale, c.q_scale);
  in.q.resize(static_cast<size_t>(in.qo_indptr.back()) * c.hq * c.d);
  for (float& x : in.q) x = u(*rng);
  for (int i = 0; i < c.d / 2; ++i) in.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / c.d));
  for (size_t s = 0; s < c.seqs.size() * c.hkv; ++s) {
    in.slot_offsets.push_back(in.total_slots);
    in.total_slots += c.seqs[s / c.hkv].len;
    std::vector<int32_t> pos(static_cast<size_t>(c.seqs[s / c.hkv].len));
    std::iota(pos.begin(), pos.end(), 0);
    if (c.gaps) {  // strictly increasing with holes; the new tokens' positions are consecutive
      const int len = c.seqs[s / c.hkv].len, q_len = c.seqs[s / c.hkv].q_len;
      int32_t next = static_cast<int32_t>((*rng)() % 5);
      for (int t = 0; t < len; ++t) {
        pos[static_cast<size_t>(t)] = next;
        next += 1 + (t < len - q_len && (*rng)() % 3 == 0 ? static_cast<int32_t>((*rng)() % 7) : 0);
      }
    }
    in.positions.push_back(std::move(pos));
  }
  if (c.window > 0) {
    // The first visible slot by a linear scan (the cache's binary search is tested on its own).
    in.first_visible.resize(static_cast<size_t>(in.qo_indptr.back()) * c.hkv);
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      for (int h = 0; h < c.hkv; ++h) {
        const std::vector<int32_t>& pos = in.positions[i * c.hkv + h];
        for (int j = 0; j < c.seqs[i].q_len; ++j) {
          const int q_slot = c.seqs[i].len - c.seqs[i].q_len + j;
          int first = 0;
          while (!InWindow(c, pos[static_cast<size_t>(q_slot)], pos[static_cast<size_t>(first)])) ++first;
          in.first_visible[static_cast<size_t>(in.qo_indptr[i] + j) * c.hkv + h] = first;
        }
      }
    }
  }
  return in;
}

AttentionParams MakeParams(const Case& c, const Inputs& in, float* o) {
  AttentionParams p;
  p.num_seqs = static_cast<int>(c.seqs.size());
  p.num_qo_heads = c.hq;
  p.num_kv_heads = c.hkv;
  p.head_dim = c.d;
  p.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  p.qo_indptr = in.qo_indptr.data();
  p.q = in.q.data();
  p.o = o;
  if (c.rope) p.rope_inv_freq = in.inv_freq.data();
  if (c.window > 0) p.first_visible = in.first_visible.data();
  return p;
}

// Rotates x[d] to position pos (Hugging Face rotate_half), in double.
void Rope(const std::vector<float>& inv_freq, int64_t pos, double* x, int d) {
  for (int i = 0; i < d / 2; ++i) {
    const double a = static_cast<double>(pos) * inv_freq[i], x1 = x[i], x2 = x[i + d / 2];
    x[i] = x1 * std::cos(a) - x2 * std::sin(a);
    x[i + d / 2] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

// Plain dense causal attention in double on the gathered K/V (rotated here
// when the case has rope): the output and each stream's per-slot probability
// summed over its query heads and queries.
// With last_queries > 0 only each sequence's last last_queries queries add to
// slot_attn (AttentionParams::slot_attn_last_queries).
// With softcap > 0 each score becomes softcap * tanh(score / softcap) (Gemma 2).
void DenseExpected(const Case& c, const Inputs& in, TestCache* cache, std::vector<double>* o,
                   std::vector<double>* slot_attn, int last_queries = 0, double softcap = 0) {
  const int group = c.hq / c.hkv, d = c.d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  o->assign(in.q.size(), 0.0);
  slot_attn->assign(static_cast<size_t>(in.total_slots), 0.0);
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    const int len = c.seqs[i].len, q_len = c.seqs[i].q_len;
    for (int h = 0; h < c.hkv; ++h) {
      const int s = static_cast<int>(i) * c.hkv + h;
      const std::vector<float> v = cache->Gather(s, true);
      const std::vector<float> k_stored = cache->Gather(s, false);
      const std::vector<int32_t>& pos = in.positions[static_cast<size_t>(s)];
      std::vector<double> k(k_stored.begin(), k_stored.end());
      for (int t = 0; c.rope && t < len; ++t) Rope(in.inv_freq, t, k.data() + static_cast<size_t>(t) * d, d);
      for (int g = 0; g < group; ++g) {
        for (int j = 0; j < q_len; ++j) {
          const int64_t off = (static_cast<int64_t>(in.qo_indptr[i] + j) * c.hq + h * group + g) * d;
          const int visible = len - q_len + j + 1;
          std::vector<double> q(in.q.begin() + off, in.q.begin() + off + d);
          if (c.rope) Rope(in.inv_freq, visible - 1, q.data(), d);
          std::vector<double> w(static_cast<size_t>(visible), -INFINITY);
          for (int t = 0; t < visible; ++t) {
            if (!InWindow(c, pos[static_cast<size_t>(visible - 1)], pos[static_cast<size_t>(t)])) continue;
            double dot = 0.0;
            for (int x = 0; x < d; ++x) dot += q[x] * k[static_cast<size_t>(t) * d + x];
            w[t] = dot * scale;
            if (softcap > 0) w[t] = softcap * std::tanh(w[t] / softcap);
          }
          const double mx = *std::max_element(w.begin(), w.end());
          double sum = 0.0;
          for (double& x : w) sum += (x = std::exp(x - mx));
          for (int t = 0; t < visible; ++t) {
            for (int x = 0; x < d; ++x) (*o)[off + x] += w[t] / sum * v[t * d + x];
            if (last_queries <= 0 || j >= q_len - last_queries) (*slot_attn)[in.slot_offsets[s] + t] += w[t] / sum;
          }
        }
      }
    }
  }
}

// Counts elements outside atol + rtol * |expected| and reports the first few.
template <typename T>
int CountMismatches(const std::vector<float>& got, const std::vector<T>& want, double atol, double rtol,
                    const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double tol = atol + rtol * std::abs(static_cast<double>(want[i]));
    if (!(std::abs(got[i] - static_cast<double>(want[i])) <= tol)) {  // NaN fails
      if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected " << want[i];
    }
  }
  return bad;
}

using AttentionFn = void (*)(const PagedKV&, const AttentionParams&);
struct Backend {
  const char* name;
  AttentionFn fn;
  int isa = -1;  // a kernel path (CpuIsa) forced for the call; -1: the dispatcher's own choice
};

// The CPU kernel running a plan made for other lengths than the call's, as
// one plan serves every layer of a step (whose lengths and windows may
// differ): about half the length on even streams, twice on odd ones, no window.
void PlannedCpu(const PagedKV& kv, const AttentionParams& p) {
  std::vector<int64_t> len(static_cast<size_t>(kv.num_streams));
  for (int s = 0; s < kv.num_streams; ++s) {
    const int seq = s / p.num_kv_heads, q_len = p.qo_indptr[seq + 1] - p.qo_indptr[seq];
    const int64_t own = kv.StreamLength(s);
    len[static_cast<size_t>(s)] = s % 2 == 0 ? std::max<int64_t>(q_len, own / 2) : 2 * own;
  }
  CpuDecodePlan plan;
  PlanCpuDecode(CpuDecodeShape{p.num_seqs, p.num_qo_heads, p.num_kv_heads, p.head_dim}, p.qo_indptr, len.data(),
                nullptr, 0, &plan);
  PagedAttentionCpu(kv, p, plan);
}

// "cpu" runs the path the dispatcher picks; cpu_<path> forces each kernel path
// (kernels/cpu_isa.h) and is skipped, naming the path, where the host lacks it.
const Backend kBackends[] = {{"reference", PagedAttentionReference},
                             {"cpu", PagedAttentionCpu},
                             {"cpu_planned", PlannedCpu},
                             {"cpu_scalar", PagedAttentionCpu, static_cast<int>(CpuIsa::kScalar)},
                             {"cpu_avx2", PagedAttentionCpu, static_cast<int>(CpuIsa::kAvx2)},
                             {"cpu_avx512", PagedAttentionCpu, static_cast<int>(CpuIsa::kAvx512)},
                             {"cpu_planned_scalar", PlannedCpu, static_cast<int>(CpuIsa::kScalar)},
                             {"cpu_planned_avx512", PlannedCpu, static_cast<int>(CpuIsa::kAvx512)}};

// gtest prints parameters of failing tests with these.
void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  const DType f32 = DType::kF32, f16 = DType::kF16, bf16 = DType::kBF16;
  return {
      // decode: many sequences of different lengths, a length-1 stream, partly filled last blocks
      {"decode_bs16_gqa4_bf16", bf16, 16, 8, 2, 128, 1.0f, false, {{1, 1}, {17, 1}, {100, 1}, {300, 1}, {33, 1}}},
      {"decode_bs1_gqa1_f32", f32, 1, 4, 4, 64, 4.0f, false, {{1, 1}, {5, 1}, {40, 1}}},
      {"decode_bs16_gqa8_f16", f16, 16, 16, 2, 64, 4.0f, false, {{1, 1}, {16, 1}, {31, 1}, {257, 1}}},
      {"decode_bs16_gqa1_bf16", bf16, 16, 3, 3, 128, 8.0f, false, {{15, 1}, {64, 1}, {2, 1}}},
      // prefill: whole sequence, chunks over existing cache, mixed with decode and an idle sequence
      {"prefill_bs16_gqa4_bf16", bf16, 16, 8, 2, 128, 2.0f, false, {{70, 70}, {100, 37}, {5, 1}, {10, 0}}},
      {"prefill_bs1_gqa8_f32", f32, 1, 8, 1, 32, 2.0f, false, {{40, 40}, {50, 13}}},
      {"prefill_bs16_gqa1_f16", f16, 16, 2, 2, 64, 2.0f, false, {{70, 70}, {90, 45}}},
      {"prefill_bs7_gqa4_f32", f32, 7, 4, 1, 48, 2.0f, false, {{29, 29}, {23, 9}}},
      // head_dim not a multiple of 16 (the CPU backend falls back to the reference)
      {"decode_bs16_gqa2_d24_f32", f32, 16, 4, 2, 24, 2.0f, false, {{20, 1}, {3, 3}}},
      // long contexts: split-K over threads and its log-sum-exp merge
      {"long_decode_bs16_gqa4_bf16", bf16, 16, 8, 2, 128, 4.0f, false, {{8000, 1}, {3001, 1}}},
      {"long_decode_bs16_gqa8_f16", f16, 16, 8, 1, 128, 4.0f, false, {{6007, 1}}},
      {"long_decode_bs16_gqa1_f32", f32, 16, 2, 2, 64, 4.0f, false, {{4100, 1}}},
      {"long_prefill_bs16_gqa4_bf16", bf16, 16, 4, 1, 128, 2.0f, false, {{2000, 48}}},
      // keys stored before RoPE, rotated at read time (positions up to a few thousand)
      {"rope_decode_bs16_gqa4_bf16", bf16, 16, 8, 2, 128, 2.0f, true, {{3000, 1}, {17, 1}}},
      {"rope_prefill_bs16_gqa2_f16", f16, 16, 4, 2, 64, 2.0f, true, {{300, 40}, {50, 50}}},
      {"rope_prefill_bs1_gqa4_d48_f32", f32, 1, 4, 1, 48, 2.0f, true, {{30, 7}}},
      // sliding windows (first_visible): smaller than, equal to and larger than the block
      {"window5_decode_bs16_gqa4_bf16", bf16, 16, 8, 2, 128, 4.0f, false, {{1, 1}, {17, 1}, {100, 1}, {33, 1}}, 5},
      {"window16_decode_bs16_gqa8_f16", f16, 16, 16, 2, 64, 4.0f, false, {{16, 1}, {31, 1}, {257, 1}}, 16},
      {"window40_decode_bs16_gqa1_bf16", bf16, 16, 3, 3, 128, 8.0f, false, {{15, 1}, {64, 1}, {2, 1}}, 40},
      {"window3_decode_bs1_gqa1_f32", f32, 1, 4, 4, 64, 4.0f, false, {{1, 1}, {5, 1}, {40, 1}}, 3},
      // prefill chunks longer than the window, mixed with decode and an idle sequence
      {"window8_prefill_bs16_gqa4_bf16", bf16, 16, 8, 2, 128, 2.0f, false, {{70, 70}, {100, 37}, {5, 1}, {10, 0}}, 8},
      {"window5_prefill_bs1_gqa8_f32", f32, 1, 8, 1, 32, 2.0f, false, {{40, 40}, {50, 13}}, 5},
      {"window24_prefill_bs7_gqa4_f32", f32, 7, 4, 1, 48, 2.0f, false, {{29, 29}, {60, 9}}, 24},
      // evicted slots: positions with gaps, different in every stream
      {"window9_gaps_prefill_bs16_gqa4_bf16", bf16, 16, 8, 2, 128, 2.0f, false, {{90, 40}, {60, 1}}, 9, true},
      {"window20_gaps_decode_bs1_gqa1_f32", f32, 1, 2, 2, 64, 4.0f, false, {{50, 1}, {7, 1}}, 20, true},
      {"window16_gaps_prefill_bs16_gqa8_f16", f16, 16, 8, 1, 64, 2.0f, false, {{100, 30}}, 16, true},
      // long contexts: the window skips blocks; split-K over what remains
      {"window4096_long_decode_bs16_gqa4_bf16", bf16, 16, 8, 2, 128, 4.0f, false, {{8000, 1}, {3001, 1}}, 4096},
      {"window512_long_prefill_bs16_gqa4_bf16", bf16, 16, 4, 1, 128, 2.0f, false, {{2000, 600}}, 512, true},
      {"window1000_long_decode_bs16_gqa8_f16", f16, 16, 8, 1, 128, 4.0f, false, {{6007, 1}}, 1000, true},
      // with RoPE at read time (by slot) and a window (by position)
      {"window30_rope_prefill_bs16_gqa2_f16", f16, 16, 4, 2, 64, 2.0f, true, {{300, 40}, {50, 50}}, 30},
      // head_dim 24: the CPU backend's reference fallback
      {"window6_decode_bs16_gqa2_d24_f32", f32, 16, 4, 2, 24, 2.0f, false, {{20, 1}, {3, 3}}, 6},
  };
}

class AttentionTest : public ::testing::TestWithParam<std::tuple<Backend, Case>> {};

// Split-K (and its merge) only happens with several threads: ask for 4 even on
// a smaller machine, so the long cases always exercise it.
class ThreadsAtLeast {
 public:
  explicit ThreadsAtLeast(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(std::max(n, saved_)); }
  ~ThreadsAtLeast() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

TEST_P(AttentionTest, MatchesDenseAttention) {
  const Backend& backend = std::get<0>(GetParam());
  const Case& c = std::get<1>(GetParam());
  if (backend.isa >= 0 && !HostHasCpuIsa(static_cast<CpuIsa>(backend.isa))) {
    GTEST_SKIP() << "kernel path " << CpuIsaName(static_cast<CpuIsa>(backend.isa)) << " skipped: this CPU lacks it";
  }
  const ScopedCpuIsa isa(backend.isa >= 0 ? static_cast<CpuIsa>(backend.isa) : ActiveCpuIsa());
  ASSERT_TRUE(isa.status().ok()) << isa.status().ToString();
  const ThreadsAtLeast threads(4);
  std::mt19937 rng(1234);
  TestCache cache(c, &rng);
  cache.Fill(&rng);
  const Inputs in = MakeInputs(c, &rng);
  const PagedKV kv = cache.View();
  std::vector<double> want_o, want_slots;
  DenseExpected(c, in, &cache, &want_o, &want_slots);

  std::vector<float> o(in.q.size(), std::nanf(""));
  AttentionParams p = MakeParams(c, in, o.data());
  ASSERT_TRUE(AttentionParamsCheck(kv, p).ok()) << AttentionParamsCheck(kv, p).ToString();
  backend.fn(kv, p);
  EXPECT_EQ(CountMismatches(o, want_o, kAtol, kRtol, "o"), 0);

  // slot_attn is added to what is there; the output must not change with it.
  constexpr float kPrior = 0.5f;
  std::vector<float> slots(static_cast<size_t>(in.total_slots), kPrior), o2(o.size(), std::nanf(""));
  p.o = o2.data();
  p.slot_attn = slots.data();
  p.slot_attn_offsets = in.slot_offsets.data();
  backend.fn(kv, p);
  EXPECT_EQ(CountMismatches(o2, want_o, kAtol, kRtol, "o with slot_attn"), 0);
  std::vector<float> added(slots.size());
  for (size_t t = 0; t < slots.size(); ++t) added[t] = slots[t] - kPrior;
  EXPECT_EQ(CountMismatches(added, want_slots, 1e-6, 1e-4, "slot_attn"), 0);
  for (size_t s = 0; s < in.slot_offsets.size(); ++s) {
    const SeqSpec& seq = c.seqs[s / c.hkv];
    double sum = 0.0;
    for (int t = 0; t < seq.len; ++t) sum += added[in.slot_offsets[s] + t];
    const double expected = static_cast<double>(c.hq / c.hkv) * seq.q_len;
    EXPECT_NEAR(sum, expected, 1e-4 * expected + 1e-6 * seq.len) << "stream " << s;
  }

  // An observation window: only each sequence's last 3 queries count.
  constexpr int kWindow = 3;
  std::vector<double> o_unused, want_window;
  DenseExpected(c, in, &cache, &o_unused, &want_window, kWindow);
  std::vector<float> window(static_cast<size_t>(in.total_slots), 0.0f);
  p.o = o2.data();
  p.slot_attn = window.data();
  p.slot_attn_last_queries = kWindow;
  backend.fn(kv, p);
  EXPECT_EQ(CountMismatches(o2, want_o, kAtol, kRtol, "o with an observation window"), 0);
  EXPECT_EQ(CountMismatches(window, want_window, 1e-6, 1e-4, "slot_attn of the last 3 queries"), 0);
  for (size_t s = 0; s < in.slot_offsets.size(); ++s) {
    const SeqSpec& seq = c.seqs[s / c.hkv];
    double sum = 0.0;
    for (int t = 0; t < seq.len; ++t) sum += window[in.slot_offsets[s] + t];
    const double expected = static_cast<double>(c.hq / c.hkv) * std::min(seq.q_len, kWindow);
    EXPECT_NEAR(sum, expected, 1e-4 * expected + 1e-6 * seq.len) << "stream " << s;
  }
}

std::string CaseName(const ::testing::TestParamInfo<AttentionTest::ParamType>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionTest,
                         ::testing::Combine(::testing::ValuesIn(kBackends), ::testing::ValuesIn(Cases())), CaseName);

TEST(AppendKVTest, WritesLastSlotsOfEachStreamConverted) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Case c{"append", dtype, 4, 4, 2, 32, 1.0f, false, {{9, 3}, {1, 1}, {6, 0}, {12, 12}}};
    std::mt19937 rng(7);
    TestCache cache(c, &rng);
    cache.Fill(&rng);
    const PagedKV kv = cache.View();
    const Inputs in = MakeInputs(c, &rng);
    const int total_q = in.qo_indptr.back();
    std::vector<float> k(static_cast<size_t>(total_q) * c.hkv * c.d), v(k.size());
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    std::vector<std::vector<float>> before_k, before_v;
    for (int s = 0; s < kv.num_streams; ++s) {
      before_k.push_back(cache.Gather(s, false));
      before_v.push_back(cache.Gather(s, true));
    }
    ASSERT_TRUE(AppendKVCheck(kv, in.qo_indptr.data(), static_cast<int>(c.seqs.size()), c.hkv).ok());
    AppendKV(kv, in.qo_indptr.data(), static_cast<int>(c.seqs.size()), c.hkv, k.data(), v.data());
    // Half an ulp of the storage dtype, relative.
    const double rel = dtype == DType::kF32 ? 0.0 : dtype == DType::kF16 ? 1.0 / 2048 : 1.0 / 256;
    std::vector<float> row(static_cast<size_t>(c.d));
    for (int s = 0; s < kv.num_streams; ++s) {
      const SeqSpec& seq = c.seqs[s / c.hkv];
      const std::vector<float> after_k = cache.Gather(s, false), after_v = cache.Gather(s, true);
      for (int t = 0; t < seq.len; ++t) {
        const int j = t - (seq.len - seq.q_len);  // index among the new tokens, < 0 for old slots
        for (int x = 0; x < c.d; ++x) {
          const size_t at = static_cast<size_t>(t) * c.d + x;
          if (j < 0) {
            ASSERT_EQ(after_k[at], before_k[s][at]) << "old key overwritten, stream " << s << " slot " << t;
            ASSERT_EQ(after_v[at], before_v[s][at]) << "old value overwritten, stream " << s << " slot " << t;
            continue;
          }
          const size_t src = (static_cast<size_t>(in.qo_indptr[s / c.hkv] + j) * c.hkv + s % c.hkv) * c.d + x;
          ASSERT_NEAR(after_k[at], k[src], rel * std::abs(k[src])) << "stream " << s << " slot " << t;
          ASSERT_NEAR(after_v[at], v[src], rel * std::abs(v[src])) << "stream " << s << " slot " << t;
        }
        // The same through the cache's own accessors.
        if (j >= 0) {
          ConvertToF32(dtype, kv.KeyPtr(s, t), row.data(), c.d);
          EXPECT_EQ(0, std::memcmp(row.data(), after_k.data() + static_cast<size_t>(t) * c.d, c.d * sizeof(float)));
          ConvertToF32(dtype, kv.ValuePtr(s, t), row.data(), c.d);
          EXPECT_EQ(0, std::memcmp(row.data(), after_v.data() + static_cast<size_t>(t) * c.d, c.d * sizeof(float)));
        }
      }
    }
  }
}

TEST(DenseAttentionTest, AgreesWithPagedReference) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    // One sequence (DenseAttention takes one): a prefill chunk over existing cache, GQA 4.
    const Case c{"dense", dtype, 16, 8, 2, 64, 2.0f, false, {{150, 20}}};
    std::mt19937 rng(99);
    TestCache cache(c, &rng);
    cache.Fill(&rng);
    const Inputs in = MakeInputs(c, &rng);
    const PagedKV kv = cache.View();
    std::vector<float> o(in.q.size());
    PagedAttentionReference(kv, MakeParams(c, in, o.data()));

    const int len = c.seqs[0].len, q_len = c.seqs[0].q_len;
    at::Tensor k = torch::empty({len, c.hkv, c.d}), v = torch::empty({len, c.hkv, c.d});
    for (int h = 0; h < c.hkv; ++h) {
      k.select(1, h).copy_(torch::from_blob(cache.Gather(h, false).data(), {len, c.d}));
      v.select(1, h).copy_(torch::from_blob(cache.Gather(h, true).data(), {len, c.d}));
    }
    const auto torch_dtype = dtype == DType::kBF16 ? torch::kBFloat16 : torch::kFloat32;
    const at::Tensor q = torch::from_blob(const_cast<float*>(in.q.data()), {q_len, c.hq, c.d});
    const at::Tensor dense = DenseAttention(q, k.to(torch_dtype), v.to(torch_dtype),
                                            1.0 / std::sqrt(static_cast<double>(c.d)), /*causal=*/true);
    ASSERT_EQ(dense.sizes(), q.sizes());
    ASSERT_EQ(dense.scalar_type(), torch::kFloat32);
    const at::Tensor flat = dense.contiguous().view({-1});
    const std::vector<float> got(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
    EXPECT_EQ(CountMismatches(got, o, kAtol, kRtol, "dense o"), 0);
  }
}

// Logit soft-capping (AttentionParams::logit_softcap), which only the
// reference kernel computes: against the dense double computation with the
// cap, rotation by slot, a window, GQA and per-slot attention; and the cap
// changes the result (the scores are large enough for tanh to bend them).
TEST(AttentionSoftCapTest, ReferenceCapsScoresBeforeTheSoftmax) {
  const Case c{"softcap", DType::kBF16, 16, 8, 2, 64, 4.0f, true, {{70, 1}, {45, 9}}, 30, true};
  std::mt19937 rng(5);
  TestCache cache(c, &rng);
  cache.Fill(&rng);
  const Inputs in = MakeInputs(c, &rng);
  const PagedKV kv = cache.View();
  const double cap = 2.5;
  std::vector<float> o(in.q.size()), plain(in.q.size()), slot(static_cast<size_t>(in.total_slots), 0.0f);
  AttentionParams p = MakeParams(c, in, o.data());
  p.logit_softcap = static_cast<float>(cap);
  p.slot_attn = slot.data();
  p.slot_attn_offsets = in.slot_offsets.data();
  ASSERT_TRUE(AttentionParamsCheck(kv, p).ok());
  PagedAttentionReference(kv, p);
  std::vector<double> want_o, want_slot;
  DenseExpected(c, in, &cache, &want_o, &want_slot, 0, static_cast<double>(static_cast<float>(cap)));
  EXPECT_EQ(CountMismatches(o, want_o, kAtol, kRtol, "softcap o"), 0);
  EXPECT_EQ(CountMismatches(slot, want_slot, kAtol, kRtol, "softcap slot_attn"), 0);

  PagedAttentionReference(kv, MakeParams(c, in, plain.data()));
  double diff = 0;
  for (size_t i = 0; i < o.size(); ++i) diff = std::max(diff, static_cast<double>(std::abs(o[i] - plain[i])));
  EXPECT_GT(diff, 1e-2) << "the cap left the output unchanged";

  AttentionParams bad = MakeParams(c, in, o.data());
  bad.logit_softcap = -1.0f;
  const Status st = AttentionParamsCheck(kv, bad);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("logit_softcap"), std::string::npos) << st.message();
}

TEST(AttentionParamsCheckTest, RejectsInconsistentCalls) {
  const Case c{"check", DType::kBF16, 16, 8, 2, 64, 1.0f, false, {{20, 4}}};
  std::mt19937 rng(1);
  TestCache cache(c, &rng);
  Inputs in = MakeInputs(c, &rng);
  std::vector<float> o(in.q.size());
  PagedKV kv = cache.View();
  ASSERT_TRUE(AttentionParamsCheck(kv, MakeParams(c, in, o.data())).ok());

  AttentionParams bad = MakeParams(c, in, o.data());
  bad.num_qo_heads = 7;
  EXPECT_FALSE(AttentionParamsCheck(kv, bad).ok());
  bad = MakeParams(c, in, o.data());
  bad.head_dim = 128;
  EXPECT_NE(AttentionParamsCheck(kv, bad).message().find("head_dim"), std::string::npos);
  bad = MakeParams(c, in, o.data());
  bad.num_kv_heads = 1;
  bad.num_qo_heads = 8;
  EXPECT_FALSE(AttentionParamsCheck(kv, bad).ok());  // stream count no longer matches
  bad = MakeParams(c, in, o.data());
  bad.slot_attn = o.data();
  EXPECT_FALSE(AttentionParamsCheck(kv, bad).ok());  // no offsets
  // first_visible past the query's own slot, or decreasing over a sequence's queries.
  std::vector<int32_t> first(static_cast<size_t>(4 * c.hkv), 0);
  bad = MakeParams(c, in, o.data());
  bad.first_visible = first.data();
  EXPECT_TRUE(AttentionParamsCheck(kv, bad).ok());
  first[0] = 17;  // query 0 of 4 in a 20-slot stream sits at slot 16
  EXPECT_NE(AttentionParamsCheck(kv, bad).message().find("first_visible"), std::string::npos);
  first[0] = 3;
  first[static_cast<size_t>(c.hkv)] = 2;
  EXPECT_FALSE(AttentionParamsCheck(kv, bad).ok());
  for (int j = 1; j < 4; ++j) first[static_cast<size_t>(j * c.hkv)] = 3;
  EXPECT_TRUE(AttentionParamsCheck(kv, bad).ok());
  in.qo_indptr[1] = 21;                              // more queries than the stream holds
  in.q.resize(21 * 8 * 64);
  EXPECT_FALSE(AttentionParamsCheck(kv, MakeParams(c, in, o.data())).ok());
  EXPECT_FALSE(AppendKVCheck(kv, in.qo_indptr.data(), 1, c.hkv).ok());
  kv.block_bytes -= 2;
  in.qo_indptr[1] = 4;
  EXPECT_FALSE(AttentionParamsCheck(kv, MakeParams(c, in, o.data())).ok());
}

}  // namespace
}  // namespace kvlab
