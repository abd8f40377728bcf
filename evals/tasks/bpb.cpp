// Tasks bpb and bpb-recompute: a window of text teacher-forced through the
// point's stack, scored against the true next token (bits per byte, or per
// token) and against the `full` cache's distribution (KL, top-1 agreement).
// docs/sweeps.md describes the metrics.
#include <algorithm>
#include <cmath>

#include "datasets/tasks/tasks.h"
#include "evals/tasks/task.h"

namespace kvlab {

using json = nlohmann::ordered_json;

namespace {

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

// Per-position sums of one point: negative log-likelihood, KL, top-1 and their buckets.
struct BpbSums {
  std::vector<double> kl_b, top_b, n_b;
  double nats = 0, kl = 0, agree = 0;
  int64_t count = 0;
};

// Scores one window's logits against the true next tokens and the baseline's logits.
void ScoreWindow(const std::vector<int32_t>& ids, const std::vector<float>& logits, const std::vector<float>* base,
                 int64_t V, int64_t buckets, BpbSums* s) {
  const int64_t n = static_cast<int64_t>(ids.size()) - 1;
  std::vector<double> lp, lq;
  for (int64_t i = 0; i < n; ++i) {
    const float* q = logits.data() + i * V;
    const float* b = base->data() + i * V;
    LogSoftmax(q, V, &lq);
    s->nats -= lq[static_cast<size_t>(ids[static_cast<size_t>(i + 1)])];
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
    s->kl += k;
    s->agree += a;
    s->kl_b[bucket] += k;
    s->top_b[bucket] += a;
    s->n_b[bucket] += 1;
    ++s->count;
  }
}

Status RunBpb(bool recompute, TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, json* m) {
  const TaskTokens* text = nullptr;
  KVLAB_RETURN_IF_ERROR(ctx->Tokens(p, o.Path("text"), &text));
  if (static_cast<int64_t>(text->ids.size()) < p.length) {
    return Status::InvalidArgument(o.Path("text") + ": text has " + std::to_string(text->ids.size()) + " " + text->unit +
                                   "s, fewer than length " + std::to_string(p.length));
  }
  const int64_t buckets = o.Int("buckets");
  BpbSums s;
  s.kl_b.assign(static_cast<size_t>(buckets), 0);
  s.top_b.assign(static_cast<size_t>(buckets), 0);
  s.n_b.assign(static_cast<size_t>(buckets), 0);
  MemoryStats mem;
  // Per window, for the reports' intervals (windows are the units: positions within one are not independent).
  json per_bpb = json::array(), per_kl = json::array(), per_top1 = json::array();
  for (int64_t w = 0; w < o.Int("windows"); ++w) {
    SplitMix rng(p.seed * 1000003ull + static_cast<uint64_t>(w) * 7919ull + static_cast<uint64_t>(p.length));
    const size_t off = static_cast<size_t>(rng.Below(text->ids.size() - static_cast<size_t>(p.length) + 1));
    // BOS (when the model has one), then the window's tokens: p.length in all.
    std::vector<int32_t> ids;
    if (text->bos >= 0) ids.push_back(text->bos);
    ids.insert(ids.end(), text->ids.begin() + static_cast<std::ptrdiff_t>(off),
               text->ids.begin() + static_cast<std::ptrdiff_t>(off + static_cast<size_t>(p.length) - ids.size()));
    const EngineOptions eo = PointEngineOptions(ctx->config(), p, p.length + 1, 1);
    std::vector<float> logits;
    int64_t V = 0;
    if (recompute) {
      KVLAB_RETURN_IF_ERROR(Recomputed(eo, p.stack, ids, o.Int("window"), &logits, &mem, &V));
    } else {
      KVLAB_RETURN_IF_ERROR(TeacherForced(eo, p.stack, ids, o.Int("prefill"), &logits, &mem, &V));
    }
    // The baseline's logits of the same window, from the same procedure
    // (for recompute: the full cache's).
    const std::vector<float>* base = &logits;
    if (!p.baseline || recompute) {
      const std::string bkey = p.model + "|" + std::to_string(p.length) + "|" + std::to_string(p.seed) + "|" +
                               std::to_string(w) + "|" + std::to_string(o.Int("prefill")) + "|" + o.Path("text");
      std::map<std::string, std::vector<float>>* cache = ctx->logits_cache();
      auto it = cache->find(bkey);
      if (it == cache->end()) {
        std::vector<float> bl;
        MemoryStats bm;
        int64_t bv = 0;
        KVLAB_RETURN_IF_ERROR(TeacherForced(eo, {PolicySpec{"full", {}, "baseline"}}, ids, o.Int("prefill"), &bl, &bm, &bv));
        if (cache->size() > 64) cache->clear();
        it = cache->emplace(bkey, std::move(bl)).first;
      }
      base = &it->second;
    }
    const BpbSums before = s;
    ScoreWindow(ids, logits, base, V, buckets, &s);
    const double n = static_cast<double>(s.count - before.count);
    per_bpb.push_back((s.nats - before.nats) / n / std::log(2.0));
    per_kl.push_back((s.kl - before.kl) / n);
    per_top1.push_back((s.agree - before.agree) / n);
  }
  (*m)["bpb"] = s.nats / static_cast<double>(s.count) / std::log(2.0);
  if (text->unit != "byte") (*m)["bpb_unit"] = text->unit;  // bits per token, not per byte
  (*m)["kl"] = s.kl / static_cast<double>(s.count);
  (*m)["top1_agreement"] = s.agree / static_cast<double>(s.count);
  json edges = json::array(), klj = json::array(), topj = json::array();
  for (int64_t b = 0; b < buckets; ++b) {
    edges.push_back(b * (p.length - 1) / buckets);
    const double nb = s.n_b[static_cast<size_t>(b)];
    klj.push_back(nb > 0 ? s.kl_b[static_cast<size_t>(b)] / nb : 0.0);
    topj.push_back(nb > 0 ? s.top_b[static_cast<size_t>(b)] / nb : 0.0);
  }
  (*m)["bucket_starts"] = edges;
  (*m)["kl_by_bucket"] = klj;
  (*m)["top1_by_bucket"] = topj;
  (*m)["tokens_scored"] = s.count;
  (*m)["per_sample"] = json{{"bpb", per_bpb}, {"kl", per_kl}, {"top1_agreement", per_top1}};
  (*m)["memory"] = MemoryJson(mem);
  return Status::OK();
}

std::vector<TaskOption> BpbOptions() {
  return {PathOption("text", "a text file, or token ids in a file ending in .ids (\"\": the built-in text)"),
          IntOption("windows", 1, 1, kMaxCount, "text windows scored"),
          IntOption("prefill", 0, 0, kMaxContextTokens, "tokens of each window prefilled before scoring"),
          IntOption("buckets", 4, 1, kMaxCount, "position buckets of the KL and top-1 by position")};
}

}  // namespace

void RegisterBpbTasks(SweepTaskRegistry* registry) {
  SweepTaskInfo bpb;
  bpb.name = "bpb";
  bpb.summary = "bits per byte (or token) of a text window, KL and top-1 agreement against the full cache";
  bpb.options = BpbOptions();
  bpb.key_options = [](const SweepTaskOptions& o, json* k) {
    (*k)["windows"] = o.Int("windows");
    (*k)["prefill"] = o.Int("prefill");
  };
  bpb.estimate = [](const TaskCost& c, const SweepPoint& p, const SweepTaskOptions& o) {
    const double L = static_cast<double>(p.length);
    const double steps = L - static_cast<double>(o.Int("prefill"));
    const double one = steps * (c.step_overhead_s + c.token_s + c.attention_s * L / 2) +
                       static_cast<double>(o.Int("prefill")) * c.token_s;
    return static_cast<double>(o.Int("windows")) * one * (p.baseline ? 1.0 : 1.5);
  };
  bpb.run = [](TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, json* m) {
    return RunBpb(/*recompute=*/false, ctx, p, o, m);
  };
  bpb.columns = {{"bpb", "bpb", "%.3f"}, {"kl", "KL", "%.4f"}, {"top1_agreement", "top-1", "%.3f"}};
  bpb.length_metric = "bpb";
  bpb.length_unit = "bits per byte";
  bpb.length_fmt = "%.3f";
  registry->Register(bpb);

  SweepTaskInfo rc;
  rc.name = "bpb-recompute";
  rc.summary = "bpb with StreamingLLM's sliding window with recompute: each prediction from the last `window` tokens";
  rc.options = BpbOptions();
  rc.options.push_back(IntOption("window", 256, 1, kMaxContextTokens, "tokens recomputed for each prediction"));
  rc.key_options = [](const SweepTaskOptions& o, json* k) {
    (*k)["windows"] = o.Int("windows");
    (*k)["prefill"] = o.Int("prefill");
    (*k)["window"] = o.Int("window");
  };
  rc.estimate = [](const TaskCost& c, const SweepPoint& p, const SweepTaskOptions& o) {
    const double L = static_cast<double>(p.length), w = static_cast<double>(o.Int("window"));
    return static_cast<double>(o.Int("windows")) * L * (w * (c.token_s + c.attention_s * w / 2) + c.step_overhead_s) * 1.2;
  };
  rc.run = [](TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, json* m) {
    return RunBpb(/*recompute=*/true, ctx, p, o, m);
  };
  rc.columns = {{"bpb", "bpb (recompute)", "%.3f"}};
  rc.length_metric = "bpb";
  rc.length_unit = "bits per byte";
  rc.length_fmt = "%.3f";
  registry->Register(rc);
}

}  // namespace kvlab
