// One engine step over the KV cache, through two doors: KVCache::BeginStep
// reserves the step's slots and hands out a StepView (the page tables with
// their windows and key bounds, the offloaded blocks to stage, the per-slot
// attention buffer a scoring policy asked for, the read policy); the model
// and the attention backend work on that view alone; KVCache::EndStep takes
// the view back with what the step observed and applies the stack's
// decisions in one place (scores, selection and windows, key bounds,
// sealing, placement).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/cache/read_selection.h"
#include "policies/kv_policy.h"

namespace kvlab {

// The step a caller asks for: its sequences in batch order, their new
// tokens (qo_indptr) and those tokens' positions.
struct StepRequest {
  std::vector<KVCache::SeqId> seqs;
  std::vector<int32_t> qo_indptr{0};  // [B+1]
  std::vector<int32_t> positions;     // [T], the sequences' new tokens concatenated
};

// What the model and the attention backend read and fill during one step.
// Made by KVCache::BeginStep, given back to KVCache::EndStep (or AbortStep).
struct StepView {
  std::vector<KVCache::SeqId> seqs;
  std::vector<int32_t> qo_indptr;
  PageTable page_table;  // all layers, windows (first_visible) and key bounds attached
  // Offloaded blocks the step reads: the backend loads each layer's into its
  // staging blocks (LoadStaged) before the layer reads them.
  StagingPlan staging;
  const KVCache* cache = nullptr;  // the cache that made the view
  // Copies layer `layer`'s offloaded blocks into their staging blocks
  // (KVCache::LoadStaged). Safe on another thread while a different layer computes.
  Status LoadStaged(int layer) const { return cache->LoadStaged(staging, layer); }
  // Per-slot attention, when the stack ranks by it (the backend adds to it):
  // sized for page_table; wants_slot_attention false leaves it empty.
  bool wants_slot_attention = false;
  SlotAttention slot_attention;
  // The stack's read policy (KVPolicy::SelectReadBlocks), or null: each
  // layer's decode streams read only the blocks it picks.
  const KVPolicy* read_policy = nullptr;
  // K/V bytes the step's decode attention read, and a dense read's (the
  // backend adds to them).
  ReadStats reads;
};

// What the step did, for KVCache::EndStep.
struct StepOutcome {
  // Each sequence's next query position, in the view's batch order.
  std::vector<int64_t> next_pos;
  // Each sequence's piece of its chunk (SeqStep): a whole chunk unless the
  // engine split it.
  std::vector<SeqStep> steps;
  // Every sequence of the cache with the tokens it has processed (placement
  // ranks over all of them).
  const std::map<KVCache::SeqId, int64_t>* seq_length = nullptr;
};

}  // namespace kvlab
