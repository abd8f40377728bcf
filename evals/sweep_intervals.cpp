// The units behind a report cell and its intervals (evals/stats.h): which
// values a record contributes to a metric's mean, and the paired differences
// from its baseline on the same samples. Used by evals/sweep_report.cpp.
#include <cmath>
#include <cstdio>

#include "evals/stats.h"
#include "evals/sweep_internal.h"

namespace kvlab {

using json = nlohmann::ordered_json;

namespace {

const json* Find(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

}  // namespace

std::vector<double> MetricUnits(const json& r, const std::string& metric, bool* per_sample) {
  std::vector<double> out;
  if (per_sample != nullptr) *per_sample = false;
  const json* m = Find(r, "metrics");
  if (m == nullptr) return out;
  const json* per = Find(*m, "per_sample");
  if (per != nullptr && per->is_object()) {
    const auto it = per->find(metric);
    if (it != per->end() && it->is_array()) {
      for (const json& v : *it) {
        if (v.is_number()) out.push_back(v.get<double>());  // types checked by LoadRecords
      }
      if (per_sample != nullptr) *per_sample = true;
      return out;
    }
  }
  const json* v = Find(*m, metric.c_str());
  if (v != nullptr && v->is_number() && std::isfinite(v->get<double>())) out.push_back(v->get<double>());
  return out;
}

CellStats ComputeCell(const std::vector<const json*>& recs, const std::string& metric, const BaselineOf& base_of,
                      const std::string& seed_text) {
  std::vector<double> values, diffs;
  bool paired = false, trials = metric == "accuracy";  // exact match per sample: a proportion's trials
  for (const json* r : recs) {
    bool per = false;
    const std::vector<double> a = MetricUnits(*r, metric, &per);
    trials = trials && per;
    values.insert(values.end(), a.begin(), a.end());
    const json* b = base_of ? base_of(*r) : nullptr;
    if (b == nullptr || b == r || r->value("baseline", false)) continue;
    const std::vector<double> bu = MetricUnits(*b, metric);
    if (a.empty() || bu.size() != a.size()) continue;  // not the same samples: no pairing
    paired = true;
    for (size_t i = 0; i < a.size(); ++i) diffs.push_back(a[i] - bu[i]);
  }
  CellStats c;
  c.value = MeanInterval(values, trials, SeedOf(seed_text + "|value|" + metric));
  if (paired) c.delta = BootstrapMean(diffs, kBootstrapResamples, SeedOf(seed_text + "|delta|" + metric));
  return c;
}

CellStats ComputeAverage(const std::vector<std::vector<const json*>>& groups, const std::string& metric,
                         const BaselineOf& base_of, const std::string& seed_text) {
  std::vector<Stratum> values, diffs;
  bool all_paired = true;
  for (const std::vector<const json*>& g : groups) {
    Stratum v, d;
    bool paired = false;
    for (const json* r : g) {
      const std::vector<double> a = MetricUnits(*r, metric);
      v.values.insert(v.values.end(), a.begin(), a.end());
      const json* b = base_of ? base_of(*r) : nullptr;
      if (b == nullptr || b == r || r->value("baseline", false)) continue;
      const std::vector<double> bu = MetricUnits(*b, metric);
      if (a.empty() || bu.size() != a.size()) continue;
      paired = true;
      for (size_t i = 0; i < a.size(); ++i) d.values.push_back(a[i] - bu[i]);
    }
    if (v.values.empty()) continue;
    all_paired = all_paired && paired;
    values.push_back(std::move(v));
    diffs.push_back(std::move(d));
  }
  CellStats c;
  c.value = StratifiedBootstrap(values, kBootstrapResamples, SeedOf(seed_text + "|value|" + metric));
  if (all_paired && !diffs.empty()) {
    c.delta = StratifiedBootstrap(diffs, kBootstrapResamples, SeedOf(seed_text + "|delta|" + metric));
  }
  c.groups = static_cast<int64_t>(values.size());
  return c;
}

namespace {

std::string Num(double v, const char* f, double scale, bool sign) {
  char buf[64];
  const std::string fmt = sign ? std::string("%+") + (f + 1) : std::string(f);
  std::snprintf(buf, sizeof(buf), fmt.c_str(), v * scale);
  return buf;
}

}  // namespace

std::string FormatInterval(const Interval& i, const char* f, double scale) {
  if (!std::isfinite(i.estimate)) return "–";
  std::string s = Num(i.estimate, f, scale, false);
  if (i.has_interval()) s += " [" + Num(i.lo, f, scale, false) + ", " + Num(i.hi, f, scale, false) + "]";
  return s + " n=" + std::to_string(i.n);
}

std::string FormatDifference(const Interval& i, const char* f, double scale) {
  if (!std::isfinite(i.estimate)) return "–";
  std::string s = Num(i.estimate, f, scale, true);
  if (i.has_interval()) s += " [" + Num(i.lo, f, scale, true) + ", " + Num(i.hi, f, scale, true) + "]";
  s += " n=" + std::to_string(i.n);
  if (!i.has_interval() || i.Contains(0)) s += " ~";
  return s;
}

}  // namespace kvlab
