// The specification of paged attention: plain loops, double accumulation and
// scalar dtype conversion through PagedKV::KeyPtr/ValuePtr. Slow on purpose;
// every other backend is tested against it. Callable from any thread.
#pragma once

#include "core/base/status.h"
#include "kernels/paged_kv.h"

namespace kvlab {

// Checks that `p` describes a valid call on `kv`: shapes agree, pointers are
// set, every block id is non-negative and every stream of a sequence with
// q_len queries holds at least q_len slots (its new tokens are already
// appended). O(num_streams + number of blocks). Returns OK or
// InvalidArgument naming the field and what was expected. Every backend
// REQUIRES this to be OK; none of them checks again.
Status AttentionParamsCheck(const PagedKV& kv, const AttentionParams& p);

// Writes p.o and, when p.slot_attn is set, adds to it (see AttentionParams).
// With p.rope_inv_freq, rotates q and keys in double precision (exact angles).
// REQUIRES: AttentionParamsCheck(kv, p).ok().
void PagedAttentionReference(const PagedKV& kv, const AttentionParams& p);

}  // namespace kvlab
