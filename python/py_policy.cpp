// The C++ side of a Python policy (py_policy.h): a ScoredSelection whose
// Score / Choose / FoldAttention call the Python object under the GIL, with
// the slots' K/V as torch tensors the policy owns (copies: the cache's
// memory never reaches Python), and check what comes back before core acts
// on it.
#include "python/py_policy.h"

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>  // at::Tensor <-> torch.Tensor (libtorch_python)
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include "policies/scored_selection.h"

namespace py = pybind11;

namespace kvlab {
namespace {

std::atomic<bool> g_interrupted{false};

struct PyPolicyClass {
  std::string name;
  py::object cls;
  bool has_select = false, has_fold = false, needs_attention = false;
};

// The registered classes by name; never freed (the registry keeps pointers to
// their names for the process's life).
std::map<std::string, std::unique_ptr<PyPolicyClass>>& Classes() {
  static auto* classes = new std::map<std::string, std::unique_ptr<PyPolicyClass>>();
  return *classes;
}

// "ValueError: what" from a Python error: the last line of its traceback.
std::string LastLine(py::error_already_set& e) {
  std::string type = "Exception";
  std::string text;
  try {
    type = py::str(e.type().attr("__name__")).cast<std::string>();
    text = py::str(e.value()).cast<std::string>();
  } catch (...) {
  }
  return text.empty() ? type : type + ": " + text;
}

class PyScorerPolicy : public ScoredSelection {
 public:
  PyScorerPolicy(PolicyParams p, const PyPolicyClass* c, py::object instance)
      : ScoredSelection(p, ReadBudget(p, p.GetInt("recent"))),
        class_(c),
        instance_(std::move(instance)),
        recent_(p.GetInt("recent")) {}
  ~PyScorerPolicy() override {
    if (!Py_IsInitialized()) {
      instance_.release();  // the interpreter is gone: nothing to give back
      return;
    }
    py::gil_scoped_acquire gil;
    instance_ = py::object();
  }

  const char* Name() const override { return class_->name.c_str(); }
  bool NeedsKeyValues() const override { return true; }
  bool NeedsAttentionScores() const override { return class_->needs_attention || class_->has_fold; }
  int64_t Recent(int64_t budget) const override { return std::min(recent_, budget); }

  void FoldAttention(const float* step, int64_t n, float* score) const override {
    if (!class_->has_fold) {
      for (int64_t i = 0; i < n; ++i) score[i] += step[i];
      return;
    }
    py::gil_scoped_acquire gil;
    const std::string where = "folding attention";
    if (CheckPythonSignals()) throw PolicyError(Prefix(where) + "interrupted");
    py::object result;
    try {
      result = instance_.attr("fold")(Floats(step, n), Floats(score, n));
    } catch (py::error_already_set& e) {
      throw Error(e, where, "fold");
    }
    const at::Tensor t = CheckScores(result, n, where, "fold");
    std::copy(t.data_ptr<float>(), t.data_ptr<float>() + n, score);
  }

 protected:
  void Score(const StreamState& s, int64_t n, float* out) const override {
    py::gil_scoped_acquire gil;
    const at::Tensor t = CheckScores(Call(s, "score", py::none()), s.num_tokens, Where(s), "score");
    std::copy(t.data_ptr<float>(), t.data_ptr<float>() + n, out);
  }

  void Choose(const StreamState& s, int64_t budget, std::vector<int64_t>* keep) const override {
    if (!class_->has_select) {
      ScoredSelection::Choose(s, budget, keep);
      return;
    }
    py::gil_scoped_acquire gil;
    const py::object result = Call(s, "select", py::int_(budget));
    const std::string where = Where(s);
    at::Tensor t;
    if (THPVariable_Check(result.ptr())) {
      t = result.cast<at::Tensor>();
    } else {
      try {
        t = torch::tensor(result.cast<std::vector<int64_t>>(), torch::kInt64);
      } catch (const py::cast_error&) {
        throw PolicyError(Prefix(where) + "select returned a " + TypeName(result) +
                          ", not a list of slot indices or a torch.Tensor");
      }
    }
    if (t.dim() != 1 || t.is_floating_point() || t.is_complex() || t.scalar_type() == at::kBool) {
      throw PolicyError(Prefix(where) + "select must return a 1-D integer tensor of slot indices, got " +
                        std::string(c10::toString(t.scalar_type())) + " of " + std::to_string(t.dim()) + " dimensions");
    }
    if (!t.device().is_cpu()) throw PolicyError(Prefix(where) + "select returned a tensor on " + t.device().str() + ", not the CPU");
    t = t.to(torch::kInt64).contiguous();
    keep->assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    std::sort(keep->begin(), keep->end());
    for (size_t i = 0; i < keep->size(); ++i) {
      const int64_t k = (*keep)[i];
      if (k < 0 || k >= s.num_tokens) {
        throw PolicyError(Prefix(where) + "select returned slot " + std::to_string(k) + ", outside [0, " +
                          std::to_string(s.num_tokens) + ")");
      }
      if (i > 0 && (*keep)[i - 1] == k) throw PolicyError(Prefix(where) + "select returned slot " + std::to_string(k) + " twice");
    }
    if (static_cast<int64_t>(keep->size()) > budget) {
      throw PolicyError(Prefix(where) + "select returned " + std::to_string(keep->size()) + " slots, more than the budget " +
                        std::to_string(budget));
    }
  }

 private:
  std::string Prefix(const std::string& where) const { return "policy '" + class_->name + "' (Python), " + where + ": "; }
  static std::string Where(const StreamState& s) {
    return "layer " + std::to_string(s.layer) + ", KV head " + std::to_string(s.kv_head) + ", at sequence length " +
           std::to_string(s.seq_length);
  }
  static std::string TypeName(const py::handle& o) { return py::str(py::type::handle_of(o).attr("__name__")).cast<std::string>(); }

  PolicyError Error(py::error_already_set& e, const std::string& where, const char* method) const {
    if (e.matches(PyExc_KeyboardInterrupt)) g_interrupted = true;
    return PolicyError(Prefix(where) + method + " raised " + LastLine(e));
  }

  static at::Tensor Floats(const float* p, int64_t n) {
    at::Tensor t = torch::empty({n}, torch::kFloat32);
    if (n > 0 && p != nullptr) std::copy(p, p + n, t.data_ptr<float>());
    if (p == nullptr) t.zero_();
    return t;
  }

  // method(keys, values, attention, positions, state[, budget]) on the stream's live slots.
  py::object Call(const StreamState& s, const char* method, py::object budget) const {
    const std::string where = Where(s);
    if (CheckPythonSignals()) throw PolicyError(Prefix(where) + "interrupted");
    if (s.kv == nullptr) throw PolicyError(Prefix(where) + "the cache's K/V are not in host memory (a device cache)");
    const int64_t n = s.num_tokens;
    const int d = s.kv->head_dim();
    at::Tensor keys = torch::empty({n, d}, torch::kFloat32), values = torch::empty({n, d}, torch::kFloat32);
    s.kv->Read(keys.data_ptr<float>(), values.data_ptr<float>());
    at::Tensor positions = torch::empty({n}, torch::kInt64);
    for (int64_t i = 0; i < n; ++i) positions.data_ptr<int64_t>()[i] = s.positions[i];
    py::object attention = py::none();
    if (NeedsAttentionScores()) attention = py::cast(Floats(s.score, n));
    py::dict state;
    state["layer"] = s.layer;
    state["kv_head"] = s.kv_head;
    state["num_layers"] = s.num_layers;
    state["seq_length"] = s.seq_length;
    state["step_tokens"] = s.step_tokens;
    state["budget"] = BudgetOf(s);
    state["recent"] = Recent(BudgetOf(s));
    try {
      py::object fn = instance_.attr(method);
      return budget.is_none() ? fn(keys, values, attention, positions, state)
                              : fn(keys, values, attention, positions, state, budget);
    } catch (py::error_already_set& e) {
      throw Error(e, where, method);
    }
  }

  // A float32 CPU tensor of n finite values.
  at::Tensor CheckScores(const py::object& result, int64_t n, const std::string& where, const char* method) const {
    if (!THPVariable_Check(result.ptr())) {
      throw PolicyError(Prefix(where) + method + " returned a " + TypeName(result) + ", not a torch.Tensor");
    }
    at::Tensor t = result.cast<at::Tensor>();
    if (t.dim() != 1 || t.size(0) != n) {
      std::string shape;
      for (int64_t x : t.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(x);
      throw PolicyError(Prefix(where) + method + " returned a tensor of shape [" + shape + "], not [" + std::to_string(n) +
                        "] (one score per slot)");
    }
    if (t.scalar_type() != torch::kFloat32) {
      throw PolicyError(Prefix(where) + method + " returned " + std::string(c10::toString(t.scalar_type())) +
                        " scores, not float32");
    }
    if (!t.device().is_cpu()) throw PolicyError(Prefix(where) + method + " returned a tensor on " + t.device().str() + ", not the CPU");
    t = t.contiguous();
    const float* p = t.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(p[i])) {
        throw PolicyError(Prefix(where) + method + " returned a non-finite score (" + std::to_string(p[i]) + ") at slot " +
                          std::to_string(i));
      }
    }
    return t;
  }

  const PyPolicyClass* class_;
  py::object instance_;
  int64_t recent_;
};

// A parameter's type and canonical default from its Python default value.
ParamSpec SpecOf(const std::string& name, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return {name, ParamSpec::Type::kBool, v.cast<bool>() ? "true" : "false", "(Python policy)"};
  if (py::isinstance<py::int_>(v)) return {name, ParamSpec::Type::kInt, std::to_string(v.cast<int64_t>()), "(Python policy)"};
  if (py::isinstance<py::float_>(v)) {
    return {name, ParamSpec::Type::kFloat, py::str(v).cast<std::string>(), "(Python policy)"};
  }
  if (py::isinstance<py::str>(v)) return {name, ParamSpec::Type::kString, v.cast<std::string>(), "(Python policy)"};
  throw std::invalid_argument("parameter '" + name + "': its default must be an int, float, bool or str");
}

py::object TypedValue(const PolicyParams& p, const ParamSpec& spec) {
  switch (spec.type) {
    case ParamSpec::Type::kBool: return py::bool_(p.GetBool(spec.name));
    case ParamSpec::Type::kInt: return py::int_(p.GetInt(spec.name));
    case ParamSpec::Type::kFloat: return py::float_(p.GetFloat(spec.name));
    case ParamSpec::Type::kString: return py::str(p.GetString(spec.name));
  }
  return py::none();
}

}  // namespace

bool PythonInterruptPending() { return g_interrupted; }
void ClearPythonInterrupt() { g_interrupted = false; }

bool CheckPythonSignals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) {
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) g_interrupted = true;
    PyErr_Clear();
  }
  return g_interrupted;
}

void RegisterPythonPolicy(const std::string& name, py::object cls) {
  PolicyRegistry& registry = PolicyRegistry::Global();
  auto& classes = Classes();
  if (registry.Find(name) != nullptr && classes.count(name) == 0) {
    throw std::invalid_argument("register_policy: '" + name + "' is a built-in policy's name");
  }
  if (name.empty() || name.find_first_of(":,=+ ") != std::string::npos) {
    throw std::invalid_argument("register_policy: '" + name + "' is not a policy name (no ':', ',', '=', '+' or spaces)");
  }
  auto c = std::make_unique<PyPolicyClass>();
  c->name = name;
  c->cls = cls;
  c->has_select = py::bool_(cls.attr("_defines")("select"));
  c->has_fold = py::bool_(cls.attr("_defines")("fold"));
  c->needs_attention = py::bool_(cls.attr("needs_attention"));
  std::string summary = "(Python) ";
  const py::object doc = cls.attr("__doc__");
  if (!doc.is_none()) {
    std::string d = doc.cast<std::string>();
    d.erase(0, d.find_first_not_of(" \n\t"));
    summary += d.substr(0, d.find('\n'));
  }
  PolicyInfo info(name, summary, py::str(cls.attr("paper")).cast<std::string>(), kConcernSelection,
                  BudgetParams(std::to_string(cls.attr("default_budget").cast<int64_t>()),
                               py::str(cls.attr("default_ratio")).cast<std::string>()));
  info.params.push_back({"recent", ParamSpec::Type::kInt, std::to_string(cls.attr("default_recent").cast<int64_t>()),
                         "most recent slots always kept", {}, ParamRange::Closed(1, 1 << 20)});
  const py::dict extra = cls.attr("params").cast<py::dict>();
  for (const auto& kv : extra) {
    const std::string pname = kv.first.cast<std::string>();
    if (pname == "budget" || pname == "ratio" || pname == "recent") {
      throw std::invalid_argument("register_policy: parameter '" + pname + "' is declared by every Python policy");
    }
    info.params.push_back(SpecOf(pname, kv.second));
  }
  const PyPolicyClass* cp = c.get();
  info.create = [cp](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    if (p.GetInt("budget") > 0 && p.GetInt("budget") < p.GetInt("recent")) {
      return Status::InvalidArgument(cp->name + ": parameter 'budget' is " + std::to_string(p.GetInt("budget")) +
                                     ", smaller than 'recent' " + std::to_string(p.GetInt("recent")));
    }
    py::gil_scoped_acquire gil;
    const PolicyInfo* info = PolicyRegistry::Global().Find(cp->name);
    py::dict kwargs;
    for (const ParamSpec& spec : info->params) kwargs[py::str(spec.name)] = TypedValue(p, spec);
    py::object instance;
    try {
      instance = cp->cls(**kwargs);
    } catch (py::error_already_set& e) {
      return Status::InvalidArgument("policy '" + cp->name + "' (Python): creating it raised " + LastLine(e));
    }
    out->reset(new PyScorerPolicy(std::move(p), cp, std::move(instance)));
    return Status::OK();
  };
  if (classes.count(name) != 0) {
    registry.Replace(std::move(info));
  } else {
    registry.Register(std::move(info));
  }
  // A replaced class stays alive: a policy made from it may still be in use.
  static auto* replaced = new std::vector<std::unique_ptr<PyPolicyClass>>();
  if (classes.count(name) != 0) replaced->push_back(std::move(classes[name]));
  classes[name] = std::move(c);
}

}  // namespace kvlab
