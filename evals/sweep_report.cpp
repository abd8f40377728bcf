// results.jsonl -> results.csv and summary.md (ratios against the baseline of
// the same sweep; intervals and paired differences, evals/sweep_intervals.cpp;
// each file replaced atomically, evals/results_io.h), and `kvlab merge`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "core/base/untrusted.h"
#include "evals/results_io.h"
#include "evals/sweep.h"
#include "evals/sweep_internal.h"
#include "evals/tasks/task.h"

namespace kvlab {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// The baseline a record compares with: same model, task, length, batch, seed, repetition.
std::string PeerKey(const json& r) {
  return r.value("model", "") + "|" + r.value("task", "") + "|" + std::to_string(r.value("length", 0)) + "|" +
         std::to_string(r.value("batch", 0)) + "|" + std::to_string(r.value("seed", 0)) + "|" +
         std::to_string(r.value("repetition", 0));
}

// j[key], or null when j is not an object or has no such key: records come
// from a file, and const operator[] on a missing key is undefined behaviour.
const json& Field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

double Num(const json& m, const char* key, double dflt = NAN) {
  const json& v = Field(m, key);
  return v.is_number() ? v.get<double>() : dflt;
}

double Mem(const json& r, const char* key) { return Num(Field(Field(r, "metrics"), "memory"), key); }

double Ratio(double a, double b) { return std::isfinite(a) && std::isfinite(b) && b != 0 ? a / b : NAN; }

std::string Fmt(double v, const char* f = "%.4g") {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string Csv(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

struct Derived {
  double memory_ratio = NAN, peak_ratio = NAN, reserved_ratio = NAN, compression = NAN, bpb_ratio = NAN, decode_ratio = NAN, prefill_ratio = NAN,
         accuracy_delta = NAN, read_ratio = NAN;
};

Derived Derive(const json& r, const json* base) {
  Derived d;
  if (base == nullptr) return d;
  d.memory_ratio = Ratio(Mem(r, "kv_bytes_end"), Mem(*base, "kv_bytes_end"));
  d.compression = Ratio(Mem(*base, "kv_bytes_end"), Mem(r, "kv_bytes_end"));
  d.peak_ratio = Ratio(Mem(r, "peak_kv_bytes"), Mem(*base, "peak_kv_bytes"));
  d.reserved_ratio = Ratio(Mem(r, "kv_bytes_reserved"), Mem(*base, "kv_bytes_reserved"));
  d.read_ratio = Ratio(Mem(r, "kv_read_bytes_per_step"), Mem(*base, "kv_read_bytes_per_step"));
  const json &m = Field(r, "metrics"), &bm = Field(*base, "metrics");
  d.bpb_ratio = Ratio(Num(m, "bpb"), Num(bm, "bpb"));
  d.decode_ratio = Ratio(Num(m, "decode_ms_median"), Num(bm, "decode_ms_median"));
  d.prefill_ratio = Ratio(Num(m, "prefill_ms"), Num(bm, "prefill_ms"));
  const double a = Num(m, "accuracy"), b = Num(bm, "accuracy");
  if (std::isfinite(a) && std::isfinite(b)) d.accuracy_delta = a - b;
  return d;
}

// Points recorded more than once (a retried failure, or two runs that computed
// the same points before the results directory had a lock): the tables keep
// one record per point, and the summary says how many were repeated.
std::string RepeatedPointsNote(const std::vector<json>& all) {
  std::map<std::string, int64_t> records, ok;
  int64_t points = 0, twice_ok = 0;
  for (const json& r : all) {
    const std::string k = r.value("key", "");
    points += ++records[k] == 2;
    if (r.value("status", "") == "ok") twice_ok += ++ok[k] == 2;
  }
  if (points == 0) return "";
  return std::to_string(points) + " point(s) have more than one record in results.jsonl (" +
         std::to_string(all.size() - records.size()) + " extra, " + std::to_string(twice_ok) +
         " point(s) with two or more ok records); the tables keep one record per point, its latest ok one.\n\n";
}

struct Mean {
  double sum = 0;
  int64_t n = 0;
  void Add(double v) {
    if (std::isfinite(v)) { sum += v; ++n; }
  }
  std::string Str(const char* f = "%.4g") const { return n ? Fmt(sum / static_cast<double>(n), f) : "–"; }
};

// The lengths at which a model ran a task, ascending.
std::vector<int64_t> Lengths(const std::vector<json>& recs, const std::string& model, const std::string& task) {
  std::vector<int64_t> lengths;
  for (const json& r : recs) {
    if (r.value("model", "") == model && r.value("task", "") == task) {
      const int64_t L = r.value("length", 0);
      if (std::find(lengths.begin(), lengths.end(), L) == lengths.end()) lengths.push_back(L);
    }
  }
  std::sort(lengths.begin(), lengths.end());
  return lengths;
}

std::vector<int64_t> FamilyLengths(const std::vector<json>& recs, const std::string& model,
                                  const std::vector<std::string>& family) {
  std::set<int64_t> all;
  for (const std::string& t : family) for (int64_t L : Lengths(recs, model, t)) all.insert(L);
  return std::vector<int64_t>(all.begin(), all.end());
}

// The prompt tasks' query_aware mode, as a table title's suffix: ", question-aware",
// ", question-agnostic", or a warning when the records mix both; then ", chat
// template" when the prompts went through the model's chat template (chat = true).
std::string QueryMode(const std::vector<json>& recs, const std::string& model, const std::vector<std::string>& tasks,
                      int64_t L) {
  std::set<bool> modes, chats;
  for (const json& r : recs) {
    if (r.value("model", "") != model || r.value("length", 0) != L || r.value("status", "") != "ok") continue;
    if (std::find(tasks.begin(), tasks.end(), r.value("task", "")) == tasks.end()) continue;
    const json& q = Field(Field(r, "metrics"), "query_aware");
    if (q.is_boolean()) modes.insert(q.get<bool>());
    const json& c = Field(Field(r, "metrics"), "chat");
    if (c.is_boolean()) chats.insert(c.get<bool>());
  }
  std::string s;
  if (modes.size() == 2) s = ", question-aware and question-agnostic records mixed (query_aware)";
  if (modes.size() == 1) s = *modes.begin() ? ", question-aware" : ", question-agnostic";
  if (chats.size() == 2) s += ", chat-template and plain prompts mixed (chat)";
  if (chats.size() == 1 && *chats.begin()) s += ", chat template";
  return s;
}

// A column of the summary's tables: a task's metric.
struct Column {
  std::string task, metric, title;
  const char* fmt;
};

}  // namespace

Status WriteReports(const std::string& dir, std::string* summary) {
  std::vector<json> all;
  KVLAB_RETURN_IF_ERROR(LoadRecords(dir + "/results.jsonl", &all));
  // The latest record per key (an ok record wins over an error).
  const std::vector<json> recs = OneRecordPerKey(all);
  std::map<std::string, const json*> baselines;
  for (const json& r : recs) {
    if (r.value("baseline", false) && r.value("status", "") == "ok") baselines[PeerKey(r)] = &r;
  }
  const BaselineOf base_of = [&](const json& r) -> const json* {
    auto it = baselines.find(PeerKey(r));
    return it == baselines.end() ? nullptr : it->second;
  };

  // results.csv
  {
    std::ostringstream csv;
    csv << "index,sweep,model,stack,policy,baseline,task,length,batch,seed,repetition,kv_dtype,block_size,status,error,"
           "wall_s,kv_bytes_end,kv_bytes_per_token,peak_kv_bytes,blocks_in_use,device_bytes,host_bytes,disk_bytes,"
           "memory_ratio,compression,n_samples,bpb,bpb_lo,bpb_hi,bpb_ratio,bpb_delta,bpb_delta_lo,bpb_delta_hi,kl,kl_lo,"
           "kl_hi,kl_delta,kl_delta_lo,kl_delta_hi,top1_agreement,top1_lo,top1_hi,top1_delta,top1_delta_lo,top1_delta_hi,"
           "accuracy,accuracy_lo,accuracy_hi,char_accuracy,char_accuracy_lo,char_accuracy_hi,accuracy_delta,"
           "accuracy_delta_lo,accuracy_delta_hi,prefill_ms,decode_ms_median,decode_ms_p90,decode_tokens_per_s,"
           "decode_ratio,prefill_ratio,checkpoint,git_revision,peak_ratio,kv_bytes_reserved,reserved_ratio,peak_device_bytes,"
           "kv_read_bytes_per_step,kv_read_ratio,read_ratio,run_blocks,peak_kv_bytes_run_reserve\n";
    for (const json& r : recs) {
      const json& m = Field(r, "metrics");
      const bool ok = r.value("status", "") == "ok";
      const Derived d = Derive(r, ok ? base_of(r) : nullptr);
      // The point's own intervals, over its samples (windows for bpb), and the paired differences.
      const std::string seed = "point|" + r.value("key", "");
      auto cell = [&](const char* metric) {
        return ok && Field(m, metric).is_number() ? ComputeCell({&r}, metric, base_of, seed) : CellStats();
      };
      const CellStats bpb = cell("bpb"), kl = cell("kl"), top = cell("top1_agreement"), acc = cell("accuracy"),
                      chars = cell("char_accuracy");
      const int64_t n = acc.value.n > 0 ? acc.value.n : bpb.value.n;
      auto ci = [](const Interval& i) { return Fmt(i.lo) + "," + Fmt(i.hi); };
      auto delta = [](const Interval& i, double fallback) {
        return Fmt(i.n > 0 ? i.estimate : fallback) + "," + Fmt(i.lo) + "," + Fmt(i.hi);
      };
      csv << r.value("index", 0) << "," << Csv(r.value("sweep", "")) << "," << Csv(r.value("model", "")) << ","
          << Csv(r.value("stack", "")) << "," << Csv(r.value("policy", "")) << "," << (r.value("baseline", false) ? 1 : 0)
          << "," << r.value("task", "") << "," << r.value("length", 0) << "," << r.value("batch", 0) << ","
          << r.value("seed", 0) << "," << r.value("repetition", 0) << "," << r.value("kv_dtype", "") << ","
          << r.value("block_size", 0) << "," << r.value("status", "") << "," << Csv(r.value("error", "")) << ","
          << Fmt(r.value("wall_s", NAN)) << "," << Fmt(Mem(r, "kv_bytes_end"), "%.0f") << ","
          << Fmt(Mem(r, "kv_bytes_per_token")) << "," << Fmt(Mem(r, "peak_kv_bytes"), "%.0f") << ","
          << Fmt(Mem(r, "blocks_in_use"), "%.0f") << "," << Fmt(Mem(r, "device_bytes"), "%.0f") << ","
          << Fmt(Mem(r, "host_bytes"), "%.0f") << "," << Fmt(Mem(r, "disk_bytes"), "%.0f") << "," << Fmt(d.memory_ratio)
          << "," << Fmt(d.compression) << "," << (n > 0 ? std::to_string(n) : "") << "," << Fmt(Num(m, "bpb")) << ","
          << ci(bpb.value) << "," << Fmt(d.bpb_ratio) << "," << delta(bpb.delta, NAN) << "," << Fmt(Num(m, "kl")) << ","
          << ci(kl.value) << "," << delta(kl.delta, NAN) << "," << Fmt(Num(m, "top1_agreement")) << "," << ci(top.value)
          << "," << delta(top.delta, NAN) << "," << Fmt(Num(m, "accuracy")) << "," << ci(acc.value) << ","
          << Fmt(Num(m, "char_accuracy")) << "," << ci(chars.value) << "," << delta(acc.delta, d.accuracy_delta) << ","
          << Fmt(Num(m, "prefill_ms")) << "," << Fmt(Num(m, "decode_ms_median")) << "," << Fmt(Num(m, "decode_ms_p90"))
          << "," << Fmt(Num(m, "decode_tokens_per_s")) << "," << Fmt(d.decode_ratio) << "," << Fmt(d.prefill_ratio) << ","
          << Csv(r.value("checkpoint", "")) << "," << r.value("git_revision", "") << "," << Fmt(d.peak_ratio) << ","
          << Fmt(Mem(r, "kv_bytes_reserved"), "%.0f") << "," << Fmt(d.reserved_ratio) << ","
          << Fmt(Mem(r, "peak_device_bytes"), "%.0f") << "," << Fmt(Mem(r, "kv_read_bytes_per_step"), "%.0f") << ","
          << Fmt(Mem(r, "kv_read_ratio")) << "," << Fmt(d.read_ratio) << ","
          << Fmt(Num(r, "run_blocks"), "%.0f") << "," << Fmt(Mem(r, "peak_kv_bytes_run_reserve"), "%.0f") << "\n";
    }
    KVLAB_RETURN_IF_ERROR(WriteFileAtomic(dir + "/results.csv", csv.str()));
  }

  // summary.md: per model, one row per policy setting, means over its points' samples.
  std::ostringstream md;
  const std::string name = recs.empty() ? "" : recs[0].value("sweep", "");
  md << "# Sweep `" << name << "`\n\n";
  if (!recs.empty() && recs[0].contains("config")) {
    md << "Made by `kvlab run " << recs[0].value("config", "") << "` (git " << recs[0].value("git_revision", "?")
       << "; " << recs[0].value("machine", "?") << ").\n\n";
  }
  md << "Means over each setting's samples (all its lengths, seeds and repetitions; a bpb sample is a text window). "
        "peak = the most KV bytes the pools held at once during each sequence, end = KV bytes held at its end, "
        "reserved = bytes the pools reserved for it, each / the `full` baseline's on the same model, task, length "
        "and seed (compression = the baseline's end bytes / the setting's; \"whole cache\": a read policy such as quest, "
        "which keeps every block and reads a subset); read = K/V bytes a decode step's attention read / the "
        "baseline's; bpb on held-out text, teacher forced token by token; KL (nats) and top-1 agreement of next-token "
        "distributions against the baseline; retrieval = exact-match accuracy; RULER = RULER's score (%), its average "
        "over its tasks; LongBench = each dataset's own metric (%), its average over datasets; decode = median time per decode step / the baseline's.\n\n"
        "Each figure is `mean [95% interval] n=samples`: Wilson's interval for exact-match proportions, else a "
        "percentile bootstrap (" << kBootstrapResamples << " resamples, seeded). Differences from the baseline are "
        "paired on the same samples (bootstrap of the per-sample differences); `~` marks a difference whose interval "
        "contains 0: the data cannot tell that setting from the baseline there.\n\n";
  std::vector<std::string> models;
  for (const json& r : recs) {
    const std::string m = r.value("model", "");
    if (std::find(models.begin(), models.end(), m) == models.end()) models.push_back(m);
  }
  // The ok records of a model's setting and task (at one length, or all when L < 0).
  auto select = [&](const std::string& model, const std::string& stack, const std::string& task, int64_t L) {
    std::vector<const json*> out;
    for (const json& r : recs) {
      if (r.value("model", "") == model && r.value("stack", "") == stack && r.value("task", "") == task &&
          (L < 0 || r.value("length", 0) == L) && r.value("status", "") == "ok") {
        out.push_back(&r);
      }
    }
    return out;
  };
  int64_t errors = 0;
  for (const std::string& model : models) {
    std::vector<std::string> stacks;
    std::set<std::string> tasks;
    std::map<std::string, bool> is_baseline;
    for (const json& r : recs) {
      if (r.value("model", "") != model) continue;
      const std::string s = r.value("stack", "");
      if (std::find(stacks.begin(), stacks.end(), s) == stacks.end()) stacks.push_back(s);
      if (r.value("baseline", false)) is_baseline[s] = true;
      tasks.insert(r.value("task", ""));
    }
    // What each task present shows (SweepTaskInfo's report fields), in
    // registration order: its columns, its benchmark family, its latency columns.
    std::vector<Column> cols;
    std::vector<std::pair<std::string, std::vector<std::string>>> families;  // (name, its tasks present)
    std::string ruler_title;  // the family whose average is a column of the model's table
    std::vector<std::string> ruler;
    bool has_lat = false;
    for (const SweepTaskInfo& info : SweepTaskRegistry::Global().infos()) {
      if (!tasks.count(info.name)) continue;
      for (const SweepTaskInfo::Column& c : info.columns) cols.push_back({info.name, c.metric, c.title, c.fmt.c_str()});
      has_lat = has_lat || info.decode_columns;
      if (info.family.empty()) continue;
      if (families.empty() || families.back().first != info.family) families.push_back({info.family, {}});
      families.back().second.push_back(info.name);
      if (info.family_average_column && (ruler.empty() || ruler_title == info.family)) {
        ruler_title = info.family;
        ruler.push_back(info.name);
      }
    }
    // A benchmark's average over its tasks (RULER's, LongBench's), stratified by task.
    auto family_avg = [&](const std::vector<std::string>& family, const std::string& stack, int64_t L) {
      std::vector<std::vector<const json*>> g;
      for (const std::string& t : family) g.push_back(select(model, stack, t, L));
      const std::string id = family == ruler ? "ruler" : family[0];
      return ComputeAverage(g, "accuracy", base_of, "summary|" + model + "|" + stack + "|" + id + "|" + std::to_string(L));
    };
    auto ruler_avg = [&](const std::string& stack, int64_t L) { return family_avg(ruler, stack, L); };
    auto family_note = [&](const std::vector<std::string>& family, const CellStats& c) {
      return c.groups > 0 && c.groups < static_cast<int64_t>(family.size())
                 ? " (" + std::to_string(c.groups) + " of " + std::to_string(family.size()) + " tasks)"
                 : std::string();
    };
    auto ruler_note = [&](const CellStats& c) { return family_note(ruler, c); };
    md << "## " << model << "\n\n| setting | peak memory | end memory | reserved | compression |";
    for (const Column& c : cols) md << " " << c.title << " |";
    if (!ruler.empty()) md << " " << ruler_title << " avg (%) |";
    if (has_lat) md << " decode ms | decode |";
    md << " read |";
    md << " points |\n|---|---|---|---|---|---|";
    for (size_t i = 0; i < cols.size() + (ruler.empty() ? 0 : 1); ++i) md << "---|";
    if (has_lat) md << "---|---|";
    md << "---|\n";
    for (const std::string& s : stacks) {
      Mean mem, peak, reserved, comp, dec_ms, dec_ratio, read;
      int64_t n = 0, bad = 0;
      bool whole = false;  // some point read a subset of a cache it kept whole (a read policy)
      for (const json& r : recs) {
        if (r.value("model", "") != model || r.value("stack", "") != s) continue;
        ++n;
        if (r.value("status", "") != "ok") { ++bad; continue; }
        const Derived d = Derive(r, base_of(r));
        mem.Add(d.memory_ratio);
        peak.Add(d.peak_ratio);
        reserved.Add(d.reserved_ratio);
        comp.Add(d.compression);
        read.Add(d.read_ratio);
        whole = whole || Mem(r, "kv_read_ratio") < 1;
        const SweepTaskInfo* task = SweepTaskRegistry::Global().Find(r.value("task", ""));
        if (task != nullptr && task->decode_columns) {
          dec_ms.Add(Num(Field(r, "metrics"), "decode_ms_median"));
          dec_ratio.Add(d.decode_ratio);
        }
      }
      errors += bad;
      md << "| `" << s << "` | " << peak.Str("%.3f") << " | " << mem.Str("%.3f") << (whole ? " (whole cache)" : "")
         << " | " << reserved.Str("%.3f") << " | " << comp.Str("%.2f") << "x |";
      for (const Column& c : cols) {
        md << " " << FormatInterval(ComputeCell(select(model, s, c.task, -1), c.metric, base_of,
                                                "summary|" + model + "|" + s + "|" + c.task).value, c.fmt) << " |";
      }
      if (!ruler.empty()) {
        const CellStats a = ruler_avg(s, -1);
        md << " " << FormatInterval(a.value, "%.1f", 100) << ruler_note(a) << " |";
      }
      if (has_lat) md << " " << dec_ms.Str("%.2f") << " | " << dec_ratio.Str("%.2f") << "x |";
      md << " " << read.Str("%.3f") << " |";
      md << " " << n << (bad ? " (" + std::to_string(bad) + " failed)" : "") << " |\n";
    }
    md << "\n";
    // Paired differences from the baseline.
    const bool any_other = std::any_of(stacks.begin(), stacks.end(), [&](const std::string& s) { return !is_baseline[s]; });
    if (any_other && (!cols.empty() || !ruler.empty())) {
      md << "### " << model << ": differences from the baseline (paired on the same samples)\n\n| setting |";
      for (const Column& c : cols) md << " " << c.title << " |";
      if (!ruler.empty()) md << " " << ruler_title << " avg (points) |";
      md << "\n|---|";
      for (size_t i = 0; i < cols.size() + (ruler.empty() ? 0 : 1); ++i) md << "---|";
      md << "\n";
      for (const std::string& s : stacks) {
        if (is_baseline[s]) continue;
        md << "| `" << s << "` |";
        for (const Column& c : cols) {
          md << " " << FormatDifference(ComputeCell(select(model, s, c.task, -1), c.metric, base_of,
                                                    "summary|" + model + "|" + s + "|" + c.task).delta, c.fmt) << " |";
        }
        if (!ruler.empty()) md << " " << FormatDifference(ruler_avg(s, -1).delta, "%.1f", 100) << " |";
        md << "\n";
      }
      md << "\n";
    }
    for (const SweepTaskInfo& info : SweepTaskRegistry::Global().infos()) {
      if (!tasks.count(info.name) || !info.section) continue;
      std::string section;
      info.section(recs, model, &section);
      md << section;
    }
    // Per length: the accuracy-type metric of each task (RULER's in its own tables below).
    for (const std::string& task : tasks) {
      const SweepTaskInfo* info = SweepTaskRegistry::Global().Find(task);
      if (info == nullptr || info->length_metric.empty()) continue;
      const std::vector<int64_t> lengths = Lengths(recs, model, task);
      if (lengths.size() < 2) continue;
      const char* metric = info->length_metric.c_str();
      const char* fmt = info->length_fmt.c_str();
      for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1 && !any_other) break;
        md << "### " << task << " (" << info->length_unit << ")"
           << (pass == 0 ? " by context length" : ": difference from the baseline by context length") << "\n\n| setting |";
        for (int64_t L : lengths) md << " " << L << " |";
        md << "\n|---|";
        for (size_t i = 0; i < lengths.size(); ++i) md << "---|";
        md << "\n";
        for (const std::string& s : stacks) {
          if (pass == 1 && is_baseline[s]) continue;
          md << "| `" << s << "` |";
          for (int64_t L : lengths) {
            const CellStats c = ComputeCell(select(model, s, task, L), metric, base_of,
                                            "summary|" + model + "|" + s + "|" + task + "|" + std::to_string(L));
            md << " " << (pass == 0 ? FormatInterval(c.value, fmt) : FormatDifference(c.delta, fmt)) << " |";
          }
          md << "\n";
        }
        md << "\n";
      }
    }
    // The benchmark families (RULER, LongBench, ...): each task's score (%) and the average over tasks, per length.
    for (const auto& [title, family] : families) {
      for (const int64_t L : FamilyLengths(recs, model, family)) {
        for (int pass = 0; pass < 2; ++pass) {
          if (pass == 1 && !any_other) break;
          md << "### " << title << " at " << L << " tokens"
             << (pass == 0 ? ": score (%)" : ": difference from the baseline (points)") << QueryMode(recs, model, family, L)
             << "\n\n| setting |";
          const bool average = family.size() > 1;  // one task: its column says it all
          for (const std::string& t : family) md << " " << t << " |";
          md << (average ? " average |" : "") << "\n|---|";
          for (size_t i = 0; i < family.size() + (average ? 1 : 0); ++i) md << "---|";
          md << "\n";
          for (const std::string& s : stacks) {
            if (pass == 1 && is_baseline[s]) continue;
            md << "| `" << s << "` |";
            for (const std::string& t : family) {
              const CellStats c = ComputeCell(select(model, s, t, L), "accuracy", base_of,
                                              "summary|" + model + "|" + s + "|" + t + "|" + std::to_string(L));
              md << " " << (pass == 0 ? FormatInterval(c.value, "%.1f", 100) : FormatDifference(c.delta, "%.1f", 100)) << " |";
            }
            if (average) {
              const CellStats a = family_avg(family, s, L);
              md << " " << (pass == 0 ? FormatInterval(a.value, "%.1f", 100) : FormatDifference(a.delta, "%.1f", 100))
                 << family_note(family, a) << " |";
            }
            md << "\n";
          }
          md << "\n";
        }
      }
    }
  }
  if (errors > 0) md << errors << " point(s) failed; their errors are in results.jsonl and results.csv.\n\n";
  int64_t no_samples = 0;
  for (const json& r : recs) {
    const json& m = Field(r, "metrics");
    if (r.value("status", "") == "ok" && (m.contains("accuracy") || m.contains("bpb")) && !m.contains("per_sample")) ++no_samples;
  }
  if (no_samples > 0) {
    md << no_samples << " record(s) hold no per-sample values (made before kvlab kept them): each counts as one unit, "
          "its point's mean, so their n counts points and their intervals are over points.\n\n";
  }
  md << RepeatedPointsNote(all);
  KVLAB_RETURN_IF_ERROR(WriteFileAtomic(dir + "/summary.md", md.str()));
  *summary = md.str();
  return Status::OK();
}

Status MergeResults(const std::vector<std::string>& dirs, const std::string& out_dir, std::string* report) {
  if (dirs.empty()) return Status::InvalidArgument("merge: give the shard directories to join");
  std::vector<json> all;  // every shard's records, in the order of the directories
  // Each model's checkpoint and the file it was first seen in: shards run with
  // different weights of one model do not merge into one sweep.
  std::map<std::string, std::pair<std::string, std::string>> checkpoints;
  for (const std::string& d : dirs) {
    const std::string path = d + "/results.jsonl";
    if (!fs::exists(path)) return Status::NotFound(path + ": no results to merge");
    std::vector<json> recs;
    {
      // A shard still running may be mid-line; LoadRecords would cut that line off.
      std::unique_ptr<ResultsDirLock> lock;
      KVLAB_RETURN_IF_ERROR(ResultsDirLock::Acquire(d, /*wait=*/false, "merged", &lock));
      KVLAB_RETURN_IF_ERROR(LoadRecords(path, &recs));
    }
    for (const json& r : recs) {
      const std::string k = r.value("key", "");
      if (r.contains("checkpoint") && r["checkpoint"].is_string()) {
        std::string model = r.value("model", "");
        const json key = CheckJsonText(k, path, kMaxRecordBytes).ok() ? json::parse(k, nullptr, false) : json();
        if (key.is_object() && key.contains("model") && key["model"].is_string()) model = key["model"].get<std::string>();
        const std::string hash = r["checkpoint"].get<std::string>();
        auto seen = checkpoints.emplace(model, std::make_pair(hash, path)).first;
        if (seen->second.first != hash) {
          return Status::InvalidArgument("merge: records of model '" + model + "' were made with two checkpoints: " +
                                         seen->second.first + " (" + seen->second.second + ") and " + hash + " (" +
                                         path + "); rerun the stale directory with the current model");
        }
      }
      all.push_back(r);
    }
  }
  // The first record per key, in the order of the directories (an ok record wins over an error).
  const std::vector<json> recs = OneRecordPerKey(all, RepeatedRecord::kFirst);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::IOError(out_dir + ": cannot create directory: " + ec.message());
  std::unique_ptr<ResultsDirLock> lock;  // a run writing into out_dir would lose its records to the rename below
  KVLAB_RETURN_IF_ERROR(ResultsDirLock::Acquire(out_dir, /*wait=*/false, "merged", &lock));
  KVLAB_RETURN_IF_ERROR(CheckResultsDirFiles(out_dir));
  const std::string out = out_dir + "/results.jsonl";
  std::string lines;
  for (const json& r : recs) lines += r.dump() + "\n";
  KVLAB_RETURN_IF_ERROR(WriteFileAtomic(out, lines));
  std::string summary;
  KVLAB_RETURN_IF_ERROR(WriteReports(out_dir, &summary));
  *report = "merged " + std::to_string(all.size()) + " records from " + std::to_string(dirs.size()) + " directories into " +
            std::to_string(recs.size()) + " points in " + out + "\n\n" + summary;
  return Status::OK();
}

}  // namespace kvlab
