// Task latency: `batch` prompts of `length` tokens prefilled, then decoded
// together for `decode_tokens` greedy steps; wall-clock prefill and per-step
// decode times (docs/sweeps.md). Times are not deterministic; memory is.
#include <algorithm>
#include <chrono>

#include "evals/tasks/task.h"

namespace kvlab {

using json = nlohmann::ordered_json;

namespace {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Status RunLatency(TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, json* m) {
  const TaskTokens* text = nullptr;
  KVLAB_RETURN_IF_ERROR(ctx->Tokens(p, o.Path("text"), &text));
  if (text->ids.empty()) return Status::InvalidArgument(o.Path("text") + ": no tokens");
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
  KVLAB_RETURN_IF_ERROR(
      Engine::Create(PointEngineOptions(ctx->config(), p, p.length + o.Int("decode_tokens") + 1, p.batch), p.stack, &e));
  GenerateOptions go;
  go.max_new_tokens = o.Int("decode_tokens") + 1;  // the first token comes from the prefill
  go.stop_at_eos = false;
  std::vector<GenerateResult> results;
  GenerateStats st;
  KVLAB_RETURN_IF_ERROR(e->Generate(prompts, go, &results, &st));
  const double med = Percentile(st.decode_step_ms, 0.5);
  (*m)["prefill_ms"] = st.prefill_ms;
  (*m)["prefill_tokens_per_s"] = st.prefill_ms > 0 ? static_cast<double>(p.length * p.batch) / (st.prefill_ms / 1e3) : 0.0;
  (*m)["decode_ms_median"] = med;
  (*m)["decode_ms_p90"] = Percentile(st.decode_step_ms, 0.9);
  (*m)["decode_steps"] = st.decode_step_ms.size();
  (*m)["decode_tokens_per_s"] = med > 0 ? static_cast<double>(p.batch) / (med / 1e3) : 0.0;
  (*m)["memory"] = MemoryJson(st.memory_at_end);
  return Status::OK();
}

}  // namespace

void RegisterLatencyTasks(SweepTaskRegistry* registry) {
  SweepTaskInfo info;
  info.name = "latency";
  info.summary = "prefill time and per-step decode time of `batch` prompts";
  info.options = {PathOption("text", "a text file, or token ids in a file ending in .ids (\"\": the built-in text)"),
                  IntOption("decode_tokens", 16, 1, kMaxContextTokens, "tokens decoded after the prefill")};
  info.batched = true;
  info.key_options = [](const SweepTaskOptions& o, json* k) { (*k)["decode_tokens"] = o.Int("decode_tokens"); };
  info.estimate = [](const TaskCost& c, const SweepPoint& p, const SweepTaskOptions& o) {
    const double B = static_cast<double>(p.batch), L = static_cast<double>(p.length);
    return B * L * (c.token_s + c.attention_s * L / 2) +
           static_cast<double>(o.Int("decode_tokens")) * (c.step_overhead_s + B * (c.token_s + c.attention_s * L));
  };
  info.run = RunLatency;
  info.decode_columns = true;
  registry->Register(info);
}

}  // namespace kvlab
