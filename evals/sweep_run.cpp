// Running sweep points (each through its task, evals/tasks/), results.jsonl
// (appended and fsynced per point, evals/results_io.h; partial last lines from
// a killed run are dropped), resume, shards, the progress bar.
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
#include "core/base/untrusted.h"
#include "core/model/model_config.h"
#include "datasets/tasks/tasks.h"
#include "core/tokenizer/tokenizer.h"
#include "evals/results_io.h"
#include "evals/sweep.h"
#include "evals/sweep_internal.h"
#include "evals/tasks/task.h"

namespace kvlab {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

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

}  // namespace

// Runs one point through its task; returns its metrics (or an error).
Status SweepRunner::RunPoint(const SweepPoint& p, json* metrics) {
  const SweepTaskInfo* task = SweepTaskRegistry::Global().Find(p.task);
  if (task == nullptr) return Status::InvalidArgument("unknown task '" + p.task + "'");
  json m = json::object();
  KVLAB_RETURN_IF_ERROR(task->run(this, p, config_.task_options.at(p.task), &m));
  *metrics = std::move(m);
  return Status::OK();
}

Status SweepRunner::ModelTokenizer(const SweepPoint& p, const Tokenizer** out) {
  auto it = tokenizers_.find(p.model);
  if (it == tokenizers_.end()) {
    ModelConfig mc;
    KVLAB_RETURN_IF_ERROR(PointModelConfig(p, &mc));
    std::unique_ptr<Tokenizer> t;
    KVLAB_RETURN_IF_ERROR(LoadTokenizer(p.model, mc, &t));
    it = tokenizers_.emplace(p.model, std::move(t)).first;
  }
  *out = it->second.get();
  return Status::OK();
}

Status SweepRunner::CachedText(const std::string& path, std::string* out) {
  const std::string* t = nullptr;
  KVLAB_RETURN_IF_ERROR(Text(path, &t));
  *out = *t;
  return Status::OK();
}

Status SweepRunner::Text(const std::string& path, const std::string** out) {
  auto it = texts_.find(path);
  if (it == texts_.end()) {
    std::string t;
    KVLAB_RETURN_IF_ERROR(ReadText(path, &t));
    it = texts_.emplace(path, std::move(t)).first;
  }
  *out = &it->second;
  return Status::OK();
}

Status SweepRunner::Tokens(const SweepPoint& p, const std::string& path, const TaskTokens** out) {
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

std::string MachineDescription(int64_t threads) {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model = "unknown cpu";
  while (std::getline(cpu, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  // The threads the sweep ran on beside the host's hardware threads (a sweep
  // run with threads = 1 on a 2-core host says "1 of 2 threads").
  const int64_t hw = std::thread::hardware_concurrency();
  return model + ", " + std::to_string(threads > 0 ? threads : hw) + " of " + std::to_string(hw) + " threads";
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
  const SweepTaskInfo* task = SweepTaskRegistry::Global().Find(p.task);
  if (task == nullptr) return 1.0;
  return task->estimate(TaskCost{tok, attn, step_overhead}, p, c.task_options.at(p.task));
}

// Records of this sweep's points made with other weights of the same model
// (retrained since) must not pass as done: an error naming the model.
Status CheckRecordedCheckpoints(const std::vector<SweepPoint>& all, const std::vector<json>& records,
                                const std::string& jsonl, SweepRunner* runner) {
  std::map<std::string, const SweepPoint*> by_key;
  for (const SweepPoint& p : all) by_key.emplace(p.key, &p);
  std::map<std::string, int64_t> stale;  // model label -> records
  std::map<std::string, std::string> was, now;
  for (const json& r : records) {
    if (!r.contains("key") || !r.contains("checkpoint")) continue;  // types checked by LoadRecords
    auto it = by_key.find(r["key"].get<std::string>());
    if (it == by_key.end()) continue;
    const std::string hash = runner->CheckpointHash(it->second->model);
    if (hash == "unreadable" || r["checkpoint"].get<std::string>() == hash) continue;  // a missing model fails its points
    ++stale[it->second->model_label];
    was.emplace(it->second->model_label, r["checkpoint"].get<std::string>());
    now[it->second->model_label] = hash;
  }
  if (stale.empty()) return Status::OK();
  const std::string& label = stale.begin()->first;
  return Status::InvalidArgument(
      jsonl + ": " + std::to_string(stale.begin()->second) + " recorded point(s) of model '" + label +
      "' were made with checkpoint " + was[label].substr(0, 16) + "..., but its model.safetensors is now " +
      now[label].substr(0, 16) + "... (retrained?): write to a new directory (--out DIR or another name) "
      "or remove those records; nothing was run");
}

// A copy of the config beside the results, with the --set overrides that were
// applied on top of it, so that the copy says what ran (replaced atomically).
Status WriteConfigCopy(const SweepConfig& config, const std::string& out_dir) {
  if (config.path.empty()) return Status::OK();
  std::string copy;
  KVLAB_RETURN_IF_ERROR(ReadFileBounded(config.path, kMaxConfigBytes, &copy));
  if (!config.overrides.empty()) {
    copy += "\n# kvlab run applied these overrides on top of this file:\n#  ";
    for (const std::string& o : config.overrides) copy += " --set '" + o + "'";
    copy += "\n";
  }
  const Status wrote = WriteFileAtomic(out_dir + "/config.toml", copy);
  if (wrote.code() == Status::Code::kIOError) return Status::IOError(wrote.message() + "; nothing was run");
  return wrote;
}

}  // namespace

Status RunSweep(const SweepConfig& config, const RunSweepOptions& opts, std::string* report) {
  report->clear();
  if (opts.num_shards < 1 || opts.shard < 0 || opts.shard >= opts.num_shards) {
    return Status::InvalidArgument("--shard I/N needs 0 <= I < N");
  }
  if (opts.out_dir.empty() && (config.name.empty() || config.name == "." || config.name == ".." ||
                               !IsSafePathComponent(config.name))) {
    return Status::InvalidArgument("sweep name '" + QuoteBytes(config.name) +
                                   "' is not a directory name under results/ (give another name or --out DIR)");
  }
  const std::string out_dir = opts.out_dir.empty() ? "results/" + config.name : opts.out_dir;
  const std::string jsonl = out_dir + "/results.jsonl";
  // Held until the reports are written: a second run on out_dir waits or stops
  // here, before it reads the records, so it never repeats this run's points.
  std::unique_ptr<ResultsDirLock> lock;
  if (!opts.dry_run) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) return Status::IOError(out_dir + ": cannot create directory: " + ec.message());
    KVLAB_RETURN_IF_ERROR(ResultsDirLock::Acquire(out_dir, opts.wait_if_locked, "run", &lock, opts.on_lock_wait));
    // Before any work: a link among the files this run writes is an error naming it.
    KVLAB_RETURN_IF_ERROR(CheckResultsDirFiles(out_dir));
  }
  std::vector<SweepPoint> all = ExpandPoints(config);
  std::vector<SweepPoint> mine;
  for (const SweepPoint& p : all) {
    if (p.index % opts.num_shards == opts.shard) mine.push_back(p);
  }
  std::vector<json> records;
  KVLAB_RETURN_IF_ERROR(LoadRecords(jsonl, &records));
  std::set<std::string> done, failed;
  for (const json& r : records) {
    if (!r.contains("key")) continue;  // LoadRecords checked that a key is a string
    (r.value("status", "") == "ok" ? done : failed).insert(r["key"].get<std::string>());
  }
  auto skip = [&](const SweepPoint& p) { return done.count(p.key) || (!opts.retry_failed && failed.count(p.key)); };
  // A point's key does not name the checkpoint: records made with other
  // weights of the same model (retrained since) must not pass as done.
  SweepRunner runner(config);
  KVLAB_RETURN_IF_ERROR(CheckRecordedCheckpoints(all, records, jsonl, &runner));
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
  KVLAB_RETURN_IF_ERROR(WriteConfigCopy(config, out_dir));

  const std::string rev = GitRevision(), machine = MachineDescription(config.threads);
  std::vector<const SweepPoint*> todo;
  for (const SweepPoint& p : mine) if (!skip(p)) todo.push_back(&p);
  // Each point's estimate once (it reads the model's config.json).
  std::vector<double> est(todo.size());
  double est_total = 0;
  for (size_t i = 0; i < todo.size(); ++i) est_total += est[i] = EstimateSeconds(config, *todo[i]);
  ProgressBar bar(static_cast<int64_t>(todo.size()), opts.progress);
  int64_t failures = 0, ok_now = 0;
  std::string first_error;
  double est_done = 0;
  const auto t_start = Clock::now();
  for (size_t i = 0; i < todo.size(); ++i) {
    const SweepPoint* p = todo[i];
    bar.Update(p->task + " " + p->stack_label + " L=" + std::to_string(p->length), est_done, est_total);
    const auto stop = [&] {
      if (opts.progress) std::fprintf(stderr, "\n");  // off the progress bar's line
      return Status::Internal("interrupted; this run recorded " + std::to_string(i) + " of its " +
                              std::to_string(todo.size()) + " points (rerun to resume)");
    };
    if (opts.interrupted && opts.interrupted()) return stop();
    const auto t0 = Clock::now();
    json metrics;
    Status s;
    // A policy with no Status path (a Python policy's error) throws: the point
    // fails with its message and the sweep goes on.
    try {
      s = runner.RunPoint(*p, &metrics);
    } catch (const std::exception& e) {
      if (opts.interrupted && opts.interrupted()) return stop();
      s = Status::Internal(e.what());
    }
    const double wall = Ms(t0, Clock::now()) / 1e3;
    json r;
    r["key"] = p->key;
    r["sweep"] = config.name;
    r["config"] = config.path;
    r["index"] = p->index;
    r["status"] = s.ok() ? "ok" : "error";
    if (!s.ok()) {
      r["error"] = s.ToString();
      if (failures++ == 0) first_error = "point " + std::to_string(p->index) + ": " + s.ToString();
    } else {
      ++ok_now;
    }
    r["model"] = p->model_label;
    ModelConfig point_model;
    if (PointModelConfig(*p, &point_model).ok()) r["model_type"] = point_model.spec.model_type;
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
    if (config.allow_long_context) r["allow_long_context"] = true;
    r["max_step_tokens"] = config.max_step_tokens;
    r["run_blocks"] = config.run_blocks;
    r["metrics"] = s.ok() ? metrics : json::object();
    r["git_revision"] = rev;
    r["machine"] = machine;
    r["wall_s"] = wall;
    const Status appended = AppendRecord(jsonl, r);
    if (!appended.ok()) {
      // Stop: a point computed now could not be kept either.
      if (opts.progress) std::fprintf(stderr, "\n");  // off the progress bar's line
      return Status::IOError(appended.message() + "; this run recorded " + std::to_string(i) + " of its " +
                             std::to_string(todo.size()) + " points before it (rerun to run the rest; results.csv "
                             "and summary.md were not rewritten)");
    }
    est_done += est[i];
    bar.Done(s.ok() ? "" : "point " + std::to_string(p->index) + " failed: " + s.ToString());
  }
  bar.Finish(Ms(t_start, Clock::now()) / 1e3);
  std::string summary;
  const Status reported = WriteReports(out_dir, &summary);
  if (!reported.ok()) {
    if (reported.code() != Status::Code::kIOError) return reported;
    return Status::IOError(reported.message() + "; every point of this run is in " + jsonl +
                           " (a rerun runs nothing and writes the reports)");
  }
  rep << "ran " << todo.size() << " of " << mine.size() << " points (" << (mine.size() - todo.size())
      << " already in " << jsonl << ")";
  if (failures > 0) rep << "; " << failures << " failed (their errors are in results.jsonl)";
  if (lock != nullptr && !lock->waited_for().empty()) rep << "; waited for pid " << lock->waited_for() << " first";
  rep << "\n";
  if (opts.print_summary) rep << "\n" << summary;
  rep << "\nwrote " << out_dir << "/results.jsonl, results.csv, summary.md\n";
  *report = rep.str();
  // A sweep in which no point of this shard succeeded (this run's and the ones
  // recorded before) measured nothing: that is an error, not a quiet exit 0.
  int64_t ok_before = 0;
  for (const SweepPoint& p : mine) ok_before += done.count(p.key) ? 1 : 0;
  if (!mine.empty() && ok_now + ok_before == 0) {
    std::string why = first_error;
    if (why.empty()) {  // nothing ran now: every point was recorded as failed before
      for (auto it = records.rbegin(); it != records.rend() && why.empty(); ++it) {
        if (it->value("status", "") != "ok" && it->contains("error") && (*it)["error"].is_string()) {
          why = "point " + std::to_string(it->value("index", 0)) + ": " + (*it)["error"].get<std::string>();
        }
      }
      why += " (recorded before; --retry-failed runs them again)";
    }
    return Status::InvalidArgument("every one of the " + std::to_string(mine.size()) + " point(s) failed; first: " + why +
                                   " (all errors in " + jsonl + ")");
  }
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
