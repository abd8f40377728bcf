#include "core/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <map>
#include <thread>

#include "core/attention/backend.h"
#include "core/attention/cuda_backend.h"
#include "core/base/untrusted.h"
#include "core/cache/cache_step.h"
#include "core/engine/run_config.h"
#include "core/model/matmul16.h"
#include "core/model/model.h"

namespace kvlab {

struct Engine::Impl {
  EngineOptions options;
  PolicyStack policies;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KVCache> cache;
  // Chosen once at Create: where attention runs and the pools live.
  std::unique_ptr<AttentionBackend> backend;
  std::map<int64_t, int64_t> seq_len;  // tokens processed per sequence
  PoolReservation reservation;
  int64_t step_tokens = 0;             // Engine::step_tokens()
  ReadStats reads;                     // Engine::reads()
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
    if (options.num_layers > 0) preset.KeepFirstLayers(options.num_layers);
    KVLAB_RETURN_IF_ERROR(WindowOverride(options, preset.num_hidden_layers));
    if (!options.layer_sliding_window.empty()) preset.layer_sliding_window = options.layer_sliding_window;
    return LlamaModel::Random(preset, options.weight_seed, out);
  }
  KVLAB_RETURN_IF_ERROR(LlamaModel::Load(options.model, out));
  static_assert(kMatmul16PrefillRows == kMatMul16SmallRows + 1, "prefill rows: one past the decode kernel's");
  (*out)->SetMatmul16(options.matmul16);
  KVLAB_RETURN_IF_ERROR(WindowOverride(options, (*out)->config().num_hidden_layers));
  if (!options.layer_sliding_window.empty()) (*out)->SetLayerSlidingWindows(options.layer_sliding_window);
  return Status::OK();
}

// The attention backends a run can ask for (EngineOptions::attention, device).
enum class BackendKind { kCpu, kReference, kCuda };
const char kDeviceOption[] = "device \"cuda\" (--device cuda)";

Status ChooseBackend(const EngineOptions& options, BackendKind* kind) {
  if (options.attention != "cpu" && options.attention != "reference") {
    return Status::InvalidArgument("attention backend '" + options.attention + "': expected cpu or reference");
  }
  if (options.device == "cpu") {
    *kind = options.attention == "cpu" ? BackendKind::kCpu : BackendKind::kReference;
    return Status::OK();
  }
  if (options.device != "cuda") return Status::InvalidArgument("device '" + options.device + "': expected cpu or cuda");
  const std::string device_option = kDeviceOption;
  if (options.attention != "cpu") {
    return Status::InvalidArgument("attention backend '" + options.attention + "' runs on device \"cpu\" only; " +
                                   device_option + " uses the CUDA kernels");
  }
#if KVLAB_ENGINE_CUDA
  KVLAB_RETURN_IF_ERROR(CudaDeviceStatus(device_option));
  *kind = BackendKind::kCuda;
  return Status::OK();
#else
  return Status::InvalidArgument(device_option + ": this kvlab was built without CUDA (no nvcc at configure time; "
                                 "configure with -DKVLAB_CUDA=ON and a CUDA toolkit)");
#endif
}

Status NewBackend(BackendKind kind, const PolicyStack& stack, const CacheShape& shape, const ModelConfig& mc,
                  bool prefix_caching, std::unique_ptr<AttentionBackend>* out) {
  if (kind != BackendKind::kCuda) {
    *out = NewHostAttention(kind == BackendKind::kReference, stack.AttentionKernelOptions(),
                            static_cast<int>(mc.num_attention_heads));
    return Status::OK();
  }
#if KVLAB_ENGINE_CUDA
  CudaBackendOptions co;
  co.policies = &stack;
  co.shape = shape;
  co.num_qo_heads = static_cast<int>(mc.num_attention_heads);
  co.prefix_caching = prefix_caching;
  const Status s = NewCudaBackend(co, out);
  if (!s.ok()) return Status::InvalidArgument(std::string(kDeviceOption) + ": " + s.message());
  return Status::OK();
#else
  (void)shape, (void)mc, (void)prefix_caching;
  return Status::Internal("engine: no CUDA backend in this build");  // ChooseBackend refused it
#endif
}

}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Status Engine::Create(const EngineOptions& options, const std::vector<PolicySpec>& policy_specs,
                      std::unique_ptr<Engine>* out) {
  KVLAB_RETURN_IF_ERROR(CheckEngineOptions(options));  // bounds before any work (run_config.h)
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  BackendKind kind = BackendKind::kCpu;
  KVLAB_RETURN_IF_ERROR(ChooseBackend(options, &kind));
  const int threads = options.num_threads > 0 ? options.num_threads
                                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);

  KVLAB_RETURN_IF_ERROR(PolicyStack::Create(policy_specs, &impl->policies));

  KVLAB_RETURN_IF_ERROR(MakeModel(options, &impl->model));
  const ModelConfig& mc = impl->model->config();
  CacheShape shape;
  KVLAB_RETURN_IF_ERROR(DeriveCacheShape(KvShapeOf(mc), impl->policies, options.block_size, options.kv_dtype, &shape));
  KVLAB_RETURN_IF_ERROR(impl->model->SetStoredKvHeads(shape.num_kv_heads, impl->policies.MergeMode()));
  KVLAB_RETURN_IF_ERROR(impl->model->SetKeysBeforeRope(impl->policies.KeysBeforeRope()));
  impl->model->SetRopeContext(options.max_context);
  KVLAB_RETURN_IF_ERROR(NewBackend(kind, impl->policies, shape, mc, options.prefix_caching, &impl->backend));
  KVLAB_RETURN_IF_ERROR(impl->model->CheckPagedSupport(shape.encoded, impl->backend->on_device()));
  if (const KVPolicy* read = impl->policies.ReadPolicy(); read != nullptr && mc.spec.attn_logit_softcapping > 0) {
    return Status::InvalidArgument("policy '" + std::string(read->Name()) + "' (read) with model '" + options.model +
                                   "': soft-capped attention (attn_logit_softcapping) runs on the reference kernel, "
                                   "which reads every block, not the selected ones");
  }
  if (options.max_seqs <= 0 || options.max_context <= 0) {
    return Status::InvalidArgument("engine: max_seqs and max_context must be positive");
  }
  PlacementOptions placement;
  const bool places = impl->policies.Placement(&placement);
  const bool bounded = options.max_step_tokens > 0 &&
                       (impl->policies.For(kConcernSelection) != nullptr || shape.encoded || places);
  impl->step_tokens = bounded ? options.max_step_tokens : 0;
  if (const int64_t w = impl->policies.ObservationWindow(); w > 0 && impl->step_tokens > 0 && w > impl->step_tokens) {
    return Status::InvalidArgument("policy '" + std::string(impl->policies.ScoringPolicy()->Name()) + "' parameter 'window' is " +
                                   std::to_string(w) + ", more than the engine's max_step_tokens " +
                                   std::to_string(impl->step_tokens) + ": the observation window must fit in one step");
  }
  ReservationRequest rr;
  rr.max_seqs = options.max_seqs;
  rr.max_context = options.max_context;
  rr.step_tokens = bounded ? options.max_step_tokens : options.max_context;
  rr.prefix_caching = options.prefix_caching;
  rr.lower_step_to_fit_full = bounded && options.num_blocks <= 0;
  KVLAB_RETURN_IF_ERROR(ReservePools(shape, KvShapeOf(mc), options.kv_dtype, impl->policies, rr, &impl->reservation));
  PoolReservation& res = impl->reservation;
  if (bounded && res.step_tokens < std::min(options.max_step_tokens, options.max_context)) {
    impl->step_tokens = res.step_tokens;  // lowered so an encoding reserves no more than full (res.why says so)
  }
  if (options.num_blocks > 0) {
    res.plain_blocks = options.num_blocks;
    res.plain_bytes = options.num_blocks * shape.BlockBytes();
    const size_t enc_rule = res.why.find("\nencoded");
    res.why = "plain: " + std::to_string(options.num_blocks) + " blocks (num_blocks, as given)" +
              (enc_rule == std::string::npos ? "" : res.why.substr(enc_rule));
  }
  const int64_t num_blocks = res.plain_blocks;
  const int64_t num_enc_blocks = res.encoded_blocks;
  if (!impl->backend->on_device()) {
    // The pools live in host memory: refuse up front what the host cannot hold.
    const Status fits = CheckHostMemory("engine: the KV pools (" + std::to_string(options.max_seqs) + " sequences x " +
                                            std::to_string(options.max_context) + " tokens, stack '" +
                                            impl->policies.Describe() + "')",
                                        res.bytes());
    if (!fits.ok()) return Status::ResourceExhausted(fits.message() + "; lower max_seqs or the context");
  }
  KVLAB_RETURN_IF_ERROR(KVCache::Create(shape, num_blocks, /*with_storage=*/true, &impl->cache, num_enc_blocks,
                                        impl->backend->arena_allocator()));
  impl->cache->SetRunBlocks(options.run_blocks);
  KVLAB_RETURN_IF_ERROR(impl->backend->Attach(impl->cache.get()));
  if (impl->backend->on_device()) KVLAB_RETURN_IF_ERROR(impl->model->To(at::Device(impl->backend->torch_device())));
  if (places) KVLAB_RETURN_IF_ERROR(impl->cache->EnableOffload(placement));
  if (const KVPolicy* read = impl->policies.ReadPolicy(); read != nullptr && read->NeedsBlockKeyBounds()) {
    impl->cache->EnableKeyBounds();
  }
  if (options.prefix_caching) {
    std::string why_not;
    if (!impl->policies.SharesPrefixBlocks(&why_not)) {
      return Status::InvalidArgument("engine: prefix caching with the stack '" + impl->policies.Describe() + "': " + why_not);
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
const PoolReservation& Engine::reservation() const { return impl_->reservation; }
int64_t Engine::step_tokens() const { return impl_->step_tokens; }
const ReadStats& Engine::reads() const { return impl_->reads; }

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
  const int64_t cap = impl_->step_tokens;
  for (const SeqChunk& c : chunks) {
    const int64_t n = static_cast<int64_t>(c.tokens.size());
    need += impl_->cache->BlocksNeeded(c.seq, cap > 0 ? std::min(n, cap) : n);
  }
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

Status Engine::CheckChunks(const std::vector<SeqChunk>& chunks) const {
  const Impl& s = *impl_;
  const int64_t vocab = s.model->config().vocab_size;
  if (chunks.empty()) return Status::InvalidArgument("Forward: no chunks");
  std::vector<int64_t> seqs;
  for (const SeqChunk& c : chunks) {
    auto it = s.seq_len.find(c.seq);
    if (it == s.seq_len.end()) return Status::NotFound("Forward: sequence " + std::to_string(c.seq) + " was not added");
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
    KVLAB_RETURN_IF_ERROR(CheckContextLength(s.model->config(), it->second, static_cast<int64_t>(c.tokens.size()),
                                             s.options.allow_long_context, "sequence " + std::to_string(c.seq)));
  }
  return Status::OK();
}

namespace {

// Where a chunk of n tokens splits into steps of at most cap tokens (cap 0:
// none): the ends of its pieces. With an observation window w (w <= cap),
// the last piece is made at least min(w, n) tokens long by moving the last
// split back, so the window of a prompt's last w tokens lies in one step.
std::vector<int64_t> PieceEnds(int64_t n, int64_t cap, int64_t w) {
  std::vector<int64_t> ends;
  if (cap <= 0 || n <= cap) return {n};
  for (int64_t e = cap; e < n; e += cap) ends.push_back(e);
  ends.push_back(n);
  const int64_t last = n - ends[ends.size() - 2];
  if (w > last) ends[ends.size() - 2] = n - std::min(w, cap);
  return ends;
}

}  // namespace

Status Engine::Forward(const std::vector<SeqChunk>& chunks, bool all_logits,
                       std::vector<std::vector<float>>* logits) {
  const int64_t cap = impl_->step_tokens;
  size_t longest = 0;
  for (const SeqChunk& c : chunks) longest = std::max(longest, c.tokens.size());
  if (cap <= 0 || static_cast<int64_t>(longest) <= cap) return ForwardStep(chunks, all_logits, logits, nullptr);
  KVLAB_RETURN_IF_ERROR(CheckChunks(chunks));
  // Bounded steps: piece k of every chunk that has one, batched, then the
  // policies act (ForwardStep applies them) before piece k + 1.
  const int64_t window = impl_->policies.ObservationWindow();
  std::vector<std::vector<int64_t>> ends;
  size_t num_pieces = 0;
  for (const SeqChunk& c : chunks) {
    ends.push_back(PieceEnds(static_cast<int64_t>(c.tokens.size()), cap, window));
    num_pieces = std::max(num_pieces, ends.back().size());
  }
  logits->assign(chunks.size(), {});
  std::vector<std::vector<float>> out;
  for (size_t k = 0; k < num_pieces; ++k) {
    std::vector<SeqChunk> piece;
    std::vector<SeqStep> steps;
    std::vector<size_t> idx;
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (k >= ends[i].size()) continue;
      const std::vector<int32_t>& t = chunks[i].tokens;
      const int64_t begin = k == 0 ? 0 : ends[i][k - 1], end = ends[i][k];
      piece.push_back({chunks[i].seq, std::vector<int32_t>(t.begin() + begin, t.begin() + end)});
      steps.push_back(SeqStep{end - begin, k + 1 == ends[i].size()});
      idx.push_back(i);
    }
    KVLAB_RETURN_IF_ERROR(ForwardStep(piece, all_logits, &out, &steps));
    for (size_t j = 0; j < idx.size(); ++j) {
      std::vector<float>& dst = (*logits)[idx[j]];
      if (all_logits) {
        dst.insert(dst.end(), out[j].begin(), out[j].end());
      } else {
        dst = std::move(out[j]);
      }
    }
  }
  return Status::OK();
}

Status Engine::ForwardStep(const std::vector<SeqChunk>& chunks, bool all_logits,
                           std::vector<std::vector<float>>* logits, const std::vector<SeqStep>* piece_steps) {
  Impl& s = *impl_;
  const int64_t vocab = s.model->config().vocab_size;
  KVLAB_RETURN_IF_ERROR(CheckChunks(chunks));
  std::vector<int32_t> tokens;
  StepRequest req;  // the step's sequences, their new tokens' offsets and positions
  for (const SeqChunk& c : chunks) {
    req.seqs.push_back(c.seq);
    const int64_t start = s.seq_len[c.seq];
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      tokens.push_back(c.tokens[i]);
      req.positions.push_back(static_cast<int32_t>(start + static_cast<int64_t>(i)));
    }
    req.qo_indptr.push_back(static_cast<int32_t>(tokens.size()));
  }
  if (!CanForward(chunks)) {
    return Status::ResourceExhausted("KV pool has " + std::to_string(s.cache->AvailableBlocks()) +
                                     " free blocks, too few for this step");
  }
  // Door one: the cache reserves the step's slots and hands out its view.
  const std::vector<int32_t>& qo_indptr = req.qo_indptr;
  StepView view;
  KVLAB_RETURN_IF_ERROR(s.cache->BeginStep(req, s.policies, &view));
  // The backend and the model work on the view alone.
  if (Status st = s.backend->BeginStep(&view); !st.ok()) {
    s.cache->AbortStep(&view);
    return st;
  }
  PagedForward in;
  in.tokens = &tokens;
  in.positions = &req.positions;
  in.qo_indptr = &qo_indptr;
  in.attention = s.backend.get();
  in.all_logits = all_logits;
  // Logits come back to the host (a no-op on the CPU).
  at::Tensor out = s.model->ForwardPaged(in).to(at::kCPU).contiguous();
  if (Status st = s.backend->EndStep(); !st.ok()) {
    s.cache->AbortStep(&view);
    return st;
  }
  if (view.reads.kv_dense_bytes > 0) {
    ReadStats reads = view.reads;
    reads.decode_steps = 1;
    s.reads.Add(reads);
  }
  const float* data = out.data_ptr<float>();
  logits->assign(chunks.size(), {});
  StepOutcome outcome;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int64_t row0 = all_logits ? qo_indptr[i] : static_cast<int64_t>(i);
    const int64_t rows = all_logits ? qo_indptr[i + 1] - qo_indptr[i] : 1;
    (*logits)[i].assign(data + row0 * vocab, data + (row0 + rows) * vocab);
    outcome.next_pos.push_back(s.seq_len[chunks[i].seq] += static_cast<int64_t>(chunks[i].tokens.size()));
  }
  // Door two: the cache applies the stack's decisions (scores, selection and
  // windows, key bounds, sealing, placement) with what the step observed.
  if (piece_steps != nullptr) {
    outcome.steps = *piece_steps;
  } else {  // a whole chunk, unless Forward split it
    for (const SeqChunk& c : chunks) outcome.steps.push_back(SeqStep{static_cast<int64_t>(c.tokens.size()), true});
  }
  outcome.seq_length = &s.seq_len;
  return s.cache->EndStep(s.policies, outcome, &view);
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
  const ReadStats reads_before = s.reads;
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
  stats->reads = s.reads;
  stats->reads.decode_steps -= reads_before.decode_steps;
  stats->reads.kv_read_bytes -= reads_before.kv_read_bytes;
  stats->reads.kv_dense_bytes -= reads_before.kv_dense_bytes;
  stats->reads.bound_read_bytes -= reads_before.bound_read_bytes;
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
  m.plain_bytes_reserved = c.pool().bytes_reserved();
  m.encoded_bytes_reserved = c.encoded_pool() ? c.encoded_pool()->bytes_reserved() : 0;
  m.full_bytes_reserved = impl_->reservation.full_bytes;
  m.peak_bytes_in_use = c.PeakBytesInUse();
  m.run_reserve_bytes = c.RunReserveBytes();
  m.peak_run_reserve_bytes = c.PeakRunReserveBytes();
  m.blocks_in_use = c.BlocksInUse();
  m.block_bytes = c.pool().block_bytes();
  m.plain_blocks_in_use = c.pool().num_used();
  m.encoded_blocks_in_use = c.encoded_pool() ? c.encoded_pool()->num_used() : 0;
  m.device_bytes = c.DeviceBytesInUse();
  m.peak_device_bytes = c.PeakDeviceBytesInUse();
  m.host_bytes = c.HostBytesInUse();
  m.disk_bytes = c.DiskBytesInUse();
  m.decode_steps = impl_->reads.decode_steps;
  m.kv_read_bytes = impl_->reads.kv_read_bytes;
  m.kv_dense_read_bytes = impl_->reads.kv_dense_bytes;
  for (const auto& kv : impl_->seq_len) {
    m.slots_in_use += impl_->cache->SlotsInUse(kv.first);
    m.tokens_seen += kv.second;
  }
  return m;
}

}  // namespace kvlab
