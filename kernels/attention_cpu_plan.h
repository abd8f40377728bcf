// The CPU decode plan: FlashInfer's plan/run split for PagedAttentionCpu and
// PagedAttentionKiviCpu. Planning decides, from the step's queries and stream
// lengths, the jobs (stream, query tile, split-K part), where each part's
// partial result goes and the order threads take them; running does one
// layer's arithmetic. The CPU attention backend
// (core/attention/host_backend.cpp) plans once per step and every layer runs
// that plan; the entry points without a plan make one per call.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"
#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"

namespace kvlab {

// What stays fixed over a step's layers (AttentionParams' fields of the same names).
struct CpuDecodeShape {
  int num_seqs = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};

// q_count consecutive queries (from q_begin) of sequence seq times the group
// query heads of kv_head; query vector n is query q_begin + n / group, head
// kv_head * group + n % group. All of a KV head's group share one job, so
// each K/V row a job reads serves every query head that reads it.
struct CpuQueryTile {
  int seq, kv_head, q_begin, q_count;
};

// Plain data; a plan made for one step's queries serves any layer of that
// step: the split is stored as part counts, and each layer cuts its own
// visible slots (window, encoded and plain blocks) into that many parts when
// it runs, so layers shorter or longer than the lengths planned with are
// still covered exactly (only the balance between threads differs).
struct CpuDecodePlan {
  struct Tile {
    CpuQueryTile q;
    int num_parts = 1;       // 1: one job writes o; more: split-K parts merged by log-sum-exp
    int64_t first_part = 0;  // parts > 1: workspace offset (floats) of part 0's record
  };
  struct Job {
    int tile, part;
    int64_t work;  // planned slots times query vectors
  };
  // The slot_attn pass: stream's slots [slot_begin, slot_end), for all its
  // queries (slot_end of a stream's last job: INT64_MAX, whatever its length).
  struct SlotJob {
    int stream;
    int64_t slot_begin, slot_end;
  };

  CpuDecodeShape shape;
  int group = 1;    // num_qo_heads / num_kv_heads
  int q_tile = 1;   // queries per tile
  int threads = 1;  // the team the split was sized for (1: no split)
  std::vector<int32_t> qo_indptr;  // the step's [num_seqs + 1], copied
  std::vector<Tile> tiles;
  std::vector<Job> jobs;         // every (tile, part) once, largest planned work first
  std::vector<int> split_tiles;  // tiles with num_parts > 1, for the merge
  std::vector<SlotJob> slot_jobs;
  // Partial records of the split parts: per part [m(nv), l(nv), acc(nv * head_dim)]
  // for its tile's nv = q_count * group query vectors.
  int64_t workspace_floats = 0;

  int64_t RecordFloats(const Tile& t) const {
    return static_cast<int64_t>(t.q.q_count) * group * (shape.head_dim + 2);
  }
};

// Plans a step (clears and refills *plan, reusing its capacity).
// stream_len[s], s < num_seqs * num_kv_heads: stream s's slots, encoded plus
// plain; when one plan serves every layer, the longest over the layers.
// first_visible: null, or one layer's AttentionParams::first_visible, whose
// skipped slots then do not count as work. threads <= 0: omp_get_max_threads().
// REQUIRES: num_qo_heads a multiple of num_kv_heads > 0; qo_indptr and
// stream_len as AttentionParamsCheck wants them.
void PlanCpuDecode(const CpuDecodeShape& shape, const int32_t* qo_indptr, const int64_t* stream_len,
                   const int32_t* first_visible, int threads, CpuDecodePlan* plan);

// One layer's plan from its own lengths (enc may be null), with omp_get_max_threads() threads.
void PlanCpuDecodeLayer(const PagedKV& kv, const EncodedKV* enc, const AttentionParams& p, CpuDecodePlan* plan);

// OK when `plan` was made for p's queries (shape and qo_indptr), else
// InvalidArgument naming the field. O(num_seqs). The planned entry points
// REQUIRE it and do not check again.
Status CpuDecodePlanCheck(const CpuDecodePlan& plan, const AttentionParams& p);

}  // namespace kvlab
