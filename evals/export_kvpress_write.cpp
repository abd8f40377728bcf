// The files of one exported kvpress run (export_kvpress_internal.h): the rows
// read from the records, predictions.csv with evaluate.py's columns,
// metrics.json in the benchmark's calculate_metrics shape, config.yaml with
// EvaluationConfig's fields, and kvlab.json.
#include <cmath>
#include <cstdio>
#include <map>

#include "evals/export_kvpress_internal.h"
#include "evals/results_io.h"
#include "evals/sweep_internal.h"

namespace kvlab {

using json = nlohmann::ordered_json;

namespace {

const json& At(const json& j, const char* key) { return ExportField(j, key); }

// An optional array of `n` strings (or, with lists, of lists of strings) at `field`.
Status Texts(const json& v, const std::string& where, const std::string& field, size_t n, bool lists,
             std::vector<std::string>* out) {
  out->clear();
  if (v.is_null()) return Status::OK();
  const std::string expected = lists ? "an array of lists of strings" : "an array of strings";
  if (!v.is_array()) return Status::InvalidArgument(where + ": field '" + field + "' is not " + expected);
  if (v.size() != n) {
    return Status::InvalidArgument(where + ": field '" + field + "' has " + std::to_string(v.size()) +
                                   " entries, the record's samples " + std::to_string(n));
  }
  for (const json& e : v) {
    bool ok = lists ? e.is_array() : e.is_string();
    if (lists) {
      for (const json& s : e) ok = ok && s.is_string();
    }
    if (!ok) return Status::InvalidArgument(where + ": field '" + field + "' holds " + e.dump() + ", expected " + expected);
    out->push_back(lists ? e.dump() : e.get<std::string>());
  }
  return Status::OK();
}

double NumberAt(const json& per, const char* field, size_t i) {
  const json& a = At(per, field);
  return a.is_array() && i < a.size() && a[i].is_number() ? a[i].get<double>() : NAN;
}

// The samples behind a record: its per-sample scores, else `samples`.
size_t SamplesOf(const json& m) {
  const json& acc = At(At(m, "per_sample"), "accuracy");
  if (acc.is_array()) return acc.size();
  const json& s = At(m, "samples");
  return s.is_number_integer() && s.get<int64_t>() > 0 ? static_cast<size_t>(s.get<int64_t>()) : 0;
}

double Round2(double v) {  // Python's round(v, 2): the binary value rounded, ties to even
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return std::strtod(buf, nullptr);
}

std::string NumText(double v) { return std::isfinite(v) ? json(v).dump() : ""; }

// The mean of a metric over the group's records, weighted by their samples;
// a single record's own value. `task` filters (RULER), empty: all.
double Pooled(const ExportGroup& g, const char* metric, const std::string& task = "") {
  double sum = 0, n = 0, only = NAN;
  int count = 0;
  for (const json* r : g.recs) {
    if (!task.empty() && r->value("task", "") != task) continue;
    const json& v = At(At(*r, "metrics"), metric);
    if (!v.is_number()) continue;
    const double w = std::max<double>(1, static_cast<double>(SamplesOf(At(*r, "metrics"))));
    sum += v.get<double>() * w;
    n += w;
    only = v.get<double>();
    ++count;
  }
  return count == 1 ? only : n > 0 ? sum / n : NAN;
}

// Means of the rows' kvlab_score per label (pandas' groupby: sorted keys).
json MeansByLabel(const std::vector<ExportRow>& rows, std::string ExportRow::*label, bool longbench_e_buckets) {
  std::map<std::string, std::pair<double, int64_t>> by;
  for (const ExportRow& row : rows) {
    const std::string& v = row.*label;
    if (v.empty() || !std::isfinite(row.kvlab_score)) continue;
    std::string k = v;
    if (longbench_e_buckets) {
      const double len = std::strtod(v.c_str(), nullptr);
      k = len < 4000 ? "0-4k" : len < 8000 ? "4-8k" : "8k+";
    }
    by[k].first += row.kvlab_score;
    ++by[k].second;
  }
  json out = json::object();
  const char* order[] = {"0-4k", "4-8k", "8k+"};
  if (longbench_e_buckets) {
    for (const char* k : order) {
      if (by.count(k)) out[k] = Round2(100 * by[k].first / static_cast<double>(by[k].second));
    }
    return out;
  }
  for (const auto& [k, v] : by) out[k] = v.first / static_cast<double>(v.second);
  return out;
}

// metrics.json as the benchmark's calculate_metrics returns it.
json MetricsJson(const ExportGroup& g) {
  const std::string& d = g.family.dataset;
  if (d == "ruler") {  // {task: {"string_match": score}}, score in % rounded to 2 places
    std::map<std::string, double> by_task;
    for (const json* r : g.recs) by_task[r->value("task", "")] = 0;
    json out = json::object();
    for (auto& [task, v] : by_task) out[task] = {{"string_match", Round2(100 * Pooled(g, "accuracy", task))}};
    return out;
  }
  if (d == "longbench") return Round2(100 * Pooled(g, "accuracy"));
  if (d == "longbench-e") return MeansByLabel(g.rows, &ExportRow::length, true);
  if (d == "infinitebench") return Pooled(g, "accuracy");  // a fraction, not %: get_score's mean
  if (d == "longbench-v2") {
    json out = {{"average", Pooled(g, "accuracy")}};
    json diff = MeansByLabel(g.rows, &ExportRow::difficulty, false), len = MeansByLabel(g.rows, &ExportRow::length, false);
    if (diff.empty() && len.empty() && g.recs.size() == 1) {  // records made before the labels were kept
      diff = At(At(*g.recs[0], "metrics"), "accuracy_by_difficulty");
      len = At(At(*g.recs[0], "metrics"), "accuracy_by_length");
    }
    if (diff.is_object()) out.update(diff);
    if (len.is_object()) out.update(len);
    return out;
  }
  json out = json::object();  // kvlab's own tasks: kvlab's metric names
  const char* names[] = {"accuracy", "char_accuracy", "bpb", "kl", "top1_agreement"};
  for (const char* k : names) {
    const double v = Pooled(g, k);
    if (std::isfinite(v)) out[k] = v;
  }
  return out;
}

std::string PressInit(const ExportGroup& g) {
  std::string s = g.press.press_init;
  for (const auto& [tag, v] : {std::pair<std::string, double>{"{R}", g.compression_ratio},
                               std::pair<std::string, double>{"{H}", g.press.head_compression_ratio}}) {
    const size_t at = s.find(tag);
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.4g", v);
    if (at != std::string::npos) s.replace(at, tag.size(), buf);
  }
  if (g.press.press_name == "no_press") return "None";  // str(None): PRESS_REGISTRY's no_press
  return s.empty() && !g.press.mapped ? "none: kvlab stack " + g.recs.front()->value("stack", "") + " (kvlab.json)" : s;
}

// config.yaml: EvaluationConfig's fields in its order (save_config), every
// scalar in JSON form, which YAML reads as the same value.
std::string ConfigYaml(const ExportGroup& g, const std::string& out_root) {
  const json& m = At(*g.recs.front(), "metrics");
  const bool heads = g.press.ratio_kind == KvpressRatioKind::kHeads;
  json max_new = At(m, "tokens_to_generate").is_number_integer() ? At(m, "tokens_to_generate") : json();
  for (const json* r : g.recs) {  // one budget for the run, else null (the dataset's per task, as kvpress)
    if (At(At(*r, "metrics"), "tokens_to_generate") != max_new) max_new = nullptr;
  }
  json ratio = std::isfinite(g.compression_ratio) ? json(g.compression_ratio) : json();
  std::vector<std::pair<std::string, json>> f = {
      {"dataset", g.family.dataset}, {"data_dir", g.family.data_dir}, {"model", g.model}, {"device", nullptr},
      {"press_name", g.press.press_name}};
  if (heads) {
    f.emplace_back("key_channel_compression_ratio", nullptr);
    f.emplace_back("head_compression_ratio", g.press.head_compression_ratio);
  } else {
    f.emplace_back("compression_ratio", ratio);
    f.emplace_back("key_channel_compression_ratio", nullptr);
  }
  f.insert(f.end(), {{"fraction", 1.0}, {"max_new_tokens", max_new},
                     {"max_context_length", g.family.max_context ? json(g.length) : json()},
                     {"query_aware", g.query_aware}, {"needle_depth", nullptr}, {"compression_interval", nullptr},
                     {"target_size", nullptr}, {"hidden_states_buffer_size", nullptr}, {"output_dir", out_root},
                     {"log_level", "INFO"}, {"model_kwargs", json::object()}, {"press_init_command", PressInit(g)},
                     {"seed", g.recs.front()->value("seed", 0)}, {"fp8", false}});
  std::string out;
  for (const auto& [k, v] : f) out += k + ": " + v.dump() + "\n";
  return out;
}

const char* RatioRule(KvpressRatioKind k) {
  switch (k) {
    case KvpressRatioKind::kNone: return "no press: 0";
    case KvpressRatioKind::kFraction: return "1 - the policy's ratio (its kept share)";
    case KvpressRatioKind::kTokens:
      return "1 - the policy's token budget / the sample's context tokens (prompt tokens, less the question's with "
             "query_aware = false), per row; the directory's and config.yaml's value is the mean over the rows";
    case KvpressRatioKind::kHeads: return "duo: head_compression_ratio = 1 - fraction (the share of streaming heads)";
    case KvpressRatioKind::kBytes: return "1 - the end KV bytes / the full cache's (the baseline record's), per point";
  }
  return "";
}

json KvlabJson(const ExportGroup& g) {
  const json& first = *g.recs.front();
  json points = json::array();
  std::map<std::string, std::vector<const json*>> by_task;
  for (const json* r : g.recs) {
    points.push_back({{"key", r->value("key", "")}, {"task", r->value("task", "")}, {"seed", r->value("seed", 0)},
                      {"repetition", r->value("repetition", 0)}, {"samples", SamplesOf(At(*r, "metrics"))},
                      {"git_revision", r->value("git_revision", "")}});
    by_task[r->value("task", "")].push_back(r);
  }
  const BaselineOf base_of = [&g](const json& r) -> const json* {
    for (size_t i = 0; i < g.recs.size(); ++i) {
      if (g.recs[i] == &r) return g.baselines[i];
    }
    return nullptr;
  };
  json intervals = json::object();
  const std::string metric = g.family.predictions ? "accuracy" : "bpb";
  for (const auto& [task, recs] : by_task) {
    const CellStats c = ComputeCell(recs, metric, base_of, "kvpress|" + task + "|" + first.value("stack", ""));
    auto iv = [](const Interval& i) {
      return json{{"estimate", i.n > 0 ? json(i.estimate) : json()}, {"lo", i.has_interval() ? json(i.lo) : json()},
                  {"hi", i.has_interval() ? json(i.hi) : json()}, {"n", i.n}, {"method", i.method}};
    };
    intervals[task] = {{"metric", metric}, {"value", iv(c.value)}, {"difference_from_full", iv(c.delta)}};
  }
  return {{"kvlab_stack", first.value("stack", "")}, {"kvlab_policy", first.value("policy", "")},
          {"model", g.model}, {"checkpoint", first.value("checkpoint", "")}, {"press_name", g.press.press_name},
          {"press_mapped", g.press.mapped}, {"mapping_note", g.press.note},
          {"compression_ratio", {{"value", std::isfinite(g.compression_ratio) ? json(g.compression_ratio) : json()},
                                 {"rule", RatioRule(g.press.ratio_kind)}}},
          {"length", g.length}, {"query_aware", g.query_aware}, {"points", points},
          {"samples_without_prediction", g.samples_without_prediction},
          {"intervals_95", intervals}};
}

}  // namespace

Status CollectRows(const std::string& path, ExportGroup* g) {
  double ratio_sum = 0;
  int64_t ratio_n = 0;
  for (size_t ri = 0; ri < g->recs.size(); ++ri) {
    const json& r = *g->recs[ri];
    const json& m = At(r, "metrics");
    const std::string where = path + ": point " + r.value("key", "");
    if (!g->family.predictions) {  // bpb: no samples to write, the point's context is its length
      const double cr = KvpressCompressionRatio(g->press, static_cast<double>(g->length), g->bytes_ratios[ri]);
      if (std::isfinite(cr)) ratio_sum += cr, ++ratio_n;
      continue;
    }
    const size_t n = SamplesOf(m);
    const json& text = At(m, "sample_text");
    std::vector<std::string> preds, questions, answers, prefixes, difficulty, labels, classes;
    KVLAB_RETURN_IF_ERROR(Texts(At(m, "predictions"), where, "metrics.predictions", n, false, &preds));
    KVLAB_RETURN_IF_ERROR(Texts(At(text, "question"), where, "metrics.sample_text.question", n, false, &questions));
    KVLAB_RETURN_IF_ERROR(Texts(At(text, "answers"), where, "metrics.sample_text.answers", n, true, &answers));
    KVLAB_RETURN_IF_ERROR(Texts(At(text, "answer_prefix"), where, "metrics.sample_text.answer_prefix", n, false, &prefixes));
    KVLAB_RETURN_IF_ERROR(Texts(At(text, "difficulty"), where, "metrics.sample_text.difficulty", n, false, &difficulty));
    KVLAB_RETURN_IF_ERROR(Texts(At(text, "length"), where, "metrics.sample_text.length", n, false, &labels));
    const json& all_classes = At(m, "all_classes");
    if (!all_classes.is_null() && !all_classes.is_array()) {
      return Status::InvalidArgument(where + ": field 'metrics.all_classes' is not an array of strings");
    }
    const json& per = At(m, "per_sample");
    const json& dropped = At(m, "sample_text_dropped");
    const int64_t kept = dropped.is_number_integer() ? static_cast<int64_t>(n) - dropped.get<int64_t>() : -1;
    for (size_t i = 0; i < n; ++i) {
      ExportRow row;
      row.task = g->family.dataset == "ruler" ? r.value("task", "") : g->family.task;  // RULER: one run, every task
      row.has_prediction = !preds.empty() && (kept < 0 || static_cast<int64_t>(i) < kept);
      if (row.has_prediction) row.predicted_answer = preds[i];
      if (!questions.empty()) row.question = questions[i];
      if (!prefixes.empty()) row.answer_prefix = prefixes[i];
      if (!answers.empty()) row.answers = answers[i];
      if (!difficulty.empty()) row.difficulty = difficulty[i];
      if (!labels.empty()) row.length = labels[i];
      const double words = NumberAt(per, "length", i);  // LongBench-E's per-record length
      if (std::isfinite(words) && words >= 0) row.length = std::to_string(static_cast<int64_t>(words));
      if (all_classes.is_array()) row.all_classes = all_classes.dump();
      if (At(m, "tokens_to_generate").is_number_integer()) row.max_new_tokens = At(m, "tokens_to_generate").get<int64_t>();
      row.kvlab_score = NumberAt(per, "accuracy", i);
      double context = NumberAt(per, "prompt_tokens", i);
      if (!std::isfinite(context)) context = static_cast<double>(g->length);
      const double question = NumberAt(per, "question_tokens", i);
      if (!g->query_aware && std::isfinite(question)) context -= question;
      row.compression_ratio = KvpressCompressionRatio(g->press, context, g->bytes_ratios[ri]);
      if (std::isfinite(row.compression_ratio)) ratio_sum += row.compression_ratio, ++ratio_n;
      g->samples_without_prediction += row.has_prediction ? 0 : 1;
      g->rows.push_back(std::move(row));
    }
  }
  g->compression_ratio = ratio_n > 0 ? ratio_sum / static_cast<double>(ratio_n) : NAN;
  return Status::OK();
}

Status WriteGroup(const std::string& dir, const std::string& out_root, const ExportGroup& g) {
  KVLAB_RETURN_IF_ERROR(MakeDirNoFollow(dir));
  if (g.family.predictions) {
    const std::string& d = g.family.dataset;
    const bool lb = d == "longbench" || d == "longbench-e", v2 = d == "longbench-v2";
    std::vector<std::string> header = {"question", "answer_prefix", lb ? "answers" : "answer"};
    if (lb) header.insert(header.end(), {"all_classes", "length"});
    if (v2) header.insert(header.end(), {"difficulty", "length"});
    header.insert(header.end(), {"task", "max_new_tokens", "predicted_answer", "compression_ratio", "kvlab_score"});
    std::string csv = CsvRow(header);
    for (const ExportRow& row : g.rows) {
      std::string answer = row.answers;
      if (v2) {  // one letter, as LongBench v2's `answer`
        const json a = json::parse(answer.empty() ? "[]" : answer, nullptr, false);
        answer = a.is_array() && !a.empty() && a[0].is_string() ? a[0].get<std::string>() : "";
      }
      std::vector<std::string> f = {row.question, row.answer_prefix, answer};
      if (lb) f.insert(f.end(), {row.all_classes, row.length});
      if (v2) f.insert(f.end(), {row.difficulty, row.length});
      f.insert(f.end(), {row.task, row.max_new_tokens >= 0 ? std::to_string(row.max_new_tokens) : "",
                         row.predicted_answer, NumText(row.compression_ratio), NumText(row.kvlab_score)});
      csv += CsvRow(f);
    }
    KVLAB_RETURN_IF_ERROR(WriteFileAtomic(dir + "/predictions.csv", csv));
  }
  KVLAB_RETURN_IF_ERROR(WriteFileAtomic(dir + "/metrics.json", MetricsJson(g).dump(4) + "\n"));
  KVLAB_RETURN_IF_ERROR(WriteFileAtomic(dir + "/config.yaml", ConfigYaml(g, out_root)));
  return WriteFileAtomic(dir + "/kvlab.json", KvlabJson(g).dump(2) + "\n");
}

}  // namespace kvlab
