// Running a CpuDecodePlan (attention_cpu_plan.h): what the plain kernel
// (attention_cpu.cpp) and the KIVI kernel (attention_kivi_cpu.cpp) share
// around their own block loops: the scratch both need, query preparation, a
// planned part as a range of the layer's units, the output write, the split-K
// merge by log-sum-exp and the OpenMP team that runs the jobs.
// Internal to kernels/; everything here is inline.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention_cpu_plan.h"
#include "kernels/attention_cpu_simd.h"
#include "kernels/attention_cpu_tiles.h"

namespace kvlab {
namespace KVLAB_ISA_NS {
namespace cpu_run {

using cpu_simd::Storage;
using cpu_tiles::kNegInf;

inline constexpr float kLog2e = 1.4426950408889634f;

// Grows v to at least n elements (scratch is grown, never shrunk).
template <class T>
void Grow(std::vector<T>* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

// Per-thread buffers both kernels use; each kernel's Scratch adds its own.
struct ScratchBase {
  std::vector<float> q, s, m, l, acc, raw, comb;  // comb: one query vector's merged accumulator
  std::vector<int64_t> limit, first;              // per query vector: last and first visible slot
  // For max_vecs query vectors, tiles of `tile` rows, up to score_vecs vectors per score pass.
  void Reserve(int max_vecs, int d, int tile, int score_vecs) {
    const size_t nv = static_cast<size_t>(max_vecs);
    Grow(&q, nv * d);
    Grow(&s, nv * tile + 8);  // + 8: a full vector may be read past a query's last row
    Grow(&m, nv);
    Grow(&l, nv);
    Grow(&acc, nv * d);
    Grow(&raw, static_cast<size_t>(score_vecs) * tile * 8);
    Grow(&comb, static_cast<size_t>(d));
    Grow(&limit, nv);
    Grow(&first, nv);
  }
};

// The first slot query q (of the tile's sequence) sees in the tile's stream.
inline int64_t FirstVisible(const AttentionParams& p, const CpuQueryTile& t, int q) {
  return p.first_visible == nullptr ? 0 : p.first_visible[(p.qo_indptr[t.seq] + q) * p.num_kv_heads + t.kv_head];
}

// Offset in p.q / p.o of the tile's query vector n.
inline int64_t QoOffset(const AttentionParams& p, int group, const CpuQueryTile& t, int n) {
  const int64_t query = p.qo_indptr[t.seq] + t.q_begin + n / group;
  return (query * p.num_qo_heads + t.kv_head * group + n % group) * p.head_dim;
}

// Copies the tile's query vectors, scaled into log2 units and permuted to the
// lane order of DT's rows, and sets each vector's causal limit (last visible
// slot, also the query's position) and first visible slot, for a stream of
// len slots. Returns the number of slots visible to the tile.
template <DType DT>
int64_t PrepareQueries(const AttentionParams& p, int group, const CpuQueryTile& t, int64_t len, ScratchBase* sc) {
  const float scale = p.sm_scale * kLog2e;
  const int d = p.head_dim;
  const int q_len = p.qo_indptr[t.seq + 1] - p.qo_indptr[t.seq];
  const int nq = t.q_count * group;
  for (int n = 0; n < nq; ++n) {
    const float* src = p.q + QoOffset(p, group, t, n);
    float* dst = sc->q.data() + static_cast<size_t>(n) * d;
    for (int c = 0; c < d; c += 16) {
      for (int i = 0; i < 16; ++i) dst[c + i] = src[c + Storage<DT>::StoredIndex(i)] * scale;
    }
    sc->limit[n] = len - q_len + t.q_begin + n / group;
    sc->first[n] = FirstVisible(p, t, t.q_begin + n / group);
  }
  return len - q_len + t.q_begin + t.q_count;
}

// A stream's units in the order a job reads them: its encoded blocks (G slots
// each, n_enc slots in all) and then its plain blocks (bs slots each). The
// plain kernel's streams have n_enc = 0.
struct UnitGrid {
  int G, bs;
  int64_t n_enc;

  static int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }
  // Units holding the first `visible` slots.
  int UnitsFor(int64_t visible) const {
    if (visible <= n_enc) return CeilDiv(visible, G);
    return static_cast<int>(n_enc / G) + CeilDiv(visible - n_enc, bs);
  }
  // The first slot of unit u.
  int64_t UnitStart(int u) const {
    const int n_eb = static_cast<int>(n_enc / G);
    return u <= n_eb ? static_cast<int64_t>(u) * G : n_enc + static_cast<int64_t>(u - n_eb) * bs;
  }
  // The unit holding slot `slot`.
  int UnitOf(int64_t slot) const {
    if (slot < n_enc) return static_cast<int>(slot / G);
    return static_cast<int>(n_enc / G + (slot - n_enc) / bs);
  }
};

// Units [*begin, *end) of part k of n of a tile that sees slots [first,
// visible) of this layer's stream: cut at unit boundaries near equal slot
// counts from the first unit's start. A part may be empty (its record then
// holds m = -inf, which the merge skips).
inline void PartUnits(const UnitGrid& g, int64_t first, int64_t visible, int k, int n, int* begin, int* end) {
  const int u_first = g.UnitOf(first), u_end = g.UnitsFor(visible);
  const int64_t start = g.UnitStart(u_first), span = visible - start;
  *begin = k == 0 ? u_first : g.UnitOf(start + span * k / n);
  *end = k + 1 == n ? u_end : g.UnitOf(start + span * (k + 1) / n);
}

// o = acc / l, lane order -> head order; lse2 (log2 units, slot_attn's
// normaliser) when non-null.
template <DType DT>
void WriteOutput(const AttentionParams& p, int group, const CpuQueryTile& t, int n, const float* acc, float m, float l,
                 float* lse2) {
  const int64_t off = QoOffset(p, group, t, n);
  float* o = p.o + off;
  const float inv_l = 1.0f / l;
  for (int c = 0; c < p.head_dim; c += 16) {
    for (int i = 0; i < 16; ++i) o[c + Storage<DT>::StoredIndex(i)] = acc[c + i] * inv_l;
  }
  if (lse2 != nullptr) lse2[off / p.head_dim] = m + std::log2(l);
}

// Merges a split tile's partial records [m(nq), l(nq), acc(nq * d)] by log-sum-exp.
template <DType DT>
void CombineSplit(const AttentionParams& p, const CpuDecodePlan& plan, const CpuDecodePlan::Tile& tile,
                  const float* parts, float* acc, float* lse2) {
  const int nq = tile.q.q_count * plan.group, d = p.head_dim;
  const int64_t rec = plan.RecordFloats(tile);
  for (int n = 0; n < nq; ++n) {
    float m = kNegInf;
    for (int k = 0; k < tile.num_parts; ++k) m = std::max(m, parts[tile.first_part + k * rec + n]);
    float l = 0.0f;
    std::fill(acc, acc + d, 0.0f);
    for (int k = 0; k < tile.num_parts; ++k) {
      const float* r = parts + tile.first_part + k * rec;
      if (r[n] == kNegInf) continue;  // this part holds no slot visible to vector n
      const float w = std::exp2(r[n] - m);
      l += w * r[nq + n];
      const float* a = r + 2 * nq + static_cast<int64_t>(n) * d;
      for (int c = 0; c < d; ++c) acc[c] += w * a[c];
    }
    WriteOutput<DT>(p, plan.group, tile.q, n, acc, m, l, lse2);
  }
}

// The calling thread's partial records, kept between calls.
inline float* Workspace(int64_t floats) {
  static thread_local std::vector<float> ws;
  Grow(&ws, static_cast<size_t>(floats));
  return ws.data();
}

// Runs the plan's jobs on a team of up to plan.threads threads, each with its
// own Scratch (a ScratchBase kept between calls):
//   reserve(&scratch)               makes it ready for the plan's tiles;
//   run_job(tile, part, &scratch)   leaves (m, l, acc) of the tile's vectors for the part;
//   slot_job(slot_job, &scratch)    (only with p.slot_attn) after every output and lse2 is written.
// Barriers only where a later step reads an earlier one's results: a thread
// that is descheduled at a barrier stalls the whole call.
template <DType DT, class Scratch, class ReserveFn, class RunJobFn, class SlotJobFn>
void RunPlan(const CpuDecodePlan& plan, const AttentionParams& p, float* lse2, ReserveFn reserve, RunJobFn run_job,
             SlotJobFn slot_job) {
  if (plan.jobs.empty()) return;
  float* parts = Workspace(plan.workspace_floats);
  const bool slots = p.slot_attn != nullptr && !plan.slot_jobs.empty();
  const size_t most = std::max(plan.jobs.size(), slots ? plan.slot_jobs.size() : 0);
  const int team = static_cast<int>(std::min<size_t>(static_cast<size_t>(plan.threads), most));
  const int d = p.head_dim;
#pragma omp parallel num_threads(team)
  {
    static thread_local Scratch sc;
    reserve(&sc);
#pragma omp for schedule(dynamic, 1) nowait
    for (size_t j = 0; j < plan.jobs.size(); ++j) {
      const CpuDecodePlan::Job& job = plan.jobs[j];
      const CpuDecodePlan::Tile& tile = plan.tiles[static_cast<size_t>(job.tile)];
      run_job(tile, job.part, &sc);
      const int nq = tile.q.q_count * plan.group;
      if (tile.num_parts == 1) {
        for (int n = 0; n < nq; ++n) {
          WriteOutput<DT>(p, plan.group, tile.q, n, sc.acc.data() + static_cast<size_t>(n) * d, sc.m[n], sc.l[n],
                          lse2);
        }
      } else {
        float* rec = parts + tile.first_part + job.part * plan.RecordFloats(tile);
        std::copy(sc.m.begin(), sc.m.begin() + nq, rec);
        std::copy(sc.l.begin(), sc.l.begin() + nq, rec + nq);
        std::copy(sc.acc.begin(), sc.acc.begin() + static_cast<size_t>(nq) * d, rec + 2 * nq);
      }
    }
    if (!plan.split_tiles.empty()) {
#pragma omp barrier
#pragma omp for schedule(dynamic, 1) nowait
      for (size_t g = 0; g < plan.split_tiles.size(); ++g) {
        CombineSplit<DT>(p, plan, plan.tiles[static_cast<size_t>(plan.split_tiles[g])], parts, sc.comb.data(), lse2);
      }
    }
    if (slots) {  // needs every query's lse2
#pragma omp barrier
#pragma omp for schedule(dynamic, 1) nowait
      for (size_t j = 0; j < plan.slot_jobs.size(); ++j) slot_job(plan.slot_jobs[j], &sc);
    }
  }
}

}  // namespace cpu_run
}  // namespace KVLAB_ISA_NS
}  // namespace kvlab
