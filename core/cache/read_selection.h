// ReadSelection: the blocks one layer's decode attention reads under the
// stack's read policy (KVPolicy::SelectReadBlocks, Quest), as a page table of
// their own, and the bytes read against a dense read of the same cache.
// Called by the host attention backends per layer; torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cache/kv_cache.h"
#include "kernels/paged_kv.h"
#include "policies/kv_policy.h"

namespace kvlab {

// K/V bytes a step's attention read, over its decode queries (sequences with
// one new token; prefill reads every slot and is not counted).
struct ReadStats {
  int64_t decode_steps = 0;      // steps with at least one decode query (the engine counts them)
  int64_t kv_read_bytes = 0;     // K and V rows of the slots the kernels read (plain rows, encoded blocks)
  int64_t kv_dense_bytes = 0;    // the same for every visible slot: what a dense read of this cache reads
  int64_t bound_read_bytes = 0;  // block key bounds the read policy ranked pages with
  void Add(const ReadStats& o) {
    decode_steps += o.decode_steps;
    kv_read_bytes += o.kv_read_bytes;
    kv_dense_bytes += o.kv_dense_bytes;
    bound_read_bytes += o.bound_read_bytes;
  }
};

struct ReadSelection {
  bool subset = false;  // some stream reads fewer blocks than it holds (then use View, EncodedView)
  std::vector<int32_t> indptr, indices, last_block_len;
  // With a sealed encoding: the groups each stream reads, and their dead-slot
  // flags renumbered from the first group read (EncodedKV::dead).
  std::vector<int32_t> enc_indptr, enc_indices;
  ReadStats stats;
  // Scratch, reused between layers: each stream's picked pages (empty: all),
  // sealed groups first (StreamReadState::num_group_pages); the ranked
  // pages' bounds; the renumbered dead flags.
  std::vector<std::vector<int32_t>> picks;
  std::vector<float> bound_lo, bound_hi;
  std::vector<std::vector<uint8_t>> enc_dead;
  std::vector<const uint8_t*> enc_dead_ptrs;
  // `kv` with this selection's page table (the same pool, the listed blocks only).
  PagedKV View(PagedKV kv) const {
    kv.indptr = indptr.data();
    kv.indices = indices.data();
    kv.last_block_len = last_block_len.data();
    return kv;
  }
  // `enc` (the same layer's encoded segments) with only the groups read: a
  // stream's groups read become its encoded segment, so a decode query,
  // which sees every slot, attends to exactly the pages picked.
  EncodedKV EncodedView(EncodedKV enc) const {
    enc.indptr = enc_indptr.data();
    enc.indices = enc_indices.data();
    if (enc.dead != nullptr) enc.dead = enc_dead_ptrs.data();
    return enc;
  }
};

// Chooses the blocks layer `layer` reads (pt's page table; p: the layer's
// attention call, its queries and qo_indptr) by `read` (may be null: every
// block) and counts the bytes. Every stream of a prefill sequence, a window
// layer (first_visible set), keys rotated at read time, and a stream whose
// bounds are incomplete read all their blocks. A stream's sealed blocks are
// pages too, ranked by the range of their decoded keys: KIVI's from its
// scales and zeros (KiviKeyRange), int8 / fp8 / ThinK's from the bounds kept
// at seal (PageTable::EncodedKeyBounds). The last block of a stream
// is always read, so each listed stream keeps its length's last slot and the
// kernels' causal rule (query j sees slots up to len - q_len + j) holds: a
// decode query sees every slot listed, wherever it came from.
// Streams are ranked one after another on the calling thread, each by the
// vectorised PageBoundScores (an OpenMP team over a layer's 8 streams is
// 3-45x slower than one thread on a loaded 2-core host, its barrier waiting
// for a descheduled thread; read_bench's BM_RankPages).
void SelectLayerReads(const PageTable& pt, int layer, const KVPolicy* read, const AttentionParams& p,
                      ReadSelection* out);

}  // namespace kvlab
