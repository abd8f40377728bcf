// Room core/cache/: block pools, the KV cache's streams, prefix cache, offload tiers.
// Called by core/model, core/engine and core/serve; includes policies, kernels, core/base.
//
// KVCache: the paged KV cache. One stream per (sequence, layer, stored KV
// head); each stream is a list of blocks from the cache's BlockPool plus
// per-slot metadata. Policies propose and the cache applies their decisions
// (ApplySelection, ApplyPlacement, FoldAttention, Seal); core (engine,
// executors, scheduler) drives it step by step (Reserve, the page tables,
// RemoveSequence). Not thread-safe.
#pragma once

#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/cache/block_pool.h"
#include "core/cache/cache_shape.h"
#include "core/cache/offload_store.h"
#include "core/base/dtype.h"
#include "core/cache/prefix_cache.h"
#include "core/base/status.h"
#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"
#include "policies/kv_policy.h"

namespace kvlab {

struct StepRequest;  // core/cache/cache_step.h
struct StepView;
struct StepOutcome;

// A block reference in a stream: >= 0 is a block id in a device pool; < 0 is
// a block moved off the device, -1 - (its OffloadStore handle).
inline bool IsOffloaded(int32_t ref) { return ref < 0; }
inline int64_t OffloadHandle(int32_t ref) { return -1 - static_cast<int64_t>(ref); }

// Offloaded blocks a step reads, brought back into device staging blocks
// layer by layer (two staging sets, so layer l+1 loads while l computes).
struct StagingPlan {
  struct Load {
    int64_t handle;
    int32_t block;  // staging block id in the plain or encoded device pool
    bool encoded;
  };
  std::vector<std::vector<Load>> per_layer;
  std::vector<int32_t> plain_blocks, enc_blocks;  // allocated staging blocks
  bool empty() const { return plain_blocks.empty() && enc_blocks.empty(); }
};

// One stream: the K/V of one (sequence, layer, stored KV head). Slots are
// numbered encoded-first: [0, num_encoded) in enc_blocks, the rest in blocks.
struct Stream {
  std::vector<int32_t> blocks;     // plain block ids in slot order
  std::vector<int32_t> enc_blocks; // encoded block ids (each full), oldest first
  int64_t num_encoded = 0;         // slots in encoded blocks
  int64_t num_tokens = 0;          // slots in use, encoded + plain
  std::vector<int32_t> positions;  // original token position of each slot
  std::vector<float> score;        // policy state per slot (e.g. accumulated attention)
  // Evicted slots of sealed groups (KVCache::Compact): empty while there are
  // none, else [num_encoded] flags, 1 = a slot the policies no longer see and
  // attention skips; a group is freed once all its slots are evicted.
  std::vector<uint8_t> dead;
  // With KVCache::EnableKeyBounds (a read policy asks, KVPolicy::NeedsBlockKeyBounds):
  // the channel-wise min and max of each plain block's keys, [blocks][head_dim]
  // in the cache's dtype (the min and max of 16-bit keys are 16-bit values, so
  // a bf16/fp16 cache keeps them exactly in half fp32's bytes), as raw bytes, up
  // to date for slots [0, bounded_tokens) (UpdateKeyBounds folds the rest).
  std::vector<uint8_t> key_min, key_max;
  int64_t bounded_tokens = 0;
  // Likewise for sealed blocks of an encoding whose metadata gives no key
  // range (int8 / fp8 per token, ThinK; KIVI's groups are ranked by their
  // scales and zeros instead): the channel-wise min and max of each sealed
  // block's decoded keys, [enc_blocks][head_dim] fp32, computed once when the
  // block is sealed (or, for blocks a prefix brought, at the next update) and
  // moved with the blocks; rows for the first enc_key_min.size() / head_dim.
  std::vector<float> enc_key_min, enc_key_max;
  // The stream's run reserve (KVCache::SetRunBlocks): plain block ids
  // [run_next, run_end), consecutive, taken off the pool's free list for its
  // next blocks; empty when run_next == run_end.
  int32_t run_next = 0, run_end = 0;

  int64_t num_plain() const { return num_tokens - num_encoded; }
  bool HasDead() const { return !dead.empty(); }
  bool Dead(int64_t slot) const { return slot < static_cast<int64_t>(dead.size()) && dead[static_cast<size_t>(slot)] != 0; }
  // Slots the policies see: num_tokens less the evicted ones still held.
  int64_t LiveTokens() const;
  // Plain slots the plain blocks can hold.
  int64_t Capacity(int block_size) const { return static_cast<int64_t>(blocks.size()) * block_size; }
  int64_t RunSpare() const { return run_end - run_next; }
};

// What a policy sees of one stream (core builds it; policies only read it).
inline StreamState StateOf(const Stream& s, int layer, int head, int64_t seq_length, int block_size) {
  StreamState ss;
  ss.layer = layer;
  ss.kv_head = head;
  ss.num_tokens = s.num_tokens;
  ss.positions = s.positions.data();
  ss.score = s.score.data();
  ss.seq_length = seq_length;
  ss.block_size = block_size;
  return ss;
}

// The step's page tables for a batch of sequences, all layers, in one CSR
// (built once per step, shared by all layers). Streams are ordered
// [layer][seq][kv_head]; indptr values index the shared `indices`.
class PageTable {
 public:
  // The kernel view of layer `layer`: its plain segments.
  PagedKV Layer(int layer) const;
  // Its encoded segments; nullptr when the cache has no encoding.
  const EncodedKV* Encoded(int layer) const;
  int num_seqs() const { return num_seqs_; }
  int num_layers() const { return num_layers_; }
  int num_kv_heads() const { return num_kv_heads_; }
  // Slots of a stream, encoded plus plain.
  int64_t StreamLength(int layer, int seq, int head) const;
  // A window layer's AttentionParams::first_visible for the step's queries
  // (KVCache::BuildWindows); nullptr for a global layer or before it is built.
  const int32_t* FirstVisible(int layer) const;
  // Key bounds of stream `s` of layer `layer` (s = seq * num_kv_heads + head),
  // filled by KVCache::AttachKeyBounds: *key_min / *key_max are [blocks][head_dim]
  // in the cache's dtype (Layer(layer).dtype); returns the leading blocks whose
  // bounds are complete (0 when none are kept).
  int64_t KeyBounds(int layer, int s, const void** key_min, const void** key_max) const;
  // The sealed blocks' decoded-key bounds of that stream (Stream::enc_key_min,
  // fp32 [blocks][head_dim]); returns how many leading sealed blocks have
  // them (0 for KIVI, whose groups carry their range, and without bounds).
  int64_t EncodedKeyBounds(int layer, int s, const float** key_min, const float** key_max) const;

 private:
  friend class KVCache;
  std::vector<const Stream*> bound_streams_;  // [layer][seq][head]; empty: no bounds
  std::vector<std::vector<int32_t>> first_visible_;  // per layer; empty: none
  std::vector<int32_t> indptr_, indices_, last_block_len_;
  std::vector<int32_t> enc_indptr_, enc_indices_;
  std::vector<const uint8_t*> enc_dead_;  // per stream: its Stream::dead, or null
  std::vector<EncodedKV> enc_layers_;
  int num_seqs_ = 0, num_layers_ = 0, num_kv_heads_ = 0;
  PagedKV base_;
};

// The attention each slot received in one step (AttentionParams::slot_attn),
// for policies that rank by it: stream i of the page table ([layer][seq][head])
// owns values[offsets[i], offsets[i] + its StreamLength). The attention
// backend fills it; KVCache::FoldAttention hands it to the policy.
struct SlotAttention {
  std::vector<float> values;
  std::vector<int64_t> offsets;
  // > 0: only the last last_queries queries of each sequence count
  // (KVPolicy::ObservationWindow; AttentionParams::slot_attn_last_queries).
  int64_t last_queries = 0;
  // Sized for `pt`'s streams, all zero.
  void Reset(const PageTable& pt);
};

// The owner of a device cache's bytes (KVCache::Create with `device`): the
// cache keeps the books and applies the policies' decisions, and tells the
// owner which rows to move (in host pools the cache moves them itself). Set
// once with KVCache::SetDeviceOps; the calls come in the cache's own order,
// and each batch ends with its Finish call (the owner may queue until then).
class DeviceKvOps {
 public:
  virtual ~DeviceKvOps() = default;
  // A compaction whose kept rows move (not a kept prefix, nor leading whole
  // units dropped): the stream's plain block list and slot count as they
  // were before it, and the slots it kept. Streams with encoded blocks never
  // come here (the cache refuses to compact those on a device).
  virtual void Compacted(const std::vector<int32_t>& blocks_before, int64_t tokens_before,
                         const std::vector<int64_t>& keep) = 0;
  // After the compactions of one KVCache::ApplySelection.
  virtual Status FinishCompaction() = 0;
  // A stream sealed its oldest plain tokens: its plain block list and plain
  // slot count before, and the encoded blocks it appended (in order, each
  // holding the next tokens_per_block of those plain slots from slot 0).
  virtual void Sealed(const std::vector<int32_t>& plain_before, int64_t plain_tokens_before,
                      const std::vector<int32_t>& new_enc_blocks) = 0;
  // After the sealing of one KVCache::Seal(seqs).
  virtual Status FinishSeal() = 0;
};

class KVCache {
 public:
  using SeqId = int64_t;

  // A cache whose plain pool holds num_blocks blocks of shape.BlockBytes()
  // and, with an encoding, an encoded pool of num_encoded_blocks blocks.
  // With `device`, both pools' arenas are device memory from it
  // (BlockPool::CreateOnDevice; with_storage is then ignored): the cache keeps
  // the books and the page tables, and never touches the bytes (sealing,
  // compaction and offload copies are left to the device's owner).
  static Status Create(const CacheShape& shape, int64_t num_blocks, bool with_storage,
                       std::unique_ptr<KVCache>* out, int64_t num_encoded_blocks = 0,
                       const DeviceArenaAllocator* device = nullptr);

  const CacheShape& shape() const { return shape_; }
  BlockPool& pool() { return *pool_; }
  const BlockPool& pool() const { return *pool_; }
  // The encoded pool, or nullptr.
  const BlockPool* encoded_pool() const { return enc_pool_.get(); }

  // Bytes over all pools and tiers (device, host, disk), read from them.
  int64_t BytesInUse() const;
  // Bytes resident in the device pools (staging included while a step runs).
  int64_t DeviceBytesInUse() const;
  int64_t PeakDeviceBytesInUse() const { return peak_device_bytes_; }
  int64_t HostBytesInUse() const { return store_ ? store_->host_bytes() : 0; }
  int64_t DiskBytesInUse() const { return store_ ? store_->disk_bytes() : 0; }
  int64_t BytesReserved() const;
  int64_t BlocksInUse() const;
  // Peak of BytesInUse() since creation (or ResetPeak).
  int64_t PeakBytesInUse() const { return peak_bytes_; }
  void ResetPeak() {
    peak_bytes_ = BytesInUse();
    peak_device_bytes_ = DeviceBytesInUse();
    peak_run_reserve_bytes_ = RunReserveBytes();
  }

  // --- decode-time blocks in runs (kv_cache_runs.cpp) ---
  // With n > 1, a stream that needs a new plain block takes it from its run
  // reserve (Stream::run_next), and one that has none takes a run of
  // max(n, blocks it needs) consecutive free blocks from the pool
  // (BlockPool::ReserveRun), so that blocks added token by token during
  // decode lie together as a chunked prefill's do, however many streams grow
  // at once. The reserve is not KV: BytesInUse and the peaks leave it out,
  // RunReserveBytes says it. It goes back to the pool when the stream is
  // compacted (Compact, also a window's leading blocks), when the sequence is
  // removed, and whenever an allocation finds the free list short (other
  // streams' reserves before cached prefix units): AvailableBlocks counts
  // it, so every allocation that succeeds without runs succeeds with them.
  // A run is taken only while the free list keeps room for the rest of the
  // step's need; where no n consecutive ids are free, a stream needing one
  // block takes the longest of n/2, n/4, ... >= 2 there is; else blocks come
  // one at a time, as with n <= 1 (off).
  void SetRunBlocks(int n) { run_blocks_ = n; }
  int run_blocks() const { return run_blocks_; }
  // Bytes of the plain pool's run reserve (reserved ahead, no KV yet), and
  // its peak since creation (or ResetPeak).
  int64_t RunReserveBytes() const { return pool_->bytes_run_reserve(); }
  int64_t PeakRunReserveBytes() const { return peak_run_reserve_bytes_; }

  // --- placement (offloading) ---
  Status EnableOffload(const PlacementOptions& options);
  bool offload_enabled() const { return store_ != nullptr; }
  // Moves block `index` of a stream's plain (or encoded) list off the device.
  Status Demote(SeqId id, int layer, int head, bool encoded, size_t index);
  // Brings every offloaded block of a stream back to the device.
  Status PromoteStream(SeqId id, int layer, int head);
  // BuildPageTable plus staging: offloaded blocks get staging block ids in
  // the page table, to be filled by LoadStaged before each layer reads.
  Status PlanStep(const std::vector<SeqId>& seqs, PageTable* out, StagingPlan* plan);
  // Copies layer `layer`'s offloaded blocks into their staging blocks. Safe
  // to run on another thread while a different layer computes.
  Status LoadStaged(const StagingPlan& plan, int layer) const;
  void ReleaseStaging(StagingPlan* plan);
  // Staging blocks PlanStep takes from the plain and encoded pools for a
  // step over `seqs` (Reserve adds device blocks only, so this holds before
  // or after it). For one sequence it bounds that sequence's share of any
  // batch's staging (the sum over a batch is at least the batch's need).
  void StagingBlocksNeeded(const std::vector<SeqId>& seqs, int64_t* plain, int64_t* enc) const;
  // Blocks of `id`'s plain (or encoded) lists that live off the device:
  // what Compact brings back before it moves slots.
  int64_t OffloadedBlocks(SeqId id, bool encoded) const;

  Status AddSequence(SeqId id);
  bool HasSequence(SeqId id) const { return seqs_.count(id) != 0; }
  // Frees every block of every stream of the sequence (blocks the prefix
  // cache holds stay cached).
  Status RemoveSequence(SeqId id);
  size_t num_sequences() const { return seqs_.size(); }

  // --- prefix caching ---
  // Full units (one full block per stream for block_size tokens; with an
  // encoding, one sealed encoded block per stream for tokens_per_block
  // tokens) are cached under the chained hash of the tokens up to their end
  // and shared by reference count: a sequence added with a cached prefix
  // holds the same block ids, and new tokens only ever go to blocks after
  // them. Units no sequence holds stay cached until an allocation needs
  // their blocks (least recently released first).
  // Copy on write: a shared block (reference count > 1: other sequences or
  // the cache hold it) is never written. Compact gives the stream a private
  // copy of each shared block it would write and drops the stream's
  // reference to the shared one (a sequence stops being a user of a unit
  // when none of its streams holds the unit's blocks any more), so cached
  // units stay valid for other requests. A unit is cached only while its
  // slots are its tokens in place in every stream and were computed before
  // the sequence's first eviction (later K/V depend on what was evicted).
  // REQUIRES: no sequences yet; no offloading.
  Status EnablePrefixCaching();
  bool prefix_caching() const { return prefix_ != nullptr; }
  // Tokens per unit (block_size, or the encoding's tokens_per_block).
  int prefix_unit_tokens() const;
  // nullptr without prefix caching.
  const PrefixCache* prefix_cache() const { return prefix_.get(); }
  struct PrefixMatch {
    int64_t units = 0;            // leading units cached
    int64_t evictable_units = 0;  // of which no sequence holds (adding the sequence takes them off the LRU)
  };
  // The leading units of `hashes`, at most max_units, that are cached.
  PrefixMatch MatchPrefix(const std::vector<BlockHash>& hashes, int64_t max_units) const;
  // Adds a sequence that holds the cached units `prefix` (its leading
  // units' hashes): its streams start with their blocks and
  // prefix.size() * prefix_unit_tokens() slots at positions 0, 1, ...
  // NotFound, adding nothing, if one is not cached.
  Status AddSequenceWithPrefix(SeqId id, const std::vector<BlockHash>& prefix);
  // Caches the sequence's full units that are not cached yet: hashes[u]
  // identifies unit u of its tokens (units past those its streams hold in
  // full are ignored). A unit whose hash another sequence cached first stays
  // private to this one (no deduplication, as in vLLM).
  void CacheFullUnits(SeqId id, const std::vector<BlockHash>& hashes);
  // Blocks an allocation can get from the plain (encoded) pool: the free
  // ones, the streams' run reserves, and those only the prefix cache holds,
  // which it evicts on demand.
  int64_t AvailableBlocks() const;
  int64_t AvailableEncodedBlocks() const;
  // Bytes of the blocks only the prefix cache holds (in use in the pools;
  // those of units no sequence uses are free for allocation, see
  // AvailableBlocks).
  int64_t CachedOnlyBytes() const;
  // Bytes counted more than once when the streams' block lists of all
  // sequences are summed (blocks held by several sequences).
  int64_t SharedExtraBytes() const;
  // Plain blocks of `id`'s streams that are shared (the prefix cache or
  // other sequences hold them too): the most blocks Compact can copy before
  // writing, over all of its streams. 0 for a sequence not in the cache.
  int64_t CopyOnWriteBlocks(SeqId id) const;
  // Shared blocks Compact has copied so far.
  int64_t num_copied_blocks() const { return num_copied_blocks_; }

  // Check-then-act pair: blocks needed to append n slots to every stream of
  // `id`, and the append itself (slots get original positions positions[0..n)).
  // Reserve fails with ResourceExhausted, changing nothing, when the pool
  // cannot supply the blocks (evicting unreferenced cached units if needed).
  int64_t BlocksNeeded(SeqId id, int64_t n) const;
  Status Reserve(SeqId id, int64_t n, const int32_t* positions);

  // Keeps only the slots `keep` (strictly increasing slot indices) of one
  // stream, moving their K/V, positions and scores down, and frees the blocks
  // no longer needed. Sealed groups are never decoded nor encoded again: a
  // group none of whose slots is kept is freed (its block leaves the list,
  // nothing moves); in a group that keeps some, the others are marked dead
  // (Stream::dead), so a kept token's codes stay those it was sealed with.
  // Dead slots keep their place (slot numbers are physical: page tables,
  // windows and kernels see them, attention gives them weight 0), while the
  // selection policies see only the live ones (SelectionState). With prefix
  // caching only trailing groups are freed (its books index units by place).
  // Shared blocks it would write are copied first (see prefix caching);
  // ResourceExhausted, keeping every slot, when the pools cannot supply the
  // copies (InvalidArgument for a copy on a device pool,
  // whose bytes the cache cannot move). With offloading, the stream's
  // blocks are brought back to the device first. On a device cache, compact
  // through ApplySelection, which tells the owner what to move.
  Status Compact(SeqId id, int layer, int head, const std::vector<int64_t>& keep);

  // Seals, in every stream of `id`, whole groups of the oldest plain tokens
  // that lie outside the residual into encoded blocks, freeing their plain
  // blocks. A no-op without an encoding, or while the encoded pool is full.
  void Seal(SeqId id);
  // Seal of each sequence, then the device owner's FinishSeal (its error).
  Status Seal(const std::vector<SeqId>& seqs);

  // --- one step through two doors (core/cache/cache_step.h, kv_cache_step.cpp) ---
  // The first door: Reserve for each sequence of `req` (its positions),
  // PlanStep (page tables and staging), BuildWindows, AttachKeyBounds, and
  // the per-slot attention buffer when `stack` ranks by attention. On an
  // error the slots reserved so far stay reserved, as with Reserve, and no
  // staging is held.
  Status BeginStep(const StepRequest& req, const PolicyStack& stack, StepView* view);
  // The second door, after the model and the backend ran on `view`: releases
  // its staging, then applies the stack's decisions: FoldAttention (the
  // scoring policy's rule), RecordKeyNorms, ApplySelection, UpdateKeyBounds,
  // Seal and ApplyPlacement, in that order.
  Status EndStep(const PolicyStack& stack, const StepOutcome& outcome, StepView* view);
  // After a step that failed: releases the view's staging, decides nothing.
  void AbortStep(StepView* view);

  // --- applying the policies' decisions after a step (kv_cache_apply.cpp) ---
  // The device owner (KVCache::Create's `device`); the cache does not own it.
  void SetDeviceOps(DeviceKvOps* ops) { device_ops_ = ops; }
  // Folds a step's per-slot attention (`a`, for the page table of `seqs` that
  // the step ran on, before any compaction) into every stream's scores by the
  // rule of `scorer` (KVPolicy::FoldAttention).
  // steps[i] (may be null: unknown) is seqs[i]'s step (KVPolicy::FoldStepAttention).
  void FoldAttention(const std::vector<SeqId>& seqs, const SlotAttention& a, const KVPolicy& scorer,
                     const std::vector<SeqStep>* steps = nullptr);
  // For a selection policy that ranks by key norms (KVPolicy::NeedsKeyNorms):
  // writes the L2 norm of the key of each of the last q_len slots of every
  // stream of `seqs` into its score, q_len being the tokens the step added to
  // the sequence (qo_indptr, the step's batch order). REQUIRES: host storage.
  void RecordKeyNorms(const std::vector<SeqId>& seqs, const std::vector<int32_t>& qo_indptr);
  // Selection and sliding windows: compacts each stream of `seqs` to what
  // SlotsToKeep says, next_pos[i] being seqs[i]'s next query position. A
  // stream whose compaction the pools cannot supply (ResourceExhausted:
  // copies of shared blocks) keeps every slot and
  // the others go on; any other error is returned. `sel` may be null.
  // steps[i] (may be null) is seqs[i]'s step, which the policy sees in
  // StreamState::step_tokens and chunk_end. A policy that selects per layer
  // (KVPolicy::SelectsPerLayer) gets each (sequence, layer)'s streams at once.
  Status ApplySelection(const std::vector<SeqId>& seqs, const std::vector<int64_t>& next_pos, const KVPolicy* sel,
                        const std::vector<SeqStep>* steps = nullptr);
  // Placement: while the device holds more than the policy's budget, moves
  // the blocks `place` ranks lowest (BlockPriority; ties in the order of
  // seq_length's sequences, their layers, heads, encoded then plain blocks)
  // off the device. The open tail block of each stream (where the next
  // tokens are written) always stays. seq_length: every sequence of the
  // cache with the tokens it has processed. A no-op when `place` is null or
  // places nothing.
  Status ApplyPlacement(const KVPolicy* place, const std::map<SeqId, int64_t>& seq_length);

  // Reads slot `slot` of a stream as fp32 K and V [head_dim] (decoding if
  // needed). For tests and tools, not hot paths. REQUIRES: storage present.
  void ReadSlot(SeqId id, int layer, int head, int64_t slot, float* k, float* v) const;

  const Stream& stream(SeqId id, int layer, int head) const;
  Stream& mutable_stream(SeqId id, int layer, int head);

  // Builds the page tables of `seqs` (in batch order) for all layers.
  void BuildPageTable(const std::vector<SeqId>& seqs, PageTable* out) const;

  // --- sliding windows (CacheShape::layer_window; kv_cache_window.cpp) ---
  // The first slot of `s` visible from a query at position q_pos under a
  // window of `window` positions (Hugging Face: key j is visible from query i
  // when i - window < j): a binary search on the slots' positions, which only
  // increase, so it holds whatever a selection policy evicted.
  static int64_t FirstInWindow(const Stream& s, int64_t q_pos, int64_t window);
  // Fills pt's first_visible for the window layers, for a step whose
  // sequences `seqs` (pt's batch order) have the queries qo_indptr, their
  // K/V the last slots of each stream (after Reserve).
  void BuildWindows(const std::vector<SeqId>& seqs, const std::vector<int32_t>& qo_indptr, PageTable* pt) const;
  // The largest slot index <= slot that starts a unit (an encoded block, a
  // plain block, or the end of the stream): dropping the slots before it
  // frees whole blocks and moves nothing.
  int64_t UnitFloor(const Stream& s, int64_t slot) const;
  // True when `keep` is [k, num_tokens) with k == UnitFloor(s, k): Compact
  // then only frees the leading blocks (no K/V moves; device owners need not
  // move rows). Never with prefix caching (its units are block indices).
  bool DropsLeadingUnits(const Stream& s, const std::vector<int64_t>& keep) const;
  // What a stream keeps after a step, for Compact, when the next query is at
  // position next_pos: on a window layer, slots below FirstInWindow(next_pos)
  // are seen by no later query. The selection policy `sel` (may be null)
  // chooses among the slots the window still shows (it sees only those);
  // when it keeps them all, the out-of-window slots go. Without a selection
  // policy, a window layer drops only the leading blocks that lie wholly out
  // of the window (Compact then frees them and moves nothing), so fewer than
  // a block of out-of-window slots may stay (the kernels skip them by
  // first_visible). False: keep every slot.
  bool SlotsToKeep(SeqId id, int layer, int head, int64_t next_pos, const KVPolicy* sel,
                   std::vector<int64_t>* keep, const SeqStep* step = nullptr) const;
  // SlotsToKeep's parts: the state the selection policy sees (the slots the
  // window still shows: from *alive on; with key_values, a StreamKvReader
  // over them where the storage is host memory, for a policy that
  // NeedsKeyValues), and what a stream keeps once the policy has spoken
  // (`chose`: its SelectSlots result, *keep its choice).
  StreamState SelectionState(SeqId id, int layer, int head, int64_t next_pos, const SeqStep* step,
                             int64_t* alive, bool key_values = false) const;
  bool FinishKeep(SeqId id, int layer, int head, int64_t alive, bool has_sel, bool chose,
                  std::vector<int64_t>* keep) const;

  // --- block key bounds, for a read policy (kv_cache_bounds.cpp) ---
  // Keeps each plain block's channel-wise key min / max (Stream::key_min,
  // key_max) from now on, and each sealed block's (Stream::enc_key_min) for an
  // encoding other than KIVI (whose groups a read policy ranks by their own
  // scales and zeros). REQUIRES: host storage.
  void EnableKeyBounds() { key_bounds_ = true; }
  bool key_bounds() const { return key_bounds_; }
  // Folds the keys written since the last call (and those a compaction
  // moved) into the bounds of every stream of `seqs`.
  void UpdateKeyBounds(const std::vector<SeqId>& seqs);
  // Points pt (built for `seqs`) at their streams' bounds (PageTable::KeyBounds).
  void AttachKeyBounds(const std::vector<SeqId>& seqs, PageTable* pt) const;

  // Tokens held by a sequence, summed over its streams (slots, not blocks).
  int64_t SlotsInUse(SeqId id) const;

 private:
  KVCache(const CacheShape& shape, std::unique_ptr<BlockPool> pool, std::unique_ptr<BlockPool> enc_pool);
  void UpdatePeak();
  void SealStream(Stream* s);
  // The stream's first plain_blocks plain blocks went (sealed, or dropped):
  // their bounds rows go with them (kv_cache_bounds.cpp).
  void DropLeadingKeyBounds(Stream* s, size_t plain_blocks) const;
  // Appends the decoded-key bounds of the stream's sealed blocks that have
  // none yet, with key bounds on and an encoding other than KIVI (kv_cache_bounds.cpp).
  void BoundEncodedBlocks(Stream* s) const;
  // ApplySelection's Compact on a device cache: the books, then the owner's moves.
  Status CompactOnDevice(SeqId id, int layer, int head, const std::vector<int64_t>& keep);
  // Compact's path for DropsLeadingUnits: frees the first k slots' units.
  void DropLeadingUnits(SeqId id, size_t stream_index, Stream* s, int64_t k);
  // Device data of a block reference, reading an offloaded block into *scratch.
  const uint8_t* BlockData(int32_t ref, bool encoded, std::vector<uint8_t>* scratch) const;
  void ReadPlainSlot(const Stream& s, int64_t i, float* k, float* v, std::vector<uint8_t>* scratch) const;
  void FreeRef(int32_t ref, bool encoded);
  // Returns the streams' run reserves, then evicts unreferenced cached
  // units, until the pool has n free blocks; false if it cannot.
  bool MakeFree(bool encoded, int64_t n);
  // Returns s's run reserve to the pool.
  void ReleaseRun(Stream* s);
  // Appends k plain blocks to s, from a new run when the free list keeps
  // `rest` blocks for the other streams of the step. REQUIRES: s has no
  // reserve, the free list has k + rest blocks.
  void GrowStream(Stream* s, int64_t k, int64_t rest);
  int64_t UnitBlockBytes() const;
  CacheShape shape_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<BlockPool> enc_pool_;
  int64_t peak_bytes_ = 0;
  int64_t peak_device_bytes_ = 0;
  int64_t peak_run_reserve_bytes_ = 0;
  std::unique_ptr<OffloadStore> store_;
  std::unordered_map<SeqId, std::vector<Stream>> seqs_;
  struct HeldUnit {
    BlockHash hash;
    int64_t unit;     // its index among the sequence's units (the block's index in each stream's list)
    int64_t streams;  // streams of the sequence that still hold its block (not copied away)
  };
  struct SeqUnits {
    int64_t num_seen = 0;            // leading units attached, cached or found cached by another
    std::vector<HeldUnit> held;      // units this sequence is a user of, in unit order
    int64_t shared_plain_holds = 0;  // sum of held[].streams for plain units
    int64_t evict_horizon = INT64_MAX;  // tokens computed before the first Compact that dropped a slot
  };
  // Drops stream `stream` of `id`'s reference to `ref`, entry `index` of its
  // plain (or encoded) list, keeping the prefix cache's books.
  void DropStreamRef(SeqId id, size_t stream, bool encoded, size_t index, int32_t ref);
  std::unique_ptr<PrefixCache> prefix_;
  std::unordered_map<SeqId, SeqUnits> seq_units_;
  // SelectionState's live view of a stream with dead slots, one per KV head
  // (a per-layer policy sees all of a layer's heads at once): the live slots
  // from the window's first on, their positions and scores.
  struct LiveView {
    std::vector<int64_t> slots;
    std::vector<int32_t> positions;
    std::vector<float> score;
  };
  mutable std::vector<LiveView> live_views_;
  // SelectionState's StreamState::kv, one per KV head likewise: the stream's
  // slots from `first` on (or the live view's `slots`), read through ReadSlots.
  struct SlotReader : StreamKvReader {
    const KVCache* cache = nullptr;
    SeqId id = 0;
    int layer = 0, head = 0;
    int64_t first = 0, num_tokens = 0;
    const std::vector<int64_t>* slots = nullptr;  // null: [first, first + num_tokens)
    int head_dim() const override { return cache->shape_.head_dim; }
    void Read(float* keys, float* values) const override;
  };
  mutable std::vector<SlotReader> kv_readers_;
  DeviceKvOps* device_ops_ = nullptr;
  // Cached blocks held by more than one stream, counted once per extra
  // holder; and cached blocks no stream holds (reference count 1).
  int64_t extra_block_holds_ = 0;
  int64_t cache_only_blocks_ = 0;
  int64_t num_copied_blocks_ = 0;
  bool key_bounds_ = false;
  int run_blocks_ = 0;
};

}  // namespace kvlab
