#include "evals/tasks/task.h"

#include <algorithm>

#include "core/base/untrusted.h"

namespace kvlab {

// The built-in task files, one line each in the order `valid: ...` lists
// them: X(Name) stands for Register<Name>Tasks(SweepTaskRegistry*), defined
// in the task's own file (which may register several tasks).
#define KVLAB_BUILTIN_TASKS(X) \
  X(Bpb)                       \
  X(Retrieval)                 \
  X(Latency)                   \
  X(Paging)                    \
  X(Ruler)                     \
  X(Dataset)

#define KVLAB_DECLARE_TASKS(Name) void Register##Name##Tasks(SweepTaskRegistry* registry);
KVLAB_BUILTIN_TASKS(KVLAB_DECLARE_TASKS)
#undef KVLAB_DECLARE_TASKS

void RegisterBuiltinSweepTasks(SweepTaskRegistry* registry) {
#define KVLAB_CALL_TASKS(Name) Register##Name##Tasks(registry);
  KVLAB_BUILTIN_TASKS(KVLAB_CALL_TASKS)
#undef KVLAB_CALL_TASKS
}

SweepTaskRegistry& SweepTaskRegistry::Global() {
  static SweepTaskRegistry* registry = [] {
    auto* r = new SweepTaskRegistry();
    RegisterBuiltinSweepTasks(r);
    return r;
  }();
  return *registry;
}

void SweepTaskRegistry::Register(SweepTaskInfo info) { infos_.push_back(std::move(info)); }

const SweepTaskInfo* SweepTaskRegistry::Find(const std::string& name) const {
  for (const SweepTaskInfo& i : infos_) {
    if (i.name == name) return &i;
  }
  return nullptr;
}

std::vector<std::string> SweepTaskRegistry::Names() const {
  std::vector<std::string> names;
  for (const SweepTaskInfo& i : infos_) names.push_back(i.name);
  return names;
}

TaskOption IntOption(const std::string& name, int64_t value, int64_t min, int64_t max, const std::string& help) {
  return TaskOption{name, TaskOption::Type::kInt, value, static_cast<double>(min), static_cast<double>(max), help};
}
TaskOption FloatOption(const std::string& name, double value, double min, double max, const std::string& help) {
  return TaskOption{name, TaskOption::Type::kFloat, value, min, max, help};
}
TaskOption BoolOption(const std::string& name, bool value, const std::string& help) {
  return TaskOption{name, TaskOption::Type::kBool, value, 0, 0, help};
}
TaskOption PathOption(const std::string& name, const std::string& what) {
  return TaskOption{name, TaskOption::Type::kPath, "", 0, 0, what};
}
TaskOption IntListOption(const std::string& name, std::vector<int64_t> value, int64_t min, int64_t max,
                         const std::string& help) {
  return TaskOption{name, TaskOption::Type::kIntList, value, static_cast<double>(min), static_cast<double>(max), help};
}
TaskOption FloatListOption(const std::string& name, std::vector<double> value, double min, double max,
                           const std::string& help) {
  return TaskOption{name, TaskOption::Type::kFloatList, value, min, max, help};
}

TaskOption TextOption() { return PathOption("text", "a text file"); }
TaskOption SamplesOption() {
  return IntOption("samples", 2, 1, kMaxCount, "prompts (per depth where the task has depths)");
}
TaskOption DepthsOption() {
  return FloatListOption("depths", {0.0, 0.25, 0.5, 0.75, 1.0}, 0, 1, "where the needle sits: 0 = start, 1 = end");
}
TaskOption TokensToGenerateOption() {
  return IntOption("tokens_to_generate", 0, 1, kMaxContextTokens, "tokens generated per prompt (0: the task's own)");
}
TaskOption QueryAwareOption() {
  return BoolOption("query_aware", true,
                    "the question inside what the policies compress (false: the context is prefilled and "
                    "compressed first)");
}
TaskOption ChatOption() {
  return BoolOption("chat", false, "the prompt as one user message through the model's chat template");
}

Status PointModelConfig(const SweepPoint& p, ModelConfig* out) {
  if (PresetConfig(p.model, out).ok()) return Status::OK();
  return LoadModelConfig(p.model + "/config.json", out);
}

EngineOptions PointEngineOptions(const SweepConfig& c, const SweepPoint& p, int64_t max_context, int64_t seqs) {
  EngineOptions o;
  o.model = p.model;
  o.kv_dtype = c.kv_dtype;
  o.block_size = c.block_size;
  o.max_seqs = seqs;
  o.max_context = max_context;
  o.num_threads = static_cast<int>(c.threads);
  o.allow_long_context = c.allow_long_context;
  o.max_step_tokens = c.max_step_tokens;
  o.run_blocks = c.run_blocks;
  return o;
}

nlohmann::ordered_json MemoryJson(const MemoryStats& m) {
  nlohmann::ordered_json j;
  j["kv_bytes_end"] = m.bytes_in_use;
  j["kv_bytes_per_token"] = m.tokens_seen > 0 ? static_cast<double>(m.bytes_in_use) / static_cast<double>(m.tokens_seen) : 0.0;
  j["peak_kv_bytes"] = m.peak_bytes_in_use;
  j["kv_bytes_run_reserve"] = m.run_reserve_bytes;  // reserved ahead, not KV: outside the two above
  j["peak_kv_bytes_run_reserve"] = m.peak_run_reserve_bytes;
  j["blocks_in_use"] = m.blocks_in_use;
  j["slots_in_use"] = m.slots_in_use;
  j["tokens_seen"] = m.tokens_seen;
  j["device_bytes"] = m.device_bytes;
  j["peak_device_bytes"] = m.peak_device_bytes;
  j["host_bytes"] = m.host_bytes;
  j["disk_bytes"] = m.disk_bytes;
  j["kv_bytes_reserved"] = m.bytes_reserved;
  j["plain_bytes_reserved"] = m.plain_bytes_reserved;
  j["encoded_bytes_reserved"] = m.encoded_bytes_reserved;
  j["full_bytes_reserved"] = m.full_bytes_reserved;
  if (m.decode_steps > 0 && m.kv_dense_read_bytes > 0) {  // K/V bytes a decode step's attention read
    j["decode_steps_read"] = m.decode_steps;
    j["kv_read_bytes_per_step"] = static_cast<double>(m.kv_read_bytes) / static_cast<double>(m.decode_steps);
    j["kv_read_ratio"] = static_cast<double>(m.kv_read_bytes) / static_cast<double>(m.kv_dense_read_bytes);
  }
  return j;
}

Status ContinuationText(const Tokenizer& tok, const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated,
                        std::string* text) {
  std::string before, all;
  KVLAB_RETURN_IF_ERROR(tok.Decode(prompt, &before));
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), generated.begin(), generated.end());
  KVLAB_RETURN_IF_ERROR(tok.Decode(ids, &all));
  if (all.compare(0, before.size(), before) == 0) {
    *text = all.substr(before.size());
    return Status::OK();
  }
  return tok.Decode(generated, text);
}

Status GenerateAfterSplit(TaskContext* ctx, const SweepPoint& p, const Tokenizer& tok, const std::vector<int32_t>& ids,
                          size_t split, int64_t gen, std::string* text, MemoryStats* mem) {
  const int64_t context = static_cast<int64_t>(ids.size()) + gen + 1;
  std::unique_ptr<Engine> e;
  KVLAB_RETURN_IF_ERROR(Engine::Create(PointEngineOptions(ctx->config(), p, context, 1), p.stack, &e));
  KVLAB_RETURN_IF_ERROR(e->AddSequence(0));
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(1, e->options().prefill_chunk));
  std::vector<std::vector<float>> logits;
  auto prefill = [&](size_t b, size_t end) -> Status {
    for (size_t off = b; off < end; off += chunk) {
      SeqChunk c{0, std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(off),
                                         ids.begin() + static_cast<std::ptrdiff_t>(std::min(end, off + chunk)))};
      KVLAB_RETURN_IF_ERROR(e->Forward({c}, false, &logits));
    }
    return Status::OK();
  };
  if (split == 0 || split > ids.size()) split = ids.size();
  KVLAB_RETURN_IF_ERROR(prefill(0, split));
  KVLAB_RETURN_IF_ERROR(prefill(split, ids.size()));
  std::vector<int32_t> out;
  for (int64_t i = 0; i < gen; ++i) {
    const std::vector<float>& l = logits[0];
    const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(next);
    if (i + 1 < gen) KVLAB_RETURN_IF_ERROR(e->Forward({SeqChunk{0, {next}}}, false, &logits));
  }
  *mem = e->Memory();
  KVLAB_RETURN_IF_ERROR(e->RemoveSequence(0));
  if (tok.eos_id() >= 0) out.erase(std::find(out.begin(), out.end(), tok.eos_id()), out.end());
  return ContinuationText(tok, ids, out, text);
}

size_t SharedPrefix(const Tokenizer& tok, const std::string& head, const std::vector<int32_t>& ids) {
  std::vector<int32_t> h;
  if (!tok.Encode(head, /*add_bos=*/true, &h).ok()) return 0;
  size_t n = 0;
  while (n < h.size() && n < ids.size() && h[n] == ids[n]) ++n;
  return n;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace kvlab
