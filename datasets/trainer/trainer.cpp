#include "datasets/trainer/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <thread>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <nlohmann/json.hpp>

#include "core/model/llama_tensors.h"
#include "core/model/safetensors.h"
#include "datasets/tasks/ruler.h"
#include "datasets/tasks/tasks.h"
#include "core/tokenizer/tokenizer.h"

namespace kvlab {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The trainable parameters, in Hugging Face names and layout.
struct Params {
  ModelConfig config;
  std::vector<std::pair<std::string, torch::Tensor>> named;  // save order
  std::map<std::string, torch::Tensor> by_name;

  torch::Tensor& Add(const std::string& name, torch::Tensor t) {
    named.push_back({name, t});
    return by_name[name] = t;
  }
  const torch::Tensor& operator[](const std::string& name) const { return by_name.at(name); }
};

// Normal(0, 0.02) matrices, residual output projections scaled by
// 1/sqrt(2 L) (GPT-2), norms 1; from a seeded generator.
Params InitParams(const ModelConfig& c, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  Params p;
  p.config = c;
  const double out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.num_hidden_layers));
  for (const LlamaTensorSpec& spec : LlamaTensorSpecs(c)) {
    torch::Tensor t;
    if (spec.shape.size() == 1) {
      t = torch::ones(spec.shape);
    } else {
      const bool out_proj = spec.role == LlamaTensor::kO || spec.role == LlamaTensor::kDown;
      t = at::normal(0.0, out_proj ? out_std : 0.02, spec.shape, gen);
    }
    p.Add(spec.name, t.set_requires_grad(true));
  }
  return p;
}

Status LoadParams(const std::string& dir, Params* out) {
  Params p;
  KVLAB_RETURN_IF_ERROR(LoadModelConfig(dir + "/config.json", &p.config));
  std::unique_ptr<CheckpointReader> ckpt;
  KVLAB_RETURN_IF_ERROR(CheckpointReader::Open(dir, &ckpt));
  for (const LlamaTensorSpec& spec : LlamaTensorSpecs(p.config)) {
    const std::string& name = spec.name;
    const std::vector<int64_t>& shape = spec.shape;
    TensorView v;
    KVLAB_RETURN_IF_ERROR(ckpt->GetChecked(name, shape, &v));
    at::ScalarType st = v.dtype == DType::kF32 ? at::kFloat : v.dtype == DType::kF16 ? at::kHalf : at::kBFloat16;
    torch::Tensor raw = torch::empty(shape, torch::TensorOptions().dtype(st));
    std::memcpy(raw.data_ptr(), v.data, static_cast<size_t>(v.nbytes));
    p.Add(name, raw.to(at::kFloat).contiguous().set_requires_grad(true));
  }
  *out = std::move(p);
  return Status::OK();
}

Status SaveParams(const Params& p, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError(dir + ": cannot create directory: " + ec.message());
  std::vector<torch::Tensor> keep;
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, t] : p.named) {
    keep.push_back(t.detach().to(at::kFloat).contiguous());
    TensorToWrite w;
    w.name = name;
    w.dtype = DType::kF32;
    w.shape = keep.back().sizes().vec();
    w.data = keep.back().data_ptr();
    tensors.push_back(std::move(w));
  }
  KVLAB_RETURN_IF_ERROR(WriteSafetensors(dir + "/model.safetensors", tensors));
  const std::string tmp = dir + "/config.json.tmp";
  KVLAB_RETURN_IF_ERROR(SaveModelConfig(tmp, p.config));
  fs::rename(tmp, dir + "/config.json", ec);
  if (ec) return Status::IOError(dir + "/config.json: cannot write: " + ec.message());
  return Status::OK();
}

// The trainer's forward is Llama's: plain RMSNorm, full RoPE without
// scaling, SwiGLU, no biases, every layer global. Other families are refused.
Status CheckTrainable(const ModelConfig& c, const std::string& source) {
  const DecoderSpec& f = c.spec;
  bool windows = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) windows = windows || c.LayerWindow(l) > 0;
  if ((f.model_type != "llama" && f.model_type != "mistral") || f.qkv_bias || f.o_bias || f.mlp_bias || windows ||
      !c.rope_scaling.rope_type.empty()) {
    return Status::InvalidArgument(source + ": kvlab train runs the llama family only (no biases, sliding windows "
                                   "or rope_scaling); this model is model_type '" + f.model_type + "'");
  }
  return Status::OK();
}

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * w;
}

torch::Tensor RotateHalf(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Batched causal forward [B, T] -> logits [B, T, V], with autograd. Same
// maths as LlamaModel (checked by a test); K/V are shared by the query heads
// of a group without copies: queries are grouped as [B, H_kv, G*T, d].
class Forwarder {
 public:
  explicit Forwarder(const Params& p) : p_(p) {
    const ModelConfig& c = p.config;
    const int64_t d = c.head_dim;
    std::vector<double> inv(static_cast<size_t>(d / 2));
    for (int64_t i = 0; i < d / 2; ++i) {
      inv[static_cast<size_t>(i)] = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(d));
    }
    inv_freq_ = torch::tensor(inv, torch::kDouble);
  }

  torch::Tensor operator()(const torch::Tensor& tokens) {
    const ModelConfig& c = p_.config;
    const int64_t B = tokens.size(0), T = tokens.size(1), D = c.hidden_size, d = c.head_dim;
    const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, G = Hq / Hkv;
    Tables(T);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    torch::Tensor x = p_["model.embed_tokens.weight"].index_select(0, tokens.reshape({-1})).view({B, T, D});
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      auto w = [&](const char* rest) -> const torch::Tensor& { return p_[LlamaLayerTensorName(i, rest)]; };
      torch::Tensor h = RmsNorm(x, w("input_layernorm.weight"), c.rms_norm_eps);
      torch::Tensor q = torch::linear(h, w("self_attn.q_proj.weight")).view({B, T, Hq, d}).transpose(1, 2);
      torch::Tensor k = torch::linear(h, w("self_attn.k_proj.weight")).view({B, T, Hkv, d}).transpose(1, 2);
      torch::Tensor v = torch::linear(h, w("self_attn.v_proj.weight")).view({B, T, Hkv, d}).transpose(1, 2);
      q = q * cos_ + RotateHalf(q) * sin_;  // [B, Hq, T, d]
      k = k * cos_ + RotateHalf(k) * sin_;  // [B, Hkv, T, d]
      q = q.reshape({B, Hkv, G * T, d});
      torch::Tensor s = torch::matmul(q, k.transpose(-1, -2)).mul(scale).view({B, Hkv, G, T, T});
      s = s.masked_fill(mask_, -std::numeric_limits<float>::infinity());
      torch::Tensor a = torch::softmax(s, -1).view({B, Hkv, G * T, T});
      torch::Tensor o = torch::matmul(a, v).view({B, Hq, T, d}).transpose(1, 2).reshape({B, T, Hq * d});
      x = x + torch::linear(o, w("self_attn.o_proj.weight"));
      torch::Tensor h2 = RmsNorm(x, w("post_attention_layernorm.weight"), c.rms_norm_eps);
      x = x + torch::linear(torch::silu(torch::linear(h2, w("mlp.gate_proj.weight"))) *
                                torch::linear(h2, w("mlp.up_proj.weight")),
                            w("mlp.down_proj.weight"));
    }
    const torch::Tensor& head = c.tie_word_embeddings ? p_["model.embed_tokens.weight"] : p_["lm_head.weight"];
    return torch::linear(RmsNorm(x, p_["model.norm.weight"], c.rms_norm_eps), head);
  }

 private:
  void Tables(int64_t T) {
    if (T == cached_t_) return;
    torch::Tensor pos = torch::arange(T, torch::kDouble);
    torch::Tensor freqs = torch::outer(pos, inv_freq_);
    torch::Tensor emb = torch::cat({freqs, freqs}, -1);
    cos_ = emb.cos().to(torch::kFloat);  // [T, d], broadcast over [B, H, T, d]
    sin_ = emb.sin().to(torch::kFloat);
    mask_ = torch::ones({T, T}, torch::kBool).triu(1);
    cached_t_ = T;
  }
  const Params& p_;
  torch::Tensor inv_freq_, cos_, sin_, mask_;
  int64_t cached_t_ = -1;
};

Status ReadFile(const std::string& path, const std::string& what, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open " + what + " (build the corpora with `bash datasets/build.sh`)");
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return Status::OK();
}

// One training batch: tokens [B, T+1] and per-target loss weights [B, T].
struct Batch {
  torch::Tensor tokens, weights, task_mask, is_text;  // is_text: [B, 1], 1 for corpus rows
};

// A RULER sample (the phase's ruler_tasks) as a training row: RULER's prompt,
// then the references as the answer (niah: " v1, v2." after its "... are";
// vt: the names after its "they are: "), the answer's bytes the task targets.
// The length counts RULER's generation budget (niah 128, vt 30 tokens), as
// the evaluation does, so a row of length L has the prompt an evaluation at L
// reads. False when the task cannot be built at this length (the row is
// then a copy row): tiny-ruler was trained by this rule.
bool RulerRow(const TrainPhase& ph, int64_t length, const std::string& essay_text, SplitMix* rng, std::string* text,
              std::vector<uint8_t>* targets) {
  RulerSpec spec;
  spec.task = ph.ruler_tasks[static_cast<size_t>(rng->Below(ph.ruler_tasks.size()))];
  spec.length = length;
  spec.depth = rng->Uniform();
  spec.fewshot = 0;  // as evals/configs/ruler.toml reads vt and cwe at one token a byte
  spec.essay = &essay_text;
  spec.seed = rng->Next();
  RulerTaskInfo info;
  if (!GetRulerTask(spec.task, &info).ok()) return false;
  if (!info.has_depth) spec.depth = -1;
  const TokenCounter bytes = [](const std::string& t, int64_t* n) {
    *n = static_cast<int64_t>(t.size()) + 1;  // BOS, then one token a byte
    return Status::OK();
  };
  RulerSample s;
  if (!MakeRulerSample(spec, bytes, &s).ok() || s.outputs.empty()) return false;
  std::string answer;
  const bool list = !s.answer_prefix.empty() && s.answer_prefix.back() == ' ';
  for (size_t i = 0; i < s.outputs.size(); ++i) answer += (i > 0 ? (list ? " " : ", ") : "") + s.outputs[i];
  *text = s.prompt + (list ? answer : " " + answer + ".");
  targets->assign(text->size(), 0);
  std::fill(targets->begin() + static_cast<std::ptrdiff_t>(s.prompt.size()), targets->end(), uint8_t{1});
  return true;
}

// One of kvlab's own tasks (datasets/tasks/tasks.h; kind 1-4 of the mix, any
// other kind copy) as a training row, at a length drawn in [shortest, T].
void TaskRow(int kind, int64_t T, int64_t shortest, SplitMix* rng, std::string* text, std::vector<uint8_t>* targets) {
  TaskSpec spec;
  spec.kind = kind == 1 ? TaskKind::kPasskey : kind == 2 ? TaskKind::kMultiNeedle : kind == 3 ? TaskKind::kRecall : TaskKind::kCopy;
  spec.seed = rng->Next();
  // Lengths vary so that every depth and distance is seen.
  spec.length = shortest + static_cast<int64_t>(rng->Below(static_cast<uint64_t>(T - shortest + 1)));
  spec.depth = rng->Uniform();
  spec.num_needles = 2 + static_cast<int>(rng->Below(4));
  spec.num_pairs = 4 + static_cast<int>(rng->Below(13));
  TaskSample s;
  if (!MakeTask(spec, &s).ok()) {  // too short for this kind: fall back to copy
    spec.kind = TaskKind::kCopy;
    spec.length = T;
    MakeTask(spec, &s);
  }
  *text = s.prompt + s.answer;
  targets->assign(s.target_mask.begin(), s.target_mask.end());
}

// Deterministic in (seed, step): resuming reproduces the same data.
Batch MakeBatch(const TrainConfig& cfg, const TrainPhase& ph, int64_t step, const std::string& train_text,
                const std::string& boost_text, const std::string& essay_text) {
  const int64_t B = ph.batch, T = ph.seq_len;
  SplitMix rng(cfg.seed * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(step) + 1) * 0xD1B54A32D192ED03ull);
  std::vector<int64_t> toks(static_cast<size_t>(B * (T + 1)));
  std::vector<float> w(static_cast<size_t>(B * T)), m(static_cast<size_t>(B * T)), is_text(static_cast<size_t>(B), 0.0f);
  const double mix[] = {ph.text, ph.passkey, ph.multi_needle, ph.recall, ph.copy, ph.ruler};
  double total = 0;
  for (double x : mix) total += x;
  for (int64_t b = 0; b < B; ++b) {
    int64_t* row = toks.data() + b * (T + 1);
    float* wrow = w.data() + b * T;
    float* mrow = m.data() + b * T;
    row[0] = ByteTokenizer::kBos;
    double r = rng.Uniform() * total;
    int kind = 0;
    while (kind < 5 && r >= mix[kind]) r -= mix[kind++];
    if (kind == 0) {
      is_text[static_cast<size_t>(b)] = 1.0f;
      const std::string& corpus = cfg.boost_share > 0 && rng.Uniform() < cfg.boost_share ? boost_text : train_text;
      const uint64_t span = corpus.size() > static_cast<size_t>(T) ? corpus.size() - static_cast<size_t>(T) : 1;
      const size_t off = static_cast<size_t>(rng.Below(span));
      for (int64_t t = 0; t < T; ++t) {
        row[t + 1] = static_cast<unsigned char>(off + static_cast<size_t>(t) < corpus.size() ? corpus[off + static_cast<size_t>(t)] : ' ');
        wrow[t] = 1.0f;
        mrow[t] = 0.0f;
      }
      continue;
    }
    const int64_t shortest = std::clamp<int64_t>(static_cast<int64_t>(ph.min_length * static_cast<double>(T)), 1, T);
    std::string text;
    std::vector<uint8_t> targets;  // [text.size()]: 1 where the loss tests the task
    if (!(kind == 5 && RulerRow(ph, shortest + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(T - shortest + 1))),
                                essay_text, &rng, &text, &targets))) {
      TaskRow(kind, T, shortest, &rng, &text, &targets);
    }
    for (int64_t t = 0; t < T; ++t) {
      const bool in = t < static_cast<int64_t>(text.size());
      row[t + 1] = in ? static_cast<unsigned char>(text[static_cast<size_t>(t)]) : ByteTokenizer::kEos;
      const bool target = in && targets[static_cast<size_t>(t)] != 0;
      // After the sample: EOS then padding-like EOS tokens, not trained on.
      wrow[t] = !in ? (t == static_cast<int64_t>(text.size()) ? static_cast<float>(ph.filler_weight) : 0.0f)
                    : static_cast<float>(target ? ph.answer_weight : ph.filler_weight);
      mrow[t] = target ? 1.0f : 0.0f;
    }
  }
  Batch batch;
  batch.tokens = torch::tensor(toks, torch::kLong).view({B, T + 1});
  batch.weights = torch::tensor(w, torch::kFloat).view({B, T});
  batch.task_mask = torch::tensor(m, torch::kFloat).view({B, T});
  batch.is_text = torch::tensor(is_text, torch::kFloat).view({B, 1});
  return batch;
}

// Held-out bits per byte over the first eval_tokens bytes, in windows.
double EvalBpb(Forwarder& fwd, const std::string& heldout, int64_t tokens, int64_t window) {
  torch::NoGradGuard no_grad;
  const int64_t n = std::min<int64_t>(tokens, static_cast<int64_t>(heldout.size()));
  double nats = 0;
  int64_t count = 0;
  for (int64_t off = 0; off + 1 < n; off += window) {
    const int64_t len = std::min(window, n - off);
    std::vector<int64_t> ids = {ByteTokenizer::kBos};
    for (int64_t i = 0; i < len; ++i) ids.push_back(static_cast<unsigned char>(heldout[static_cast<size_t>(off + i)]));
    torch::Tensor t = torch::tensor(ids, torch::kLong).view({1, -1});
    torch::Tensor logits = fwd(t.narrow(1, 0, len));
    torch::Tensor ce = torch::nn::functional::cross_entropy(
        logits.view({len, -1}), t.narrow(1, 1, len).reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    nats += ce.item<double>();
    count += len;
  }
  return count == 0 ? -1 : nats / static_cast<double>(count) / std::log(2.0);
}

std::string Hms(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", static_cast<long>(s / 3600), static_cast<long>(s / 60 % 60),
                static_cast<long>(s % 60));
  return buf;
}

struct State {
  int64_t step = 0, tokens = 0;
  double elapsed = 0, heldout_bpb = -1;
};

Status ReadState(const std::string& path, State* s) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path);
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    s->step = j.at("step").get<int64_t>();
    s->tokens = j.at("tokens").get<int64_t>();
    s->elapsed = j.at("elapsed_seconds").get<double>();
    s->heldout_bpb = j.value("heldout_bpb", -1.0);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(path + ": unreadable trainer state: " + e.what());
  }
  return Status::OK();
}

Status WriteState(const std::string& path, const State& s, const TrainConfig& cfg) {
  nlohmann::ordered_json j;
  j["step"] = s.step;
  j["tokens"] = s.tokens;
  j["elapsed_seconds"] = s.elapsed;
  j["heldout_bpb"] = s.heldout_bpb;
  j["total_steps"] = cfg.TotalSteps();
  j["seed"] = cfg.seed;
  j["config"] = cfg.path;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) return Status::IOError(tmp + ": cannot write");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IOError(path + ": cannot write: " + ec.message());
  return Status::OK();
}

// Drops loss-log rows past `step` (they came from a run that did not checkpoint).
void TruncateLog(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  bool header = true;
  while (std::getline(in, line)) {
    if (header || std::atoll(line.c_str()) <= step) kept += line + "\n";
    header = false;
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  out << kept;
}

}  // namespace

void KeepFreedMemoryInHeap() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  mallopt(M_TOP_PAD, 64 << 20);
#endif
}

Status Train(const TrainConfig& cfg, const TrainOptions& opts, TrainResult* result) {
  *result = TrainResult();
  const int64_t threads = cfg.threads > 0 ? cfg.threads : static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(static_cast<int>(threads));
  std::string corpus, boost, heldout, essay;
  bool needs_text = false;
  for (const TrainPhase& p : cfg.phases) needs_text |= p.text > 0;
  // A text that rows are drawn from must hold more than a few windows.
  auto read_training_text = [](const std::string& path, const std::string& what, std::string* text) -> Status {
    KVLAB_RETURN_IF_ERROR(ReadFile(path, what, text));
    if (text->size() < 4096) return Status::InvalidArgument(path + ": " + what + " is too short");
    return Status::OK();
  };
  if (needs_text) KVLAB_RETURN_IF_ERROR(read_training_text(cfg.train_data, "training text ([data] train)", &corpus));
  if (needs_text && cfg.boost_share > 0) {
    KVLAB_RETURN_IF_ERROR(read_training_text(cfg.boost_data, "boosted training text ([data] boost)", &boost));
  }
  if (!cfg.essay_data.empty()) {
    KVLAB_RETURN_IF_ERROR(read_training_text(cfg.essay_data, "RULER essay haystack ([data] essay)", &essay));
  }
  if (!cfg.heldout_data.empty() && cfg.eval_every > 0) {
    KVLAB_RETURN_IF_ERROR(ReadFile(cfg.heldout_data, "held-out text ([data] heldout)", &heldout));
  }

  const std::string state_path = cfg.out + "/trainer_state.json", opt_path = cfg.out + "/optimizer.pt";
  const std::string log_path = cfg.out + "/loss.csv";
  State st;
  Params params;
  const bool resuming = opts.resume && fs::exists(state_path);
  if (resuming) {
    KVLAB_RETURN_IF_ERROR(ReadState(state_path, &st));
    KVLAB_RETURN_IF_ERROR(LoadParams(cfg.out, &params));
  } else if (!cfg.init.empty()) {
    KVLAB_RETURN_IF_ERROR(LoadParams(cfg.init, &params));
    if (params.config.vocab_size != cfg.model.vocab_size) {
      return Status::InvalidArgument(cfg.init + ": vocabulary " + std::to_string(params.config.vocab_size) +
                                     " differs from the byte tokenizer's " + std::to_string(cfg.model.vocab_size));
    }
  } else {
    params = InitParams(cfg.model, cfg.seed);
  }
  KVLAB_RETURN_IF_ERROR(CheckTrainable(params.config, cfg.init.empty() ? cfg.out : cfg.init));
  std::error_code ec;
  fs::create_directories(cfg.out, ec);
  if (ec) return Status::IOError(cfg.out + ": cannot create directory: " + ec.message());

  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& [name, t] : params.named) (t.dim() >= 2 ? decay : no_decay).push_back(t);
  auto make_opts = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(cfg.lr).betas({cfg.beta1, cfg.beta2}).eps(1e-8).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, make_opts(cfg.weight_decay));
  groups.emplace_back(no_decay, make_opts(0.0));
  torch::optim::AdamW optimizer(groups, torch::optim::AdamWOptions(cfg.lr));
  if (resuming) {
    try {
      torch::load(optimizer, opt_path);
    } catch (const std::exception& e) {
      return Status::IOError(opt_path + ": cannot load optimizer state: " + std::string(e.what()).substr(0, 200));
    }
    TruncateLog(log_path, st.step);
    if (!opts.quiet) std::fprintf(stderr, "resuming %s at step %ld\n", cfg.out.c_str(), static_cast<long>(st.step));
  } else {
    std::ofstream log(log_path, std::ios::trunc);
    log << "step,tokens,lr,loss,text_bpb,task_bits,heldout_bpb,elapsed_s\n";
  }

  Forwarder fwd(params);
  std::vector<torch::Tensor> all_params;
  for (auto& nt : params.named) all_params.push_back(nt.second);
  const int64_t total = cfg.TotalSteps();
  const int64_t stop = opts.max_steps >= 0 ? std::min(total, st.step + opts.max_steps) : total;
  const int64_t eval_window = cfg.eval_seq_len > 0 ? cfg.eval_seq_len : cfg.phases.back().seq_len;
  auto checkpoint = [&]() -> Status {
    KVLAB_RETURN_IF_ERROR(SaveParams(params, cfg.out));
    try {
      torch::save(optimizer, opt_path + ".tmp");
    } catch (const std::exception& e) {
      return Status::IOError(opt_path + ": cannot save optimizer state");
    }
    fs::rename(opt_path + ".tmp", opt_path, ec);
    if (ec) return Status::IOError(opt_path + ": cannot write: " + ec.message());
    return WriteState(state_path, st, cfg);
  };

  std::ofstream log(log_path, std::ios::app);
  const auto t0 = Clock::now();
  const double elapsed0 = st.elapsed;
  int64_t window_tokens = 0;
  auto window_start = Clock::now();
  double sum_loss = 0, sum_text = 0, sum_task = 0;
  int64_t n_loss = 0, n_text = 0, n_task = 0;
  while (st.step < stop) {
    const TrainPhase& ph = cfg.PhaseAt(st.step);
    const double lr = cfg.LearningRateAt(st.step);
    for (auto& g : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    Batch batch = MakeBatch(cfg, ph, st.step, corpus, boost, essay);
    const int64_t T = ph.seq_len;
    torch::Tensor logits = fwd(batch.tokens.narrow(1, 0, T));
    torch::Tensor ce = torch::nn::functional::cross_entropy(
                           logits.reshape({-1, logits.size(-1)}), batch.tokens.narrow(1, 1, T).reshape({-1}),
                           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                           .view_as(batch.weights);
    torch::Tensor loss = (ce * batch.weights).sum() / batch.weights.sum().clamp_min(1e-6);
    optimizer.zero_grad();
    loss.backward();
    if (cfg.grad_clip > 0) torch::nn::utils::clip_grad_norm_(all_params, cfg.grad_clip);
    optimizer.step();
    const double lv = loss.item<double>();
    if (!std::isfinite(lv)) {
      return Status::Internal(cfg.out + ": training loss is " + std::to_string(lv) + " at step " + std::to_string(st.step) +
                              " (lower train.lr or raise warmup_steps); the last checkpoint is kept");
    }
    {
      torch::NoGradGuard ng;
      torch::Tensor tm = batch.is_text.expand_as(ce);  // corpus rows: their mean CE in bits
      const double nt = tm.sum().item<double>();
      if (nt > 0) { sum_text += (ce * tm).sum().item<double>() / std::log(2.0); n_text += static_cast<int64_t>(nt); }
      const double nk = batch.task_mask.sum().item<double>();
      if (nk > 0) { sum_task += (ce * batch.task_mask).sum().item<double>() / std::log(2.0); n_task += static_cast<int64_t>(nk); }
    }
    sum_loss += lv;
    ++n_loss;
    result->step_losses.push_back(lv);
    st.step += 1;
    st.tokens += ph.batch * T;
    window_tokens += ph.batch * T;
    st.elapsed = elapsed0 + std::chrono::duration<double>(Clock::now() - t0).count();
    const bool eval_now = !heldout.empty() && cfg.eval_every > 0 && (st.step % cfg.eval_every == 0 || st.step == total);
    if (eval_now) st.heldout_bpb = EvalBpb(fwd, heldout, cfg.eval_tokens, eval_window);
    if (st.step % cfg.log_every == 0 || st.step == stop || eval_now) {
      const double secs = std::chrono::duration<double>(Clock::now() - window_start).count();
      const double tps = secs > 0 ? static_cast<double>(window_tokens) / secs : 0;
      const double text_bpb = n_text ? sum_text / static_cast<double>(n_text) : -1;
      const double task_bits = n_task ? sum_task / static_cast<double>(n_task) : -1;
      // ETA: the current window's seconds per unit of work, times the work
      // left, where a step's work is batch x seq_len x (1 + seq_len / 256)
      // (attention grows with the sequence), so later, longer phases count.
      auto work = [&](int64_t step) {
        const TrainPhase& p = cfg.PhaseAt(step);
        return static_cast<double>(p.batch * p.seq_len) * (1.0 + static_cast<double>(p.seq_len) / 256.0);
      };
      double window_work = 0, left_work = 0;
      for (int64_t s = st.step - n_loss; s < st.step; ++s) window_work += work(s);
      for (int64_t s = st.step; s < stop; ++s) left_work += work(s);
      const double eta = window_work > 0 ? secs * left_work / window_work : 0;
      if (!opts.quiet) {
        std::fprintf(stderr, "step %ld/%ld  loss %.4f  text %.3f bpb  task %.3f bits  lr %.2e  %.0f tok/s  elapsed %s  ETA %s%s\n",
                     static_cast<long>(st.step), static_cast<long>(total), sum_loss / static_cast<double>(n_loss), text_bpb,
                     task_bits, lr, tps, Hms(st.elapsed).c_str(), Hms(eta).c_str(),
                     eval_now ? ("  heldout " + std::to_string(st.heldout_bpb).substr(0, 5) + " bpb").c_str() : "");
      }
      log << st.step << "," << st.tokens << "," << lr << "," << sum_loss / static_cast<double>(n_loss) << "," << text_bpb << ","
          << task_bits << "," << (eval_now ? st.heldout_bpb : -1.0) << "," << st.elapsed << "\n";
      log.flush();
      sum_loss = sum_text = sum_task = 0;
      n_loss = n_text = n_task = 0;
      window_tokens = 0;
      window_start = Clock::now();
    }
    if ((cfg.checkpoint_every > 0 && st.step % cfg.checkpoint_every == 0) || st.step == stop) {
      KVLAB_RETURN_IF_ERROR(checkpoint());
    }
  }
  if (st.step == stop && result->step_losses.empty() && !fs::exists(cfg.out + "/model.safetensors")) {
    KVLAB_RETURN_IF_ERROR(checkpoint());
  }
  result->steps_done = st.step;
  result->heldout_bpb = st.heldout_bpb;
  return Status::OK();
}

Status ConvertPoolKvHeads(const std::string& in_dir, const std::string& out_dir, int group, bool mean) {
  ModelConfig probe;
  KVLAB_RETURN_IF_ERROR(LoadModelConfig(in_dir + "/config.json", &probe));
  if (probe.spec.fused_qkv) {
    return Status::InvalidArgument(in_dir + "/config.json: --pool-kv-heads needs separate k_proj and v_proj; this " +
                                   probe.spec.model_type + " checkpoint fuses them in self_attn.qkv_proj");
  }
  Params p;
  KVLAB_RETURN_IF_ERROR(LoadParams(in_dir, &p));
  const ModelConfig& c = p.config;
  if (group < 1 || c.num_key_value_heads % group != 0) {
    return Status::InvalidArgument(in_dir + "/config.json: --pool-kv-heads " + std::to_string(group) +
                                   " must divide num_key_value_heads " + std::to_string(c.num_key_value_heads));
  }
  Params q;
  q.config = c;
  q.config.num_key_value_heads = c.num_key_value_heads / group;
  q.config.name = c.name + "-kv" + std::to_string(q.config.num_key_value_heads);
  q.config.spec.tensor_prefix.clear();  // a multimodal gemma3's language model is written as gemma3_text
  const int64_t d = c.head_dim;
  const std::vector<LlamaTensorSpec> specs = LlamaTensorSpecs(c), names = LlamaTensorSpecs(q.config);
  for (size_t i = 0; i < specs.size(); ++i) {
    const LlamaTensorSpec& spec = specs[i];
    torch::Tensor out = p[spec.name].detach();
    const bool kv = spec.role == LlamaTensor::kK || spec.role == LlamaTensor::kV;
    const bool kv_bias = spec.role == LlamaTensor::kKBias || spec.role == LlamaTensor::kVBias;
    if (kv || kv_bias) {  // [H_kv * d (, D)]: adjacent heads' rows merge
      std::vector<int64_t> shape = {q.config.num_key_value_heads, group, d};
      if (kv) shape.push_back(c.hidden_size);
      torch::Tensor g = out.view(shape);
      out = mean ? g.mean(1) : g.select(1, 0);
      out = kv ? out.reshape({q.config.num_key_value_heads * d, c.hidden_size}) : out.reshape({-1});
      out = out.contiguous();
    }
    q.Add(names[i].name, out);
  }
  KVLAB_RETURN_IF_ERROR(SaveParams(q, out_dir));
  // The tokenizer travels with the weights, so the output is a complete model directory.
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                        "generation_config.json"}) {
    const fs::path src = fs::path(in_dir) / f;
    if (!fs::exists(src)) continue;
    std::error_code ec;
    fs::copy_file(src, fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::IOError((fs::path(out_dir) / f).string() + ": cannot copy from " + src.string() + ": " +
                                   ec.message());
  }
  return Status::OK();
}

namespace {

// The rows of a 2-D tensor of T, as vectors.
template <typename T>
std::vector<std::vector<T>> TensorRows(const torch::Tensor& x) {
  const torch::Tensor t = x.contiguous();
  std::vector<std::vector<T>> rows(static_cast<size_t>(t.size(0)));
  for (int64_t b = 0; b < t.size(0); ++b) {
    const T* p = t[b].data_ptr<T>();
    rows[static_cast<size_t>(b)].assign(p, p + t.size(1));
  }
  return rows;
}

}  // namespace

std::vector<std::vector<int32_t>> TrainingBatchRows(const TrainConfig& cfg, int64_t step, const std::string& train_text,
                                                   const std::string& boost_text, const std::string& essay_text,
                                                   std::vector<std::vector<float>>* weights) {
  const Batch batch = MakeBatch(cfg, cfg.PhaseAt(step), step, train_text, boost_text, essay_text);
  if (weights != nullptr) *weights = TensorRows<float>(batch.weights);
  return TensorRows<int32_t>(batch.tokens.to(torch::kInt));
}

Status TrainerLogits(const std::string& dir, const std::vector<int32_t>& tokens, std::vector<float>* out) {
  Params p;
  KVLAB_RETURN_IF_ERROR(LoadParams(dir, &p));
  KVLAB_RETURN_IF_ERROR(CheckTrainable(p.config, dir));
  torch::NoGradGuard no_grad;
  Forwarder fwd(p);
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  torch::Tensor logits = fwd(torch::tensor(ids, torch::kLong).view({1, -1})).contiguous();
  out->assign(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
  return Status::OK();
}

}  // namespace kvlab
