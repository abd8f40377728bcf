// Page scores for query-aware page selection (Quest, policies/quest.cpp): the
// upper bound of q.k over each page from its keys' channel-wise min and max,
// per query head, combined over the heads of a GQA group. Called by the read
// policy once per stream and decode step; torch-free, host memory.
//
// Compiled once per CPU path (kernels/cpu_isa.h). Every path computes the
// same bits: each head's sum runs in 16 lanes (channel c in lane c % 16, in
// channel order), the lanes are added by a fixed tree (j + 8, j + 4, j + 2,
// j + 1), then the channels past the last multiple of 16 in order; the
// heads combine in head order. So the pages chosen never depend on the path
// (or KVLAB_ISA).
#pragma once

#include <cstdint>

#include "core/base/dtype.h"

namespace kvlab {

struct PageBoundsArgs {
  const float* queries = nullptr;  // [num_queries][head_dim]
  int num_queries = 0;
  int head_dim = 0;
  const void* key_min = nullptr;   // [num_pages][head_dim] in dtype: each page's smallest key, per channel
  const void* key_max = nullptr;   // [num_pages][head_dim] in dtype: its largest
  DType dtype = DType::kF32;
  int64_t num_pages = 0;
  bool sum_heads = false;          // combine the heads' bounds by their sum (else their max)
};

// scores[b] = combine over heads h of sum_c max(q[h][c] * min[b][c], q[h][c] * max[b][c])
// for each page b in [0, num_pages). REQUIRES: num_queries >= 1, head_dim >= 1,
// scores holds num_pages floats.
void PageBoundScores(const PageBoundsArgs& a, float* scores);

}  // namespace kvlab
