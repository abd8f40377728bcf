#include "core/model/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/model/llama_tensors.h"
#include "core/model/matmul16.h"
#include "core/model/safetensors.h"
#include "kernels/dense_attention.h"

namespace kvlab {

namespace {

at::ScalarType TorchType(DType t) {
  switch (t) {
    case DType::kF32: return at::kFloat;
    case DType::kF16: return at::kHalf;
    case DType::kBF16: return at::kBFloat16;
  }
  return at::kFloat;
}

// Copies a (possibly unaligned) mapped tensor into an owned tensor of its own dtype.
at::Tensor CopyTensor(const TensorView& v) {
  at::Tensor raw = at::empty(v.shape, at::TensorOptions().dtype(TorchType(v.dtype)));
  std::memcpy(raw.data_ptr(), v.data, static_cast<size_t>(v.nbytes));
  return raw;
}

// A weight as the model keeps it. Matrices (projections, embeddings, LM head)
// stay in the checkpoint's 16-bit dtype, read in place from the file's
// read-only mapping when aligned (the mapping lives while any tensor does),
// so an 8B bf16 checkpoint costs its file size, not twice it; the rest
// (norms, biases: a few KB a layer) and fp32 checkpoints become owned fp32.
at::Tensor WeightTensor(const TensorView& v, const std::shared_ptr<CheckpointReader>& ckpt) {
  const bool matrix = v.shape.size() == 2 && v.dtype != DType::kF32;
  if (!matrix) return CopyTensor(v).to(at::kFloat).contiguous();
  if (reinterpret_cast<uintptr_t>(v.data) % DTypeBytes(v.dtype) != 0) return CopyTensor(v);
  return at::from_blob(const_cast<uint8_t*>(v.data), v.shape, [ckpt](void*) {},
                       at::TensorOptions().dtype(TorchType(v.dtype)));
}

// The tensor of a layer that a spec names (LayerT: LlamaModel's private
// Layer, deduced, const or not).
template <class LayerT>
auto& LayerTensor(LayerT& l, LlamaTensor role) {
  switch (role) {
    case LlamaTensor::kInputNorm: return l.input_norm;
    case LlamaTensor::kQ: return l.q_proj;
    case LlamaTensor::kK: return l.k_proj;
    case LlamaTensor::kV: return l.v_proj;
    case LlamaTensor::kO: return l.o_proj;
    case LlamaTensor::kPostNorm: return l.post_norm;
    case LlamaTensor::kGate: return l.gate_proj;
    case LlamaTensor::kUp: return l.up_proj;
    case LlamaTensor::kQBias: return l.q_bias;
    case LlamaTensor::kKBias: return l.k_bias;
    case LlamaTensor::kVBias: return l.v_bias;
    case LlamaTensor::kOBias: return l.o_bias;
    case LlamaTensor::kQNorm: return l.q_norm;
    case LlamaTensor::kKNorm: return l.k_norm;
    case LlamaTensor::kQKV: return l.qkv_proj;
    case LlamaTensor::kGateUp: return l.gate_up_proj;
    case LlamaTensor::kGateBias: return l.gate_bias;
    case LlamaTensor::kUpBias: return l.up_bias;
    case LlamaTensor::kDownBias: return l.down_bias;
    case LlamaTensor::kPreFfnNorm: return l.pre_ffn_norm;
    case LlamaTensor::kPostFfnNorm: return l.post_ffn_norm;
    default: return l.down_proj;
  }
}

bool IsNorm(LlamaTensor r) {
  return r == LlamaTensor::kInputNorm || r == LlamaTensor::kPostNorm || r == LlamaTensor::kFinalNorm ||
         r == LlamaTensor::kQNorm || r == LlamaTensor::kKNorm || r == LlamaTensor::kPreFfnNorm ||
         r == LlamaTensor::kPostFfnNorm;
}

// x [.., K] fp32 times w [N, K]ᵀ (+ b): fp32 weights through libtorch; 16-bit
// ones as MatMul16 chooses (matmul16.cpp), in their own dtype when x has at
// least math16_rows rows (> 0; LlamaModel::SetMatmul16).
at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, int64_t math16_rows) {
  if (w.scalar_type() != at::kFloat) {
    const int64_t rows = x.numel() / std::max<int64_t>(1, x.size(-1));
    return MatMul16(x, w, b, math16_rows > 0 && rows >= math16_rows);
  }
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

// Attention of one sequence's queries [Tq, Hq, d] over its keys and values
// [S, Hkv, d] (any dtype) in libtorch, with transformers' order: scores
// scaled, soft-capped (cap > 0), masked, softmax. Query j sits at position
// q_pos0 + j and key i at k_pos0 + i; key visible when k <= q and, with a
// window, q - window < k; with first_visible [Hq, Tq, 1], key slot >= it.
// probs_out, when given, receives [Hq, Tq, S].
at::Tensor MaskedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                           int64_t q_pos0, int64_t k_pos0, int64_t window, double cap,
                           at::Tensor* probs_out = nullptr, const at::Tensor& first_visible = at::Tensor()) {
  const int64_t Tq = q.size(0), Hq = q.size(1), S = k.size(0), Hkv = k.size(1);
  at::Tensor kf = k.to(at::kFloat), vf = v.to(at::kFloat);
  if (Hq != Hkv) {
    kf = kf.repeat_interleave(Hq / Hkv, 1);
    vf = vf.repeat_interleave(Hq / Hkv, 1);
  }
  at::Tensor scores = at::matmul(q.transpose(0, 1), kf.permute({1, 2, 0})) * scale;  // [Hq, Tq, S]
  if (cap > 0) scores = at::tanh(scores / cap) * cap;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(q.device());
  at::Tensor qp = at::arange(Tq, opts).unsqueeze(1) + q_pos0;
  at::Tensor kp = at::arange(S, opts).unsqueeze(0) + k_pos0;
  at::Tensor hidden = kp > qp;
  if (window > 0) hidden = hidden.logical_or(kp <= qp - window);
  if (first_visible.defined()) hidden = hidden.logical_or(kp.unsqueeze(0) < first_visible);  // [Hq, Tq, S]
  scores = scores.masked_fill(hidden, -std::numeric_limits<float>::infinity());
  at::Tensor probs = at::softmax(scores, -1);
  if (probs_out != nullptr) *probs_out = probs;
  return at::matmul(probs, vf.transpose(0, 1)).transpose(0, 1).contiguous();  // [Tq, Hq, d]
}

// The model tensor that a spec names: a layer's, or the embedding, final norm
// or LM head (TensorT: at::Tensor, const or not, as the model is).
template <class LayersT, class TensorT>
TensorT& SpecTensor(LayersT& layers, TensorT& embed, TensorT& final_norm, TensorT& lm_head,
                    const LlamaTensorSpec& spec) {
  if (spec.layer >= 0) return LayerTensor(layers[static_cast<size_t>(spec.layer)], spec.role);
  return spec.role == LlamaTensor::kEmbed ? embed : spec.role == LlamaTensor::kFinalNorm ? final_norm : lm_head;
}

}  // namespace

int64_t DenseKVCache::bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < k.size(); ++i) {
    if (k[i].defined()) n += k[i].numel() * k[i].element_size() + v[i].numel() * v[i].element_size();
  }
  return n;
}

Status LlamaModel::Load(const std::string& dir, std::unique_ptr<LlamaModel>* out) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  KVLAB_RETURN_IF_ERROR(LoadModelConfig(dir + "/config.json", &m->config_));
  std::unique_ptr<CheckpointReader> opened;
  KVLAB_RETURN_IF_ERROR(CheckpointReader::Open(dir, &opened));
  const std::shared_ptr<CheckpointReader> ckpt(std::move(opened));
  const ModelConfig& c = m->config_;
  m->layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (const LlamaTensorSpec& spec : LlamaTensorSpecs(c)) {
    TensorView view;
    std::string name = spec.name;
    // Multimodal gemma3 checkpoints saved by newer transformers put the
    // language model under "model.language_model." instead.
    if (!c.spec.tensor_prefix.empty() && !ckpt->Has(name) && name.rfind("language_model.model.", 0) == 0) {
      const std::string alt = "model.language_model." + name.substr(std::strlen("language_model.model."));
      if (ckpt->Has(alt)) name = alt;
    }
    Status st = ckpt->GetChecked(name, spec.shape, &view);
    if (st.code() == Status::Code::kNotFound) {
      return Status::NotFound(st.message() + ", which a " + c.spec.model_type + " checkpoint of " + dir +
                              "/config.json has");
    }
    KVLAB_RETURN_IF_ERROR(st);
    SpecTensor(m->layers_, m->embed_, m->final_norm_, m->lm_head_, spec) = WeightTensor(view, ckpt);
  }
  m->weight_dtype_ = m->embed_.scalar_type();
  if (c.tie_word_embeddings) m->lm_head_ = m->embed_;
  m->stored_kv_heads_ = static_cast<int>(c.num_key_value_heads);
  m->InitRope();
  *out = std::move(m);
  return Status::OK();
}

Status LlamaModel::Random(const ModelConfig& config, uint64_t seed, std::unique_ptr<LlamaModel>* out,
                          double init_std) {
  KVLAB_RETURN_IF_ERROR(config.Validate("model config '" + config.name + "'"));
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->config_ = config;
  const ModelConfig& c = m->config_;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto randn = [&](const std::vector<int64_t>& shape) { return at::normal(0.0, init_std, shape, gen); };
  const std::vector<LlamaTensorSpec> specs = LlamaTensorSpecs(c);
  // Draw order (embeddings, head, then each layer's tensors) keeps the
  // random Llama presets' weights what they were before other families.
  m->embed_ = randn(specs.front().shape);
  m->lm_head_ = c.tie_word_embeddings ? m->embed_ : randn(specs.back().shape);
  m->layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (const LlamaTensorSpec& spec : specs) {
    if (spec.role == LlamaTensor::kEmbed || spec.role == LlamaTensor::kLmHead) continue;
    at::Tensor t;
    if (IsNorm(spec.role)) {  // unit scale: w = 1, or w = 0 where the norm scales by 1 + w
      t = c.spec.norm_one_plus ? at::zeros(spec.shape) : at::ones(spec.shape);
    } else {
      t = randn(spec.shape);
    }
    SpecTensor(m->layers_, m->embed_, m->final_norm_, m->lm_head_, spec) = t;
  }
  m->stored_kv_heads_ = static_cast<int>(c.num_key_value_heads);
  m->InitRope();
  *out = std::move(m);
  return Status::OK();
}

Status LlamaModel::WriteRandom(const ModelConfig& config, uint64_t seed, double init_std, DType dtype,
                               const std::string& dir) {
  KVLAB_RETURN_IF_ERROR(config.Validate("model config '" + config.name + "'"));
  ModelConfig plain = config;
  plain.spec.tensor_prefix.clear();
  if (dtype != DType::kF32) plain.torch_dtype = dtype == DType::kBF16 ? "bfloat16" : "float16";
  KVLAB_RETURN_IF_ERROR(SaveModelConfig(dir + "/config.json", plain));
  // Random's draws in Random's order (embeddings, head, then the layers'
  // tensors as written), so the weights equal Random's rounded to dtype; one
  // layer tensor is in memory at a time, plus the embeddings and the head.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::ScalarType st = TorchType(dtype);
  auto draw = [&](const std::vector<int64_t>& shape) { return at::normal(0.0, init_std, shape, gen).to(st); };
  const std::vector<LlamaTensorSpec> specs = LlamaTensorSpecs(config), names = LlamaTensorSpecs(plain);
  const at::Tensor embed = draw(specs.front().shape);
  const at::Tensor head = config.tie_word_embeddings ? at::Tensor() : draw(specs.back().shape);
  auto current = std::make_shared<at::Tensor>();
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < specs.size(); ++i) {
    const LlamaTensorSpec spec = specs[i];
    TensorToWrite w;
    w.name = names[i].name;
    w.dtype = dtype;
    w.shape = spec.shape;
    w.produce = [&, spec, current]() -> const void* {
      if (spec.role == LlamaTensor::kEmbed) return embed.data_ptr();
      if (spec.role == LlamaTensor::kLmHead) return head.data_ptr();
      if (IsNorm(spec.role)) {
        *current = (config.spec.norm_one_plus ? at::zeros(spec.shape) : at::ones(spec.shape)).to(st);
      } else {
        *current = draw(spec.shape);
      }
      return current->data_ptr();
    };
    tensors.push_back(std::move(w));
  }
  return WriteSafetensors(dir + "/model.safetensors", tensors);
}

Status LlamaModel::Save(const std::string& dir) const {
  // A multimodal gemma3's language model is saved as a plain gemma3_text checkpoint.
  ModelConfig plain = config_;
  plain.spec.tensor_prefix.clear();
  KVLAB_RETURN_IF_ERROR(SaveModelConfig(dir + "/config.json", plain));
  const std::vector<LlamaTensorSpec> specs = LlamaTensorSpecs(config_), names = LlamaTensorSpecs(plain);
  std::vector<at::Tensor> keep;
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < specs.size(); ++i) {
    keep.push_back(SpecTensor(layers_, embed_, final_norm_, lm_head_, specs[i]).to(at::kCPU).to(weight_dtype_).contiguous());
    TensorToWrite w;
    w.name = names[i].name;
    w.dtype = WeightDType();
    w.shape = keep.back().sizes().vec();
    w.data = keep.back().data_ptr();
    tensors.push_back(std::move(w));
  }
  return WriteSafetensors(dir + "/model.safetensors", tensors);
}

DType LlamaModel::WeightDType() const {
  return weight_dtype_ == at::kBFloat16 ? DType::kBF16 : weight_dtype_ == at::kHalf ? DType::kF16 : DType::kF32;
}

std::vector<at::Tensor*> LlamaModel::AllTensors() {
  std::vector<at::Tensor*> all = {&embed_, &final_norm_};
  for (Layer& l : layers_) {
    for (at::Tensor* t : {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.post_norm, &l.gate_proj,
                          &l.up_proj, &l.down_proj, &l.q_bias, &l.k_bias, &l.v_bias, &l.o_bias, &l.q_norm, &l.k_norm,
                          &l.qkv_proj, &l.gate_up_proj, &l.gate_bias, &l.up_bias, &l.down_bias, &l.pre_ffn_norm,
                          &l.post_ffn_norm}) {
      if (t->defined()) all.push_back(t);
    }
  }
  for (Rope& r : rope_) {
    if (r.inv_freq.defined()) all.push_back(&r.inv_freq);
    if (r.long_inv_freq.defined()) all.push_back(&r.long_inv_freq);
  }
  return all;
}

Status LlamaModel::To(const at::Device& device) {
  try {
    const bool tied = lm_head_.is_same(embed_);
    for (at::Tensor* t : AllTensors()) *t = t->to(device);
    lm_head_ = tied ? embed_ : lm_head_.to(device);
  } catch (const c10::Error& e) {
    return Status::Internal("model '" + config_.name + "': cannot move the weights to " + device.str() + ": " +
                            e.what_without_backtrace());
  }
  return Status::OK();
}

Status LlamaModel::SetKeysBeforeRope(bool on) {
  if (on && config_.rope_scaling.rope_type == "longrope") {
    return Status::InvalidArgument("model '" + config_.name + "': keys stored before RoPE (a policy that moves "
                                   "positions, e.g. sink) are not rotated with LongRoPE's factors by the kernels "
                                   "(rope_scaling type longrope)");
  }
  if (on && config_.RotaryDim() != config_.head_dim) {
    return Status::InvalidArgument("model '" + config_.name + "': keys stored before RoPE (a policy that moves "
                                   "positions, e.g. sink) need RoPE over the whole head; this " +
                                   config_.spec.model_type + " rotates " + std::to_string(config_.RotaryDim()) +
                                   " of " + std::to_string(config_.head_dim) + " channels (partial_rotary_factor)");
  }
  keys_before_rope_ = on;
  return Status::OK();
}

Status LlamaModel::CheckPagedSupport(bool encoded, bool cuda) const {
  if (!encoded && !cuda) return Status::OK();
  const std::string where = encoded ? "a sealed-block encoding (e.g. kivi)" : "device \"cuda\"";
  if (config_.spec.attn_logit_softcapping > 0) {
    return Status::InvalidArgument("model '" + config_.name + "': attention logit soft-capping "
                                   "(attn_logit_softcapping) is computed on the CPU over plain blocks only, not with " +
                                   where);
  }
  if (cuda && std::abs(AttentionScale() * std::sqrt(static_cast<double>(config_.head_dim)) - 1.0) > 1e-12) {
    return Status::InvalidArgument("model '" + config_.name + "': the CUDA attention scales by head_dim^-1/2; this " +
                                   config_.spec.model_type + " scales by query_pre_attn_scalar^-1/2 (" +
                                   std::to_string(config_.spec.query_pre_attn_scalar) + ", head_dim " +
                                   std::to_string(config_.head_dim) + ")");
  }
  return Status::OK();
}

Status LlamaModel::SetStoredKvHeads(int n, HeadMerge merge) {
  const int64_t hkv = config_.num_key_value_heads;
  if (n <= 0 || hkv % n != 0) {
    return Status::InvalidArgument("stored KV heads must divide the model's " + std::to_string(hkv) +
                                   " KV heads, got " + std::to_string(n));
  }
  stored_kv_heads_ = n;
  merge_ = merge;
  return Status::OK();
}

// Llama 3 scaling follows Hugging Face's _compute_llama3_parameters: long
// wavelengths are divided by `factor`, short ones kept, the band between
// interpolated smoothly. Linear scaling divides every frequency by `factor`.
// Gemma 3's sliding layers use rope_local_base_freq without scaling.
void LlamaModel::InitRope() {
  const int64_t r = config_.RotaryDim();
  for (int table = 0; table < 2; ++table) {
    if (table == 1 && config_.spec.rope_local_base_freq <= 0) break;
    const double base = table == 0 ? config_.rope_theta : config_.spec.rope_local_base_freq;
    const RopeScaling rs = table == 0 ? config_.rope_scaling : RopeScaling();
    std::vector<double> inv(static_cast<size_t>(r / 2));
    for (int64_t i = 0; i < r / 2; ++i) {
      double f = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(r));
      if (rs.rope_type == "llama3") {
        const double old_len = static_cast<double>(rs.original_max_position_embeddings);
        const double low_wavelen = old_len / rs.low_freq_factor;
        const double high_wavelen = old_len / rs.high_freq_factor;
        const double wavelen = 2.0 * M_PI / f;
        if (wavelen > low_wavelen) {
          f = f / rs.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
          f = (1.0 - smooth) * f / rs.factor + smooth * f;
        }
      } else if (rs.rope_type == "linear") {
        f = f / rs.factor;
      }
      inv[static_cast<size_t>(i)] = f;
    }
    if (rs.rope_type == "longrope") {  // _compute_longrope_parameters: inv_freq / ext_factor
      std::vector<double> lng(inv);
      for (int64_t i = 0; i < r / 2; ++i) {
        inv[static_cast<size_t>(i)] /= rs.short_factor[static_cast<size_t>(i)];
        lng[static_cast<size_t>(i)] /= rs.long_factor[static_cast<size_t>(i)];
      }
      rope_[table].long_inv_freq = at::tensor(lng, at::kDouble).to(embed_.device());
      rope_[table].long_after = rs.original_max_position_embeddings;
      rope_[table].attention_factor = rs.attention_factor;
    }
    rope_[table].inv_freq = at::tensor(inv, at::kDouble).to(embed_.device());
    rope_[table].inv_freq_f32.assign(inv.begin(), inv.end());
  }
}

int LlamaModel::RopeIndex(size_t layer) const {
  return rope_[1].inv_freq.defined() && config_.LayerWindow(static_cast<int64_t>(layer)) > 0 ? 1 : 0;
}

void LlamaModel::RopeTables(const std::vector<int32_t>& positions, RopeCache* rc) const {
  std::vector<double> pos(positions.begin(), positions.end());
  at::Tensor p = at::tensor(pos, at::kDouble).to(embed_.device());
  int64_t context = rope_context_;
  for (int32_t q : positions) context = std::max<int64_t>(context, static_cast<int64_t>(q) + 1);
  for (int t = 0; t < 2; ++t) {
    const Rope& rope = rope_[t];
    if (!rope.inv_freq.defined()) continue;
    const bool use_long = rope.long_inv_freq.defined() && context > rope.long_after;
    at::Tensor freqs = at::outer(p, use_long ? rope.long_inv_freq : rope.inv_freq);  // [T, r/2]
    at::Tensor emb = at::cat({freqs, freqs}, -1);                                      // [T, r]
    rc->cos[t] = (emb.cos() * rope.attention_factor).to(at::kFloat).unsqueeze(1);      // [T, 1, r]
    rc->sin[t] = (emb.sin() * rope.attention_factor).to(at::kFloat).unsqueeze(1);
  }
}

// Hugging Face's rotate_half convention: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin),
// over the first r channels (phi3's partial rotary); the rest pass through.
at::Tensor LlamaModel::ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const {
  const int64_t r = cos.size(-1), d = x.size(-1);
  at::Tensor xr = r == d ? x : x.narrow(-1, 0, r);
  const int64_t half = r / 2;
  at::Tensor x1 = xr.narrow(-1, 0, half), x2 = xr.narrow(-1, half, half);
  at::Tensor out = xr * cos + at::cat({-x2, x1}, -1) * sin;
  return r == d ? out : at::cat({out, x.narrow(-1, r, d - r)}, -1);
}

at::Tensor LlamaModel::Embed(const std::vector<int32_t>& tokens) const {
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  at::Tensor x = embed_.index_select(0, at::tensor(ids, at::kLong).to(embed_.device())).to(at::kFloat);
  // Gemma: times sqrt(hidden_size), as a tensor of the hidden states' dtype (fp32 here).
  if (config_.spec.scale_embeddings) x = x * static_cast<float>(std::sqrt(static_cast<double>(config_.hidden_size)));
  return x;
}

at::Tensor LlamaModel::RmsNorm(const at::Tensor& x, const at::Tensor& w) const {
  at::Tensor var = x.pow(2).mean(-1, /*keepdim=*/true);
  return x * at::rsqrt(var + config_.rms_norm_eps) * (config_.spec.norm_one_plus ? w + 1.0 : w);
}

at::Tensor LlamaModel::MergeHeads(const at::Tensor& kv) const {
  const int64_t hkv = config_.num_key_value_heads;
  if (stored_kv_heads_ == hkv) return kv;
  at::Tensor grouped = kv.view({kv.size(0), stored_kv_heads_, hkv / stored_kv_heads_, kv.size(2)});
  return merge_ == HeadMerge::kMean ? grouped.mean(2) : grouped.select(2, 0);
}

at::Tensor LlamaModel::Mlp(const Layer& l, const at::Tensor& x) const {
  at::Tensor gate, up;
  if (l.gate_up_proj.defined()) {  // phi3: gate rows, then up rows
    at::Tensor gu = Linear(x, l.gate_up_proj, at::Tensor(), math16_rows_);
    const int64_t I = config_.intermediate_size;
    gate = gu.narrow(-1, 0, I);
    up = gu.narrow(-1, I, I);
  } else {
    gate = Linear(x, l.gate_proj, l.gate_bias, math16_rows_);
    up = Linear(x, l.up_proj, l.up_bias, math16_rows_);
  }
  at::Tensor act = config_.spec.hidden_act == "silu" ? at::silu(gate) : at::gelu(gate, "tanh");
  return Linear(act * up, l.down_proj, l.down_bias, math16_rows_);
}

at::Tensor LlamaModel::Head(const at::Tensor& x) const {
  at::Tensor logits = Linear(RmsNorm(x, final_norm_), lm_head_, at::Tensor(), math16_rows_);
  const double cap = config_.spec.final_logit_softcapping;
  return cap > 0 ? at::tanh(logits / cap) * cap : logits;
}

double LlamaModel::AttentionScale() const {
  const double s = config_.spec.query_pre_attn_scalar;
  return 1.0 / std::sqrt(s > 0 ? s : static_cast<double>(config_.head_dim));
}

void LlamaModel::Project(size_t li, const at::Tensor& h, const RopeCache& rc, bool rotate, at::Tensor* q,
                         at::Tensor* k, at::Tensor* v) const {
  const Layer& l = layers_[li];
  const int64_t T = h.size(0), Hq = config_.num_attention_heads, Hkv = config_.num_key_value_heads,
                d = config_.head_dim;
  if (l.qkv_proj.defined()) {  // phi3: q, k, v rows in that order
    at::Tensor qkv = Linear(h, l.qkv_proj, at::Tensor(), math16_rows_);
    *q = qkv.narrow(-1, 0, Hq * d);
    *k = qkv.narrow(-1, Hq * d, Hkv * d);
    *v = qkv.narrow(-1, (Hq + Hkv) * d, Hkv * d);
  } else {
    *q = Linear(h, l.q_proj, l.q_bias, math16_rows_);
    *k = Linear(h, l.k_proj, l.k_bias, math16_rows_);
    *v = Linear(h, l.v_proj, l.v_bias, math16_rows_);
  }
  *q = q->reshape({T, Hq, d});
  *k = k->reshape({T, Hkv, d});
  *v = v->reshape({T, Hkv, d});
  if (l.q_norm.defined()) {  // qwen3, gemma3: per head, over head_dim, before RoPE
    *q = RmsNorm(*q, l.q_norm);
    *k = RmsNorm(*k, l.k_norm);
  }
  if (rotate) {
    const int t = RopeIndex(li);
    *q = ApplyRope(*q, rc.cos[t], rc.sin[t]);
    *k = ApplyRope(*k, rc.cos[t], rc.sin[t]);
  }
}

// Gemma 2/3 norm the attention and MLP outputs before each residual add and
// the MLP input with pre_feedforward_layernorm; the others norm the MLP input
// with post_attention_layernorm.
at::Tensor LlamaModel::FinishLayer(const Layer& l, const at::Tensor& x, const at::Tensor& o) const {
  at::Tensor a = Linear(o, l.o_proj, l.o_bias, math16_rows_);
  if (config_.spec.sandwich_norms) {
    at::Tensor y = x + RmsNorm(a, l.post_norm);
    return y + RmsNorm(Mlp(l, RmsNorm(y, l.pre_ffn_norm)), l.post_ffn_norm);
  }
  at::Tensor y = x + a;
  return y + Mlp(l, RmsNorm(y, l.post_norm));
}

at::Tensor LlamaModel::ForwardPaged(const PagedForward& in) const {
  const std::vector<int32_t>& tokens = *in.tokens;
  const std::vector<int32_t>& qo_indptr = *in.qo_indptr;
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int B = static_cast<int>(qo_indptr.size()) - 1;
  const int64_t Hq = config_.num_attention_heads, d = config_.head_dim;
  RopeCache rc;
  RopeTables(*in.positions, &rc);
  at::Tensor x = Embed(tokens);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    at::Tensor q, k, v;
    // With keys before RoPE the kernel rotates by positions within the cache.
    Project(li, RmsNorm(x, l.input_norm), rc, !keys_before_rope_, &q, &k, &v);
    q = q.contiguous();
    k = MergeHeads(k).contiguous();
    v = MergeHeads(v).contiguous();
    const int layer = static_cast<int>(li);
    in.attention->Append(layer, k, v);
    LayerAttention a;
    a.layer = layer;
    a.sm_scale = static_cast<float>(AttentionScale());
    a.logit_softcap = static_cast<float>(config_.spec.attn_logit_softcapping);
    if (keys_before_rope_) a.rope_inv_freq = rope_[RopeIndex(li)].inv_freq_f32.data();
    const at::Tensor o = in.attention->Attend(a, q);
    x = FinishLayer(l, x, o.view({T, Hq * d}));
  }
  if (!in.all_logits) {
    std::vector<int64_t> last;
    for (int b = 0; b < B; ++b) last.push_back(qo_indptr[static_cast<size_t>(b) + 1] - 1);
    x = x.index_select(0, at::tensor(last, at::kLong).to(x.device()));
  }
  return Head(x);
}

at::Tensor LlamaModel::ForwardDense(const std::vector<int32_t>& tokens, int64_t start_pos, DenseKVCache* cache,
                                    DType kv_dtype) const {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t Hq = config_.num_attention_heads, d = config_.head_dim;
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(start_pos + i);
  RopeCache rc;
  RopeTables(positions, &rc);
  if (cache->k.empty()) {
    cache->k.resize(layers_.size());
    cache->v.resize(layers_.size());
  }
  const double cap = config_.spec.attn_logit_softcapping;
  at::Tensor x = Embed(tokens);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    at::Tensor q, k, v;
    Project(li, RmsNorm(x, l.input_norm), rc, /*rotate=*/true, &q, &k, &v);
    k = MergeHeads(k).to(TorchType(kv_dtype));
    v = MergeHeads(v).to(TorchType(kv_dtype));
    cache->k[li] = cache->k[li].defined() ? at::cat({cache->k[li], k}, 0) : k;
    cache->v[li] = cache->v[li].defined() ? at::cat({cache->v[li], v}, 0) : v;
    const int64_t window = config_.LayerWindow(static_cast<int64_t>(li));
    const int64_t S = cache->k[li].size(0);
    at::Tensor o = cap > 0 ? MaskedAttention(q, cache->k[li], cache->v[li], AttentionScale(), S - T, 0, window, cap)
                           : DenseAttention(q, cache->k[li], cache->v[li], AttentionScale(), /*causal=*/true, window);
    x = FinishLayer(l, x, o.reshape({T, Hq * d}));
  }
  return Head(x);
}

at::Tensor LlamaModel::ForwardNoCache(const std::vector<int32_t>& tokens) const {
  DenseKVCache scratch;
  return ForwardDense(tokens, 0, &scratch, DType::kF32);
}

}  // namespace kvlab
