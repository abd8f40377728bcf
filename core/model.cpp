#include "core/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstring>

#include "core/llama_tensors.h"
#include "core/safetensors.h"
#include "kernels/append_kv.h"
#include "kernels/attention_encoded.h"
#include "kernels/attention_cpu.h"
#include "kernels/attention_reference.h"
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

// Copies a (possibly unaligned) mapped tensor into an owned fp32 tensor.
at::Tensor ToTensor(const TensorView& v) {
  at::Tensor raw = at::empty(v.shape, at::TensorOptions().dtype(TorchType(v.dtype)));
  std::memcpy(raw.data_ptr(), v.data, static_cast<size_t>(v.nbytes));
  return raw.to(at::kFloat).contiguous();
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
    default: return l.down_proj;
  }
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
  std::unique_ptr<CheckpointReader> ckpt;
  KVLAB_RETURN_IF_ERROR(CheckpointReader::Open(dir, &ckpt));
  const ModelConfig& c = m->config_;
  m->layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (const LlamaTensorSpec& spec : LlamaTensorSpecs(c)) {
    TensorView view;
    KVLAB_RETURN_IF_ERROR(ckpt->GetChecked(spec.name, spec.shape, &view));
    SpecTensor(m->layers_, m->embed_, m->final_norm_, m->lm_head_, spec) = ToTensor(view);
  }
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
  const int64_t D = c.hidden_size, d = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto randn = [&](std::vector<int64_t> shape) { return at::normal(0.0, init_std, shape, gen); };
  auto ones = [&](int64_t n) { return at::ones({n}); };
  m->embed_ = randn({V, D});
  m->final_norm_ = ones(D);
  m->lm_head_ = c.tie_word_embeddings ? m->embed_ : randn({V, D});
  m->layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (Layer& l : m->layers_) {
    l.input_norm = ones(D);
    l.q_proj = randn({Hq * d, D});
    l.k_proj = randn({Hkv * d, D});
    l.v_proj = randn({Hkv * d, D});
    l.o_proj = randn({D, Hq * d});
    l.post_norm = ones(D);
    l.gate_proj = randn({I, D});
    l.up_proj = randn({I, D});
    l.down_proj = randn({D, I});
  }
  m->stored_kv_heads_ = static_cast<int>(Hkv);
  m->InitRope();
  *out = std::move(m);
  return Status::OK();
}

Status LlamaModel::Save(const std::string& dir) const {
  KVLAB_RETURN_IF_ERROR(SaveModelConfig(dir + "/config.json", config_));
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const LlamaTensorSpec& spec : LlamaTensorSpecs(config_)) {
    named.push_back({spec.name, SpecTensor(layers_, embed_, final_norm_, lm_head_, spec)});
  }
  std::vector<at::Tensor> keep;
  std::vector<TensorToWrite> tensors;
  for (auto& nt : named) {
    keep.push_back(nt.second.to(at::kCPU).to(at::kFloat).contiguous());
    TensorToWrite w;
    w.name = nt.first;
    w.dtype = DType::kF32;
    w.shape = keep.back().sizes().vec();
    w.data = keep.back().data_ptr();
    tensors.push_back(std::move(w));
  }
  return WriteSafetensors(dir + "/model.safetensors", tensors);
}

Status LlamaModel::To(const at::Device& device) {
  try {
    const bool tied = lm_head_.is_same(embed_);
    embed_ = embed_.to(device);
    final_norm_ = final_norm_.to(device);
    lm_head_ = tied ? embed_ : lm_head_.to(device);
    for (Layer& l : layers_) {
      for (at::Tensor* t : {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.post_norm, &l.gate_proj,
                            &l.up_proj, &l.down_proj}) {
        *t = t->to(device);
      }
    }
    inv_freq_ = inv_freq_.to(device);
  } catch (const c10::Error& e) {
    return Status::Internal("model '" + config_.name + "': cannot move the weights to " + device.str() + ": " +
                            e.what_without_backtrace());
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
// interpolated smoothly.
void LlamaModel::InitRope() {
  const int64_t d = config_.head_dim;
  std::vector<double> inv(static_cast<size_t>(d / 2));
  const RopeScaling& rs = config_.rope_scaling;
  for (int64_t i = 0; i < d / 2; ++i) {
    double f = 1.0 / std::pow(config_.rope_theta, static_cast<double>(2 * i) / static_cast<double>(d));
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
    }
    inv[static_cast<size_t>(i)] = f;
  }
  inv_freq_ = at::tensor(inv, at::kDouble);
  inv_freq_f32_.assign(inv.begin(), inv.end());
}

void LlamaModel::RopeTables(const std::vector<int32_t>& positions, at::Tensor* cos, at::Tensor* sin) const {
  std::vector<double> pos(positions.begin(), positions.end());
  at::Tensor p = at::tensor(pos, at::kDouble).to(inv_freq_.device());
  at::Tensor freqs = at::outer(p, inv_freq_);          // [T, d/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);         // [T, d]
  *cos = emb.cos().to(at::kFloat).unsqueeze(1);         // [T, 1, d]
  *sin = emb.sin().to(at::kFloat).unsqueeze(1);
}

// Hugging Face's rotate_half convention: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
at::Tensor LlamaModel::ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const {
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  at::Tensor rot = at::cat({-x2, x1}, -1);
  return x * cos + rot * sin;
}

at::Tensor LlamaModel::Embed(const std::vector<int32_t>& tokens) const {
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  return embed_.index_select(0, at::tensor(ids, at::kLong).to(embed_.device()));
}

at::Tensor LlamaModel::RmsNorm(const at::Tensor& x, const at::Tensor& w) const {
  at::Tensor var = x.pow(2).mean(-1, /*keepdim=*/true);
  return x * at::rsqrt(var + config_.rms_norm_eps) * w;
}

at::Tensor LlamaModel::MergeHeads(const at::Tensor& kv) const {
  const int64_t hkv = config_.num_key_value_heads;
  if (stored_kv_heads_ == hkv) return kv;
  at::Tensor grouped = kv.view({kv.size(0), stored_kv_heads_, hkv / stored_kv_heads_, kv.size(2)});
  return merge_ == HeadMerge::kMean ? grouped.mean(2) : grouped.select(2, 0);
}

at::Tensor LlamaModel::Mlp(const Layer& l, const at::Tensor& x) const {
  return at::linear(at::silu(at::linear(x, l.gate_proj)) * at::linear(x, l.up_proj), l.down_proj);
}

at::Tensor LlamaModel::Head(const at::Tensor& x) const { return at::linear(RmsNorm(x, final_norm_), lm_head_); }

at::Tensor LlamaModel::ForwardPaged(const PagedForward& in) const {
  const std::vector<int32_t>& tokens = *in.tokens;
  const std::vector<int32_t>& qo_indptr = *in.qo_indptr;
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int B = static_cast<int>(qo_indptr.size()) - 1;
  const int64_t Hq = config_.num_attention_heads, Hkv = config_.num_key_value_heads, d = config_.head_dim;
  at::Tensor cos, sin;
  RopeTables(*in.positions, &cos, &sin);
  at::Tensor x = Embed(tokens);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    at::Tensor h = RmsNorm(x, l.input_norm);
    at::Tensor q = at::linear(h, l.q_proj).view({T, Hq, d});
    at::Tensor k = at::linear(h, l.k_proj).view({T, Hkv, d});
    if (!keys_before_rope_) {  // else the kernel rotates by positions within the cache
      q = ApplyRope(q, cos, sin);
      k = ApplyRope(k, cos, sin);
    }
    q = q.contiguous();
    k = MergeHeads(k).contiguous();
    at::Tensor v = MergeHeads(at::linear(h, l.v_proj).view({T, Hkv, d})).contiguous();
    if (in.before_attention) in.before_attention(static_cast<int>(li));
    if (in.attention) {
      at::Tensor o = in.attention(static_cast<int>(li), q, k, v);
      x = x + at::linear(o.view({T, Hq * d}), l.o_proj);
      x = x + Mlp(l, RmsNorm(x, l.post_norm));
      continue;
    }
    const PagedKV kv = in.page_table->Layer(static_cast<int>(li));
    AppendKV(kv, qo_indptr.data(), B, stored_kv_heads_, k.data_ptr<float>(), v.data_ptr<float>());
    at::Tensor o = at::empty({T, Hq, d});
    AttentionParams p;
    p.num_seqs = B;
    p.num_qo_heads = static_cast<int>(Hq);
    p.num_kv_heads = stored_kv_heads_;
    p.head_dim = static_cast<int>(d);
    p.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    p.qo_indptr = qo_indptr.data();
    p.q = q.data_ptr<float>();
    p.o = o.data_ptr<float>();
    if (keys_before_rope_) p.rope_inv_freq = inv_freq_f32_.data();
    p.first_visible = in.page_table->FirstVisible(static_cast<int>(li));
    if (in.slot_attn != nullptr) {
      p.slot_attn = in.slot_attn;
      p.slot_attn_offsets = in.slot_attn_offsets + li * static_cast<size_t>(kv.num_streams);
    }
    const EncodedKV* enc = in.page_table->Encoded(static_cast<int>(li));
    if (enc != nullptr) {
      if (in.backend == AttentionBackend::kReference) {
        PagedAttentionEncodedReference(kv, *enc, p);
      } else {
        PagedAttentionEncodedCpu(kv, *enc, p);
      }
    } else if (in.backend == AttentionBackend::kReference) {
      PagedAttentionReference(kv, p);
    } else {
      PagedAttentionCpu(kv, p);
    }
    x = x + at::linear(o.view({T, Hq * d}), l.o_proj);
    x = x + Mlp(l, RmsNorm(x, l.post_norm));
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
  const int64_t Hq = config_.num_attention_heads, Hkv = config_.num_key_value_heads, d = config_.head_dim;
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(start_pos + i);
  at::Tensor cos, sin;
  RopeTables(positions, &cos, &sin);
  if (cache->k.empty()) {
    cache->k.resize(layers_.size());
    cache->v.resize(layers_.size());
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  at::Tensor x = Embed(tokens);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    at::Tensor h = RmsNorm(x, l.input_norm);
    at::Tensor q = ApplyRope(at::linear(h, l.q_proj).view({T, Hq, d}), cos, sin);
    at::Tensor k = MergeHeads(ApplyRope(at::linear(h, l.k_proj).view({T, Hkv, d}), cos, sin)).to(TorchType(kv_dtype));
    at::Tensor v = MergeHeads(at::linear(h, l.v_proj).view({T, Hkv, d})).to(TorchType(kv_dtype));
    cache->k[li] = cache->k[li].defined() ? at::cat({cache->k[li], k}, 0) : k;
    cache->v[li] = cache->v[li].defined() ? at::cat({cache->v[li], v}, 0) : v;
    const int64_t window = li < config_.layer_sliding_window.size() ? config_.layer_sliding_window[li] : 0;
    at::Tensor o = DenseAttention(q, cache->k[li], cache->v[li], scale, /*causal=*/true, window);
    x = x + at::linear(o.reshape({T, Hq * d}), l.o_proj);
    x = x + Mlp(l, RmsNorm(x, l.post_norm));
  }
  return Head(x);
}

at::Tensor LlamaModel::ForwardNoCache(const std::vector<int32_t>& tokens) const {
  DenseKVCache scratch;
  return ForwardDense(tokens, 0, &scratch, DType::kF32);
}

}  // namespace kvlab
