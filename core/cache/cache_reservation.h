// Pool reservations that follow the policy stack: how many plain and encoded
// blocks a cache reserves for max_seqs sequences of up to max_context tokens,
// given what the stack can hold, and why. The engine sizes its pools with
// ReservePools; `kvlab memory` and the tests compare against it.
//
// The rules, per stream (one (sequence, layer, stored KV head)):
//   slots    the most slots a stream holds during a step: the selection
//            policy's KeptSlotsBound(max_context) plus the tokens of one step
//            (step_tokens), at most max_context; on a sliding-window layer at
//            most window + block_size + step_tokens (whole leading blocks out
//            of the window are freed).
//   plain    ceil(slots / block_size) blocks; with a sealed encoding only
//            the residual, the group being filled and one step's tokens stay
//            plain: at most ceil((residual + tokens_per_block - 1 +
//            step_tokens) / block_size) blocks (compaction never decodes a
//            sealed group back to plain).
//   encoded  with an encoding and no selection, ceil((slots - residual) /
//            tokens_per_block) groups (sealing keeps the residual plain);
//            under a selection rule with R runs of kept slots (KVPolicy::
//            KeptRunsBound) ceil(slots / tokens_per_block) + R, since a
//            sealed group stays whole while it keeps a slot; for a rule by
//            score (R = 0) one group a slot; never more than the context's.
// Placement (offload) replaces the device side: the resident budget
// (device_budget_bytes over the block bytes) plus the open tail block of
// every stream, one step's new blocks for every stream, and two staging
// sets of one layer's offloaded blocks (KVCache::PlanStep). With selection
// the device keeps the selection's bound: compaction brings each stream's
// blocks back before it moves slots, and placement runs only after every
// stream is compacted. Each pool is capped at what the rules above give
// without placement. A device budget below one block per stream (the open
// blocks a step writes, which never leave the device) is InvalidArgument:
// no step could meet it.
// Prefix caching keeps the full-cache reservation: its cached blocks outlive
// their sequences, and a pool sized to live tokens would evict them at once.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"
#include "core/cache/cache_shape.h"
#include "policies/kv_policy.h"

namespace kvlab {

struct ReservationRequest {
  int64_t max_seqs = 1;
  int64_t max_context = 0;  // tokens per sequence
  // The most tokens one step adds to a sequence (the engine's bounded step
  // under selection or placement, else its largest chunk: max_context).
  int64_t step_tokens = 0;
  bool prefix_caching = false;
  // Lower the step (whole blocks) when an encoding without selection would
  // otherwise reserve more than the full cache (PoolReservation::step_tokens
  // is then the step the engine must use; `why` says so).
  bool lower_step_to_fit_full = false;
};

struct PoolReservation {
  int64_t plain_blocks = 0;
  int64_t encoded_blocks = 0;
  int64_t plain_bytes = 0;
  int64_t encoded_bytes = 0;
  // What the full cache (no policy: the model's KV heads, the requested
  // dtype, no encoding) reserves for the same request.
  int64_t full_bytes = 0;
  // Device-side detail under placement (0 otherwise): the budget's blocks
  // and the staging blocks (plain pool).
  int64_t budget_blocks = 0;
  int64_t staging_blocks = 0;
  // One line per rule that set a pool's size, e.g. "plain: 2 seqs x 1,024
  // streams x 5 blocks (h2o keeps <= 64 slots + a 16-token step)".
  std::string why;
  // The step the reservation holds room for (the request's, or lower: above).
  int64_t step_tokens = 0;

  int64_t bytes() const { return plain_bytes + encoded_bytes; }
};

// A step writes into the open (last plain) block of every stream, and
// placement never moves an open block off the device, so after every step
// the device holds at least one block per stream: a `budget` below
// max_seqs x layers x KV heads blocks of `block_bytes` could never be met,
// and is InvalidArgument naming the placement policy, device_budget and both
// numbers. (The offloaded blocks a step reads come back into staging blocks
// reserved beside the budget, not inside it.) ReservePools checks it;
// `kvlab memory` too, for one sequence.
Status CheckDeviceBudget(const PolicyStack& stack, int64_t budget, int64_t max_seqs, int num_layers, int num_kv_heads,
                         int64_t block_bytes);

// The reservation for `shape` (DeriveCacheShape of `stack`) and `model` (its
// KV shape before head sharing) under `req`. InvalidArgument when a request
// size is not positive, or a count overflows.
Status ReservePools(const CacheShape& shape, const ModelKvShape& model, DType requested_dtype, const PolicyStack& stack,
                    const ReservationRequest& req, PoolReservation* out);

}  // namespace kvlab
