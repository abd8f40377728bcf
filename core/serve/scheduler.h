// Room core/serve/: scheduler, workload, executors (model-free, engine), serve-bench.
// Called by evals (the CLI); includes core/engine and below.
//
// Scheduler: vLLM-style continuous batching over the paged KV cache. Keeps
// the waiting and running queues, fills each step's token budget with decode
// tokens and chunked-prefill chunks, admits first-come-first-served, and when
// blocks run out preempts whole requests, latest arrivals first, freeing all
// their blocks; a preempted request goes back to the front of the waiting
// queue and later recomputes its cache (a prefill over its prompt plus the
// tokens it has generated). With prefix caching (the executor's cache has
// it on), an admitted request starts after the leading full blocks of its
// tokens that are cached (vLLM's automatic prefix caching): it holds the same
// blocks and its prefill skips their tokens; the full blocks it computes are
// offered to the cache after every step (with a selection policy, a shared
// block is copied before compaction writes it; see KVCache). Bookkeeping
// only: torch-free, it
// drives a StepExecutor (the real Engine, or a model-free pool) that owns
// the KV memory. Not thread-safe.
#pragma once

#include <climits>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/engine/engine.h"  // SeqChunk (torch-free header)
#include "core/cache/kv_cache.h"
#include "core/base/status.h"

namespace kvlab {

// Runs steps over the KV cache it owns: the scheduler's only way to touch
// memory or a model (nano-vllm's model_runner). Capacity is read from
// cache(): the scheduler checks KVCache::BlocksNeeded, plus the staging
// blocks of offloaded KV and the copies compaction may make of shared
// blocks, against the pools' free blocks before each step, so Step never
// runs out of blocks.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // "engine" or "model-free"; recorded in reports.
  virtual const char* Name() const = 0;
  virtual const KVCache& cache() const = 0;
  // Adds an empty sequence (no blocks yet) / frees every block of one.
  virtual Status AddSequence(int64_t seq) = 0;
  virtual Status RemoveSequence(int64_t seq) = 0;
  // Prefix caching (when cache().prefix_caching()): adds a sequence holding
  // the cached units `prefix` (KVCache::AddSequenceWithPrefix), its first
  // prefix.size() * cache().prefix_unit_tokens() tokens computed; and offers
  // a sequence's full units to the cache after a step (hashes[u]: unit u of
  // its tokens; KVCache::CacheFullUnits).
  virtual Status AddSequenceWithPrefix(int64_t seq, const std::vector<BlockHash>& prefix) = 0;
  virtual void CacheFullUnits(int64_t seq, const std::vector<BlockHash>& hashes) = 0;
  // One step over chunks of distinct added sequences: appends their tokens
  // to the cache and writes, per chunk, the greedy next token after its last
  // token (model-free: a deterministic dummy). ResourceExhausted, changing
  // nothing, if the plain pool cannot supply the step's blocks.
  virtual Status Step(const std::vector<SeqChunk>& chunks, std::vector<int32_t>* next_tokens) = 0;
  // The most tokens one sequence can ever hold when it is alone in the
  // pools (INT64_MAX when a selection policy bounds each stream's size).
  // Requests longer than this are rejected at admission.
  virtual int64_t MaxSequenceTokens() const = 0;
};

struct SchedulerOptions {
  int64_t max_num_batched_tokens = 2048;  // token budget per step (decode tokens + prefill chunks)
  int64_t max_num_seqs = 256;             // running requests at most
  int64_t max_prefill_chunk = 0;          // prompt tokens of one request per step; 0: the budget
  int64_t max_model_len = 0;              // prompt + max_new_tokens at most; 0: no cap
  // Admission keeps this share of the pool's blocks free (vLLM's watermark),
  // so a newly admitted request is not preempted at once by running ones.
  double watermark = 0.01;
  Status Validate() const;
};

struct RequestSpec {
  int64_t id = 0;
  double arrival = 0;              // time (in steps) the request arrived
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 1;      // generation stops after this many tokens (no EOS stop)
};

enum class RequestState { kWaiting, kRunning, kFinished, kAborted };

struct Request {
  RequestSpec spec;
  RequestState state = RequestState::kWaiting;
  std::vector<int32_t> output;     // generated tokens
  // Tokens of prompt + output whose KV is in the cache. While decoding it is
  // prompt + output - 1: the last generated token is the next step's input.
  int64_t num_computed = 0;
  int64_t num_preemptions = 0;
  // Computed tokens discarded by preemptions and computed again (those a
  // readmission finds in the prefix cache are not counted).
  int64_t recomputed_tokens = 0;
  int64_t recompute_until = 0;     // tokens below this were computed once before and are being recomputed
  int64_t last_discarded = 0;      // tokens the last preemption discarded
  // Prefix caching: chained hashes of the full units of prompt ++ output
  // (extended as tokens come), prompt tokens taken from the cache at the
  // first admission, and tokens taken from it over all admissions.
  std::vector<BlockHash> block_hashes;
  bool admitted = false;
  int64_t prompt_cached_tokens = 0;
  int64_t cached_tokens = 0;
  double first_scheduled_time = -1;
  double first_token_time = -1;    // end of the step that produced output[0]
  double finish_time = -1;
  std::string abort_reason;

  int64_t num_tokens() const { return static_cast<int64_t>(spec.prompt.size() + output.size()); }
  int32_t token(int64_t i) const;  // prompt ++ output
  // Tokens still to be fed to reach the next output token.
  int64_t num_uncomputed() const { return num_tokens() - num_computed; }
};

// What one step ran, and what changed.
struct StepOutcome {
  struct Chunk {
    int64_t id;
    int64_t num_tokens;
    bool prefill;      // more than the one decode token (a prompt chunk or a recompute)
    bool recompute;    // re-prefill of tokens a preemption discarded
  };
  std::vector<Chunk> chunks;
  int64_t num_batched_tokens = 0;
  std::vector<int64_t> preempted;    // in preemption order (latest arrival first)
  std::vector<int64_t> finished;     // finished this step
  std::vector<int64_t> aborted;      // could not run even alone (see Step)
  int64_t prefix_hit_tokens = 0;     // tokens this step's admissions took from the prefix cache
  bool ran() const { return !chunks.empty(); }
};

class Scheduler {
 public:
  // REQUIRES: executor outlives the scheduler; options.Validate() is OK.
  Scheduler(const SchedulerOptions& options, StepExecutor* executor);

  // Queues an arrived request at the back of the waiting queue. Rejects
  // (InvalidArgument, nothing queued) a request with an empty prompt, an id
  // in use, or one longer than max_model_len or than the pools can ever hold.
  Status AddRequest(RequestSpec spec);

  // One step at time `now` (in steps): plans the batch (decode tokens of
  // running requests first, then prefill chunks, in arrival order; then, if
  // nothing was preempted, admissions from the head of the waiting queue
  // while its whole prefill fits), runs it on the executor and applies the
  // tokens. A running prefill that cannot get blocks for its chunk preempts
  // later arrivals; the latest running request instead shrinks its chunk to
  // what fits, and preempts itself only when not one token fits.
  // A step with nothing to run leaves out->chunks empty. A request that
  // cannot get blocks even when it is the only one holding any is aborted
  // (listed in out->aborted) rather than preempted forever.
  Status Step(double now, StepOutcome* out);

  // --- capacity, check then act (nano-vllm's block_manager pairs) ---
  // The acts book blocks against the step being planned; the executor's
  // Step takes them from the pool (Engine::Forward reserves a step's slots
  // itself), so a planned step never runs out of blocks.
  // Can waiting request r be admitted with a first chunk of n tokens (the
  // chunk starts after CachedPrefixTokens(r))? Its whole prefill (the
  // tokens after the cached prefix) must fit the pools, keeping the
  // watermark free in each, and reusing cached blocks that no one holds
  // takes them out of the free count; with a selection policy (executor's
  // MaxSequenceTokens() == INT64_MAX) only the first chunk must fit, plus
  // a copy of every shared plain block it takes up (compaction copies a
  // shared block before writing it).
  // Allocate adds its sequence to the executor, holding the cached prefix,
  // and books the first chunk's blocks for this step.
  // REQUIRES (for prefix hits): UpdateBlockHashes(r) since r's last token.
  bool CanAllocate(const Request& r, int64_t n) const;
  Status Allocate(Request* r, int64_t n);
  // Tokens of waiting request r that admission would take from the prefix
  // cache: its leading cached units, leaving at least one token to compute
  // (for the next token's logits) and, with an encoding, the tokens a
  // prefill of r would leave unsealed (the residual), so that the cache
  // ends as a prefill without the hit leaves it. 0 without prefix caching.
  int64_t CachedPrefixTokens(const Request& r) const;
  // Extends r.block_hashes to every full unit of r's tokens.
  void UpdateBlockHashes(Request* r) const;
  // Can a running request append n tokens this step (blocks booked so far
  // this step included)? Beyond the new slots' blocks a step may take
  // staging blocks for offloaded KV and, with a selection policy, copies of
  // shared blocks and blocks brought back before compaction; all are
  // counted. Append books them.
  bool CanAppend(const Request& r, int64_t n) const;
  void Append(const Request& r, int64_t n);

  // Preempts a running request now: frees all its blocks and puts it at the
  // front of the waiting queue (it will recompute). NotFound if not running.
  Status Preempt(int64_t id);
  // Removes a request wherever it is, freeing its blocks.
  Status Abort(int64_t id, const std::string& reason);

  bool HasUnfinished() const { return !waiting_.empty() || !running_.empty(); }
  // Running ids in arrival order (the last is the next preemption victim).
  std::vector<int64_t> RunningIds() const;
  std::vector<int64_t> WaitingIds() const;
  const Request* Find(int64_t id) const;
  // Moves finished and aborted requests out of the scheduler.
  std::vector<Request> TakeFinished();

  int64_t num_preemptions() const { return num_preemptions_; }
  int64_t num_recomputed_tokens() const { return num_recomputed_tokens_; }
  // Tokens admissions took from the prefix cache (readmissions included).
  int64_t num_prefix_hit_tokens() const { return num_prefix_hit_tokens_; }
  bool prefix_caching() const { return executor_->cache().prefix_caching(); }
  const SchedulerOptions& options() const { return options_; }
  StepExecutor* executor() const { return executor_; }

 private:
  struct Planned {
    Request* r;
    int64_t n;
  };
  Request* Get(int64_t id);
  KVCache::PrefixMatch MatchPrefix(const Request& r) const;
  int64_t Watermark(const BlockPool& pool) const;
  int64_t FreeBlocks() const;
  int64_t FreeEncodedBlocks() const;
  // A selection policy compacts streams after each step (the executor then
  // reports no length bound).
  bool compacts() const { return max_sequence_tokens_ == INT64_MAX; }
  // Blocks a step of running sequence `id` may take beyond the slots it
  // appends (KVCache::BlocksNeeded): staging for its offloaded blocks and,
  // when streams are compacted, copies of the shared blocks it holds and the
  // offloaded blocks compaction brings back. Plain pool; *encoded: the
  // encoded pool's staging.
  int64_t StepExtraBlocks(int64_t id, int64_t* encoded) const;
  void InsertRunning(Request* r);
  Status DoPreempt(Request* r, std::vector<int64_t>* preempted);
  // Largest m in [1, n] that CanAppend, or 0.
  int64_t LargestAppendable(const Request& r, int64_t n) const;
  Status Finish(Request* r, RequestState state, double now);

  SchedulerOptions options_;
  StepExecutor* executor_;
  int64_t max_sequence_tokens_;
  std::unordered_map<int64_t, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // sorted by (arrival, id)
  std::vector<int64_t> done_;      // finished or aborted, not yet taken
  int64_t booked_blocks_ = 0;      // blocks promised to this step's chunks so far
  int64_t booked_encoded_blocks_ = 0;  // encoded-pool staging promised so far
  int64_t num_preemptions_ = 0;
  int64_t num_recomputed_tokens_ = 0;
  int64_t num_prefix_hit_tokens_ = 0;
};

}  // namespace kvlab
