// The KV-cache size calculator: bytes per token and per sequence,
// 2 * L * H_kv * d_h * S * b, for any model config, storage width and policy
// stack: head sharing (stored heads), representation (the sealed encoding's
// bytes, its plain residual included), selection (what the policy keeps at
// S tokens: KVPolicy::KeptSlotsBound) and placement (device, host and disk
// bytes by the policy's budgets); sliding-window layers hold at most their
// window. A policy it cannot model is an error naming it, never the
// uncompressed figure under its name. Formula only: the engine's pools report
// what is really held (the block-rounded figure is what they hold at the end).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model_config.h"
#include "core/base/status.h"
#include "policies/kv_policy.h"

namespace kvlab {

// Layers of one attention kind: global (window 0) or sliding with `window`.
struct LayerGroup {
  int64_t window = 0, layers = 0, tokens_held = 0;
  int64_t bytes = 0;  // all these layers' K and V at tokens_held tokens
};

struct MemoryEstimate {
  int64_t num_layers = 0, kv_heads = 0, stored_kv_heads = 0, head_dim = 0, q_heads = 0, hidden = 0;
  int bits = 16;
  int64_t tokens = 0;
  int64_t bytes_per_token = 0;        // 2 * L * H_kv(stored) * d_h * bits / 8
  int64_t bytes_per_sequence = 0;     // bytes_per_token * tokens, less what an encoding saves
  int64_t mha_shortcut_bytes = 0;     // 2 * L * d_model * S * b: what the MHA formula claims
  int64_t uncompressed_bytes = 0;     // 2 * L * H_kv * d_h * S * b: the model's own uncompressed cache
  std::string policy;                 // stack description
  std::string encoding;               // sealed-block encoding, if the stack has one
  int64_t encoded_tokens = 0;         // live tokens in sealed encoded blocks
  // Selection by score over an encoding: sealed groups stay whole while they
  // keep a slot, so which stay depends on the attention; the encoded bytes
  // are then an upper bound (each kept sealed token in a group of its own).
  bool sealed_bound = false;
  int64_t tokens_kept = 0;            // per stream of a global layer, after selection
  std::string selection;              // the selection policy's description, if any
  int64_t block_size = 16;
  int64_t bytes_in_blocks = 0;        // bytes_per_sequence with every stream's plain part in whole blocks
  bool placed = false;                // a placement policy splits bytes_in_blocks by tier:
  int64_t device_bytes = 0, host_bytes = 0, disk_bytes = 0;
  std::vector<LayerGroup> groups;     // one per distinct window, global first
  std::string unverified_model_type;  // set when the config's family is not one kvlab models
};

// A preset, a config.json or a model directory, as far as the KV cache's
// shape goes: any decoder config.json with num_hidden_layers,
// num_attention_heads (num_key_value_heads) and head_dim (hidden_size) reads;
// *unverified names a model_type kvlab does not model ("" otherwise).
Status ResolveKvShape(const std::string& model, ModelConfig* out, std::string* unverified);

// `bits` is the storage width per number (16, 8, 4, 2; or 32).
Status EstimateKVMemory(const ModelConfig& config, int64_t tokens, int bits, const PolicyStack& stack,
                        MemoryEstimate* out);

// "131,072"
std::string WithCommas(int64_t v);
// "128 KiB", "1 GiB", "9.16 GiB": binary units, exact when a whole number.
std::string BinaryUnits(int64_t bytes);
// "9.83 GB": decimal units, 3 significant digits.
std::string DecimalUnits(int64_t bytes);
// The report `kvlab memory` prints. pool_bytes > 0 adds the share of a pool.
std::string FormatMemoryReport(const MemoryEstimate& e, int64_t pool_bytes);

}  // namespace kvlab
