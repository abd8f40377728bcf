// `kvlab export --format kvpress` (export_kvpress.h): records grouped per
// kvpress run (dataset, model, press, ratio), written as evaluate.py writes a
// run. The layout follows NVIDIA/kvpress evaluation/evaluate.py
// (EvaluationConfig.get_results_dir, save_config, _save_results,
// _calculate_and_save_metrics), and each metrics.json the shape of
// evaluation/benchmarks/{ruler,longbench,longbenchv2,infinite_bench}/calculate_metrics.py.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "datasets/tasks/ruler.h"
#include "evals/export_kvpress.h"
#include "evals/export_kvpress_internal.h"
#include "evals/results_io.h"
#include "evals/sweep_internal.h"

namespace kvlab {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

bool StartsWith(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// kvpress's dataset (DATASET_REGISTRY's key) and data_dir for a kvlab task;
// false for the tasks that measure no quality (latency, paging).
bool FamilyOf(const json& r, ExportFamily* f) {
  const std::string task = r.value("task", ""), length = std::to_string(r.value("length", 0));
  f->task = task;
  for (const std::string& t : RulerTaskNames()) {
    if (t == task) {
      *f = {"ruler", length, task, true, false};
      return true;
    }
  }
  if (task == "longbench-v2") {
    *f = {"longbench-v2", "0shot", task, true, true};
  } else if (StartsWith(task, "longbench-")) {
    const std::string name = task.substr(10);
    json key = json::parse(r.value("key", "{}"), nullptr, /*allow_exceptions=*/false);
    const std::string file = key.is_object() ? key.value("file", "") : "";
    const bool e = file.size() > 8 && file.compare(file.size() - 8, 8, "_e.jsonl") == 0;  // LongBench-E's files
    *f = {e ? "longbench-e" : "longbench", e ? name + "_e" : name, name, true, true};
  } else if (StartsWith(task, "infinitebench-")) {
    *f = {"infinitebench", task.substr(14), task.substr(14), true, true};
  } else if (task == "passkey" || task == "multi-needle" || task == "recall") {
    *f = {"kvlab_" + task, length, task, true, false};
  } else if (task == "bpb" || task == "bpb-recompute") {
    *f = {"kvlab_" + task, length, task, false, false};
  } else {
    return false;
  }
  return true;
}

// The record's end KV bytes over its baseline's (NaN without one).
double BytesRatio(const json& r, const json* base) {
  if (base == nullptr) return NAN;
  const json& ma = ExportField(ExportField(ExportField(r, "metrics"), "memory"), "kv_bytes_end");
  const json& mb = ExportField(ExportField(ExportField(*base, "metrics"), "memory"), "kv_bytes_end");
  const double a = ma.is_number() ? ma.get<double>() : NAN, b = mb.is_number() ? mb.get<double>() : NAN;
  return std::isfinite(a) && std::isfinite(b) && b > 0 ? a / b : NAN;
}

std::string Ratio2(double r) {
  if (!std::isfinite(r)) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", r);
  return buf;
}

}  // namespace

const json& ExportField(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string PeerKeyOf(const json& r) {
  return r.value("model", "") + "|" + r.value("task", "") + "|" + std::to_string(r.value("length", 0)) + "|" +
         std::to_string(r.value("batch", 0)) + "|" + std::to_string(r.value("seed", 0)) + "|" +
         std::to_string(r.value("repetition", 0));
}

Status ExportResults(const std::string& results_dir, const ExportOptions& options, std::string* report) {
  report->clear();
  if (options.format != "kvpress") {
    return Status::InvalidArgument("--format: unknown export format '" + options.format + "' (known: kvpress)");
  }
  const std::string path = results_dir + "/results.jsonl";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return Status::NotFound(results_dir + ": no results.jsonl there (the output directory of `kvlab run`?); "
                            "nothing was exported");
  }
  std::vector<json> all;
  KVLAB_RETURN_IF_ERROR(LoadRecords(path, &all));
  // The latest record per key, an ok record winning over an error (as the reports).
  std::vector<json> recs;
  int64_t failed = 0;
  for (json& r : OneRecordPerKey(all)) {
    if (r.value("status", "") == "ok") {
      recs.push_back(std::move(r));
    } else {
      ++failed;
    }
  }
  if (recs.empty()) {
    return Status::InvalidArgument(path + ": no ok record (" + std::to_string(failed) +
                                   " failed point(s)); nothing was exported");
  }
  std::map<std::string, const json*> baselines;
  for (const json& r : recs) {
    if (r.value("baseline", false)) baselines[PeerKeyOf(r)] = &r;
  }
  // Groups: one kvpress run each, in the order of their first point.
  std::vector<ExportGroup> groups;
  std::map<std::string, size_t> group_of;
  std::set<std::string> skipped;
  for (const json& r : recs) {
    ExportFamily fam;
    if (!FamilyOf(r, &fam)) {
      skipped.insert(r.value("task", ""));
      continue;
    }
    KvpressPress press;
    const Status ms = MapStackToKvpress(r.value("policy", ""), r.value("stack", ""), &press);
    if (!ms.ok()) return Status::InvalidArgument(path + ": point " + r.value("key", "") + ": " + ms.message());
    const json& qa_field = ExportField(ExportField(r, "metrics"), "query_aware");
    // kvlab's generation tasks read the question before the policies act unless query_aware = false; bpb has none.
    const bool qa = fam.predictions && (qa_field.is_boolean() ? qa_field.get<bool>() : true);
    const std::string id = fam.dataset + "|" + fam.data_dir + "|" + r.value("model", "") + "|" +
                           r.value("stack", "") + "|" + std::to_string(r.value("length", 0)) + "|" + (qa ? "1" : "0");
    auto it = group_of.find(id);
    if (it == group_of.end()) {
      ExportGroup g;
      g.family = fam;
      g.press = press;
      g.model = r.value("model", "");
      g.length = r.value("length", 0);
      g.query_aware = qa;
      it = group_of.emplace(id, groups.size()).first;
      groups.push_back(std::move(g));
    }
    const auto b = baselines.find(PeerKeyOf(r));
    groups[it->second].recs.push_back(&r);
    groups[it->second].bytes_ratios.push_back(BytesRatio(r, b == baselines.end() ? nullptr : b->second));
    groups[it->second].baselines.push_back(b == baselines.end() ? nullptr : b->second);
  }
  const std::string out = options.out_dir.empty() ? results_dir + "/kvpress" : options.out_dir;
  // --out is the user's to name (and may be a link); the default, a name inside
  // the results directory, is not followed if it is a link.
  if (options.out_dir.empty()) {
    KVLAB_RETURN_IF_ERROR(MakeDirNoFollow(out));
  } else {
    fs::create_directories(out, ec);
    if (ec) return Status::IOError(out + ": cannot create directory: " + ec.message());
  }
  std::map<std::string, int> used;  // a second stack with one directory name goes to DIR/1, as evaluate.py does
  std::string written, missing;
  for (ExportGroup& g : groups) {
    KVLAB_RETURN_IF_ERROR(CollectRows(path, &g));
    std::vector<std::string> parts = {g.family.dataset, g.family.data_dir, g.model, g.press.press_name,
                                      Ratio2(g.press.ratio_kind == KvpressRatioKind::kHeads
                                                 ? g.press.head_compression_ratio : g.compression_ratio)};
    if (g.family.max_context) parts.push_back("max_context" + std::to_string(g.length));
    if (g.query_aware) parts.push_back("query_aware");
    std::string joined;
    for (const std::string& p : parts) joined += (joined.empty() ? "" : "__") + p;
    // The model, stack and task come from the records (untrusted): one safe
    // component, never a path ("../x" is "..--x"; docs/cli.md has the rule).
    const std::string name = SafePathComponent(joined);
    const int n = used[name]++;
    KVLAB_RETURN_IF_ERROR(MakeDirNoFollow(out + "/" + name));
    const std::string dir = out + "/" + name + (n > 0 ? "/" + std::to_string(n) : "");
    KVLAB_RETURN_IF_ERROR(WriteGroup(dir, out, g));
    written += "  " + dir + "  (" + g.recs.front()->value("stack", "") + ", " + std::to_string(g.rows.size()) +
               " rows)\n";
    if (g.samples_without_prediction > 0) {
      missing += "  " + dir + ": " + std::to_string(g.samples_without_prediction) +
                 " sample(s) without a recorded prediction (records made before kvlab kept them, or past the "
                 "record's text budget): empty predicted_answer, metrics written from the records\n";
    }
  }
  *report = "kvpress export of " + results_dir + " into " + out + ": " + std::to_string(groups.size()) +
            " run(s) from " + std::to_string(recs.size()) + " point(s)" +
            (failed > 0 ? " (" + std::to_string(failed) + " failed point(s) not exported)" : "") + "\n" + written;
  if (!missing.empty()) *report += "without predictions:\n" + missing;
  if (!skipped.empty()) {
    std::string list;
    for (const std::string& t : skipped) list += (list.empty() ? "" : ", ") + t;
    *report += "not exported (no quality metric to compare): " + list + "\n";
  }
  return Status::OK();
}

}  // namespace kvlab
