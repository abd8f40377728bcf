// Planning of the CPU decode (attention_cpu_plan.h): the jobs, the split-K
// part counts and the workspace layout, shared by the plain and KIVI kernels.
#include "kernels/attention_cpu_plan.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kvlab {
namespace {

constexpr int kMaxTileQueryVecs = 32;  // query vectors per prefill job: K/V reuse from L1 vs scratch size
constexpr int kJobsPerThread = 4;      // for dynamic load balance
constexpr int kMinSlotsPerJob = 256;   // below this, split-K overhead outweighs the parallelism

// Slot-attention jobs: ranges of one stream's slots, each for all its
// queries, so that jobs write disjoint slots; enough of them to give every
// thread kJobsPerThread.
void PlanSlotJobs(const int64_t* stream_len, CpuDecodePlan* plan) {
  const int hkv = plan->shape.num_kv_heads;
  const int num_streams = plan->shape.num_seqs * hkv;
  int64_t total = 0;
  for (int s = 0; s < num_streams; ++s) total += stream_len[s];
  const int64_t chunk =
      std::max<int64_t>(kMinSlotsPerJob, total / (static_cast<int64_t>(plan->threads) * kJobsPerThread));
  for (int s = 0; s < num_streams; ++s) {
    if (plan->qo_indptr[s / hkv + 1] == plan->qo_indptr[s / hkv]) continue;  // no queries, no probabilities
    for (int64_t b = 0; b < std::max<int64_t>(stream_len[s], 1); b += chunk) {
      const int64_t end = b + chunk >= stream_len[s] ? std::numeric_limits<int64_t>::max() : b + chunk;
      plan->slot_jobs.push_back(CpuDecodePlan::SlotJob{s, b, end});
    }
  }
}

}  // namespace

void PlanCpuDecode(const CpuDecodeShape& shape, const int32_t* qo_indptr, const int64_t* stream_len,
                   const int32_t* first_visible, int threads, CpuDecodePlan* plan) {
  CpuDecodePlan& pl = *plan;
  pl.shape = shape;
  pl.group = shape.num_qo_heads / shape.num_kv_heads;
  pl.q_tile = std::max(1, kMaxTileQueryVecs / pl.group);
  pl.threads = threads > 0 ? threads : omp_get_max_threads();
  pl.qo_indptr.assign(qo_indptr, qo_indptr + shape.num_seqs + 1);
  pl.tiles.clear();
  pl.jobs.clear();
  pl.split_tiles.clear();
  pl.slot_jobs.clear();
  pl.workspace_floats = 0;
  const int hkv = shape.num_kv_heads;

  // One job per query tile and stream, over the slots the tile sees (those
  // wholly below its first query's window skipped).
  int64_t total_work = 0;
  for (int i = 0; i < shape.num_seqs; ++i) {
    const int q_len = qo_indptr[i + 1] - qo_indptr[i];
    for (int h = 0; h < hkv; ++h) {
      const int64_t len = stream_len[i * hkv + h];
      for (int q_begin = 0; q_begin < q_len; q_begin += pl.q_tile) {
        const CpuQueryTile t{i, h, q_begin, std::min(pl.q_tile, q_len - q_begin)};
        const int64_t visible = len - q_len + q_begin + t.q_count;
        const int64_t first = first_visible == nullptr ? 0 : first_visible[(qo_indptr[i] + q_begin) * hkv + h];
        const int64_t work = std::max<int64_t>(1, visible - first) * t.q_count * pl.group;
        pl.jobs.push_back(CpuDecodePlan::Job{static_cast<int>(pl.tiles.size()), 0, work});
        pl.tiles.push_back(CpuDecodePlan::Tile{t, 1, 0});
        total_work += work;
      }
    }
  }
  if (pl.jobs.empty()) return;

  // Split-K: enough parts of each tile to give every thread kJobsPerThread
  // jobs' worth of work, none under kMinSlotsPerJob slots.
  const int64_t work_per_job = std::max<int64_t>(1, total_work / (static_cast<int64_t>(pl.threads) * kJobsPerThread));
  const size_t num_tiles = pl.tiles.size();
  for (size_t j = 0; j < num_tiles && pl.threads > 1; ++j) {
    CpuDecodePlan::Tile& tile = pl.tiles[j];
    const int64_t work = pl.jobs[j].work;
    const int64_t span = work / (static_cast<int64_t>(tile.q.q_count) * pl.group);
    const int num_parts =
        static_cast<int>(std::min<int64_t>((work + work_per_job - 1) / work_per_job, span / kMinSlotsPerJob));
    if (num_parts <= 1) continue;
    tile.num_parts = num_parts;
    tile.first_part = pl.workspace_floats;
    pl.workspace_floats += num_parts * pl.RecordFloats(tile);
    pl.split_tiles.push_back(static_cast<int>(j));
    pl.jobs[j].work = work / num_parts;
    for (int k = 1; k < num_parts; ++k) pl.jobs.push_back(CpuDecodePlan::Job{static_cast<int>(j), k, work / num_parts});
  }
  // Largest first, so the dynamic schedule ends with small jobs.
  std::stable_sort(pl.jobs.begin(), pl.jobs.end(),
                   [](const CpuDecodePlan::Job& a, const CpuDecodePlan::Job& b) { return a.work > b.work; });
  PlanSlotJobs(stream_len, &pl);
}

void PlanCpuDecodeLayer(const PagedKV& kv, const EncodedKV* enc, const AttentionParams& p, CpuDecodePlan* plan) {
  static thread_local std::vector<int64_t> len;
  len.resize(static_cast<size_t>(kv.num_streams));
  for (int s = 0; s < kv.num_streams; ++s) {
    len[static_cast<size_t>(s)] = kv.StreamLength(s) + (enc == nullptr ? 0 : enc->StreamTokens(s));
  }
  PlanCpuDecode(CpuDecodeShape{p.num_seqs, p.num_qo_heads, p.num_kv_heads, p.head_dim}, p.qo_indptr, len.data(),
                p.first_visible, 0, plan);
}

Status CpuDecodePlanCheck(const CpuDecodePlan& plan, const AttentionParams& p) {
  const CpuDecodeShape& s = plan.shape;
  auto differs = [](const char* field, int planned, int given) {
    return Status::InvalidArgument("CPU decode plan: " + std::string(field) + " is " + std::to_string(given) +
                                   ", the plan was made for " + std::to_string(planned));
  };
  if (s.num_seqs != p.num_seqs) return differs("num_seqs", s.num_seqs, p.num_seqs);
  if (s.num_qo_heads != p.num_qo_heads) return differs("num_qo_heads", s.num_qo_heads, p.num_qo_heads);
  if (s.num_kv_heads != p.num_kv_heads) return differs("num_kv_heads", s.num_kv_heads, p.num_kv_heads);
  if (s.head_dim != p.head_dim) return differs("head_dim", s.head_dim, p.head_dim);
  if (plan.qo_indptr.size() != static_cast<size_t>(p.num_seqs) + 1 || p.qo_indptr == nullptr) {
    return Status::InvalidArgument("CPU decode plan: qo_indptr missing (was the plan made by PlanCpuDecode?)");
  }
  for (int i = 0; i <= p.num_seqs; ++i) {
    if (plan.qo_indptr[static_cast<size_t>(i)] != p.qo_indptr[i]) {
      return differs(("qo_indptr[" + std::to_string(i) + "]").c_str(), plan.qo_indptr[static_cast<size_t>(i)],
                     p.qo_indptr[i]);
    }
  }
  return Status::OK();
}

}  // namespace kvlab
