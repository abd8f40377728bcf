// Writes a step's new keys and values into the paged cache, converting fp32 to
// the cache's dtype. Called by the model once per layer after core has
// reserved the slots; it is the only kernel that writes the cache.
#pragma once

#include <cstdint>

#include "core/base/status.h"
#include "kernels/paged_kv.h"

namespace kvlab {

// Checks the arguments of AppendKV: shapes agree and every stream of sequence
// i already holds at least q_len_i slots. Returns OK or InvalidArgument.
Status AppendKVCheck(const PagedKV& kv, const int32_t* qo_indptr, int num_seqs, int num_kv_heads);

// k and v are fp32 [total_q, num_kv_heads, head_dim] with total_q =
// qo_indptr[num_seqs]. Token j of sequence i (of q_len_i) goes to slot
// len - q_len_i + j of stream i * num_kv_heads + h, i.e. the new tokens fill
// the LAST q_len_i slots, which is where attention expects them.
// REQUIRES: AppendKVCheck(kv, qo_indptr, num_seqs, num_kv_heads).ok().
void AppendKV(const PagedKV& kv, const int32_t* qo_indptr, int num_seqs, int num_kv_heads, const float* k,
              const float* v);

}  // namespace kvlab
