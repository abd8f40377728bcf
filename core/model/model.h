// LlamaModel: a decoder on libtorch for every family ModelConfig::spec
// describes (llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text): RMSNorm
// (w or 1 + w), RoPE (default, llama3, linear; partial; per-layer base), GQA
// with any H_q/H_kv ratio, q/k norms, biases, fused projections, SwiGLU or
// GELU-tanh MLP, sliding-window layers, soft-capping, tied or untied heads.
// Forward passes: over the paged KV cache (the engine), over a contiguous
// per-sequence cache with plain libtorch attention (the dense reference), and
// without a cache (recompute). Compute is fp32. Only model.cpp, the engine
// (engine.cpp, its CUDA backend) and tests include this header: it pulls in
// libtorch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/model_config.h"
#include "core/attention/backend.h"
#include "core/base/status.h"
#include "policies/kv_policy.h"

namespace kvlab {

// Inputs of one paged forward pass over a ragged batch. `attention` began
// the step on the cache's view (AttentionBackend::BeginStep, after
// KVCache::BeginStep reserved the new tokens' slots; the caller ends it):
// the model hands it each layer's K/V and queries and never reads the page
// table itself.
struct PagedForward {
  const std::vector<int32_t>* tokens = nullptr;     // [T] new tokens, sequences concatenated
  const std::vector<int32_t>* positions = nullptr;  // [T] their positions (RoPE)
  const std::vector<int32_t>* qo_indptr = nullptr;  // [B+1]
  AttentionBackend* attention = nullptr;  // writes each layer's K/V and computes its attention
  bool all_logits = false;  // logits of every token, else of each sequence's last token
};

// A contiguous per-sequence cache: per layer, K and V as [S, H_kv, d] tensors
// in the storage dtype, grown by concatenation (what most research code does).
struct DenseKVCache {
  std::vector<at::Tensor> k, v;
  int64_t length() const { return k.empty() || !k[0].defined() ? 0 : k[0].size(0); }
  int64_t bytes() const;
};

class LlamaModel {
 public:
  // Loads config.json plus model.safetensors (or a sharded index) from `dir`.
  static Status Load(const std::string& dir, std::unique_ptr<LlamaModel>* out);
  // Random weights (normal, std `init_std`; norms 1) for `config`, seeded.
  static Status Random(const ModelConfig& config, uint64_t seed, std::unique_ptr<LlamaModel>* out,
                       double init_std = 0.02);
  // Writes Random(config, seed)'s weights, rounded to `dtype` (f32, bf16,
  // f16), as a checkpoint in `dir` (existing), one tensor in memory at a time
  // besides the embeddings and head: `kvlab init --dtype` of an 8B model.
  static Status WriteRandom(const ModelConfig& config, uint64_t seed, double init_std, DType dtype,
                            const std::string& dir);
  // Writes config.json and model.safetensors to `dir`, every tensor in the
  // weights' dtype (WeightDType).
  Status Save(const std::string& dir) const;
  // The dtype the model keeps its matrices in: the checkpoint's (bf16, f16)
  // for Load, f32 for Random and f32 checkpoints. 16-bit matrices are read in
  // place from the checkpoint's read-only mapping, never written.
  DType WeightDType() const;
  // Arithmetic for 16-bit weights (matmul16.h), chosen per product by the
  // rows of activations it has: products of at least min_rows rows round the
  // activations to the weights' dtype and multiply in it (faster on CUDA and
  // on CPUs with bf16 instructions), the others multiply in fp32 on the
  // weights' exact values. 0 (default): never, fp32 everywhere; 1: always;
  // kMatmul16PrefillRows (engine.h): prefill chunks and large batches only.
  void SetMatmul16(int64_t min_rows) { math16_rows_ = min_rows; }
  int64_t matmul16() const { return math16_rows_; }

  const ModelConfig& config() const { return config_; }
  // Replaces the per-layer sliding windows (EngineOptions::layer_sliding_window).
  // REQUIRES: one entry per layer.
  void SetLayerSlidingWindows(std::vector<int64_t> w) { config_.layer_sliding_window = std::move(w); }
  // Stored KV heads (< num_key_value_heads when heads are merged for sharing).
  int stored_kv_heads() const { return stored_kv_heads_; }
  // Merges each group of num_key_value_heads / n adjacent K/V heads into one
  // stored stream, by mean or by taking the group's first head (head
  // sharing). Fails unless n divides num_key_value_heads.
  Status SetStoredKvHeads(int n, HeadMerge merge = HeadMerge::kMean);
  // Store keys before RoPE; the attention kernel rotates them (and the
  // queries) by positions within the cache. Refused for partial RoPE (phi3),
  // which the kernels do not rotate.
  Status SetKeysBeforeRope(bool on);
  // Whether the paged engine can run this model with a sealed-block encoding
  // or on CUDA: logit soft-capping (gemma2) is computed only by the model's
  // own libtorch attention over plain blocks, and the CUDA attention scales
  // by head_dim^-1/2 only. InvalidArgument naming why.
  Status CheckPagedSupport(bool encoded, bool cuda) const;
  // LongRoPE (phi3) picks its short or long factors by the request's length:
  // set here to the longest context a caller will run (the engine's
  // max_context), so that every step of a request rotates alike. 0 (the
  // default): by each forward call's last position + 1, as transformers'
  // dynamic update does for one call.
  void SetRopeContext(int64_t tokens) { rope_context_ = tokens; }
  bool keys_before_rope() const { return keys_before_rope_; }
  // Moves every weight to `device` (the CUDA engine path); inputs are then
  // made there and the forward passes return logits there. Internal (naming
  // the device) if the move fails, e.g. out of device memory.
  Status To(const at::Device& device);
  at::Device device() const { return embed_.device(); }

  // Logits [T, V] (all_logits) or [B, V].
  at::Tensor ForwardPaged(const PagedForward& in) const;
  // One sequence over a dense cache (appends to it). Logits [T, V].
  at::Tensor ForwardDense(const std::vector<int32_t>& tokens, int64_t start_pos, DenseKVCache* cache,
                          DType kv_dtype) const;
  // The whole sequence from scratch, no cache. Logits [T, V].
  at::Tensor ForwardNoCache(const std::vector<int32_t>& tokens) const;

 private:
  struct Layer {
    at::Tensor input_norm, q_proj, k_proj, v_proj, o_proj, post_norm, gate_proj, up_proj, down_proj;
    // Family options (undefined when the family has none): biases, per-head
    // q/k norms, fused projections (phi3), Gemma's feed-forward norms.
    at::Tensor q_bias, k_bias, v_bias, o_bias, q_norm, k_norm, qkv_proj, gate_up_proj, gate_bias, up_bias,
        down_bias, pre_ffn_norm, post_ffn_norm;
  };
  // RoPE tables of one layer kind (global, or gemma3's local layers).
  struct Rope {
    at::Tensor inv_freq;  // [rotary_dim / 2], float64
    std::vector<float> inv_freq_f32;
    at::Tensor long_inv_freq;  // longrope: used when the context exceeds long_after tokens
    int64_t long_after = 0;
    double attention_factor = 1.0;  // longrope: cos and sin scale
  };
  struct RopeCache {  // cos/sin of a forward's positions, per table
    at::Tensor cos[2], sin[2];
  };
  LlamaModel() = default;
  void InitRope();
  int RopeIndex(size_t layer) const;
  at::Tensor Embed(const std::vector<int32_t>& tokens) const;
  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& w) const;
  at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const;
  void RopeTables(const std::vector<int32_t>& positions, RopeCache* rc) const;
  // q [T, Hq, d], k and v [T, Hkv, d] of layer li: projections, biases, q/k
  // norms, and RoPE unless rotate is false.
  void Project(size_t li, const at::Tensor& h, const RopeCache& rc, bool rotate, at::Tensor* q, at::Tensor* k,
               at::Tensor* v) const;
  // The rest of a layer once attention is done: o_proj, residual, MLP.
  at::Tensor FinishLayer(const Layer& l, const at::Tensor& x, const at::Tensor& o) const;
  double AttentionScale() const;
  at::Tensor MergeHeads(const at::Tensor& kv) const;
  at::Tensor Mlp(const Layer& l, const at::Tensor& x) const;
  at::Tensor Head(const at::Tensor& x) const;
  std::vector<at::Tensor*> AllTensors();

  ModelConfig config_;
  int stored_kv_heads_ = 0;
  HeadMerge merge_ = HeadMerge::kMean;
  bool keys_before_rope_ = false;
  int64_t math16_rows_ = 0;
  at::ScalarType weight_dtype_ = at::kFloat;
  at::Tensor embed_, final_norm_, lm_head_;  // lm_head_ aliases embed_ when tied
  std::vector<Layer> layers_;
  Rope rope_[2];  // [0] global layers, [1] gemma3's sliding layers
  int64_t rope_context_ = 0;
};

}  // namespace kvlab
