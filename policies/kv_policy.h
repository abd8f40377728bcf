// Room policies/: the KVPolicy interface, the registry, one file per policy.
// Called by core (cache, model, engine) and the harness; includes kernels and core/base.
//
// KVPolicy: the one interface every KV-cache compression policy implements
// (LevelDB FilterPolicy style). A policy observes and decides; core applies
// its decisions, so a policy never touches KV memory itself.
//
// Five concerns, each with a neutral default (so a policy overrides only the
// hooks of the concerns it declares):
//   head sharing    which stored stream serves which query head
//   selection       which token slots a stream keeps
//   representation  how blocks are encoded
//   placement       which memory tier holds each block
//   read            which blocks a decode step's attention reads (the cache
//                   keeps them all: what is read, not what is stored)
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/status.h"
#include "kernels/kv_encoding.h"

namespace kvlab {

enum Concern : uint32_t {
  kConcernHeadSharing = 1u << 0,
  kConcernSelection = 1u << 1,
  kConcernRepresentation = 1u << 2,
  kConcernPlacement = 1u << 3,
  kConcernRead = 1u << 4,
};
const char* ConcernName(Concern c);
// "selection+representation" style list of the bits set in `concerns`.
std::string ConcernList(uint32_t concerns);

enum class Tier : uint8_t { kDevice = 0, kHost = 1, kDisk = 2 };
enum class HeadMerge : uint8_t { kMean = 0, kFirst = 1 };

// Where blocks may live when a placement policy moves them off the device.
struct PlacementOptions {
  int64_t device_budget_bytes = 0;  // resident KV bytes the device may hold after each step
  int64_t host_budget_bytes = 0;    // then host memory up to this; the rest goes to disk
  std::string disk_path;            // directory for the disk tier's files ("" = system temp)
};

// The valid values of a number parameter: an interval whose ends may each be
// absent (unbounded), closed or open. Declared once in the ParamSpec; the
// registry checks every value given against it, so a policy's `create`
// never repeats the check.
struct ParamRange {
  bool has_min = false, has_max = false;
  bool min_open = false, max_open = false;  // open: the end itself is not valid
  double min = 0.0, max = 0.0;

  static ParamRange AtLeast(double lo);                // [lo, inf)
  static ParamRange Above(double lo);                  // (lo, inf)
  static ParamRange Closed(double lo, double hi);      // [lo, hi]
  static ParamRange OpenClosed(double lo, double hi);  // (lo, hi]
  static ParamRange Open(double lo, double hi);        // (lo, hi)
  bool bounded() const { return has_min || has_max; }
  bool Contains(double v) const;
  // ">= 0", "> 0", "in [1, 1048576]", "in (0, 1]"; "" when unbounded.
  std::string ToString() const;
};

// A declared parameter of a policy: its name, type, default, meaning and
// valid values, written once where the policy registers.
struct ParamSpec {
  enum class Type { kInt, kFloat, kBool, kString };
  ParamSpec(std::string name_, Type type_, std::string default_value_, std::string help_,
            std::vector<std::string> choices_ = {}, ParamRange range_ = {})
      : name(std::move(name_)),
        type(type_),
        default_value(std::move(default_value_)),
        help(std::move(help_)),
        choices(std::move(choices_)),
        range(range_) {}

  std::string name;
  Type type = Type::kInt;
  std::string default_value;
  std::string help;
  // For kString and kInt: the allowed values, an int's in canonical form
  // ("2", "4"); empty = any.
  std::vector<std::string> choices;
  ParamRange range;  // for kInt and kFloat: the valid interval (default: any)

  // What a valid value is, for error messages and `kvlab policies`:
  // "one of 2, 4", "in (0, 1]", ">= 0"; "" when any value of the type is.
  std::string ValidValues() const;
};

// Resolved parameters of one policy instance: every declared parameter, with
// defaults filled in, validated against the specs. Values are kept as their
// canonical text so they can be recorded in results verbatim.
class PolicyParams {
 public:
  int64_t GetInt(const std::string& name) const;
  double GetFloat(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  const std::string& GetString(const std::string& name) const;
  const std::map<std::string, std::string>& values() const { return values_; }
  // Whether the user gave `name` (every other parameter holds its default): a
  // policy refuses a given parameter its other settings leave unused.
  bool Given(const std::string& name) const { return given_.count(name) > 0; }
  // "k1=v1,k2=v2" in name order.
  std::string ToString() const;

 private:
  friend class PolicyRegistry;
  std::map<std::string, std::string> values_;
  std::set<std::string> given_;
};

// Arithmetic options of the attention kernels over a representation: how a
// kernel may compute, never what is stored (the bytes and the layout stay the
// same). A kernel without such a path runs its exact one.
struct KernelOptions {
  // KIVI blocks in the CPU decode kernel: scores with int8 queries and value
  // sums with 8-bit weights (kernels/attention_kivi_int8.h). Approximate: the
  // error is well below KIVI's own quantization error (docs/policies.md).
  bool int8_attention = false;
};

// Read access to the K/V of the slots a StreamState shows, for a selection
// policy that asks for them (KVPolicy::NeedsKeyValues): fp32 copies, decoded
// where the stream's blocks are encoded, so a policy reads them and never
// touches KV memory. Core owns it; valid only during the call it came with.
class StreamKvReader {
 public:
  virtual ~StreamKvReader() = default;
  virtual int head_dim() const = 0;
  // keys, values: [num_tokens][head_dim] for the state's slots [0, num_tokens).
  virtual void Read(float* keys, float* values) const = 0;
};

// What a policy may see of one stream when deciding.
struct StreamState {
  int layer = 0;
  int kv_head = 0;
  int64_t num_tokens = 0;             // slots in use
  const int32_t* positions = nullptr; // [num_tokens] original positions
  const float* score = nullptr;       // [num_tokens] accumulated attention (if requested)
  int64_t seq_length = 0;             // tokens the sequence has processed so far
  int block_size = 16;
  int num_layers = 0;                 // layers of the cache (0: unknown, as in a hand-built state)
  // The step just run, for policies whose rule depends on it (snapkv acts
  // when a prompt chunk is complete): tokens it added to this sequence (0:
  // unknown), and whether it was the last step of a chunk given to
  // Engine::Forward (a chunk longer than the engine's step runs as several).
  int64_t step_tokens = 0;
  bool chunk_end = true;
  // The slots' K/V, for a selection policy with NeedsKeyValues() on a cache
  // whose storage is in host memory; null otherwise.
  const StreamKvReader* kv = nullptr;
};

// What a read policy sees of one stream at one decode step: the channel-wise
// bounds of its full blocks' keys (kept by the cache while a read policy asks
// for them, KVPolicy::NeedsBlockKeyBounds) and the step's queries that the
// stream serves. The last block (it holds the step's own token) has no bounds
// here: it is always read.
//
// With a sealed encoding (KIVI) the stream's pages are its sealed groups
// first (num_group_pages of them, group_tokens tokens each, bounds from each
// group's key scales and zeros: the range of its decoded keys), then its
// plain blocks (block_size tokens each); "blocks" below counts both, and the
// indices a policy returns number them in that order.
struct StreamReadState {
  int layer = 0;
  int kv_head = 0;                 // stored KV head
  int num_layers = 0;
  int block_size = 16;
  int head_dim = 0;
  int64_t num_blocks = 0;          // pages of the stream (the last, a plain block, may be partly filled)
  int64_t num_group_pages = 0;     // leading pages that are sealed groups (0 without an encoding)
  int group_tokens = 0;            // tokens of each sealed group
  const void* key_min = nullptr;   // [num_blocks - 1][head_dim] in bound_dtype: each full page's smallest key, per channel
  const void* key_max = nullptr;   // [num_blocks - 1][head_dim] in bound_dtype: its largest
  DType bound_dtype = DType::kF32; // the cache's dtype (16-bit bounds of 16-bit keys are exact); f32 over sealed groups
  const float* queries = nullptr;  // [num_queries][head_dim]: the query heads this stream serves, as attention sees them
  int num_queries = 0;             // query heads per stored KV head (the GQA group)
};

// The step just run, per sequence (StreamState::step_tokens, chunk_end).
struct SeqStep {
  int64_t tokens = 0;
  bool chunk_end = true;
};

class KVPolicy {
 public:
  virtual ~KVPolicy() = default;

  // The registry name; with params().ToString() it identifies the policy in results.
  virtual const char* Name() const = 0;
  // Bitmask of Concern values this policy claims. `full` claims none.
  virtual uint32_t Concerns() const = 0;
  const PolicyParams& params() const { return params_; }

  // Checks the parameters against the model and cache shape (a merge group
  // that must divide H_kv, a quantization group that must divide head_dim);
  // the error names the parameter.
  virtual Status CheckShape(int /*model_kv_heads*/, int /*head_dim*/, int /*block_size*/) const { return Status::OK(); }
  // Checks the parameters against the cache's layers and stored KV heads per
  // layer (a per-(layer, head) file written for one model shape: duo's head
  // split); called with CheckShape when the cache shape is derived.
  virtual Status CheckLayout(int /*num_layers*/, int /*stored_kv_heads*/) const { return Status::OK(); }

  // --- head sharing ---
  // Stored KV heads per layer for a model with model_kv_heads KV heads.
  // REQUIRES: the result divides model_kv_heads.
  virtual int StoredKvHeads(int model_kv_heads) const { return model_kv_heads; }
  // How a group of model KV heads becomes one stored stream.
  virtual HeadMerge MergeMode() const { return HeadMerge::kMean; }

  // --- selection ---
  // True if SelectSlots needs StreamState::score (core then asks the attention
  // kernel for per-slot attention and the cache folds it into the scores by
  // FoldAttention after every step).
  virtual bool NeedsAttentionScores() const { return false; }
  // The policy's rule for its statistic: how one step's attention per slot
  // (`step`, summed over the stream's query heads and the step's queries)
  // joins the stream's scores (`score`, n slots, zero when a slot is
  // written). The default sums, which is H2O's accumulated attention; a
  // policy with another statistic (decayed, windowed, a maximum) overrides it.
  virtual void FoldAttention(const float* step, int64_t n, float* score) const {
    for (int64_t i = 0; i < n; ++i) score[i] += step[i];
  }
  // The same with the step's shape: `info` is the sequence's step (tokens 0
  // when unknown). For a rule that depends on it (snapkv replaces its scores
  // with a prefill step's window and accumulates decode steps); the default
  // calls FoldAttention.
  virtual void FoldStepAttention(const SeqStep& /*info*/, const float* step, int64_t n, float* score) const {
    FoldAttention(step, n, score);
  }
  // > 0: only the last w queries of each sequence in a step count in the
  // per-slot attention (SnapKV's observation window), and the engine makes
  // the last step of every chunk at least w tokens long when the chunk is, so
  // that a prompt's window lies in one step. 0: every query of the step.
  virtual int64_t ObservationWindow() const { return 0; }
  // True if SelectSlots needs the L2 norm of each slot's key: core then writes
  // it into StreamState::score when the slot is written (a query-free
  // statistic; RoPE rotates, so the norm is the same before or after it).
  virtual bool NeedsKeyNorms() const { return false; }
  // True if SelectSlots reads the slots' keys and values (StreamState::kv):
  // core then attaches a reader to each state it hands the policy.
  virtual bool NeedsKeyValues() const { return false; }
  // True if the policy selects all KV heads of a layer jointly (per-head
  // budgets that share a layer's total): core then calls SelectLayerSlots
  // with every stream of one (sequence, layer) instead of SelectSlots.
  virtual bool SelectsPerLayer() const { return false; }
  // heads[h]: the streams of one (sequence, layer), by KV head. Fills
  // (*keep)[h] and (*acts)[h] as SelectSlots would for head h (acts false:
  // keep everything). The default asks SelectSlots head by head.
  virtual void SelectLayerSlots(const std::vector<StreamState>& heads, std::vector<std::vector<int64_t>>* keep,
                                std::vector<char>* acts) const {
    keep->assign(heads.size(), {});
    acts->assign(heads.size(), 0);
    for (size_t h = 0; h < heads.size(); ++h) (*acts)[h] = SelectSlots(heads[h], &(*keep)[h]) ? 1 : 0;
  }
  // Called by core after each step for every stream. Returns false to keep
  // everything; otherwise fills `keep` with the slot indices to keep, strictly
  // increasing, and core compacts the stream and frees emptied blocks.
  virtual bool SelectSlots(const StreamState& /*s*/, std::vector<int64_t>* /*keep*/) const { return false; }
  // The most slots a stream keeps after SelectSlots, over every sequence
  // length up to `max_length` tokens (REQUIRES max_length >= 1). Core sizes
  // the pools from it (core/cache/cache_reservation.h): each stream gets room
  // for this bound plus the tokens of one step. The default, max_length,
  // claims no bound; a policy that keeps a budget says so here, and one that
  // under-reports makes a later step fail for want of blocks.
  virtual int64_t KeptSlotsBound(int64_t max_length) const { return max_length; }
  // The bound for one stream of a layer of kv_heads stored KV heads, which
  // the pools are sized from: a policy that selects per layer
  // (SelectsPerLayer) may give one head more than KeptSlotsBound, which is
  // then the bound of a stream selected alone. Default: KeptSlotsBound.
  virtual int64_t KeptSlotsBoundInLayer(int64_t max_length, int /*kv_heads*/) const { return KeptSlotsBound(max_length); }
  // The most runs of consecutive slots the kept set of a stream forms (sinks
  // and a window: 2), or 0 for no bound (a choice by score may scatter).
  // With an encoding in the stack, sealed groups stay whole while they keep
  // a slot (KVCache::Compact), so the encoded pool is sized from it: kept
  // slots in R runs touch at most ceil(kept / group) + R groups.
  virtual int64_t KeptRunsBound() const { return 0; }
  // The bound of the stream of (layer, kv_head) in a layer of kv_heads stored
  // heads, for a policy whose rule differs by head (PerHeadSplit): the pools
  // then reserve the sum over streams instead of one bound for all. Default:
  // KeptSlotsBoundInLayer.
  virtual int64_t KeptSlotsBoundOfHead(int64_t max_length, int /*layer*/, int /*kv_head*/, int kv_heads) const {
    return KeptSlotsBoundInLayer(max_length, kv_heads);
  }
  // True if the rule differs by (layer, KV head) from a fixed split (duo's
  // retrieval and streaming heads): heads of one layer then hold different
  // lengths for the whole run. The CUDA path refuses it (not wired for it).
  virtual bool PerHeadSplit() const { return false; }
  // True to store keys before RoPE and rotate them at read time by their
  // slot index (positions within the cache, as StreamingLLM does).
  virtual bool KeysBeforeRope() const { return false; }

  // --- read ---
  // True if SelectReadBlocks needs StreamReadState::key_min / key_max: the cache
  // then keeps, per stream, the channel-wise min and max of each block's keys
  // as the block fills (in the cache's dtype, host memory, not counted as KV
  // bytes). No cost
  // when no policy asks.
  virtual bool NeedsBlockKeyBounds() const { return false; }
  // Called by the attention backend for each stream of a decode step (one new
  // token; prefill reads everything). Returns false to read every block;
  // else fills `blocks` with the block indices to read, strictly increasing
  // and ending with num_blocks - 1 (the block holding the step's token), and
  // the kernel's page table for that stream lists only them (sealed groups
  // and plain blocks alike, StreamReadState::num_group_pages).
  virtual bool SelectReadBlocks(const StreamReadState& /*s*/, std::vector<int32_t>* /*blocks*/) const { return false; }

  // --- representation ---
  // Storage dtype of the cache's blocks given the one the run asked for.
  virtual DType StorageDType(DType requested) const { return requested; }
  // The encoding of sealed blocks, if any: fills *enc for this head_dim and
  // block_size and *residual_tokens (the most recent tokens kept in plain
  // storage). Returns false to keep every block plain.
  virtual bool SealedEncoding(int /*head_dim*/, int /*block_size*/, KvEncoding* /*enc*/,
                              int64_t* /*residual_tokens*/) const {
    return false;
  }
  // How the attention kernels may compute over this representation (an
  // option of the policy that changes no stored byte, as kivi's attention).
  virtual KernelOptions AttentionKernelOptions() const { return KernelOptions(); }
  // True when the encoding (sealed blocks, storage dtype) of a block is a
  // function of that block's tokens' K/V alone (no state, no statistics over
  // other blocks or later tokens), so two sequences with the same prefix
  // store the same block and prefix caching may share it. The conservative
  // default keeps a new representation out of prefix caching until its
  // author says so.
  virtual bool EncodingDeterministic() const { return false; }

  // --- placement ---
  // Returns false for no placement. Else fills *o; after each step core keeps
  // the highest-priority blocks on the device within the budget and moves
  // the rest to host memory, then disk; what a step reads is brought back
  // into staging blocks before it is read.
  virtual bool Placement(PlacementOptions* /*o*/) const { return false; }
  // Priority of keeping slots [first_slot, first_slot + num_slots) of a
  // stream (one block) on the device; higher stays.
  virtual double BlockPriority(const StreamState& /*s*/, int64_t /*first_slot*/, int64_t /*num_slots*/) const {
    return 0.0;
  }

 protected:
  explicit KVPolicy(PolicyParams params) : params_(std::move(params)) {}

 private:
  PolicyParams params_;
};

// A policy as named in a config or on the command line: name plus raw
// parameter text (typed and validated by the registry).
struct PolicySpec {
  std::string name;
  std::map<std::string, std::string> params;
  std::string source;  // where it came from, for error messages (file:line:col or "--policy")
};

// The composed stack of one run. At most one policy per concern.
class PolicyStack {
 public:
  // Creates each policy through the registry and checks composition: `full`
  // stands alone; two policies claiming the same concern is an error naming both.
  static Status Create(const std::vector<PolicySpec>& specs, PolicyStack* out);

  const std::vector<std::unique_ptr<KVPolicy>>& policies() const { return policies_; }
  uint32_t Concerns() const;
  // The policy claiming concern c, or nullptr.
  const KVPolicy* For(Concern c) const;
  // "full" or "sink(n_sink=4,window=1020)+kivi(bits=2,...)".
  std::string Describe() const;

  int StoredKvHeads(int model_kv_heads) const;
  HeadMerge MergeMode() const;
  DType StorageDType(DType requested) const;
  bool NeedsAttentionScores() const;
  // The selection policy's KVPolicy::KeptSlotsBoundInLayer for layers of
  // kv_heads stored KV heads, at most max_length; max_length without selection.
  int64_t KeptSlotsBound(int64_t max_length, int kv_heads = 1) const;
  // The scoring policy's ObservationWindow (0 without one).
  int64_t ObservationWindow() const;
  // Whether the selection policy asks for key norms (KVPolicy::NeedsKeyNorms).
  bool NeedsKeyNorms() const;
  // The policy whose scores the cache folds (the first that needs them), or nullptr.
  const KVPolicy* ScoringPolicy() const;
  // Every policy's AttentionKernelOptions, merged (an option is on when one sets it).
  KernelOptions AttentionKernelOptions() const;
  bool KeysBeforeRope() const;
  bool SealedEncoding(int head_dim, int block_size, KvEncoding* enc, int64_t* residual_tokens) const;
  bool Placement(PlacementOptions* o) const;
  // Whether the cache's full blocks may be shared across sequences with the
  // same prefix (prefix caching). Not with placement (blocks move off the
  // device), nor with a sealed encoding its policy does not declare
  // deterministic. A selection policy may share: core copies a shared block
  // before compaction writes it (copy on write), and caches only blocks
  // computed before a sequence's first eviction. Else true; *why_not (if
  // given) says which policy stands in the way.
  bool SharesPrefixBlocks(std::string* why_not) const;
  // Prefix caching is on by default where sharing is exact: stacks without
  // selection, representation or placement (`full`, head sharing).
  bool PrefixCachingByDefault() const;
  // The read policy (kConcernRead), or nullptr.
  const KVPolicy* ReadPolicy() const { return For(kConcernRead); }
  // Every policy's CheckShape, first error wins; then what the stack's
  // composition cannot do at this shape (a read policy over sealed encodings
  // or keys rotated at read time, or with a policy that ranks by attention).
  Status CheckShape(int model_kv_heads, int head_dim, int block_size) const;
  // Every policy's CheckLayout, first error wins.
  Status CheckLayout(int num_layers, int stored_kv_heads) const;

 private:
  std::vector<std::unique_ptr<KVPolicy>> policies_;
};

}  // namespace kvlab
