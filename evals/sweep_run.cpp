// Running sweep points through the engine: the tasks' metrics, results.jsonl
// (appended and flushed per point; partial last lines from a killed run are
// dropped), resume, shards, the progress bar.
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/model/model_config.h"
#include "datasets/tasks/tasks.h"
#include "core/model/tokenizer.h"
#include "evals/sweep.h"
#include "evals/sweep_internal.h"

namespace kvlab {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// A built-in text for latency runs when no file is given (the content does
// not matter for timing, only its length).
std::string BuiltinText() {
  std::string s;
  TaskSpec spec;
  spec.kind = TaskKind::kPasskey;
  spec.length = 4096;
  TaskSample t;
  MakeTask(spec, &t);
  return t.prompt;
}

Status ReadText(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open text file (corpora: `bash datasets/build.sh`)");
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  if (out->size() < 64) return Status::InvalidArgument(path + ": text file is too short");
  return Status::OK();
}

json MemoryJson(const MemoryStats& m) {
  json j;
  j["kv_bytes_end"] = m.bytes_in_use;
  j["kv_bytes_per_token"] = m.tokens_seen > 0 ? static_cast<double>(m.bytes_in_use) / static_cast<double>(m.tokens_seen) : 0.0;
  j["peak_kv_bytes"] = m.peak_bytes_in_use;
  j["blocks_in_use"] = m.blocks_in_use;
  j["slots_in_use"] = m.slots_in_use;
  j["tokens_seen"] = m.tokens_seen;
  j["device_bytes"] = m.device_bytes;
  j["peak_device_bytes"] = m.peak_device_bytes;
  j["host_bytes"] = m.host_bytes;
  j["disk_bytes"] = m.disk_bytes;
  j["kv_bytes_reserved"] = m.bytes_reserved;
  return j;
}

EngineOptions Options(const SweepConfig& c, const SweepPoint& p, int64_t max_context, int64_t seqs) {
  EngineOptions o;
  o.model = p.model;
  o.kv_dtype = c.kv_dtype;
  o.block_size = c.block_size;
  o.max_seqs = seqs;
  o.max_context = max_context;
  o.num_threads = static_cast<int>(c.threads);
  return o;
}

// Teacher-forced next-token logits of `ids` (BOS first): `prefill` tokens in
// one chunk, the rest one token per step so that decode-time policies act.
// logits: [(n-1) * V] for targets ids[1..n). Memory at the end, before release.
Status TeacherForced(const EngineOptions& o, const std::vector<PolicySpec>& stack, const std::vector<int32_t>& ids,
                     int64_t prefill, std::vector<float>* logits, MemoryStats* mem, int64_t* vocab) {
  std::unique_ptr<Engine> e;
  KVLAB_RETURN_IF_ERROR(Engine::Create(o, stack, &e));
  const int64_t V = e->model_config().vocab_size;
  *vocab = V;
  KVLAB_RETURN_IF_ERROR(e->AddSequence(0));
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t first = std::clamp<int64_t>(prefill, 1, n - 1);
  logits->clear();
  logits->reserve(static_cast<size_t>((n - 1) * V));
  std::vector<std::vector<float>> out;
  KVLAB_RETURN_IF_ERROR(e->Forward({SeqChunk{0, std::vector<int32_t>(ids.begin(), ids.begin() + first)}}, true, &out));
  logits->insert(logits->end(), out[0].begin(), out[0].end());
  for (int64_t i = first; i < n - 1; ++i) {
    KVLAB_RETURN_IF_ERROR(e->Forward({SeqChunk{0, {ids[static_cast<size_t>(i)]}}}, false, &out));
    logits->insert(logits->end(), out[0].begin(), out[0].end());
  }
  *mem = e->Memory();
  return Status::OK();
}

// StreamingLLM's sliding window with recompute: the logits of each position
// come from a fresh sequence over the last `window` tokens (positions from 0).
// Memory: the largest window's, at its end.
Status Recomputed(const EngineOptions& o, const std::vector<PolicySpec>& stack, const std::vector<int32_t>& ids,
                  int64_t window, std::vector<float>* logits, MemoryStats* mem, int64_t* vocab) {
  std::unique_ptr<Engine> e;
  KVLAB_RETURN_IF_ERROR(Engine::Create(o, stack, &e));
  const int64_t V = e->model_config().vocab_size;
  *vocab = V;
  const int64_t n = static_cast<int64_t>(ids.size());
  logits->clear();
  logits->reserve(static_cast<size_t>((n - 1) * V));
  std::vector<std::vector<float>> out;
  for (int64_t i = 0; i < n - 1; ++i) {
    const int64_t start = std::max<int64_t>(0, i + 1 - window);
    KVLAB_RETURN_IF_ERROR(e->AddSequence(0));
    KVLAB_RETURN_IF_ERROR(e->Forward({SeqChunk{0, std::vector<int32_t>(ids.begin() + start, ids.begin() + i + 1)}}, false, &out));
    logits->insert(logits->end(), out[0].begin(), out[0].end());
    if (i + 1 >= std::min<int64_t>(window, n - 1)) *mem = e->Memory();
    KVLAB_RETURN_IF_ERROR(e->RemoveSequence(0));
  }
  return Status::OK();
}

void LogSoftmax(const float* x, int64_t V, std::vector<double>* out) {
  out->resize(static_cast<size_t>(V));
  double mx = x[0];
  for (int64_t i = 1; i < V; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < V; ++i) (*out)[static_cast<size_t>(i)] = static_cast<double>(x[i]) - lse;
}

}  // namespace

// vLLM's paging argument, measured on the pools: requests with long-tailed
// lengths, each reserved contiguously for `length` tokens (what a
// max-length allocator holds) or paged in blocks of each size.
Status SweepRunner::Paging(const SweepPoint& p, const SweepTaskOptions& o, json* m) {
  ModelConfig mc;
  if (!PresetConfig(p.model, &mc).ok()) KVLAB_RETURN_IF_ERROR(LoadModelConfig(p.model + "/config.json", &mc));
  SplitMix rng(p.seed * 1000003ull + 17);
  const double median = static_cast<double>(o.median > 0 ? o.median : std::max<int64_t>(16, p.length / 8));
  std::vector<int64_t> lens;
  int64_t tokens = 0;
  for (int64_t i = 0; i < o.requests; ++i) {
    const double u1 = std::max(1e-12, rng.Uniform()), u2 = rng.Uniform();
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    const int64_t len = std::clamp<int64_t>(static_cast<int64_t>(std::llround(median * std::exp(o.sigma * z))), 16, p.length);
    lens.push_back(len);
    tokens += len;
  }
  const int bytes = DTypeBytes(config_.kv_dtype);
  const int64_t per_token = mc.KVBytesPerToken(bytes);
  (*m)["requests"] = o.requests;
  (*m)["tokens"] = tokens;
  (*m)["mean_length"] = static_cast<double>(tokens) / static_cast<double>(o.requests);
  (*m)["kv_bytes_tokens"] = tokens * per_token;
  (*m)["contiguous_reserved_bytes"] = o.requests * p.length * per_token;
  (*m)["contiguous_utilization"] = static_cast<double>(tokens) / static_cast<double>(o.requests * p.length);
  json paged = json::object(), held = json::object();
  for (int64_t bs : o.block_sizes) {
    CacheShape shape;
    shape.num_layers = static_cast<int>(mc.num_hidden_layers);
    shape.num_kv_heads = static_cast<int>(mc.num_key_value_heads);
    shape.head_dim = static_cast<int>(mc.head_dim);
    shape.block_size = static_cast<int>(bs);
    shape.dtype = config_.kv_dtype;
    int64_t blocks = 0;
    for (int64_t len : lens) blocks += (len + bs - 1) / bs;
    std::unique_ptr<KVCache> cache;
    KVLAB_RETURN_IF_ERROR(KVCache::Create(shape, blocks * shape.StreamsPerSequence(), /*with_storage=*/false, &cache));
    for (size_t i = 0; i < lens.size(); ++i) {
      KVLAB_RETURN_IF_ERROR(cache->AddSequence(static_cast<int64_t>(i)));
      std::vector<int32_t> pos(static_cast<size_t>(lens[i]));
      for (size_t t = 0; t < pos.size(); ++t) pos[t] = static_cast<int32_t>(t);
      KVLAB_RETURN_IF_ERROR(cache->Reserve(static_cast<int64_t>(i), lens[i], pos.data()));
    }
    const int64_t in_use = cache->BytesInUse();
    held[std::to_string(bs)] = in_use;
    paged[std::to_string(bs)] = static_cast<double>(tokens * per_token) / static_cast<double>(in_use);
  }
  (*m)["paged_bytes_by_block_size"] = held;
  (*m)["paged_utilization_by_block_size"] = paged;
  return Status::OK();
}

// Runs one point; returns its metrics (or an error).
Status SweepRunner::RunPoint(const SweepPoint& p, json* metrics) {
  const SweepTaskOptions& o = config_.task_options.at(p.task);
  json m;
  if (p.task == "bpb" || p.task == "bpb-recompute") {
    const bool recompute = p.task == "bpb-recompute";
    const TaskTokens* text = nullptr;
    KVLAB_RETURN_IF_ERROR(CachedTokens(p, o.text, &text));
    if (static_cast<int64_t>(text->ids.size()) < p.length) {
      return Status::InvalidArgument(o.text + ": text has " + std::to_string(text->ids.size()) + " " + text->unit +
                                     "s, fewer than length " + std::to_string(p.length));
    }
    const int64_t buckets = o.buckets;
    std::vector<double> kl_b(static_cast<size_t>(buckets), 0), top_b(static_cast<size_t>(buckets), 0),
        n_b(static_cast<size_t>(buckets), 0);
    double nats = 0, kl = 0, agree = 0;
    int64_t count = 0;
    MemoryStats mem;
    for (int64_t w = 0; w < o.windows; ++w) {
      SplitMix rng(p.seed * 1000003ull + static_cast<uint64_t>(w) * 7919ull + static_cast<uint64_t>(p.length));
      const size_t off = static_cast<size_t>(rng.Below(text->ids.size() - static_cast<size_t>(p.length) + 1));
      // BOS (when the model has one), then the window's tokens: p.length in all.
      std::vector<int32_t> ids;
      if (text->bos >= 0) ids.push_back(text->bos);
      ids.insert(ids.end(), text->ids.begin() + static_cast<std::ptrdiff_t>(off),
                 text->ids.begin() + static_cast<std::ptrdiff_t>(off + static_cast<size_t>(p.length) - ids.size()));
      const EngineOptions eo = Options(config_, p, p.length + 1, 1);
      std::vector<float> logits;
      int64_t V = 0;
      if (recompute) {
        KVLAB_RETURN_IF_ERROR(Recomputed(eo, p.stack, ids, o.window, &logits, &mem, &V));
      } else {
        KVLAB_RETURN_IF_ERROR(TeacherForced(eo, p.stack, ids, o.prefill, &logits, &mem, &V));
      }
      // The baseline's logits of the same window, from the same procedure
      // (for recompute: the full cache's).
      const std::vector<float>* base = &logits;
      if (!p.baseline || recompute) {
        const std::string bkey = p.model + "|" + std::to_string(p.length) + "|" + std::to_string(p.seed) + "|" +
                                 std::to_string(w) + "|" + std::to_string(o.prefill) + "|" + o.text;
        auto it = baseline_logits_.find(bkey);
        if (it == baseline_logits_.end()) {
          std::vector<float> bl;
          MemoryStats bm;
          int64_t bv = 0;
          KVLAB_RETURN_IF_ERROR(TeacherForced(eo, {PolicySpec{"full", {}, "baseline"}}, ids, o.prefill, &bl, &bm, &bv));
          if (baseline_logits_.size() > 64) baseline_logits_.clear();
          it = baseline_logits_.emplace(bkey, std::move(bl)).first;
        }
        base = &it->second;
      }
      const int64_t n = static_cast<int64_t>(ids.size()) - 1;
      std::vector<double> lp, lq;
      for (int64_t i = 0; i < n; ++i) {
        const float* q = logits.data() + i * V;
        const float* b = base->data() + i * V;
        LogSoftmax(q, V, &lq);
        nats -= lq[static_cast<size_t>(ids[static_cast<size_t>(i + 1)])];
        double k = 0;
        if (base != &logits) {
          LogSoftmax(b, V, &lp);
          for (int64_t v = 0; v < V; ++v) {
            const double pv = std::exp(lp[static_cast<size_t>(v)]);
            k += pv * (lp[static_cast<size_t>(v)] - lq[static_cast<size_t>(v)]);
          }
          k = std::max(0.0, k);
        }
        const double a = Argmax(q, V) == Argmax(b, V) ? 1.0 : 0.0;
        const size_t bucket = static_cast<size_t>(std::min<int64_t>(buckets - 1, i * buckets / n));
        kl += k;
        agree += a;
        kl_b[bucket] += k;
        top_b[bucket] += a;
        n_b[bucket] += 1;
        ++count;
      }
    }
    m["bpb"] = nats / static_cast<double>(count) / std::log(2.0);
    if (text->unit != "byte") m["bpb_unit"] = text->unit;  // bits per token, not per byte
    m["kl"] = kl / static_cast<double>(count);
    m["top1_agreement"] = agree / static_cast<double>(count);
    json edges = json::array(), klj = json::array(), topj = json::array();
    for (int64_t b = 0; b < buckets; ++b) {
      edges.push_back(b * (p.length - 1) / buckets);
      const double nb = n_b[static_cast<size_t>(b)];
      klj.push_back(nb > 0 ? kl_b[static_cast<size_t>(b)] / nb : 0.0);
      topj.push_back(nb > 0 ? top_b[static_cast<size_t>(b)] / nb : 0.0);
    }
    m["bucket_starts"] = edges;
    m["kl_by_bucket"] = klj;
    m["top1_by_bucket"] = topj;
    m["tokens_scored"] = count;
    m["memory"] = MemoryJson(mem);
  } else if (p.task == "paging") {
    KVLAB_RETURN_IF_ERROR(Paging(p, o, &m));
  } else if (p.task == "latency") {
    const TaskTokens* text = nullptr;
    KVLAB_RETURN_IF_ERROR(CachedTokens(p, o.text, &text));
    if (text->ids.empty()) return Status::InvalidArgument(o.text + ": no tokens");
    std::vector<int32_t> tokens = text->ids;
    while (static_cast<int64_t>(tokens.size()) < p.length + p.batch) {
      tokens.insert(tokens.end(), text->ids.begin(), text->ids.end());
    }
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t b = 0; b < p.batch; ++b) {
      // BOS (when the model has one), then tokens from offset b: p.length in all.
      std::vector<int32_t> prompt;
      if (text->bos >= 0) prompt.push_back(text->bos);
      const int64_t n = p.length - static_cast<int64_t>(prompt.size());
      prompt.insert(prompt.end(), tokens.begin() + b, tokens.begin() + b + n);
      prompts.push_back(std::move(prompt));
    }
    std::unique_ptr<Engine> e;
    KVLAB_RETURN_IF_ERROR(Engine::Create(Options(config_, p, p.length + o.decode_tokens + 1, p.batch), p.stack, &e));
    GenerateOptions go;
    go.max_new_tokens = o.decode_tokens + 1;  // the first token comes from the prefill
    go.stop_at_eos = false;
    std::vector<GenerateResult> results;
    GenerateStats st;
    KVLAB_RETURN_IF_ERROR(e->Generate(prompts, go, &results, &st));
    const double med = Percentile(st.decode_step_ms, 0.5);
    m["prefill_ms"] = st.prefill_ms;
    m["prefill_tokens_per_s"] = st.prefill_ms > 0 ? static_cast<double>(p.length * p.batch) / (st.prefill_ms / 1e3) : 0.0;
    m["decode_ms_median"] = med;
    m["decode_ms_p90"] = Percentile(st.decode_step_ms, 0.9);
    m["decode_steps"] = st.decode_step_ms.size();
    m["decode_tokens_per_s"] = med > 0 ? static_cast<double>(p.batch) / (med / 1e3) : 0.0;
    m["memory"] = MemoryJson(st.memory_at_end);
  } else {
    TaskKind kind;
    KVLAB_RETURN_IF_ERROR(ParseTaskKind(p.task, &kind));
    // The retrieval tasks are text built for byte-level models (datasets/tasks/tasks.h).
    ModelConfig mc;
    if (!PresetConfig(p.model, &mc).ok()) KVLAB_RETURN_IF_ERROR(LoadModelConfig(p.model + "/config.json", &mc));
    if (mc.vocab_size != ByteTokenizer::kVocabSize) {
      return Status::InvalidArgument("task '" + p.task + "' is built for byte-level models (vocabulary " +
                                     std::to_string(ByteTokenizer::kVocabSize) + "); model '" + p.model_label +
                                     "' has a vocabulary of " + std::to_string(mc.vocab_size));
    }
    json by_depth = json::object();
    double correct = 0, chars = 0;
    int64_t total = 0;
    MemoryStats mem;
    for (size_t di = 0; di < o.depths.size(); ++di) {
      double depth_correct = 0;
      for (int64_t s = 0; s < o.samples; ++s) {
        TaskSpec spec;
        spec.kind = kind;
        spec.length = p.length - 1;  // plus BOS
        spec.depth = o.depths[di];
        spec.num_needles = static_cast<int>(o.needles);
        spec.num_pairs = static_cast<int>(o.pairs);
        spec.seed = p.seed * 1000003ull + static_cast<uint64_t>(s) * 101ull + di * 7ull + static_cast<uint64_t>(p.repetition) * 65537ull;
        TaskSample sample;
        KVLAB_RETURN_IF_ERROR(MakeTask(spec, &sample));
        std::unique_ptr<Engine> e;
        KVLAB_RETURN_IF_ERROR(Engine::Create(Options(config_, p, p.length + 1, 1), p.stack, &e));
        GenerateOptions go;
        go.max_new_tokens = static_cast<int64_t>(sample.answer.size());
        go.stop_at_eos = false;
        std::vector<GenerateResult> results;
        GenerateStats st;
        KVLAB_RETURN_IF_ERROR(e->Generate({ByteTokenizer::Encode(sample.prompt)}, go, &results, &st));
        const std::string got = ByteTokenizer::Decode(results[0].tokens);
        const double ok = ScoreExact(sample, got);
        correct += ok;
        depth_correct += ok;
        chars += ScoreChars(sample, got);
        ++total;
        mem = st.memory_at_end;
      }
      char key[32];
      std::snprintf(key, sizeof(key), "%.3g", o.depths[di]);
      by_depth[key] = depth_correct / static_cast<double>(o.samples);
    }
    m["accuracy"] = correct / static_cast<double>(total);
    m["char_accuracy"] = chars / static_cast<double>(total);
    m["accuracy_by_depth"] = by_depth;
    m["samples"] = total;
    m["memory"] = MemoryJson(mem);
  }
  *metrics = std::move(m);
  return Status::OK();
}

Status SweepRunner::CachedText(const std::string& path, std::string* out) {
  auto it = texts_.find(path);
  if (it == texts_.end()) {
    std::string t;
    KVLAB_RETURN_IF_ERROR(ReadText(path, &t));
    it = texts_.emplace(path, std::move(t)).first;
  }
  *out = it->second;
  return Status::OK();
}

Status SweepRunner::CachedTokens(const SweepPoint& p, const std::string& path, const TaskTokens** out) {
  const std::string key = p.model + "\n" + path;
  auto it = tokens_.find(key);
  if (it == tokens_.end()) {
    ModelConfig mc;
    if (!PresetConfig(p.model, &mc).ok()) KVLAB_RETURN_IF_ERROR(LoadModelConfig(p.model + "/config.json", &mc));
    TaskTokens t;
    if (IsTokenIdFile(path)) {
      // Ids are checked against the model's vocabulary; errors name the file.
      KVLAB_RETURN_IF_ERROR(ReadTokenIdFile(path, mc.vocab_size, &t.ids));
      t.bos = mc.bos_token_id >= 0 ? static_cast<int32_t>(mc.bos_token_id) : -1;
      t.unit = "token";
    } else {
      std::string text;
      if (path.empty()) text = BuiltinText();
      else KVLAB_RETURN_IF_ERROR(CachedText(path, &text));
      std::unique_ptr<Tokenizer> tokenizer;
      const Status s = LoadTokenizer(p.model, mc, &tokenizer);
      if (!s.ok()) return Status::InvalidArgument((path.empty() ? "the built-in text" : path) + ": " + s.message());
      KVLAB_RETURN_IF_ERROR(tokenizer->Encode(text, /*add_bos=*/false, &t.ids));
      t.bos = tokenizer->bos_id();
      t.unit = tokenizer->Name() == "byte" ? "byte" : "token";
    }
    it = tokens_.emplace(key, std::move(t)).first;
  }
  *out = &it->second;
  return Status::OK();
}

std::string SweepRunner::CheckpointHash(const std::string& model) {
  auto it = hashes_.find(model);
  if (it != hashes_.end()) return it->second;
  std::string h;
  ModelConfig preset;
  if (PresetConfig(model, &preset).ok()) {
    h = "preset:" + model + " (random weights, seed 0)";
  } else {
    std::ifstream in(model + "/model.safetensors", std::ios::binary);
    if (!in) {
      hashes_[model] = "unreadable";
      return "unreadable";
    }
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
    std::vector<char> buf(1 << 20);
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(in.gcount()));
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx, md, &len);
    EVP_MD_CTX_free(ctx);
    char hex[3];
    for (unsigned int i = 0; i < len; ++i) {
      std::snprintf(hex, sizeof(hex), "%02x", md[i]);
      h += hex;
    }
    h = "sha256:" + h;
  }
  hashes_[model] = h;
  return h;
}

std::string GitRevision() {
  FILE* f = popen("git rev-parse --short=12 HEAD 2>/dev/null", "r");
  if (f == nullptr) return "unknown";
  char buf[64] = {0};
  std::string out = fgets(buf, sizeof(buf), f) ? std::string(buf) : "unknown";
  pclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  FILE* d = popen("git status --porcelain --untracked-files=no 2>/dev/null | head -1", "r");
  if (d != nullptr) {
    if (fgets(buf, sizeof(buf), d) != nullptr && out != "unknown") out += "+dirty";
    pclose(d);
  }
  return out;
}

std::string MachineDescription() {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model = "unknown cpu";
  while (std::getline(cpu, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return model + ", " + std::to_string(std::thread::hardware_concurrency()) + " threads";
}

// ---- results.jsonl ----

Status LoadRecords(const std::string& path, std::vector<json>* records) {
  records->clear();
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::OK();  // no file yet
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  in.close();
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < data.size()) {
    const size_t nl = data.find('\n', pos);
    ++line_no;
    if (nl == std::string::npos) {
      // No newline: the last record was cut by a killed run. Drop it.
      std::error_code ec;
      fs::resize_file(path, static_cast<uintmax_t>(pos), ec);
      if (ec) return Status::IOError(path + ": cannot drop a partial last record: " + ec.message());
      std::fprintf(stderr, "kvlab: %s:%ld: dropped a partial last record (an interrupted run)\n", path.c_str(),
                   static_cast<long>(line_no));
      break;
    }
    const std::string line = data.substr(pos, nl - pos);
    if (!line.empty()) {
      try {
        records->push_back(json::parse(line));
      } catch (const std::exception&) {
        return Status::InvalidArgument(path + ":" + std::to_string(line_no) +
                                       ": not a JSON record (edit or remove that line; nothing was changed)");
      }
    }
    pos = nl + 1;
  }
  return Status::OK();
}

Status AppendRecord(const std::string& path, const json& record) {
  const std::string line = record.dump() + "\n";
  FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr) return Status::IOError(path + ": cannot open for appending");
  const size_t n = std::fwrite(line.data(), 1, line.size(), f);
  std::fflush(f);
  ::fsync(fileno(f));
  std::fclose(f);
  if (n != line.size()) return Status::IOError(path + ": short write");
  return Status::OK();
}

namespace {

std::string Hms(double s) {
  char buf[32];
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof(buf), "%ldh%02ldm", static_cast<long>(t / 3600), static_cast<long>(t / 60 % 60));
  else std::snprintf(buf, sizeof(buf), "%ldm%02lds", static_cast<long>(t / 60), static_cast<long>(t % 60));
  return buf;
}

// Rough cost of a point in seconds on a CPU like the 2-core machine: decode
// steps cost a fixed overhead plus the weights' FLOPs, prefill tokens their
// FLOPs; attention is counted over the context.
double EstimateSeconds(const SweepConfig& c, const SweepPoint& p) {
  ModelConfig mc;
  if (!PresetConfig(p.model, &mc).ok() && !LoadModelConfig(p.model + "/config.json", &mc).ok()) return 1.0;
  const double params = static_cast<double>(mc.num_hidden_layers) *
                            (static_cast<double>(mc.hidden_size) * static_cast<double>(mc.head_dim) *
                                 static_cast<double>(2 * mc.num_attention_heads + 2 * mc.num_key_value_heads) +
                             3.0 * static_cast<double>(mc.hidden_size * mc.intermediate_size)) +
                        static_cast<double>(mc.vocab_size * mc.hidden_size);
  const double flops_per_s = 20e9, step_overhead = 0.6e-3;
  const double tok = 2.0 * params / flops_per_s;
  const double attn = 4.0 * static_cast<double>(mc.num_hidden_layers * mc.num_attention_heads * mc.head_dim) / flops_per_s;
  const SweepTaskOptions& o = c.task_options.at(p.task);
  const double L = static_cast<double>(p.length);
  if (p.task == "bpb-recompute") {
    const double w = static_cast<double>(o.window);
    return static_cast<double>(o.windows) * L * (w * (tok + attn * w / 2) + step_overhead) * 1.2;
  }
  if (p.task == "bpb") {
    const double steps = L - static_cast<double>(o.prefill);
    const double one = steps * (step_overhead + tok + attn * L / 2) + static_cast<double>(o.prefill) * tok;
    return static_cast<double>(o.windows) * one * (p.baseline ? 1.0 : 1.5);
  }
  if (p.task == "paging") return 0.05 * static_cast<double>(o.requests) * static_cast<double>(o.block_sizes.size()) / 256.0;
  if (p.task == "latency") {
    const double B = static_cast<double>(p.batch);
    return B * L * (tok + attn * L / 2) + static_cast<double>(o.decode_tokens) * (step_overhead + B * (tok + attn * L));
  }
  const double n = static_cast<double>(o.depths.size() * static_cast<size_t>(o.samples));
  return n * (L * (tok + attn * L / 2) + 6 * (step_overhead + tok + attn * L) + 0.05);
}

}  // namespace

Status RunSweep(const SweepConfig& config, const RunSweepOptions& opts, std::string* report) {
  report->clear();
  if (opts.num_shards < 1 || opts.shard < 0 || opts.shard >= opts.num_shards) {
    return Status::InvalidArgument("--shard I/N needs 0 <= I < N");
  }
  const std::string out_dir = opts.out_dir.empty() ? "results/" + config.name : opts.out_dir;
  const std::string jsonl = out_dir + "/results.jsonl";
  std::vector<SweepPoint> all = ExpandPoints(config);
  std::vector<SweepPoint> mine;
  for (const SweepPoint& p : all) {
    if (p.index % opts.num_shards == opts.shard) mine.push_back(p);
  }
  std::vector<json> records;
  KVLAB_RETURN_IF_ERROR(LoadRecords(jsonl, &records));
  std::set<std::string> done, failed;
  for (const json& r : records) {
    if (!r.contains("key")) continue;
    (r.value("status", "") == "ok" ? done : failed).insert(r["key"].get<std::string>());
  }
  auto skip = [&](const SweepPoint& p) { return done.count(p.key) || (!opts.retry_failed && failed.count(p.key)); };
  // A point's key does not name the checkpoint: records made with other
  // weights of the same model (retrained since) must not pass as done.
  SweepRunner runner(config);
  {
    std::map<std::string, const SweepPoint*> by_key;
    for (const SweepPoint& p : all) by_key.emplace(p.key, &p);
    std::map<std::string, int64_t> stale;  // model label -> records
    std::map<std::string, std::string> was, now;
    for (const json& r : records) {
      if (!r.contains("key") || !r.contains("checkpoint") || !r["checkpoint"].is_string()) continue;
      auto it = by_key.find(r["key"].get<std::string>());
      if (it == by_key.end()) continue;
      const std::string hash = runner.CheckpointHash(it->second->model);
      if (hash == "unreadable" || r["checkpoint"].get<std::string>() == hash) continue;  // a missing model fails its points
      ++stale[it->second->model_label];
      was.emplace(it->second->model_label, r["checkpoint"].get<std::string>());
      now[it->second->model_label] = hash;
    }
    if (!stale.empty()) {
      const std::string& label = stale.begin()->first;
      return Status::InvalidArgument(
          jsonl + ": " + std::to_string(stale.begin()->second) + " recorded point(s) of model '" + label +
          "' were made with checkpoint " + was[label].substr(0, 16) + "..., but its model.safetensors is now " +
          now[label].substr(0, 16) + "... (retrained?): write to a new directory (--out DIR or another name) "
          "or remove those records; nothing was run");
    }
  }
  std::ostringstream rep;
  if (opts.dry_run) {
    double total = 0;
    int64_t todo = 0;
    rep << "sweep '" << config.name << "': " << all.size() << " points";
    if (opts.num_shards > 1) rep << ", shard " << opts.shard << "/" << opts.num_shards << " runs " << mine.size();
    rep << "; results in " << out_dir << "\n";
    for (const SweepPoint& p : mine) {
      const double est = EstimateSeconds(config, p);
      const bool s = skip(p);
      if (!s) { total += est; ++todo; }
      char line[512];
      std::snprintf(line, sizeof(line), "  %4ld  %-5s %-12s %-44s L=%-6ld B=%-3ld seed=%-3lu rep=%ld  ~%s\n",
                    static_cast<long>(p.index), s ? "done" : "todo", p.task.c_str(), p.stack_label.substr(0, 44).c_str(),
                    static_cast<long>(p.length), static_cast<long>(p.batch), static_cast<unsigned long>(p.seed),
                    static_cast<long>(p.repetition), Hms(est).c_str());
      rep << line;
    }
    rep << todo << " points to run, estimated " << Hms(total) << " (a rough estimate from model FLOPs and per-step overhead)\n";
    *report = rep.str();
    return Status::OK();
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::IOError(out_dir + ": cannot create directory: " + ec.message());
  // Keep a copy of the config beside the results, with the --set overrides
  // that were applied on top of it, so that the copy says what ran.
  if (!config.path.empty()) {
    fs::copy_file(config.path, out_dir + "/config.toml", fs::copy_options::overwrite_existing, ec);
    if (!ec && !config.overrides.empty()) {
      std::ofstream copy(out_dir + "/config.toml", std::ios::app);
      copy << "\n# kvlab run applied these overrides on top of this file:\n#  ";
      for (const std::string& o : config.overrides) copy << " --set '" << o << "'";
      copy << "\n";
    }
  }

  const std::string rev = GitRevision(), machine = MachineDescription();
  std::vector<const SweepPoint*> todo;
  for (const SweepPoint& p : mine) if (!skip(p)) todo.push_back(&p);
  // Each point's estimate once (it reads the model's config.json).
  std::vector<double> est(todo.size());
  double est_total = 0;
  for (size_t i = 0; i < todo.size(); ++i) est_total += est[i] = EstimateSeconds(config, *todo[i]);
  ProgressBar bar(static_cast<int64_t>(todo.size()), opts.progress);
  int64_t failures = 0;
  double est_done = 0;
  const auto t_start = Clock::now();
  for (size_t i = 0; i < todo.size(); ++i) {
    const SweepPoint* p = todo[i];
    bar.Update(p->task + " " + p->stack_label + " L=" + std::to_string(p->length), est_done, est_total);
    const auto t0 = Clock::now();
    json metrics;
    Status s = runner.RunPoint(*p, &metrics);
    const double wall = Ms(t0, Clock::now()) / 1e3;
    json r;
    r["key"] = p->key;
    r["sweep"] = config.name;
    r["config"] = config.path;
    r["index"] = p->index;
    r["status"] = s.ok() ? "ok" : "error";
    if (!s.ok()) {
      r["error"] = s.ToString();
      ++failures;
    }
    r["model"] = p->model_label;
    r["checkpoint"] = runner.CheckpointHash(p->model);
    r["stack"] = p->stack_label;
    json stack = json::array();
    PolicyStack resolved;
    if (PolicyStack::Create(p->stack, &resolved).ok()) r["policy"] = resolved.Describe();
    for (const PolicySpec& ps : p->stack) {
      json one;
      one["name"] = ps.name;
      one["params"] = ps.params;
      stack.push_back(one);
    }
    r["stack_specs"] = stack;
    r["baseline"] = p->baseline;
    r["task"] = p->task;
    r["length"] = p->length;
    r["batch"] = p->batch;
    r["seed"] = p->seed;
    r["repetition"] = p->repetition;
    r["kv_dtype"] = DTypeName(config.kv_dtype);
    r["block_size"] = config.block_size;
    r["metrics"] = s.ok() ? metrics : json::object();
    r["git_revision"] = rev;
    r["machine"] = machine;
    r["wall_s"] = wall;
    KVLAB_RETURN_IF_ERROR(AppendRecord(jsonl, r));
    est_done += est[i];
    bar.Done(s.ok() ? "" : "point " + std::to_string(p->index) + " failed: " + s.ToString());
  }
  bar.Finish(Ms(t_start, Clock::now()) / 1e3);
  std::string summary;
  KVLAB_RETURN_IF_ERROR(WriteReports(out_dir, &summary));
  rep << "ran " << todo.size() << " of " << mine.size() << " points (" << (mine.size() - todo.size())
      << " already in " << jsonl << ")";
  if (failures > 0) rep << "; " << failures << " failed (their errors are in results.jsonl)";
  rep << "\n";
  if (opts.print_summary) rep << "\n" << summary;
  rep << "\nwrote " << out_dir << "/results.jsonl, results.csv, summary.md\n";
  *report = rep.str();
  return Status::OK();
}

// ---- progress bar ----

void ProgressBar::Update(const std::string& what, double est_done, double est_total) {
  if (!on_) return;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  std::string eta = "?";
  if (est_done > 0 && est_total > 0) {
    eta = Hms(elapsed * (est_total - est_done) / est_done);
  } else if (est_total > 0) {
    eta = "~" + Hms(est_total);
  }
  const int width = 24;
  const int filled = total_ > 0 ? static_cast<int>(width * done_ / total_) : width;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(static_cast<size_t>(width), '.');
  std::fprintf(stderr, "\r[%s] %ld/%ld  ETA %s  %-60.60s", bar.c_str(), static_cast<long>(done_), static_cast<long>(total_),
               eta.c_str(), what.c_str());
  std::fflush(stderr);
}

void ProgressBar::Done(const std::string& message) {
  ++done_;
  if (!message.empty()) {
    std::fprintf(stderr, "\n%s\n", message.c_str());
  }
}

void ProgressBar::Finish(double seconds) {
  if (!on_) return;
  std::fprintf(stderr, "\r[%s] %ld/%ld  done in %s%-70s\n", std::string(24, '#').c_str(), static_cast<long>(done_),
               static_cast<long>(total_), Hms(seconds).c_str(), "");
}

}  // namespace kvlab
