// Sweep configs: parsing (TOML++, file:line:column errors), --set overrides,
// grid expansion into points.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "core/model/model_config.h"
#include "core/base/untrusted.h"
#include "core/engine/run_config.h"
#include "evals/sweep.h"
#include "evals/tasks/task.h"

namespace kvlab {

namespace {

// Tasks are the registry's (evals/tasks/task.h).
bool KnownTask(const std::string& t) { return SweepTaskRegistry::Global().Find(t) != nullptr; }

std::string UnknownTask(const std::string& t) {
  return "unknown task '" + t + "' (valid: " + JoinNames(SweepTaskRegistry::Global().Names()) + ")";
}

std::string Dir(const std::string& path) {
  return path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
}

std::string Resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  ModelConfig preset;
  if (PresetConfig(p, &preset).ok()) return p;
  return dir + "/" + p;
}

Status Where(const std::string& path, const toml::node& n, const std::string& msg) {
  return Status::InvalidArgument(TomlWhere(path, n.source()) + ": " + msg);
}

// A bound (core/base/untrusted.h) broken at node n: its message at FILE:LINE:COL.
Status Bound(const std::string& path, const toml::node& n, const Status& s) {
  return s.ok() ? s : Where(path, n, s.message());
}

// A list of T (or a single T) from a node.
template <typename T, typename Get>
Status List(const std::string& path, const toml::node& n, const std::string& key, const char* what, Get get,
            std::vector<T>* out) {
  out->clear();
  auto one = [&](const toml::node& el) -> Status {
    T v;
    if (!get(el, &v)) return Where(path, el, "'" + key + "' entries must be " + what);
    // A value listed twice would run each of its points twice and report them
    // as one point of n=2 (repetitions is the key for more samples).
    if (std::find(out->begin(), out->end(), v) != out->end()) {
      std::string text;
      if constexpr (std::is_same_v<T, std::string>) text = "'" + QuoteBytes(v) + "'";
      else text = std::to_string(v);
      return Where(path, el, "'" + key + "' lists " + text + " twice; list each value once (repetitions = N " +
                                 "runs every point N times)");
    }
    out->push_back(v);
    return Status::OK();
  };
  if (const toml::array* a = n.as_array()) {
    for (const toml::node& el : *a) KVLAB_RETURN_IF_ERROR(one(el));
    if (out->empty()) return Where(path, n, "'" + key + "' is an empty list: nothing to sweep");
    return Status::OK();
  }
  return one(n);
}

bool GetInt(const toml::node& n, int64_t* v) {
  if (!n.is_integer()) return false;
  *v = n.as_integer()->get();
  return true;
}
bool GetString(const toml::node& n, std::string* v) {
  if (!n.is_string()) return false;
  *v = n.as_string()->get();
  return true;
}
bool GetDouble(const toml::node& n, double* v) {
  if (n.is_integer()) { *v = static_cast<double>(n.as_integer()->get()); return true; }
  if (n.is_floating_point()) { *v = n.as_floating_point()->get(); return true; }
  return false;
}

std::string OptionNames(const std::vector<TaskOption>& options) {
  std::vector<std::string> names;
  for (const TaskOption& o : options) names.push_back(o.name);
  return JoinNames(names);
}

// "0" for 0.0, "0.25", "1048576": a bound as written in an error.
std::string BoundText(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// One key of a [task.NAME] table, read and checked by the option the task
// declares under that name.
Status ReadTaskOption(const std::string& path, const std::string& dir, const std::string& task,
                      const SweepTaskInfo& info, const std::string& key, const toml::node& v, SweepTaskOptions* o) {
  const std::string full = "task." + task + "." + key;
  const TaskOption* spec = nullptr;
  for (const TaskOption& d : info.options) {
    if (d.name == key) spec = &d;
  }
  if (spec == nullptr) {
    return Where(path, v, "unknown key '" + full + "'; valid keys of task '" + task + "': " + OptionNames(info.options));
  }
  const std::string lo = BoundText(spec->min), hi = BoundText(spec->max);
  switch (spec->type) {
    case TaskOption::Type::kInt: {
      int64_t x = 0;
      if (!GetInt(v, &x) || x < spec->min) return Where(path, v, "'" + full + "' must be an integer >= " + lo);
      KVLAB_RETURN_IF_ERROR(Bound(path, v, CheckIntIn("'" + full + "'", x, static_cast<int64_t>(spec->min),
                                                      static_cast<int64_t>(spec->max))));
      o->Set(key, x);
      return Status::OK();
    }
    case TaskOption::Type::kFloat: {
      double x = 0;
      if (!GetDouble(v, &x) || x < spec->min) return Where(path, v, "'" + full + "' must be a number >= " + lo);
      KVLAB_RETURN_IF_ERROR(Bound(path, v, CheckFiniteIn("'" + full + "'", x, spec->min, spec->max)));
      o->Set(key, x);
      return Status::OK();
    }
    case TaskOption::Type::kBool:
      if (!v.is_boolean()) return Where(path, v, "'" + full + "' must be true or false");
      o->Set(key, v.as_boolean()->get());
      return Status::OK();
    case TaskOption::Type::kPath:
      if (!v.is_string()) return Where(path, v, "'" + full + "' must be a string (" + spec->help + ")");
      o->Set(key, Resolve(dir, v.as_string()->get()));
      return Status::OK();
    case TaskOption::Type::kIntList: {
      std::vector<int64_t> xs;
      KVLAB_RETURN_IF_ERROR(List<int64_t>(path, v, full, ("integers >= " + lo).c_str(), GetInt, &xs));
      for (int64_t x : xs) {
        if (x < spec->min) return Where(path, v, "'" + full + "' entries must be >= " + lo);
        KVLAB_RETURN_IF_ERROR(Bound(path, v, CheckIntIn("'" + full + "' entry", x, static_cast<int64_t>(spec->min),
                                                        static_cast<int64_t>(spec->max))));
      }
      o->Set(key, xs);
      return Status::OK();
    }
    case TaskOption::Type::kFloatList: {
      const std::string range = "[" + lo + ", " + hi + "]";
      std::vector<double> xs;
      KVLAB_RETURN_IF_ERROR(List<double>(path, v, full, ("numbers in " + range).c_str(), GetDouble, &xs));
      for (double x : xs) {  // NaN fails every comparison: refused by CheckFiniteIn
        if (x < spec->min || x > spec->max) return Where(path, v, "'" + full + "' entries must be in " + range);
        KVLAB_RETURN_IF_ERROR(Bound(path, v, CheckFiniteIn("'" + full + "' entry", x, spec->min, spec->max)));
      }
      o->Set(key, xs);
      return Status::OK();
    }
  }
  return Status::OK();
}

// A stack template: per policy, per parameter, the list of values.
struct GridPolicy {
  std::string name, source;
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
};

Status ReadStack(const std::string& path, const toml::table& t, bool allow_lists, std::vector<GridPolicy>* out) {
  const toml::node* pol = t.get("policy");
  if (pol == nullptr) return Where(path, t, "needs a 'policy' list ([[sweep.policy]] or [[point.policy]])");
  for (const auto& kv : t) {
    const std::string k(kv.first.str());
    if (k != "policy") return Where(path, kv.second, "unknown key '" + k + "' (valid: policy)");
  }
  std::vector<const toml::table*> tables;
  if (const toml::table* one = pol->as_table()) {
    tables.push_back(one);
  } else if (const toml::array* arr = pol->as_array()) {
    for (const toml::node& el : *arr) {
      if (!el.is_table()) return Where(path, el, "each policy must be a table");
      tables.push_back(el.as_table());
    }
  } else {
    return Where(path, *pol, "'policy' must be a table or an array of tables");
  }
  if (tables.empty()) return Where(path, *pol, "empty policy list");
  for (const toml::table* pt : tables) {
    GridPolicy g;
    g.source = TomlWhere(path, pt->source());
    const toml::node* name = pt->get("name");
    if (name == nullptr || !name->is_string()) return Where(path, *pt, "policy table needs a string key 'name'");
    g.name = name->as_string()->get();
    for (const auto& kv : *pt) {
      const std::string key(kv.first.str());
      if (key == "name") continue;
      std::vector<std::string> values;
      std::string text;
      if (const toml::array* a = kv.second.as_array()) {
        if (!allow_lists) return Where(path, kv.second, "a [[point]] takes single values; use [[sweep]] for grids ('" + key + "')");
        for (const toml::node& el : *a) {
          if (!TomlScalarText(el, &text)) return Where(path, el, "policy '" + g.name + "' parameter '" + key + "' values must be scalars");
          KVLAB_RETURN_IF_ERROR(CheckPolicyParamType(path, g.name, key, el));
          values.push_back(text);
        }
        if (values.empty()) return Where(path, kv.second, "policy '" + g.name + "' parameter '" + key + "' is an empty grid");
      } else if (TomlScalarText(kv.second, &text)) {
        KVLAB_RETURN_IF_ERROR(CheckPolicyParamType(path, g.name, key, kv.second));
        values.push_back(text);
      } else {
        return Where(path, kv.second, "policy '" + g.name + "' parameter '" + key + "' must be a number, boolean, string or a list of them");
      }
      g.axes.push_back({key, values});
    }
    out->push_back(std::move(g));
  }
  return Status::OK();
}

// Cartesian product of every axis of every policy of a stack.
void Expand(const std::vector<GridPolicy>& grid, std::vector<std::vector<PolicySpec>>* out) {
  std::vector<std::pair<size_t, size_t>> axes;  // (policy, axis)
  for (size_t p = 0; p < grid.size(); ++p)
    for (size_t a = 0; a < grid[p].axes.size(); ++a) axes.push_back({p, a});
  std::vector<size_t> idx(axes.size(), 0);
  while (true) {
    std::vector<PolicySpec> stack;
    for (const GridPolicy& g : grid) stack.push_back(PolicySpec{g.name, {}, g.source});
    for (size_t i = 0; i < axes.size(); ++i) {
      const auto& axis = grid[axes[i].first].axes[axes[i].second];
      stack[axes[i].first].params[axis.first] = axis.second[idx[i]];
    }
    out->push_back(std::move(stack));
    size_t i = axes.size();
    while (i > 0) {
      --i;
      if (++idx[i] < grid[axes[i].first].axes[axes[i].second].second.size()) break;
      idx[i] = 0;
      if (i == 0) return;
    }
    if (axes.empty()) return;
  }
}

std::string StackLabel(const std::vector<PolicySpec>& stack) {
  std::string out;
  for (const PolicySpec& s : stack) {
    out += (out.empty() ? "" : "+") + s.name;
    std::string args;
    for (const auto& kv : s.params) args += (args.empty() ? "" : ",") + kv.first + "=" + kv.second;
    if (!args.empty()) out += "(" + args + ")";
  }
  return out;
}

// The [task.NAME] tables: each task's options, read and checked by the
// options that task declares (paths resolved against `dir`, the config's folder).
Status ReadTaskOptions(const std::string& path, const std::string& dir, const toml::node& n,
                       std::map<std::string, SweepTaskOptions>* options) {
  const toml::table* t = n.as_table();
  if (t == nullptr) return Where(path, n, "'task' must be a table of [task.NAME] tables");
  for (const auto& tk : *t) {
    const std::string tname(tk.first.str());
    const SweepTaskInfo* info = SweepTaskRegistry::Global().Find(tname);
    if (info == nullptr) return Where(path, tk.second, UnknownTask(tname));
    const toml::table* opts = tk.second.as_table();
    if (opts == nullptr) return Where(path, tk.second, "[task." + tname + "] must be a table");
    SweepTaskOptions& o = options->emplace(tname, SweepTaskOptions(info->options)).first->second;
    for (const auto& ok : *opts) {
      KVLAB_RETURN_IF_ERROR(ReadTaskOption(path, dir, tname, *info, std::string(ok.first.str()), ok.second, &o));
    }
  }
  return Status::OK();
}

// The [[sweep]] (a grid each) or [[point]] (one stack each) tables under `key`.
Status ReadStackTables(const std::string& path, const std::string& key, const toml::node& n,
                       std::vector<std::vector<GridPolicy>>* grids, std::vector<std::vector<PolicySpec>>* points) {
  std::vector<const toml::table*> tables;
  if (const toml::table* one = n.as_table()) tables.push_back(one);
  else if (const toml::array* arr = n.as_array()) {
    for (const toml::node& el : *arr) {
      if (!el.is_table()) return Where(path, el, "each [[" + key + "]] must be a table");
      tables.push_back(el.as_table());
    }
  } else {
    return Where(path, n, "'" + key + "' must be an array of tables ([[" + key + "]])");
  }
  for (const toml::table* t : tables) {
    std::vector<GridPolicy> g;
    KVLAB_RETURN_IF_ERROR(ReadStack(path, *t, key == "sweep", &g));
    if (key == "sweep") {
      grids->push_back(std::move(g));
    } else {
      std::vector<std::vector<PolicySpec>> one;
      Expand(g, &one);
      points->push_back(one[0]);
    }
  }
  return Status::OK();
}

// c->stacks: the baseline first (when c->baseline), then grids in order, then
// points; duplicates dropped. Two spellings of the same stack (a default
// written out or not) run once. Every stack must be valid before anything runs.
Status AddStacks(const std::string& path, const std::vector<std::vector<GridPolicy>>& grids,
                 const std::vector<std::vector<PolicySpec>>& points, SweepConfig* c) {
  std::set<std::string> seen;
  auto add = [&](const std::vector<PolicySpec>& s) {
    PolicyStack resolved;
    const std::string label = PolicyStack::Create(s, &resolved).ok() ? resolved.Describe() : StackLabel(s);
    if (seen.insert(label).second) c->stacks.push_back(s);
  };
  if (c->baseline) add({PolicySpec{"full", {}, path}});
  // A grid's size is its axes' product: bounded before anything is expanded.
  for (size_t gi = 0; gi < grids.size(); ++gi) {
    double stacks = 1;
    for (const GridPolicy& p : grids[gi]) {
      for (const auto& axis : p.axes) stacks *= static_cast<double>(axis.second.size());
    }
    if (stacks > static_cast<double>(kMaxCount)) {
      return Status::InvalidArgument(path + ": [[sweep]] " + std::to_string(gi + 1) + " expands to " +
                                     std::to_string(static_cast<int64_t>(std::min(stacks, 9e18))) +
                                     " stacks, more than " + std::to_string(kMaxCount) + " (kvlab's limit)");
    }
  }
  for (const auto& g : grids) {
    std::vector<std::vector<PolicySpec>> ex;
    Expand(g, &ex);
    for (const auto& s : ex) {
      PolicyStack probe;
      KVLAB_RETURN_IF_ERROR(PolicyStack::Create(s, &probe));
      add(s);
    }
  }
  for (const auto& s : points) {
    PolicyStack probe;
    KVLAB_RETURN_IF_ERROR(PolicyStack::Create(s, &probe));
    add(s);
  }
  if (c->stacks.empty()) return Status::InvalidArgument(path + ": no policy stacks to run (baseline = false and no [[sweep]] or [[point]])");
  return Status::OK();
}

}  // namespace

Status ParseSweepConfig(const std::string& text, const std::string& path, const std::vector<std::string>& overrides,
                        SweepConfig* out) {
  toml::table root;
  KVLAB_RETURN_IF_ERROR(ParseTomlText(text, path, &root));
  for (const std::string& o : overrides) KVLAB_RETURN_IF_ERROR(ApplyTomlOverride(o, &root));
  const std::string dir = Dir(path);
  SweepConfig c;
  c.path = path;
  c.overrides = overrides;
  {
    std::string stem = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
    if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".toml") == 0) stem.resize(stem.size() - 5);
    c.name = stem;
  }
  std::vector<std::vector<GridPolicy>> grids;
  std::vector<std::vector<PolicySpec>> points;
  bool have_models = false, have_tasks = false;
  for (const auto& kv : root) {
    const std::string key(kv.first.str());
    const toml::node& n = kv.second;
    if (key == "name") {
      if (!n.is_string()) return Where(path, n, "'name' must be a string");
      c.name = n.as_string()->get();
      // The name is a directory under results/: "." or ".." would write elsewhere.
      if (c.name.empty() || c.name.find('/') != std::string::npos || c.name == "." || c.name == "..") {
        return Where(path, n, "'name' must be a non-empty word (not '.' or '..', no '/'): it names results/NAME");
      }
    } else if (key == "models" || key == "model") {
      KVLAB_RETURN_IF_ERROR(List<std::string>(path, n, key, "strings (model directories or presets)", GetString, &c.models));
      have_models = true;
    } else if (key == "tasks") {
      KVLAB_RETURN_IF_ERROR(List<std::string>(path, n, key, "strings", GetString, &c.tasks));
      for (const std::string& t : c.tasks) {
        if (!KnownTask(t)) return Where(path, n, UnknownTask(t));
      }
      have_tasks = true;
    } else if (key == "lengths") {
      KVLAB_RETURN_IF_ERROR(List<int64_t>(path, n, key, "integers", GetInt, &c.lengths));
      for (int64_t l : c.lengths) {
        if (l < 16) return Where(path, n, "'lengths' must be >= 16");
        KVLAB_RETURN_IF_ERROR(Bound(path, n, CheckIntIn("'lengths' entry", l, 16, kMaxContextTokens)));
      }
    } else if (key == "batch_sizes") {
      KVLAB_RETURN_IF_ERROR(List<int64_t>(path, n, key, "integers", GetInt, &c.batch_sizes));
      for (int64_t b : c.batch_sizes) {
        if (b < 1) return Where(path, n, "'batch_sizes' must be >= 1");
        KVLAB_RETURN_IF_ERROR(Bound(path, n, CheckIntIn("'batch_sizes' entry", b, 1, kMaxBatch)));
      }
    } else if (key == "seeds") {
      std::vector<int64_t> s;
      KVLAB_RETURN_IF_ERROR(List<int64_t>(path, n, key, "integers", GetInt, &s));
      c.seeds.assign(s.begin(), s.end());
    } else if (key == "repetitions" || key == "threads" || key == "block_size") {
      int64_t v = 0;
      if (!GetInt(n, &v) || v < 0 || (key != "threads" && v < 1)) return Where(path, n, "'" + key + "' must be a positive integer");
      // block_size becomes an int: past the bound it would wrap (2^32 + 16 -> 16).
      const int64_t hi = key == "threads" ? kMaxThreads : key == "block_size" ? kMaxBlockSize : kMaxCount;
      KVLAB_RETURN_IF_ERROR(Bound(path, n, CheckIntIn("'" + key + "'", v, 0, hi)));
      if (key == "repetitions") c.repetitions = v;
      else if (key == "threads") c.threads = v;
      else c.block_size = static_cast<int>(v);
    } else if (key == "kv_dtype") {
      if (!n.is_string() || !ParseDType(n.as_string()->get(), &c.kv_dtype)) return Where(path, n, "'kv_dtype' must be f32, f16 or bf16");
    } else if (key == "baseline") {
      if (!n.is_boolean()) return Where(path, n, "'baseline' must be true or false");
      c.baseline = n.as_boolean()->get();
    } else if (key == "max_step_tokens") {
      int64_t v = 0;
      if (!GetInt(n, &v)) return Where(path, n, "'max_step_tokens' must be an integer (0: chunks as given)");
      KVLAB_RETURN_IF_ERROR(Bound(path, n, CheckIntIn("'max_step_tokens'", v, 0, kMaxContextTokens)));
      c.max_step_tokens = v;
    } else if (key == "run_blocks") {
      int64_t v = 0;
      if (!GetInt(n, &v)) return Where(path, n, "'run_blocks' must be an integer (0 or 1: off)");
      KVLAB_RETURN_IF_ERROR(Bound(path, n, CheckIntIn("'run_blocks'", v, 0, kMaxRunBlocks)));
      c.run_blocks = static_cast<int>(v);
    } else if (key == "allow_long_context") {
      if (!n.is_boolean()) return Where(path, n, "'allow_long_context' must be true or false");
      c.allow_long_context = n.as_boolean()->get();
    } else if (key == "task") {
      KVLAB_RETURN_IF_ERROR(ReadTaskOptions(path, dir, n, &c.task_options));
    } else if (key == "sweep" || key == "point") {
      KVLAB_RETURN_IF_ERROR(ReadStackTables(path, key, n, &grids, &points));
    } else {
      return Where(path, n, "unknown key '" + key + "'; valid keys: name, models, tasks, lengths, batch_sizes, seeds, "
                            "repetitions, kv_dtype, block_size, threads, max_step_tokens, run_blocks, baseline, allow_long_context, task, sweep, "
                            "point");
    }
  }
  if (!have_models) return Status::InvalidArgument(path + ": missing key 'models'");
  if (!have_tasks) return Status::InvalidArgument(path + ": missing key 'tasks'");
  // Labels: a preset's name, or the directory's last component.
  c.model_specs = c.models;
  for (std::string& m : c.models) {
    std::string label = m;
    while (label.size() > 1 && label.back() == '/') label.pop_back();
    if (label.find('/') != std::string::npos) label = label.substr(label.rfind('/') + 1);
    c.model_labels.push_back(label);
    m = Resolve(dir, m);
  }
  for (const std::string& t : c.tasks) {  // defaults for tasks without a table
    c.task_options.emplace(t, SweepTaskOptions(SweepTaskRegistry::Global().Find(t)->options));
  }
  // Preflight: a length past a model's positions fails each of its points
  // after their work, so it is refused here (a model whose config cannot be
  // read yet is left to its points to report).
  const toml::node* lengths_node = root.get("lengths");
  for (size_t i = 0; i < c.models.size() && !c.allow_long_context && lengths_node != nullptr; ++i) {
    ModelConfig mc;
    const std::string json = c.models[i] + "/config.json";
    if (!PresetConfig(c.models[i], &mc).ok() && !(std::ifstream(json) && LoadModelConfig(json, &mc).ok())) continue;
    for (int64_t l : c.lengths) {
      if (l <= mc.max_position_embeddings) continue;
      return Where(path, *lengths_node,
                   "'lengths' entry " + std::to_string(l) + " is past the " +
                       std::to_string(mc.max_position_embeddings) + " positions of model '" + c.model_labels[i] +
                       "' (max_position_embeddings in its config.json); lower it, or set allow_long_context = true "
                       "to run past them");
    }
  }
  KVLAB_RETURN_IF_ERROR(AddStacks(path, grids, points, &c));
  // Points: models x stacks x tasks x lengths x batches x seeds x repetitions.
  const double num_points = static_cast<double>(c.models.size()) * static_cast<double>(c.stacks.size()) *
                        static_cast<double>(c.tasks.size()) * static_cast<double>(c.lengths.size()) *
                        static_cast<double>(c.batch_sizes.size()) * static_cast<double>(c.seeds.size()) *
                        static_cast<double>(c.repetitions);
  if (num_points > static_cast<double>(kMaxCount)) {
    return Status::InvalidArgument(path + ": the sweep expands to " +
                                   std::to_string(static_cast<int64_t>(std::min(num_points, 9e18))) +
                                   " points (models x stacks x tasks x lengths x batch_sizes x seeds x repetitions), "
                                   "more than " + std::to_string(kMaxCount) + " (kvlab's limit)");
  }
  *out = std::move(c);
  return Status::OK();
}

Status LoadSweepConfig(const std::string& path, const std::vector<std::string>& overrides, SweepConfig* out) {
  std::string text;
  KVLAB_RETURN_IF_ERROR(ReadTomlFile(path, "sweep config", &text));
  return ParseSweepConfig(text, path, overrides, out);
}

std::vector<SweepPoint> ExpandPoints(const SweepConfig& c) {
  std::vector<SweepPoint> out;
  for (size_t mi = 0; mi < c.models.size(); ++mi) {
    for (const auto& stack : c.stacks) {
      for (const std::string& task : c.tasks) {
        for (int64_t length : c.lengths) {
          // Batch size matters for batched tasks (latency) only; the others run one sequence.
          const SweepTaskInfo* info = SweepTaskRegistry::Global().Find(task);  // null: a hand-built config's typo
          const std::vector<int64_t> batches = info != nullptr && info->batched ? c.batch_sizes : std::vector<int64_t>{1};
          for (int64_t batch : batches) {
            for (uint64_t seed : c.seeds) {
              for (int64_t rep = 0; rep < c.repetitions; ++rep) {
                SweepPoint p;
                p.index = static_cast<int64_t>(out.size());
                p.model = c.models[mi];
                p.model_label = c.model_labels[mi];
                p.stack = stack;
                p.stack_label = StackLabel(stack);
                p.baseline = stack.size() == 1 && stack[0].name == "full" && stack[0].params.empty();
                p.task = task;
                p.length = length;
                p.batch = batch;
                p.seed = seed;
                p.repetition = rep;
                const SweepTaskOptions& o = c.task_options.at(task);
                nlohmann::ordered_json k;
                k["model"] = c.model_specs[mi];
                k["stack"] = p.stack_label;
                k["task"] = task;
                k["length"] = length;
                k["batch"] = batch;
                k["seed"] = seed;
                k["rep"] = rep;
                k["kv_dtype"] = DTypeName(c.kv_dtype);
                k["block_size"] = c.block_size;
                if (c.max_step_tokens != SweepConfig().max_step_tokens) k["max_step_tokens"] = c.max_step_tokens;
                if (c.run_blocks != SweepConfig().run_blocks) k["run_blocks"] = c.run_blocks;
                if (info != nullptr) info->key_options(o, &k);
                p.key = k.dump();
                out.push_back(std::move(p));
              }
            }
          }
        }
      }
    }
  }
  return out;
}

SweepTaskOptions::SweepTaskOptions(const std::vector<TaskOption>& declared) {
  for (const TaskOption& o : declared) values_[o.name] = o.default_value;
}

const nlohmann::ordered_json& SweepTaskOptions::Get(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) {
    std::fprintf(stderr, "kvlab: internal error: a task read option '%s', which it does not declare\n", name.c_str());
    std::abort();
  }
  return *it;
}

int64_t SweepTaskOptions::Int(const std::string& name) const { return Get(name).get<int64_t>(); }
double SweepTaskOptions::Float(const std::string& name) const { return Get(name).get<double>(); }
bool SweepTaskOptions::Bool(const std::string& name) const { return Get(name).get<bool>(); }
const std::string& SweepTaskOptions::Path(const std::string& name) const {
  return Get(name).get_ref<const std::string&>();
}
std::vector<int64_t> SweepTaskOptions::Ints(const std::string& name) const {
  return Get(name).get<std::vector<int64_t>>();
}
std::vector<double> SweepTaskOptions::Floats(const std::string& name) const {
  return Get(name).get<std::vector<double>>();
}

}  // namespace kvlab
