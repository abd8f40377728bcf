// Serving pools without a model: the cache shape a policy stack gives a
// model (DeriveCacheShape, the rule Engine::Create uses), pool sizes from a byte budget, and a
// StepExecutor over a memory-only KVCache (no storage, real model shapes such
// as llama-3.1-70b) that emits dummy tokens. The scheduler and pools are the
// ones the engine uses, so a serving scenario (such as a 70B model's
// conversation in a 15 GB pool) can be replayed at real shapes on any machine. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/model/model_config.h"
#include "core/serve/scheduler.h"
#include "policies/kv_policy.h"

namespace kvlab {

// How much KV memory serving gets. Either a byte budget (pool_bytes) or
// block counts (pool_blocks wins when > 0). With a stack that seals blocks
// into an encoding (quant, kivi) the budget is split: the plain pool holds
// each request's open tail and residual plus one step's new tokens, the
// encoded pool the rest (see ServePoolSpec::request_tokens).
enum class PrefixCachingMode {
  kDefault,  // on for stacks where sharing is exact (PolicyStack::PrefixCachingByDefault: full, head sharing)
  kOn,       // an error for a stack that cannot share blocks (PolicyStack::SharesPrefixBlocks)
  kOff,
};

struct ServePoolSpec {
  int64_t pool_bytes = 0;
  int64_t pool_blocks = 0;          // plain blocks (one stream's block_size tokens each)
  int64_t encoded_pool_blocks = 0;  // with pool_blocks and an encoding stack
  int64_t plain_pool_bytes = 0;     // with pool_bytes and an encoding: the plain share; 0 = automatic
  // Inputs of the automatic split. Per stream, a request holds
  // p = ceil((residual + tokens_per_block - 1) / block_size) + 1 plain blocks
  // (its residual, the group being filled, the open tail) and, at
  // request_tokens tokens, e = floor((request_tokens - residual) /
  // tokens_per_block) encoded blocks. The plain pool gets ceil(budget /
  // block_size) blocks for a step's new tokens plus p for each of the n
  // requests of request_tokens the whole budget holds (n = budget over one
  // request's p plain plus e encoded blocks, at most max_num_seqs); the
  // encoded pool the rest. With request_tokens = 0 (unknown), n is
  // max_num_seqs and the plain pool is capped at half the budget.
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 256;
  int64_t request_tokens = 0;
  // Prefix caching of full blocks across requests (core/cache/prefix_cache.h).
  PrefixCachingMode prefix_caching = PrefixCachingMode::kDefault;
};

struct ServeCachePlan {
  CacheShape shape;
  int64_t num_blocks = 0;           // plain pool
  int64_t num_encoded_blocks = 0;   // encoded pool (a multiple of the streams per sequence)
  bool has_selection = false;       // a selection policy bounds every stream
  bool has_placement = false;
  bool prefix_caching = false;      // the spec's mode resolved for the stack
  int64_t split_requests = 0;       // automatic split from request_tokens: the requests it was sized for
  std::string policy;               // PolicyStack::Describe()

  int64_t PlainBytes() const { return num_blocks * shape.BlockBytes(); }
  int64_t EncodedBytes() const { return shape.encoded ? num_encoded_blocks * shape.enc.BlockBytes() : 0; }
  // Tokens one sequence can hold alone: plain blocks per stream (less one,
  // for the step that overflows before sealing) plus encoded blocks per
  // stream; INT64_MAX with a selection policy.
  int64_t MaxSequenceTokens() const;
};

// The cache shape of `stack` on `model` (DeriveCacheShape: stored heads,
// storage dtype, sealed encoding, as Engine::Create), the pools of `spec`, and
// whether prefix caching is on (InvalidArgument if spec asks for it with a
// stack that cannot share blocks).
Status PlanServeCache(const ModelConfig& model, const PolicyStack& stack, int block_size, DType kv_dtype,
                      const ServePoolSpec& spec, ServeCachePlan* out);

// A model-free executor for `model`'s shapes. Policies act as in the engine:
// selection policies compact streams after each step (ranking on zero
// attention scores: there is no attention here, only the budget is real),
// representation policies seal blocks into the encoded pool; with prefix
// caching, cached units are shared by block id exactly as in the engine.
// Placement (offload) needs the engine and is refused. Dummy tokens are
// (31 * seq + position) mod vocab.
Status NewModelFreeExecutor(const ModelConfig& model, const std::vector<PolicySpec>& policies, int block_size,
                            DType kv_dtype, const ServePoolSpec& spec, std::unique_ptr<StepExecutor>* out);

}  // namespace kvlab
