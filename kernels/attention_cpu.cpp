// Layout of the work (planned in attention_cpu_plan.h, run by
// attention_cpu_run.h, as for the KIVI kernel): a job is (stream, tile of
// query vectors, range of the stream's blocks). The query vectors of a job are
// all heads of the stream's GQA group for a few consecutive queries, so each
// K/V row a job streams from memory is used by every query head that reads
// it. Rows are processed kTile at a time with an online softmax; jobs that
// cover only part of a stream (split-K, for parallelism) leave (max, sum, acc)
// partials that a second step merges by log-sum-exp.
#include "kernels/attention_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/base/dtype.h"
#include "kernels/attention_cpu_plan.h"
#include "kernels/attention_reference.h"
#include "kernels/paged_kv.h"

// Compiled once per kernel path (kernels/cpu_isa.h); this copy's code is in
// kvlab::KVLAB_ISA_NS and kernels/cpu_dispatch.cpp calls it.
#include "kernels/cpu_isa_begin.h"

#include "kernels/attention_cpu_run.h"
#include "kernels/attention_cpu_simd.h"
#include "kernels/attention_cpu_tiles.h"

namespace kvlab {
namespace KVLAB_ISA_NS {
namespace {

using namespace cpu_simd;   // NOLINT: the vector vocabulary of this file
using namespace cpu_tiles;  // NOLINT: the tile kernels (attention_cpu_tiles.h)
using namespace cpu_run;    // NOLINT: running the plan (attention_cpu_run.h)

constexpr int kTile = 16;               // rows per online-softmax step
constexpr int kMaxScoreVecs = 8;        // query vectors per score pass (8 accumulators in registers)
constexpr int kMaxValueVecs = 4;        // query vectors per value pass
constexpr int kPrefetchBytes = 16384;   // how far ahead of use blocks are prefetched

// ---- RoPE at read time (AttentionParams::rope_inv_freq) ----

constexpr int kRopeSplit = 128;

// cos and sin of t * inv_freq[i] for positions t < max_len, as the complex
// product of a coarse table (t / kRopeSplit) and a fine one (t % kRopeSplit).
// Both come from double-precision recurrences, so building costs no trig per
// position and no angle is ever rounded to fp32 before its cos/sin is taken.
// Stored in the lane order of dtype DT: Rotate works on rows in that order.
class RopeTables {
 public:
  template <DType DT>
  static RopeTables Build(const float* inv_freq, int d, int64_t max_len) {
    RopeTables t;
    t.half_ = d / 2;
    const int64_t num_coarse = max_len / kRopeSplit + 1;
    t.fine_.resize(static_cast<size_t>(2 * kRopeSplit * t.half_));
    t.coarse_.resize(static_cast<size_t>(2 * num_coarse * t.half_));
    for (int i = 0; i < t.half_; ++i) {
      const int lane = (i / 16) * 16 + LaneOf<DT>(i % 16);
      const double theta = inv_freq[i];
      Fill(std::cos(theta), std::sin(theta), kRopeSplit, t.half_, lane, t.fine_.data());
      Fill(std::cos(kRopeSplit * theta), std::sin(kRopeSplit * theta), num_coarse, t.half_, lane, t.coarse_.data());
    }
    return t;
  }

  // Rotates row[2 * half] (fp32, lane order) to position pos in place.
  void Rotate(float* row, int64_t pos) const {
    const float* cc = coarse_.data() + (pos / kRopeSplit) * 2 * half_;
    const float* fc = fine_.data() + (pos % kRopeSplit) * 2 * half_;
    for (int c = 0; c < half_; c += 8) {
      const F8 c0 = Load(cc + c), s0 = Load(cc + half_ + c), c1 = Load(fc + c), s1 = Load(fc + half_ + c);
      const F8 cs = Sub(Mul(c0, c1), Mul(s0, s1)), sn = Fma(s0, c1, Mul(c0, s1));
      const F8 x1 = Load(row + c), x2 = Load(row + half_ + c);
      Store(row + c, Sub(Mul(x1, cs), Mul(x2, sn)));
      Store(row + half_ + c, Fma(x2, cs, Mul(x1, sn)));
    }
  }

 private:
  // The lane at which Load16 puts stored element e (< 16) of a chunk.
  template <DType DT>
  static int LaneOf(int e) {
    int lane = 0;
    while (Storage<DT>::StoredIndex(lane) != e) ++lane;
    return lane;
  }
  // table[k] = (cos, sin) of k * step for k < n, as z_k = z_{k-1} * e^{i step}.
  static void Fill(double step_cos, double step_sin, int64_t n, int half, int lane, float* table) {
    double c = 1.0, s = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      table[k * 2 * half + lane] = static_cast<float>(c);
      table[k * 2 * half + half + lane] = static_cast<float>(s);
      const double next_c = c * step_cos - s * step_sin;
      s = s * step_cos + c * step_sin;
      c = next_c;
    }
  }
  int half_ = 0;
  std::vector<float> coarse_, fine_;  // [position][cos[half], sin[half]]
};

// ---- jobs (the plan: attention_cpu_plan.h; its running: attention_cpu_run.h) ----

struct Shape {
  int d, group, hkv;
  int64_t row_bytes;
  const RopeTables* rope;  // non-null when keys are stored before RoPE
};

struct Scratch : ScratchBase {
  std::vector<float> lse2, keys;  // keys: a tile's rotated keys (RoPE only)
  void Reserve(int max_vecs, int d) {
    ScratchBase::Reserve(max_vecs, d, kTile, kMaxScoreVecs);
    Grow(&lse2, static_cast<size_t>(max_vecs));
    Grow(&keys, static_cast<size_t>(kTile) * d);
  }
};

// PrepareQueries (attention_cpu_run.h), the queries then rotated to their
// positions when keys are stored before RoPE.
template <DType DT>
int64_t PrepareTile(const PagedKV& kv, const AttentionParams& p, const Shape& sh, const CpuQueryTile& t, Scratch* sc) {
  const int64_t visible = PrepareQueries<DT>(p, sh.group, t, kv.StreamLength(t.seq * sh.hkv + t.kv_head), sc);
  for (int n = 0; sh.rope != nullptr && n < t.q_count * sh.group; ++n) {
    sh.rope->Rotate(sc->q.data() + static_cast<size_t>(n) * sh.d, sc->limit[n]);
  }
  return visible;
}

inline const uint8_t* BlockBase(const PagedKV& kv, int stream, int blk) {
  return kv.base + static_cast<int64_t>(kv.indices[kv.indptr[stream] + blk]) * kv.block_bytes;
}

// sc->s[n * kTile + r] = score of query vector n against the tile's key r for
// all nq prepared vectors. With RoPE the keys are first converted and rotated to
// their positions in sc->keys (fp32, lane order), then scored as fp32 rows.
template <DType DT>
void ScoreKeys(const Shape& sh, int nq, const uint8_t* k, int nrows, int64_t slot0, Scratch* sc, PrefetchStream* pf) {
  const int d = sh.d;
  for (int n0 = 0; n0 < nq; n0 += kMaxScoreVecs) {
    float* s = sc->s.data() + n0 * kTile;
    const float* q = sc->q.data() + static_cast<size_t>(n0) * d;
    const int n = std::min(kMaxScoreVecs, nq - n0);
    if (sh.rope == nullptr) {
      ScoreTileAny<kTile, PlainRows<DT>>(n, q, d, k, sh.row_bytes, nrows, s, sc->raw.data(), pf);
      continue;
    }
    if (n0 == 0) {
      for (int r = 0; r < nrows; ++r) {
        float* row = sc->keys.data() + static_cast<size_t>(r) * d;
        for (int c = 0; c < d; c += 16) {
          F8 lo, hi;
          Storage<DT>::Load16(k + r * sh.row_bytes + c * Storage<DT>::kBytes, &lo, &hi);
          Store(row + c, lo);
          Store(row + c + 8, hi);
        }
        sh.rope->Rotate(row, slot0 + r);
      }
    }
    const uint8_t* keys = reinterpret_cast<const uint8_t*>(sc->keys.data());
    ScoreTileAny<kTile, PlainRows<DType::kF32>>(n, q, d, keys, static_cast<int64_t>(d) * 4, nrows, s, sc->raw.data(),
                                                pf);
  }
}

// Runs part `part` of a planned tile over its blocks, leaving unnormalised
// (m, l, acc) in `sc`.
template <DType DT>
void RunJob(const PagedKV& kv, const AttentionParams& p, const Shape& sh, const CpuDecodePlan::Tile& tile, int part,
            Scratch* sc) {
  const CpuQueryTile& t = tile.q;
  const int nq = t.q_count * sh.group;
  const int d = sh.d, bs = kv.block_size;
  const int stream = t.seq * sh.hkv + t.kv_head;
  const int64_t visible = PrepareTile<DT>(kv, p, sh, t, sc);
  int blk_begin, blk_end;
  PartUnits(UnitGrid{bs, bs, 0}, FirstVisible(p, t, t.q_begin), visible, part, tile.num_parts, &blk_begin, &blk_end);
  std::fill(sc->m.begin(), sc->m.begin() + nq, kNegInf);
  std::fill(sc->l.begin(), sc->l.begin() + nq, 0.0f);
  std::fill(sc->acc.begin(), sc->acc.begin() + static_cast<size_t>(nq) * d, 0.0f);
  const int ahead = std::max<int>(1, static_cast<int>(kPrefetchBytes / kv.block_bytes));
  const int64_t block_bytes = 2 * bs * sh.row_bytes;
  PrefetchStream pf;
  for (int b = blk_begin + 1; b < std::min(blk_end, blk_begin + ahead); ++b) {
    pf.NextBlock(BlockBase(kv, stream, b), block_bytes);
  }
  for (int blk = blk_begin; blk < blk_end; ++blk) {
    pf.NextBlock(blk + ahead < blk_end ? BlockBase(kv, stream, blk + ahead) : nullptr, block_bytes);
    const uint8_t* kb = BlockBase(kv, stream, blk);
    const int rows = static_cast<int>(std::min<int64_t>(bs, visible - static_cast<int64_t>(blk) * bs));
    for (int t0 = 0; t0 < rows; t0 += kTile) {
      const int nrows = std::min(kTile, rows - t0);
      const int64_t slot0 = static_cast<int64_t>(blk) * bs + t0;
      const uint8_t* kp = kb + t0 * sh.row_bytes;
      const uint8_t* vp = kb + (bs + t0) * sh.row_bytes;
      ScoreKeys<DT>(sh, nq, kp, nrows, slot0, sc, &pf);
      SoftmaxTile<kTile>(nq, nrows, slot0, sc->limit.data(), d, sc->s.data(), sc->m.data(), sc->l.data(),
                         sc->acc.data(), nullptr, 0, sc->first.data());
      for (int n0 = 0; n0 < nq; n0 += kMaxValueVecs) {
        AccumulateTileAny<PlainRows<DT>, false>(std::min(kMaxValueVecs, nq - n0), sc->s.data() + n0 * kTile, kTile, 1,
                                                d, vp, sh.row_bytes, nrows, d,
                                                sc->acc.data() + static_cast<size_t>(n0) * d, ValueEpilogue{}, &pf);
      }
    }
  }
}

inline int BlocksFor(int64_t slots, int bs) { return static_cast<int>((slots + bs - 1) / bs); }

// slot_attn pass for one planned range of a stream's slots (its blocks from
// the first that starts in it): recomputes each visible score and adds its
// normalised probability, summed over the sequence's query vectors of the
// stream. Jobs of one stream own disjoint blocks, so no races.
template <DType DT>
void SlotAttnJob(const PagedKV& kv, const AttentionParams& p, const CpuDecodePlan& plan, const Shape& sh,
                 const CpuDecodePlan::SlotJob& job, const float* lse2, Scratch* sc) {
  const int seq = job.stream / sh.hkv, kv_head = job.stream % sh.hkv;
  const int q_len = p.qo_indptr[seq + 1] - p.qo_indptr[seq];
  const int bs = kv.block_size, d = sh.d;
  const int blk_begin = BlocksFor(job.slot_begin, bs);
  const int blk_end = static_cast<int>(
      std::min<int64_t>(BlocksFor(kv.StreamLength(job.stream), bs), job.slot_end / bs + (job.slot_end % bs != 0)));
  float* out = p.slot_attn + p.slot_attn_offsets[job.stream];
  PrefetchStream no_prefetch;
  const int q_first = p.slot_attn_last_queries > 0 ? std::max(0, q_len - p.slot_attn_last_queries) : 0;
  for (int q_begin = q_first; q_begin < q_len && blk_begin < blk_end; q_begin += plan.q_tile) {
    const CpuQueryTile t{seq, kv_head, q_begin, std::min(plan.q_tile, q_len - q_begin)};
    const int nq = t.q_count * sh.group;
    const int64_t visible = PrepareTile<DT>(kv, p, sh, t, sc);
    for (int n = 0; n < nq; ++n) sc->lse2[n] = lse2[QoOffset(p, sh.group, t, n) / d];
    for (int blk = blk_begin; blk < blk_end; ++blk) {
      const int rows = static_cast<int>(std::min<int64_t>(bs, visible - static_cast<int64_t>(blk) * bs));
      const uint8_t* kb = BlockBase(kv, job.stream, blk);
      for (int t0 = 0; t0 < rows; t0 += kTile) {
        const int nrows = std::min(kTile, rows - t0);
        const int64_t slot0 = static_cast<int64_t>(blk) * bs + t0;
        ScoreKeys<DT>(sh, nq, kb + t0 * sh.row_bytes, nrows, slot0, sc, &no_prefetch);
        F8 sum_a = Zero(), sum_b = Zero();
        for (int n = 0; n < nq; ++n) {
          float* s_n = sc->s.data() + n * kTile;
          MaskTile<kTile>(s_n, slot0, sc->limit[n], nrows, sc->first[n]);
          const F8 lse = Set1(sc->lse2[n]);
          sum_a = Add(sum_a, Exp2(Sub(Load(s_n), lse)));
          sum_b = Add(sum_b, Exp2(Sub(Load(s_n + 8), lse)));
        }
        float sums[kTile];
        Store(sums, sum_a);
        Store(sums + 8, sum_b);
        for (int r = 0; r < nrows; ++r) out[slot0 + r] += sums[r];
      }
    }
  }
}

template <DType DT>
void Run(const PagedKV& kv, const AttentionParams& p, const CpuDecodePlan& plan) {
  Shape sh;
  sh.d = p.head_dim;
  sh.group = plan.group;
  sh.hkv = p.num_kv_heads;
  sh.row_bytes = static_cast<int64_t>(sh.d) * Storage<DT>::kBytes;
  sh.rope = nullptr;
  if (plan.jobs.empty()) return;
  RopeTables rope;  // per layer: layers may rotate by different frequencies
  if (p.rope_inv_freq != nullptr) {
    int64_t max_len = 0;
    for (int s = 0; s < kv.num_streams; ++s) max_len = std::max(max_len, kv.StreamLength(s));
    rope = RopeTables::Build<DT>(p.rope_inv_freq, sh.d, max_len);
    sh.rope = &rope;
  }
  std::vector<float> lse2;
  if (p.slot_attn != nullptr) lse2.resize(static_cast<size_t>(p.qo_indptr[p.num_seqs]) * p.num_qo_heads);
  float* lse2_ptr = lse2.empty() ? nullptr : lse2.data();
  const int max_vecs = plan.q_tile * plan.group;
  RunPlan<DT, Scratch>(
      plan, p, lse2_ptr, [&](Scratch* sc) { sc->Reserve(max_vecs, sh.d); },
      [&](const CpuDecodePlan::Tile& tile, int part, Scratch* sc) { RunJob<DT>(kv, p, sh, tile, part, sc); },
      [&](const CpuDecodePlan::SlotJob& job, Scratch* sc) { SlotAttnJob<DT>(kv, p, plan, sh, job, lse2_ptr, sc); });
}

}  // namespace

void PagedAttentionCpu(const PagedKV& kv, const AttentionParams& p, const CpuDecodePlan& plan) {
  // RoPE pairs dims i and i + d/2: both halves must be whole 16-element chunks.
  if (p.head_dim % 16 != 0 || (p.rope_inv_freq != nullptr && p.head_dim % 32 != 0)) {
    PagedAttentionReference(kv, p);
    return;
  }
  switch (kv.dtype) {
    case DType::kF32: return Run<DType::kF32>(kv, p, plan);
    case DType::kF16: return Run<DType::kF16>(kv, p, plan);
    case DType::kBF16: return Run<DType::kBF16>(kv, p, plan);
  }
}

void PagedAttentionCpu(const PagedKV& kv, const AttentionParams& p) {
  static thread_local CpuDecodePlan plan;  // reused: no allocation per call once grown
  PlanCpuDecodeLayer(kv, nullptr, p, &plan);
  KVLAB_ISA_NS::PagedAttentionCpu(kv, p, plan);  // qualified: ADL also finds kvlab::PagedAttentionCpu
}

}  // namespace KVLAB_ISA_NS
}  // namespace kvlab

#include "kernels/cpu_isa_end.h"
