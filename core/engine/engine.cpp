#include "core/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <limits>
#include <map>
#include <thread>

#include "core/engine/cuda_backend.h"
#include "core/engine/run_config.h"
#include "core/model/model.h"

namespace kvlab {

struct Engine::Impl {
  EngineOptions options;
  PolicyStack policies;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KVCache> cache;
  std::map<int64_t, int64_t> seq_len;  // tokens processed per sequence
  AttentionBackend backend = AttentionBackend::kCpu;
  std::unique_ptr<CudaBackend> cuda;  // device "cuda": the step's device side

  Status ApplySelection(const std::vector<SeqChunk>& chunks);
  Status ApplyPlacement();
};

namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// EngineOptions::layer_sliding_window, checked against the model's layers.
Status WindowOverride(const EngineOptions& options, int64_t num_layers) {
  if (!options.layer_sliding_window.empty() && static_cast<int64_t>(options.layer_sliding_window.size()) != num_layers) {
    return Status::InvalidArgument("engine: layer_sliding_window has " + std::to_string(options.layer_sliding_window.size()) +
                                   " entries; model '" + options.model + "' runs " + std::to_string(num_layers) + " layers");
  }
  return Status::OK();
}

// A preset name builds random weights; anything else is a model directory.
Status MakeModel(const EngineOptions& options, std::unique_ptr<LlamaModel>* out) {
  ModelConfig preset;
  if (PresetConfig(options.model, &preset).ok()) {
    if (options.num_layers > 0) preset.num_hidden_layers = std::min<int64_t>(preset.num_hidden_layers, options.num_layers);
    if (preset.layer_sliding_window.size() > static_cast<size_t>(preset.num_hidden_layers)) {
      preset.layer_sliding_window.resize(static_cast<size_t>(preset.num_hidden_layers));
    }
    KVLAB_RETURN_IF_ERROR(WindowOverride(options, preset.num_hidden_layers));
    if (!options.layer_sliding_window.empty()) preset.layer_sliding_window = options.layer_sliding_window;
    return LlamaModel::Random(preset, options.weight_seed, out);
  }
  KVLAB_RETURN_IF_ERROR(LlamaModel::Load(options.model, out));
  (*out)->SetMatmul16(options.matmul16);
  KVLAB_RETURN_IF_ERROR(WindowOverride(options, (*out)->config().num_hidden_layers));
  if (!options.layer_sliding_window.empty()) (*out)->SetLayerSlidingWindows(options.layer_sliding_window);
  return Status::OK();
}

}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Status Engine::Create(const EngineOptions& options, const std::vector<PolicySpec>& policy_specs,
                      std::unique_ptr<Engine>* out) {
  KVLAB_RETURN_IF_ERROR(CheckEngineOptions(options));  // bounds before any work (run_config.h)
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.attention == "cpu") {
    impl->backend = AttentionBackend::kCpu;
  } else if (options.attention == "reference") {
    impl->backend = AttentionBackend::kReference;
  } else {
    return Status::InvalidArgument("attention backend '" + options.attention + "': expected cpu or reference");
  }
  const bool on_cuda = options.device == "cuda";
  if (!on_cuda && options.device != "cpu") {
    return Status::InvalidArgument("device '" + options.device + "': expected cpu or cuda");
  }
  const std::string device_option = "device \"cuda\" (--device cuda)";
  if (on_cuda) {
    if (options.attention != "cpu") {
      return Status::InvalidArgument("attention backend '" + options.attention + "' runs on device \"cpu\" only; " +
                                     device_option + " uses the CUDA kernels");
    }
#if KVLAB_ENGINE_CUDA
    KVLAB_RETURN_IF_ERROR(CudaDeviceStatus(device_option));
#else
    return Status::InvalidArgument(device_option + ": this kvlab was built without CUDA (no nvcc at configure time; "
                                   "configure with -DKVLAB_CUDA=ON and a CUDA toolkit)");
#endif
  }
  const int threads = options.num_threads > 0 ? options.num_threads
                                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);

  KVLAB_RETURN_IF_ERROR(PolicyStack::Create(policy_specs, &impl->policies));

  KVLAB_RETURN_IF_ERROR(MakeModel(options, &impl->model));
  const ModelConfig& mc = impl->model->config();
  KVLAB_RETURN_IF_ERROR(impl->policies.CheckShape(static_cast<int>(mc.num_key_value_heads),
                                                   static_cast<int>(mc.head_dim), options.block_size));
  const int stored = impl->policies.StoredKvHeads(static_cast<int>(mc.num_key_value_heads));
  KVLAB_RETURN_IF_ERROR(impl->model->SetStoredKvHeads(stored, impl->policies.MergeMode()));
  KVLAB_RETURN_IF_ERROR(impl->model->SetKeysBeforeRope(impl->policies.KeysBeforeRope()));
  impl->model->SetRopeContext(options.max_context);

  CacheShape shape;
  shape.num_layers = static_cast<int>(mc.num_hidden_layers);
  shape.num_kv_heads = stored;
  shape.head_dim = static_cast<int>(mc.head_dim);
  shape.block_size = options.block_size;
  shape.dtype = impl->policies.StorageDType(options.kv_dtype);
  shape.layer_window = mc.layer_sliding_window;
  int64_t residual = 0;
  shape.encoded = impl->policies.SealedEncoding(shape.head_dim, shape.block_size, &shape.enc, &residual);
  shape.residual = residual;
  KVLAB_RETURN_IF_ERROR(shape.Validate());
  KVLAB_RETURN_IF_ERROR(impl->model->CheckPagedSupport(shape.encoded, on_cuda));
  if (options.max_seqs <= 0 || options.max_context <= 0) {
    return Status::InvalidArgument("engine: max_seqs and max_context must be positive");
  }
  const int64_t blocks_per_stream = (options.max_context + shape.block_size - 1) / shape.block_size;
  const int64_t num_blocks =
      options.num_blocks > 0 ? options.num_blocks : options.max_seqs * shape.StreamsPerSequence() * blocks_per_stream;
  int64_t num_enc_blocks = 0;
  if (shape.encoded) {
    num_enc_blocks = options.max_seqs * shape.StreamsPerSequence() *
                     ((options.max_context + shape.enc.tokens_per_block - 1) / shape.enc.tokens_per_block);
  }
#if KVLAB_ENGINE_CUDA
  if (on_cuda) {
    CudaBackendOptions co;
    co.policies = &impl->policies;
    co.shape = shape;
    co.num_qo_heads = static_cast<int>(mc.num_attention_heads);
    Status s = NewCudaBackend(co, &impl->cuda);
    if (!s.ok()) return Status::InvalidArgument(device_option + ": " + s.message());
  }
#endif
  KVLAB_RETURN_IF_ERROR(KVCache::Create(shape, num_blocks, /*with_storage=*/true, &impl->cache, num_enc_blocks,
                                        impl->cuda ? &impl->cuda->arena_allocator() : nullptr));
  if (impl->cuda) {
    impl->cuda->Attach(impl->cache.get());
    KVLAB_RETURN_IF_ERROR(impl->model->To(impl->cuda->torch_device()));
  }
  PlacementOptions placement;
  if (impl->policies.Placement(&placement)) KVLAB_RETURN_IF_ERROR(impl->cache->EnableOffload(placement));
  if (options.prefix_caching) {
    std::string why_not;
    if (!impl->policies.SharesPrefixBlocks(&why_not)) {
      return Status::InvalidArgument("engine: prefix caching with the stack '" + impl->policies.Describe() + "': " + why_not);
    }
    if (impl->cuda && impl->policies.For(kConcernSelection) != nullptr) {
      return Status::InvalidArgument(device_option + ": prefix caching with the selection policy '" +
                                     std::string(impl->policies.For(kConcernSelection)->Name()) +
                                     "' is not supported yet (copy-on-write of shared blocks on the device)");
    }
    KVLAB_RETURN_IF_ERROR(impl->cache->EnablePrefixCaching());
  }
  out->reset(new Engine(std::move(impl)));
  return Status::OK();
}

const ModelConfig& Engine::model_config() const { return impl_->model->config(); }
DType Engine::weight_dtype() const { return impl_->model->WeightDType(); }
const PolicyStack& Engine::policies() const { return impl_->policies; }
const KVCache& Engine::cache() const { return *impl_->cache; }
const EngineOptions& Engine::options() const { return impl_->options; }

Status Engine::AddSequence(int64_t seq) {
  KVLAB_RETURN_IF_ERROR(impl_->cache->AddSequence(seq));
  impl_->seq_len[seq] = 0;
  return Status::OK();
}

Status Engine::AddSequenceWithPrefix(int64_t seq, const std::vector<BlockHash>& prefix) {
  KVLAB_RETURN_IF_ERROR(impl_->cache->AddSequenceWithPrefix(seq, prefix));
  impl_->seq_len[seq] = static_cast<int64_t>(prefix.size()) * impl_->cache->prefix_unit_tokens();
  return Status::OK();
}

void Engine::CacheFullUnits(int64_t seq, const std::vector<BlockHash>& hashes) { impl_->cache->CacheFullUnits(seq, hashes); }

Status Engine::RemoveSequence(int64_t seq) {
  KVLAB_RETURN_IF_ERROR(impl_->cache->RemoveSequence(seq));
  impl_->seq_len.erase(seq);
  return Status::OK();
}

int64_t Engine::SequenceLength(int64_t seq) const {
  auto it = impl_->seq_len.find(seq);
  return it == impl_->seq_len.end() ? -1 : it->second;
}

bool Engine::CanForward(const std::vector<SeqChunk>& chunks) const {
  int64_t need = 0;
  for (const SeqChunk& c : chunks) need += impl_->cache->BlocksNeeded(c.seq, static_cast<int64_t>(c.tokens.size()));
  return need <= impl_->cache->AvailableBlocks();
}

Status CheckContextLength(const ModelConfig& config, int64_t have, int64_t add, bool allow, const std::string& what) {
  const int64_t max_pos = config.max_position_embeddings;
  if (allow || max_pos <= 0 || add <= max_pos - have) return Status::OK();
  const std::string total = add > std::numeric_limits<int64_t>::max() - have ? "more than 2^63" : std::to_string(have + add);
  return Status::InvalidArgument(what + " would reach " + total + " tokens, past the model's max_position_embeddings of " +
                                 std::to_string(max_pos) +
                                 " (--allow-long-context, or allow_long_context = true in a config, runs past it)");
}

Status Engine::Forward(const std::vector<SeqChunk>& chunks, bool all_logits,
                       std::vector<std::vector<float>>* logits) {
  Impl& s = *impl_;
  const int64_t vocab = s.model->config().vocab_size;
  if (chunks.empty()) return Status::InvalidArgument("Forward: no chunks");
  std::vector<int32_t> tokens, positions, qo_indptr{0};
  std::vector<int64_t> seqs;
  for (const SeqChunk& c : chunks) {
    if (!s.seq_len.count(c.seq)) return Status::NotFound("Forward: sequence " + std::to_string(c.seq) + " was not added");
    if (std::find(seqs.begin(), seqs.end(), c.seq) != seqs.end()) {
      return Status::InvalidArgument("Forward: sequence " + std::to_string(c.seq) + " appears twice in one step");
    }
    if (c.tokens.empty()) return Status::InvalidArgument("Forward: empty chunk for sequence " + std::to_string(c.seq));
    for (int32_t t : c.tokens) {
      if (t < 0 || t >= vocab) {
        return Status::InvalidArgument("token id " + std::to_string(t) + " outside the model's vocabulary [0, " +
                                       std::to_string(vocab) + ")");
      }
    }
    seqs.push_back(c.seq);
    const int64_t start = s.seq_len[c.seq];
    KVLAB_RETURN_IF_ERROR(CheckContextLength(s.model->config(), start, static_cast<int64_t>(c.tokens.size()),
                                             s.options.allow_long_context, "sequence " + std::to_string(c.seq)));
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      tokens.push_back(c.tokens[i]);
      positions.push_back(static_cast<int32_t>(start + static_cast<int64_t>(i)));
    }
    qo_indptr.push_back(static_cast<int32_t>(tokens.size()));
  }
  if (!CanForward(chunks)) {
    return Status::ResourceExhausted("KV pool has " + std::to_string(s.cache->AvailableBlocks()) +
                                     " free blocks, too few for this step");
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int32_t* pos = positions.data() + qo_indptr[i];
    KVLAB_RETURN_IF_ERROR(s.cache->Reserve(chunks[i].seq, static_cast<int64_t>(chunks[i].tokens.size()), pos));
  }
  PageTable pt;
  StagingPlan staging;
  KVLAB_RETURN_IF_ERROR(s.cache->PlanStep(seqs, &pt, &staging));
  s.cache->BuildWindows(seqs, qo_indptr, &pt);

  // Per-slot attention for selection policies that rank by it (H2O).
  std::vector<float> slot_attn;
  std::vector<int64_t> slot_offsets;
  const CacheShape& shape = s.cache->shape();
  const bool want_scores = s.policies.NeedsAttentionScores();
  int64_t total = 0;
  if (want_scores) {
    for (int l = 0; l < shape.num_layers; ++l) {
      for (size_t b = 0; b < seqs.size(); ++b) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          slot_offsets.push_back(total);
          total += pt.StreamLength(l, static_cast<int>(b), h);
        }
      }
    }
    slot_attn.assign(static_cast<size_t>(total), 0.0f);
  }

  PagedForward in;
  in.tokens = &tokens;
  in.positions = &positions;
  in.qo_indptr = &qo_indptr;
  in.page_table = &pt;
  in.backend = s.backend;
  in.all_logits = all_logits;
  if (s.cuda) {
    KVLAB_RETURN_IF_ERROR(s.cuda->BeginStep(pt, qo_indptr, want_scores ? &slot_offsets : nullptr, total));
    CudaBackend* cuda = s.cuda.get();
    in.attention = [cuda](int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return cuda->Attention(layer, q, k, v);
    };
  } else if (want_scores) {
    in.slot_attn = slot_attn.data();
    in.slot_attn_offsets = slot_offsets.data();
  }
  // Offloaded blocks: layer 0's are loaded before it runs; each layer starts
  // loading the next layer's into the other staging set while it computes.
  Status load_status;
  std::future<Status> next_load;
  if (!staging.empty()) {
    in.before_attention = [&](int layer) {
      Status st = layer == 0 ? s.cache->LoadStaged(staging, 0) : next_load.get();
      if (!st.ok() && load_status.ok()) load_status = st;
      if (layer + 1 < shape.num_layers) {
        next_load = std::async(std::launch::async, [&s, &staging, layer] { return s.cache->LoadStaged(staging, layer + 1); });
      }
    };
  }
  // Logits come back to the host (a no-op on the CPU).
  at::Tensor out = s.model->ForwardPaged(in).to(at::kCPU).contiguous();
  s.cache->ReleaseStaging(&staging);
  KVLAB_RETURN_IF_ERROR(load_status);
  if (s.cuda) KVLAB_RETURN_IF_ERROR(s.cuda->EndStep(want_scores ? &slot_attn : nullptr));
  const float* data = out.data_ptr<float>();
  logits->assign(chunks.size(), {});
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int64_t row0 = all_logits ? qo_indptr[i] : static_cast<int64_t>(i);
    const int64_t rows = all_logits ? qo_indptr[i + 1] - qo_indptr[i] : 1;
    (*logits)[i].assign(data + row0 * vocab, data + (row0 + rows) * vocab);
    s.seq_len[chunks[i].seq] += static_cast<int64_t>(chunks[i].tokens.size());
  }
  if (want_scores) {
    size_t k = 0;
    for (int l = 0; l < shape.num_layers; ++l) {
      for (size_t b = 0; b < seqs.size(); ++b) {
        for (int h = 0; h < shape.num_kv_heads; ++h, ++k) {
          Stream& st = s.cache->mutable_stream(seqs[b], l, h);
          const float* a = slot_attn.data() + slot_offsets[k];
          for (int64_t j = 0; j < st.num_tokens; ++j) st.score[static_cast<size_t>(j)] += a[j];
        }
      }
    }
  }
  KVLAB_RETURN_IF_ERROR(s.ApplySelection(chunks));
  if (s.cuda) {
    KVLAB_RETURN_IF_ERROR(s.cuda->Seal(seqs));
  } else {
    for (const SeqChunk& c : chunks) s.cache->Seal(c.seq);
  }
  return s.ApplyPlacement();
}

// Core applies what the selection policy proposes and what sliding windows
// no longer show: compaction and freeing (on the device, the CUDA backend
// moves the kept rows).
Status Engine::Impl::ApplySelection(const std::vector<SeqChunk>& chunks) {
  const KVPolicy* sel = policies.For(kConcernSelection);
  const CacheShape& shape = cache->shape();
  if (sel == nullptr && !shape.HasWindows()) return Status::OK();
  std::vector<int64_t> keep;
  for (const SeqChunk& c : chunks) {
    for (int l = 0; l < shape.num_layers; ++l) {
      for (int h = 0; h < shape.num_kv_heads; ++h) {
        // The next query sits at position seq_len (the tokens processed so far).
        if (!cache->SlotsToKeep(c.seq, l, h, seq_len[c.seq], sel, &keep)) continue;
        if (cuda) {
          KVLAB_RETURN_IF_ERROR(cuda->Compact(c.seq, l, h, keep));
        } else {
          cache->Compact(c.seq, l, h, keep);
        }
      }
    }
  }
  return cuda ? cuda->FinishCompaction() : Status::OK();
}

// Core moves what the placement policy ranks lowest off the device until the
// resident bytes fit its budget. The open tail block of each stream (where
// the next tokens are written) always stays.
Status Engine::Impl::ApplyPlacement() {
  const KVPolicy* place = policies.For(kConcernPlacement);
  PlacementOptions po;
  if (place == nullptr || !place->Placement(&po) || cache->DeviceBytesInUse() <= po.device_budget_bytes) {
    return Status::OK();
  }
  struct Candidate {
    double priority;
    int64_t seq;
    int layer, head;
    bool encoded;
    size_t index;
    int64_t bytes;
  };
  std::vector<Candidate> cands;
  const CacheShape& shape = cache->shape();
  for (const auto& kv : seq_len) {
    for (int l = 0; l < shape.num_layers; ++l) {
      for (int h = 0; h < shape.num_kv_heads; ++h) {
        const Stream& st = cache->stream(kv.first, l, h);
        const StreamState ss = StateOf(st, l, h, kv.second, shape.block_size);
        const int tpb = shape.enc.tokens_per_block;
        for (size_t i = 0; i < st.enc_blocks.size(); ++i) {
          if (IsOffloaded(st.enc_blocks[i])) continue;
          cands.push_back({place->BlockPriority(ss, static_cast<int64_t>(i) * tpb, tpb), kv.first, l, h, true, i,
                           cache->encoded_pool()->block_bytes()});
        }
        for (size_t i = 0; i + 1 < st.blocks.size(); ++i) {
          if (IsOffloaded(st.blocks[i])) continue;
          const int64_t first = st.num_encoded + static_cast<int64_t>(i) * shape.block_size;
          cands.push_back({place->BlockPriority(ss, first, shape.block_size), kv.first, l, h, false, i,
                           cache->pool().block_bytes()});
        }
      }
    }
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.priority < b.priority; });
  int64_t resident = cache->DeviceBytesInUse();
  for (const Candidate& c : cands) {
    if (resident <= po.device_budget_bytes) break;
    KVLAB_RETURN_IF_ERROR(cache->Demote(c.seq, c.layer, c.head, c.encoded, c.index));
    resident -= c.bytes;
  }
  return Status::OK();
}

Status Engine::Generate(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options,
                        std::vector<GenerateResult>* results, GenerateStats* stats) {
  KVLAB_RETURN_IF_ERROR(CheckGenerateOptions(options));
  Impl& s = *impl_;
  const int64_t vocab = s.model->config().vocab_size;
  const int64_t eos = s.model->config().eos_token_id;
  const int64_t n = static_cast<int64_t>(prompts.size());
  int64_t first_id = 0;
  for (const auto& kv : s.seq_len) first_id = std::max(first_id, kv.first + 1);
  results->assign(prompts.size(), {});
  *stats = GenerateStats();
  std::vector<Sampler> samplers;
  std::vector<int32_t> next(prompts.size());
  for (int64_t i = 0; i < n; ++i) {
    if (prompts[static_cast<size_t>(i)].empty()) return Status::InvalidArgument("prompt " + std::to_string(i) + " is empty");
    KVLAB_RETURN_IF_ERROR(AddSequence(first_id + i));
    samplers.emplace_back(options.sampling, static_cast<uint64_t>(i));
  }
  Status st;
  std::vector<std::vector<float>> logits;
  // Prefill: each prompt in chunks of prefill_chunk tokens, one sequence per step.
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n && st.ok(); ++i) {
    const auto& p = prompts[static_cast<size_t>(i)];
    const size_t chunk = static_cast<size_t>(std::max<int64_t>(1, s.options.prefill_chunk));
    for (size_t off = 0; off < p.size() && st.ok(); off += chunk) {
      SeqChunk c{first_id + i, std::vector<int32_t>(p.begin() + off, p.begin() + std::min(p.size(), off + chunk))};
      st = Forward({c}, false, &logits);
    }
    if (st.ok()) next[static_cast<size_t>(i)] = samplers[static_cast<size_t>(i)].Sample(logits[0].data(), vocab);
  }
  stats->prefill_ms = MsSince(t0);
  // Decode: all unfinished sequences together, one token each per step.
  std::vector<bool> done(prompts.size(), false);
  for (int64_t step = 0; step < options.max_new_tokens && st.ok(); ++step) {
    std::vector<SeqChunk> chunks;
    std::vector<size_t> idx;
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (done[i]) continue;
      (*results)[i].tokens.push_back(next[i]);
      const bool hit_eos = options.stop_at_eos && eos >= 0 && next[i] == eos;
      if (hit_eos || static_cast<int64_t>((*results)[i].tokens.size()) >= options.max_new_tokens) {
        done[i] = true;
        continue;
      }
      chunks.push_back({first_id + static_cast<int64_t>(i), {next[i]}});
      idx.push_back(i);
    }
    if (chunks.empty()) break;
    t0 = std::chrono::steady_clock::now();
    st = Forward(chunks, false, &logits);
    stats->decode_step_ms.push_back(MsSince(t0));
    for (size_t j = 0; j < idx.size() && st.ok(); ++j) next[idx[j]] = samplers[idx[j]].Sample(logits[j].data(), vocab);
  }
  stats->memory_at_end = Memory();
  for (int64_t i = 0; i < n; ++i) {
    if (s.seq_len.count(first_id + i)) RemoveSequence(first_id + i);
  }
  return st;
}

Status DenseLogits(const EngineOptions& options, const std::vector<int32_t>& tokens, bool nocache,
                   std::vector<float>* out) {
  std::unique_ptr<LlamaModel> model;
  KVLAB_RETURN_IF_ERROR(MakeModel(options, &model));
  model->SetRopeContext(static_cast<int64_t>(tokens.size()));
  const int64_t vocab = model->config().vocab_size;
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab) return Status::InvalidArgument("token id " + std::to_string(t) + " outside the vocabulary");
  }
  out->clear();
  if (nocache) {
    at::Tensor l = model->ForwardNoCache(tokens).contiguous();
    out->assign(l.data_ptr<float>(), l.data_ptr<float>() + l.numel());
    return Status::OK();
  }
  DenseKVCache cache;
  for (size_t i = 0; i < tokens.size(); ++i) {
    at::Tensor l = model->ForwardDense({tokens[i]}, static_cast<int64_t>(i), &cache, options.kv_dtype).contiguous();
    out->insert(out->end(), l.data_ptr<float>(), l.data_ptr<float>() + l.numel());
  }
  return Status::OK();
}

Status WriteRandomCheckpoint(const ModelConfig& config, uint64_t seed, double init_std, const std::string& dir,
                             DType dtype) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError(dir + ": cannot create directory: " + ec.message());
  return LlamaModel::WriteRandom(config, seed, init_std, dtype, dir);
}

MemoryStats Engine::Memory() const {
  const KVCache& c = *impl_->cache;
  MemoryStats m;
  m.bytes_in_use = c.BytesInUse();
  m.bytes_reserved = c.BytesReserved();
  m.peak_bytes_in_use = c.PeakBytesInUse();
  m.blocks_in_use = c.BlocksInUse();
  m.block_bytes = c.pool().block_bytes();
  m.device_bytes = c.DeviceBytesInUse();
  m.peak_device_bytes = c.PeakDeviceBytesInUse();
  m.host_bytes = c.HostBytesInUse();
  m.disk_bytes = c.DiskBytesInUse();
  for (const auto& kv : impl_->seq_len) {
    m.slots_in_use += impl_->cache->SlotsInUse(kv.first);
    m.tokens_seen += kv.second;
  }
  return m;
}

}  // namespace kvlab
