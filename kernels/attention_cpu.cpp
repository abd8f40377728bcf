// Layout of the work: a job is (stream, tile of up to kMaxTileQueryVecs query
// vectors, range of the stream's blocks). The query vectors of a job are all
// heads of the stream's GQA group for a few consecutive queries, so each K/V
// row a job streams from memory is used by every query head that reads it.
// Rows are processed kTile at a time with an online softmax; jobs that cover
// only part of a stream (split-K, for parallelism) leave (max, sum, acc)
// partials that a second step merges by log-sum-exp.
#include "kernels/attention_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention_cpu_simd.h"
#include "kernels/attention_cpu_tiles.h"
#include "kernels/attention_reference.h"

namespace kvlab {
namespace {

using namespace cpu_simd;   // NOLINT: the vector vocabulary of this file
using namespace cpu_tiles;  // NOLINT: the tile kernels (attention_cpu_tiles.h)

constexpr int kTile = 16;               // rows per online-softmax step
constexpr int kMaxScoreVecs = 8;        // query vectors per score pass (8 accumulators in registers)
constexpr int kMaxValueVecs = 4;        // query vectors per value pass
constexpr int kMaxTileQueryVecs = 32;   // query vectors per prefill job: K/V reuse from L1 vs scratch size
constexpr int kJobsPerThread = 4;       // for dynamic load balance
constexpr int kMinSlotsPerJob = 256;    // below this, split-K overhead outweighs the parallelism
constexpr int kPrefetchBytes = 16384;   // how far ahead of use blocks are prefetched
constexpr float kLog2e = 1.4426950408889634f;

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

// ---- jobs ----

struct Shape {
  int d, group, hq, hkv, q_tile;  // q_tile: queries per job
  int64_t row_bytes;
  const RopeTables* rope;  // non-null when keys are stored before RoPE
};

// A job's queries: q_count consecutive queries of sequence `seq` times the
// `group` query heads of kv_head; vector n = query (n / group), head (n % group).
struct QueryTile {
  int seq, kv_head, q_begin, q_count;
};

struct Job {
  QueryTile t;
  int blk_begin, blk_end;
  int64_t part;  // offset of this job's partial record, or -1 when it covers every visible block
  int64_t work;
};

struct SplitGroup {
  QueryTile t;
  int64_t first_part;
  int num_parts;
};

struct SlotJob {
  int stream, blk_begin, blk_end;
};

struct Scratch {
  std::vector<float> q, s, m, l, acc, lse2, keys;  // keys: a tile's rotated keys (RoPE only)
  std::vector<int64_t> limit, first;  // per query vector: last and first visible slot
  std::vector<float> raw = std::vector<float>(kMaxScoreVecs * kTile * 8);  // ScoreTile's partial sums
  explicit Scratch(int max_vecs, int d)
      : q(static_cast<size_t>(max_vecs) * d), s(static_cast<size_t>(max_vecs) * kTile), m(max_vecs), l(max_vecs),
        acc(static_cast<size_t>(max_vecs) * d), lse2(max_vecs), keys(static_cast<size_t>(kTile) * d),
        limit(max_vecs), first(max_vecs, 0) {}
};

// The first slot query q of sequence seq sees in its kv_head's stream.
inline int64_t FirstVisible(const AttentionParams& p, int seq, int kv_head, int q) {
  return p.first_visible == nullptr ? 0 : p.first_visible[(p.qo_indptr[seq] + q) * p.num_kv_heads + kv_head];
}

inline int64_t QoOffset(const AttentionParams& p, const Shape& sh, const QueryTile& t, int n) {
  const int64_t query = p.qo_indptr[t.seq] + t.q_begin + n / sh.group;
  return (query * sh.hq + t.kv_head * sh.group + n % sh.group) * sh.d;
}

// Copies the tile's query vectors, scaled into log2 units and permuted to the
// storage lane order, and sets each vector's causal limit (last visible slot)
// and first visible slot. Returns the number of slots visible to the tile.
template <DType DT>
int64_t PrepareQueries(const PagedKV& kv, const AttentionParams& p, const Shape& sh, const QueryTile& t,
                       Scratch* sc) {
  const float scale = p.sm_scale * kLog2e;
  const int q_len = p.qo_indptr[t.seq + 1] - p.qo_indptr[t.seq];
  const int64_t len = kv.StreamLength(t.seq * sh.hkv + t.kv_head);
  const int nq = t.q_count * sh.group;
  for (int n = 0; n < nq; ++n) {
    const float* src = p.q + QoOffset(p, sh, t, n);
    float* dst = sc->q.data() + static_cast<size_t>(n) * sh.d;
    for (int c = 0; c < sh.d; c += 16) {
      for (int i = 0; i < 16; ++i) dst[c + i] = src[c + Storage<DT>::StoredIndex(i)] * scale;
    }
    sc->limit[n] = len - q_len + t.q_begin + n / sh.group;  // also the query's position
    sc->first[n] = FirstVisible(p, t.seq, t.kv_head, t.q_begin + n / sh.group);
    if (sh.rope != nullptr) sh.rope->Rotate(dst, sc->limit[n]);
  }
  return len - q_len + t.q_begin + t.q_count;
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

// Runs one job over its blocks, leaving unnormalised (m, l, acc) in `sc`.
template <DType DT>
void RunJob(const PagedKV& kv, const AttentionParams& p, const Shape& sh, const Job& job, Scratch* sc) {
  const int nq = job.t.q_count * sh.group;
  const int d = sh.d, bs = kv.block_size;
  const int stream = job.t.seq * sh.hkv + job.t.kv_head;
  const int64_t visible = PrepareQueries<DT>(kv, p, sh, job.t, sc);
  std::fill(sc->m.begin(), sc->m.begin() + nq, kNegInf);
  std::fill(sc->l.begin(), sc->l.begin() + nq, 0.0f);
  std::fill(sc->acc.begin(), sc->acc.begin() + static_cast<size_t>(nq) * d, 0.0f);
  const int ahead = std::max<int>(1, static_cast<int>(kPrefetchBytes / kv.block_bytes));
  const int64_t block_bytes = 2 * bs * sh.row_bytes;
  PrefetchStream pf;
  for (int b = job.blk_begin + 1; b < std::min(job.blk_end, job.blk_begin + ahead); ++b) {
    pf.NextBlock(BlockBase(kv, stream, b), block_bytes);
  }
  for (int blk = job.blk_begin; blk < job.blk_end; ++blk) {
    pf.NextBlock(blk + ahead < job.blk_end ? BlockBase(kv, stream, blk + ahead) : nullptr, block_bytes);
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

// o = acc / l in storage order -> head order; lse2 (log2 units) kept for slot_attn.
template <DType DT>
void WriteOutput(const AttentionParams& p, const Shape& sh, const QueryTile& t, int n, const float* acc, float m,
                 float l, float* lse2) {
  const int64_t off = QoOffset(p, sh, t, n);
  float* o = p.o + off;
  const float inv_l = 1.0f / l;
  for (int c = 0; c < sh.d; c += 16) {
    for (int i = 0; i < 16; ++i) o[c + Storage<DT>::StoredIndex(i)] = acc[c + i] * inv_l;
  }
  if (lse2 != nullptr) lse2[off / sh.d] = m + std::log2(l);
}

// Merges a split group's partial records [m(nq), l(nq), acc(nq * d)] by log-sum-exp.
template <DType DT>
void CombineSplit(const AttentionParams& p, const Shape& sh, const SplitGroup& g, const float* parts,
                  std::vector<float>* acc, float* lse2) {
  const int nq = g.t.q_count * sh.group;
  const int64_t rec = static_cast<int64_t>(nq) * (sh.d + 2);
  acc->resize(static_cast<size_t>(sh.d));
  for (int n = 0; n < nq; ++n) {
    float m = kNegInf;
    for (int k = 0; k < g.num_parts; ++k) m = std::max(m, parts[g.first_part + k * rec + n]);
    float l = 0.0f;
    std::fill(acc->begin(), acc->end(), 0.0f);
    for (int k = 0; k < g.num_parts; ++k) {
      const float* r = parts + g.first_part + k * rec;
      if (r[n] == kNegInf) continue;  // this part holds no slot visible to vector n
      const float w = std::exp2(r[n] - m);
      l += w * r[nq + n];
      const float* a = r + 2 * nq + static_cast<int64_t>(n) * sh.d;
      for (int c = 0; c < sh.d; ++c) (*acc)[c] += w * a[c];
    }
    WriteOutput<DT>(p, sh, g.t, n, acc->data(), m, l, lse2);
  }
}

// slot_attn pass for one range of a stream's blocks: recomputes each visible
// score and adds its normalised probability, summed over the sequence's query
// vectors of the stream. Jobs of one stream own disjoint slots, so no races.
template <DType DT>
void SlotAttnJob(const PagedKV& kv, const AttentionParams& p, const Shape& sh, int seq, int kv_head, int blk_begin,
                 int blk_end, const float* lse2, Scratch* sc) {
  const int q_len = p.qo_indptr[seq + 1] - p.qo_indptr[seq];
  const int stream = seq * sh.hkv + kv_head;
  const int bs = kv.block_size, d = sh.d;
  float* out = p.slot_attn + p.slot_attn_offsets[stream];
  PrefetchStream no_prefetch;
  for (int q_begin = 0; q_begin < q_len; q_begin += sh.q_tile) {
    const QueryTile t{seq, kv_head, q_begin, std::min(sh.q_tile, q_len - q_begin)};
    const int nq = t.q_count * sh.group;
    const int64_t visible = PrepareQueries<DT>(kv, p, sh, t, sc);
    for (int n = 0; n < nq; ++n) sc->lse2[n] = lse2[QoOffset(p, sh, t, n) / d];
    for (int blk = blk_begin; blk < blk_end; ++blk) {
      const int rows = static_cast<int>(std::min<int64_t>(bs, visible - static_cast<int64_t>(blk) * bs));
      const uint8_t* kb = BlockBase(kv, stream, blk);
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

inline int BlocksFor(int64_t slots, int bs) { return static_cast<int>((slots + bs - 1) / bs); }

template <DType DT>
void Run(const PagedKV& kv, const AttentionParams& p) {
  Shape sh;
  sh.d = p.head_dim;
  sh.hq = p.num_qo_heads;
  sh.hkv = p.num_kv_heads;
  sh.group = sh.hq / sh.hkv;
  sh.q_tile = std::max(1, kMaxTileQueryVecs / sh.group);
  sh.row_bytes = static_cast<int64_t>(sh.d) * Storage<DT>::kBytes;
  sh.rope = nullptr;
  const int bs = kv.block_size;
  const int threads = omp_get_max_threads();

  // Plan: one job per query tile and stream, split over the stream's blocks
  // when that is needed to give every thread kJobsPerThread jobs' worth of work.
  std::vector<Job> jobs;
  int64_t total_work = 0;
  for (int i = 0; i < p.num_seqs; ++i) {
    const int q_len = p.qo_indptr[i + 1] - p.qo_indptr[i];
    for (int h = 0; h < sh.hkv; ++h) {
      const int64_t len = kv.StreamLength(i * sh.hkv + h);
      for (int q_begin = 0; q_begin < q_len; q_begin += sh.q_tile) {
        const QueryTile t{i, h, q_begin, std::min(sh.q_tile, q_len - q_begin)};
        const int blocks = BlocksFor(len - q_len + q_begin + t.q_count, bs);
        // Blocks wholly below the tile's first query's window are skipped.
        const int first_blk = static_cast<int>(FirstVisible(p, i, h, q_begin) / bs);
        const int64_t work = static_cast<int64_t>(blocks - first_blk) * t.q_count * sh.group;
        jobs.push_back(Job{t, first_blk, blocks, -1, work});
        total_work += work;
      }
    }
  }
  if (jobs.empty()) return;
  RopeTables rope;
  if (p.rope_inv_freq != nullptr) {
    int64_t max_len = 0;
    for (int s = 0; s < kv.num_streams; ++s) max_len = std::max(max_len, kv.StreamLength(s));
    rope = RopeTables::Build<DT>(p.rope_inv_freq, sh.d, max_len);
    sh.rope = &rope;
  }
  const int64_t work_per_job = std::max<int64_t>(1, total_work / (static_cast<int64_t>(threads) * kJobsPerThread));
  const int min_blocks = std::max(1, kMinSlotsPerJob / bs);
  std::vector<SplitGroup> splits;
  int64_t parts_floats = 0;
  const size_t num_tiles = jobs.size();
  for (size_t j = 0; j < num_tiles; ++j) {
    const Job whole = jobs[j];
    const int blocks = whole.blk_end - whole.blk_begin;
    const int num_parts = static_cast<int>(
        std::min<int64_t>((whole.work + work_per_job - 1) / work_per_job, blocks / min_blocks));
    if (threads == 1 || num_parts <= 1) continue;
    const int nq = whole.t.q_count * sh.group;
    const int64_t rec = static_cast<int64_t>(nq) * (sh.d + 2);
    splits.push_back(SplitGroup{whole.t, parts_floats, num_parts});
    for (int k = 0; k < num_parts; ++k) {
      Job part = whole;
      part.blk_begin = whole.blk_begin + static_cast<int>(static_cast<int64_t>(blocks) * k / num_parts);
      part.blk_end = whole.blk_begin + static_cast<int>(static_cast<int64_t>(blocks) * (k + 1) / num_parts);
      part.part = parts_floats + k * rec;
      part.work = static_cast<int64_t>(part.blk_end - part.blk_begin) * nq;
      if (k == 0) {
        jobs[j] = part;
      } else {
        jobs.push_back(part);
      }
    }
    parts_floats += num_parts * rec;
  }
  // Largest first, so the dynamic schedule ends with small jobs.
  std::stable_sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.work > b.work; });

  std::vector<float> parts(static_cast<size_t>(parts_floats));
  std::vector<float> lse2;
  if (p.slot_attn != nullptr) lse2.resize(static_cast<size_t>(p.qo_indptr[p.num_seqs]) * sh.hq);
  float* lse2_ptr = lse2.empty() ? nullptr : lse2.data();
  // slot_attn jobs: ranges of one stream's blocks, each for all its queries,
  // so that jobs write disjoint slots.
  std::vector<SlotJob> slot_jobs;
  if (p.slot_attn != nullptr) {
    int64_t total_blocks = 0;
    for (int s = 0; s < kv.num_streams; ++s) total_blocks += BlocksFor(kv.StreamLength(s), bs);
    const int chunk = static_cast<int>(std::max<int64_t>(
        min_blocks, total_blocks / (static_cast<int64_t>(threads) * kJobsPerThread)));
    for (int s = 0; s < kv.num_streams; ++s) {
      const int seq = s / sh.hkv;
      if (p.qo_indptr[seq + 1] == p.qo_indptr[seq]) continue;
      const int blocks = BlocksFor(kv.StreamLength(s), bs);
      for (int b = 0; b < blocks; b += chunk) slot_jobs.push_back(SlotJob{s, b, std::min(blocks, b + chunk)});
    }
  }
  const int max_vecs = sh.q_tile * sh.group;

  // Barriers only where a later step reads an earlier one's results: a thread
  // that is descheduled at a barrier stalls the whole call.
  const int team = static_cast<int>(std::min<size_t>(threads, std::max(jobs.size(), slot_jobs.size())));
#pragma omp parallel num_threads(team)
  {
    Scratch sc(max_vecs, sh.d);
#pragma omp for schedule(dynamic, 1) nowait
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Job& job = jobs[j];
      RunJob<DT>(kv, p, sh, job, &sc);
      const int nq = job.t.q_count * sh.group;
      if (job.part < 0) {
        for (int n = 0; n < nq; ++n) {
          WriteOutput<DT>(p, sh, job.t, n, sc.acc.data() + static_cast<size_t>(n) * sh.d, sc.m[n], sc.l[n], lse2_ptr);
        }
      } else {
        float* rec = parts.data() + job.part;
        std::copy(sc.m.begin(), sc.m.begin() + nq, rec);
        std::copy(sc.l.begin(), sc.l.begin() + nq, rec + nq);
        std::copy(sc.acc.begin(), sc.acc.begin() + static_cast<size_t>(nq) * sh.d, rec + 2 * nq);
      }
    }
    if (!splits.empty()) {
#pragma omp barrier
      std::vector<float> acc;
#pragma omp for schedule(dynamic, 1) nowait
      for (size_t g = 0; g < splits.size(); ++g) CombineSplit<DT>(p, sh, splits[g], parts.data(), &acc, lse2_ptr);
    }
    if (!slot_jobs.empty()) {  // needs every query's lse2
#pragma omp barrier
#pragma omp for schedule(dynamic, 1) nowait
      for (size_t j = 0; j < slot_jobs.size(); ++j) {
        const SlotJob& sj = slot_jobs[j];
        SlotAttnJob<DT>(kv, p, sh, sj.stream / sh.hkv, sj.stream % sh.hkv, sj.blk_begin, sj.blk_end, lse2_ptr, &sc);
      }
    }
  }
}

}  // namespace

void PagedAttentionCpu(const PagedKV& kv, const AttentionParams& p) {
  // RoPE pairs dims i and i + d/2: both halves must be whole 16-element chunks.
  if (p.head_dim % 16 != 0 || (p.rope_inv_freq != nullptr && p.head_dim % 32 != 0)) {
    PagedAttentionReference(kv, p);
    return;
  }
  switch (kv.dtype) {
    case DType::kF32: return Run<DType::kF32>(kv, p);
    case DType::kF16: return Run<DType::kF16>(kv, p);
    case DType::kBF16: return Run<DType::kBF16>(kv, p);
  }
}

}  // namespace kvlab
