// Room core/engine/: the engine (steps over cache and model), run configs, sampling, backends.
// Called by core/serve, datasets and evals; includes core/model and below.
//
// Engine: the paged decode engine. Owns the model, the paged KV cache, the
// policy stack and the attention backend (chosen once at Create); runs
// forward steps over ragged batches (prefill chunks and decode tokens of many
// sequences in one step) and has the cache apply the policies' decisions
// between steps. Torch-free header (pimpl) so the CLI and future
// schedulers compile without libtorch. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/cache/read_selection.h"
#include "core/model/model_config.h"
#include "core/engine/sampling.h"
#include "core/base/status.h"
#include "core/cache/cache_reservation.h"
#include "policies/kv_policy.h"

namespace kvlab {

// EngineOptions::matmul16 for "16-bit arithmetic in prefill, exact fp32 in
// decode": one more row than the CPU's decode kernel for 16-bit weights takes
// (kMatMul16SmallRows, matmul16.h), so decode steps up to batch 8 stay fp32.
constexpr int64_t kMatmul16PrefillRows = 9;

struct EngineOptions {
  std::string model = "small";   // a Hugging Face model directory, or a preset name (random weights)
  uint64_t weight_seed = 0;      // seed of the random weights of a preset
  int num_layers = 0;            // > 0: keep only this many layers of a preset (latency work at real shapes)
  // Non-empty: per-layer sliding windows (0: global) replacing the model's
  // own (ModelConfig::layer_sliding_window), one entry per layer it runs; for
  // what-if memory runs and tests. The dense reference (DenseLogits) uses them too.
  std::vector<int64_t> layer_sliding_window;
  int block_size = 16;
  // Decode-time blocks in runs (KVCache::SetRunBlocks): a stream's new
  // blocks come from a run of this many consecutive blocks reserved ahead,
  // so that decode-grown caches read as fast as prefilled ones; the reserve
  // is reported apart from the KV held (MemoryStats). 0 or 1: off. 32 is a
  // 512-token chunked prefill's run at block size 16: a decode-grown cache
  // with runs of 32 reads as fast as a prefilled one (docs/performance.md,
  // "Decode-time block runs").
  int run_blocks = 32;
  DType kv_dtype = DType::kBF16; // cache storage dtype; compute is fp32
  // Pool capacity. num_blocks > 0 wins; else room for max_seqs sequences of
  // max_context tokens in every stream.
  int64_t num_blocks = 0;
  int64_t max_seqs = 1;
  int64_t max_context = 4096;
  int64_t prefill_chunk = 512;   // prompt tokens per prefill step (chunked prefill)
  // With a stack that bounds the cache (selection, a sealed encoding, or
  // placement): the most tokens one step adds to a sequence. A longer chunk
  // runs as several steps with the policies acting after each, so no stream
  // holds more than what its policy keeps plus this many tokens, and the
  // pools are sized for that (core/cache/cache_reservation.h). 0: chunks run
  // as given, and the pools hold every stream's whole context.
  int64_t max_step_tokens = 64;
  std::string attention = "cpu"; // "cpu" (optimised) or "reference"; device "cpu" only
  // Where the model and the KV pools live: "cpu", or "cuda" (weights as
  // libtorch CUDA tensors, pools in device memory, attention through
  // kernels/cuda; core/attention/cuda_backend.h). "cuda" fails at Create when kvlab was
  // built without nvcc, when no GPU or no CUDA libtorch is present, and for
  // policies the CUDA path does not implement yet, naming them.
  std::string device = "cpu";
  int num_threads = 0;           // 0: all cores
  // Share full blocks across sequences with the same prefix (KVCache's
  // prefix caching). InvalidArgument at Create for a stack that cannot
  // (PolicyStack::SharesPrefixBlocks).
  bool prefix_caching = false;
  // Positions at or past the model's max_position_embeddings are an error
  // (InvalidArgument naming both numbers) unless this is set: the model was not
  // trained there, so a result past it says little about the model.
  bool allow_long_context = false;
  // Arithmetic of a 16-bit checkpoint's matrices (LlamaModel::SetMatmul16):
  // products of at least this many rows of activations multiply in the
  // weights' own dtype (faster on CUDA and on CPUs with bf16 instructions,
  // ~3 digits), the others in fp32 on the stored weights' exact values.
  // 0: never (default); 1: always; kMatmul16PrefillRows: prefill only.
  int64_t matmul16 = 0;
};

struct SeqChunk {
  int64_t seq = 0;
  std::vector<int32_t> tokens;
};

struct MemoryStats {
  int64_t bytes_in_use = 0;      // blocks held by sequences, from the pool
  int64_t bytes_reserved = 0;    // the pools' capacity (plain + encoded)
  int64_t plain_bytes_reserved = 0;
  int64_t encoded_bytes_reserved = 0;
  int64_t full_bytes_reserved = 0;  // what the full cache would reserve for the same run
  int64_t peak_bytes_in_use = 0;
  // Blocks reserved ahead for the streams' next blocks (EngineOptions::run_blocks):
  // not KV, so not in bytes_in_use or its peak; free for any allocation.
  int64_t run_reserve_bytes = 0;
  int64_t peak_run_reserve_bytes = 0;
  int64_t blocks_in_use = 0;
  int64_t block_bytes = 0;
  int64_t plain_blocks_in_use = 0;    // held blocks per pool: plain (block_bytes each) ...
  int64_t encoded_blocks_in_use = 0;  // ... and encoded (the encoded pool's block bytes)
  int64_t slots_in_use = 0;      // token slots held, summed over streams
  int64_t tokens_seen = 0;       // tokens processed, summed over sequences
  int64_t device_bytes = 0;      // resident in the device pools (offload moves the rest down)
  int64_t peak_device_bytes = 0;
  int64_t host_bytes = 0;        // offloaded to host memory
  int64_t disk_bytes = 0;        // offloaded to disk
  // Engine::reads() so far: K/V bytes the decode steps' attention read, and a
  // dense read's of the same cache (equal unless a read policy picks blocks).
  int64_t decode_steps = 0;
  int64_t kv_read_bytes = 0;
  int64_t kv_dense_read_bytes = 0;
};

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  SamplingParams sampling;
  bool stop_at_eos = true;
};

struct GenerateResult {
  std::vector<int32_t> tokens;   // generated tokens (prompt excluded)
};

struct GenerateStats {
  double prefill_ms = 0;               // all prompts, all chunks
  std::vector<double> decode_step_ms;  // one entry per batched decode step
  MemoryStats memory_at_end;           // before sequences are released
  ReadStats reads;                     // the decode steps' K/V bytes read (Engine::reads over them)
};

class Engine {
 public:
  // Loads (or builds) the model and creates the cache for the policy stack.
  static Status Create(const EngineOptions& options, const std::vector<PolicySpec>& policies,
                       std::unique_ptr<Engine>* out);
  ~Engine();

  const ModelConfig& model_config() const;
  // The dtype the model keeps its matrices in (the checkpoint's, or f32).
  DType weight_dtype() const;
  const PolicyStack& policies() const;
  const KVCache& cache() const;
  const EngineOptions& options() const;
  // How the pools were sized (ReservePools), with the rule behind each.
  const PoolReservation& reservation() const;
  // The most tokens one step adds to a sequence (EngineOptions::max_step_tokens
  // when the stack bounds the cache), or 0 when chunks run as given.
  int64_t step_tokens() const;
  // K/V bytes the attention read over every step since Create, counting the
  // decode queries (one new token) only, against a dense read of the same
  // cache; below it only with a read policy (Quest), which keeps the cache
  // whole and reads a subset of its blocks.
  const ReadStats& reads() const;

  Status AddSequence(int64_t seq);
  Status RemoveSequence(int64_t seq);
  // Prefix caching (options().prefix_caching): adds a sequence holding the
  // cached units `prefix` (the chained hashes of its leading units, see
  // core/cache/prefix_cache.h), which it reads as its first tokens without
  // computing them; its next Forward starts at position
  // prefix.size() * cache().prefix_unit_tokens().
  Status AddSequenceWithPrefix(int64_t seq, const std::vector<BlockHash>& prefix);
  // Offers the sequence's full units to the prefix cache (hashes[u]: unit u).
  void CacheFullUnits(int64_t seq, const std::vector<BlockHash>& hashes);
  // Tokens the sequence has processed (its next position).
  int64_t SequenceLength(int64_t seq) const;

  // Check-then-act: can one Forward over `chunks` get its blocks?
  bool CanForward(const std::vector<SeqChunk>& chunks) const;
  // One step over chunks of distinct sequences: reserves their slots, runs
  // the model over the paged cache, then applies the policy stack's
  // selection. logits[i] holds the chunk's last-token logits [vocab], or with
  // all_logits every token's [n * vocab]. ResourceExhausted (nothing changed)
  // when the pool is too small. A chunk longer than step_tokens() runs as
  // several steps of at most that many tokens (all chunks' pieces batched
  // together, the policies applied after each); the chunks are checked before
  // the first, and a failure in a later step leaves the earlier ones applied.
  Status Forward(const std::vector<SeqChunk>& chunks, bool all_logits, std::vector<std::vector<float>>* logits);

  // Batched generation: each prompt is prefilled in chunks, then all
  // sequences decode together, one token each per step, until
  // max_new_tokens or EOS. Sequences are released at the end.
  Status Generate(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options,
                  std::vector<GenerateResult>* results, GenerateStats* stats);

  MemoryStats Memory() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  // One step of Forward (no splitting).
  // piece_steps[i]: chunks[i] as a piece of a longer chunk (its tokens and
  // whether it ends that chunk); null: each chunk is whole.
  Status ForwardStep(const std::vector<SeqChunk>& chunks, bool all_logits, std::vector<std::vector<float>>* logits,
                     const std::vector<SeqStep>* piece_steps);
  // Forward's checks of the chunks (sequences added and distinct, tokens in
  // the vocabulary, context length), before any step runs.
  Status CheckChunks(const std::vector<SeqChunk>& chunks) const;
  std::unique_ptr<Impl> impl_;
};

// The context-length rule every entry point applies: OK when `allow`
// (EngineOptions::allow_long_context), when the config states no
// max_position_embeddings, or when `have` + `add` tokens fit in it; else
// InvalidArgument naming `what`, the total and the limit.
Status CheckContextLength(const ModelConfig& config, int64_t have, int64_t add, bool allow, const std::string& what);

// The dense reference path on one sequence: a contiguous per-sequence cache
// and plain libtorch attention, fed one token per step (nocache: the whole
// list at once, no cache). Writes next-token logits [tokens, vocab].
Status DenseLogits(const EngineOptions& options, const std::vector<int32_t>& tokens, bool nocache,
                   std::vector<float>* out);

// Writes a random-weight checkpoint of a preset (or of a config.json's shape)
// in Hugging Face layout to `dir` (created if missing).
Status WriteRandomCheckpoint(const ModelConfig& config, uint64_t seed, double init_std, const std::string& dir,
                             DType dtype = DType::kF32);

}  // namespace kvlab
