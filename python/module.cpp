// The kvlab extension module (_kvlab, wrapped by the kvlab package's
// __init__.py): errors, the policy registry, Python policies' registration
// and the memory calculator; the engine (module_engine.cpp) and the sweep
// harness (module_sweep.cpp) bind themselves.
#include <malloc.h>
#include <pybind11/stl.h>

#include "core/model/memory_calc.h"
#include "core/model/model_config.h"
#include "policies/registry.h"
#include "python/module_common.h"
#include "python/py_policy.h"

namespace py = pybind11;

namespace kvlab {

std::vector<PolicySpec> ParsePolicies(const std::vector<std::string>& texts) {
  std::vector<PolicySpec> specs;
  for (const std::string& t : texts) {
    PolicySpec spec;
    ThrowIfError(ParsePolicyString(t, "policy", &spec));
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) specs.push_back(PolicySpec{"full", {}, "policy"});
  return specs;
}

namespace {

const char* TypeName(ParamSpec::Type t) {
  switch (t) {
    case ParamSpec::Type::kInt: return "int";
    case ParamSpec::Type::kFloat: return "float";
    case ParamSpec::Type::kBool: return "bool";
    case ParamSpec::Type::kString: return "str";
  }
  return "";
}

py::list Policies() {
  py::list out;
  for (const PolicyInfo& i : PolicyRegistry::Global().infos()) {
    py::dict d;
    d["name"] = i.name;
    d["summary"] = i.summary;
    d["paper"] = i.paper;
    d["concerns"] = ConcernList(i.concerns);
    py::list params;
    for (const ParamSpec& p : i.params) {
      py::dict pd;
      pd["name"] = p.name;
      pd["type"] = TypeName(p.type);
      pd["default"] = p.default_value;
      pd["help"] = p.help;
      pd["valid"] = p.ValidValues();
      params.append(pd);
    }
    d["params"] = params;
    out.append(d);
  }
  return out;
}

py::dict Memory(const std::string& model, int64_t tokens, const std::vector<std::string>& policies, int bits) {
  ModelConfig mc;
  std::string unverified;
  ThrowIfError(ResolveKvShape(model, &mc, &unverified));
  PolicyStack stack;
  ThrowIfError(PolicyStack::Create(ParsePolicies(policies), &stack));
  MemoryEstimate e;
  ThrowIfError(EstimateKVMemory(mc, tokens, bits, stack, &e));
  e.unverified_model_type = unverified;
  py::dict d;
  d["policy"] = e.policy;
  d["tokens"] = e.tokens;
  d["bits"] = e.bits;
  d["num_layers"] = e.num_layers;
  d["kv_heads"] = e.kv_heads;
  d["stored_kv_heads"] = e.stored_kv_heads;
  d["head_dim"] = e.head_dim;
  d["bytes_per_token"] = e.bytes_per_token;
  d["bytes_per_sequence"] = e.bytes_per_sequence;
  d["bytes_in_blocks"] = e.bytes_in_blocks;
  d["uncompressed_bytes"] = e.uncompressed_bytes;
  d["mha_shortcut_bytes"] = e.mha_shortcut_bytes;
  d["tokens_kept"] = e.tokens_kept;
  d["encoding"] = e.encoding;
  d["selection"] = e.selection;
  d["device_bytes"] = e.device_bytes;
  d["host_bytes"] = e.host_bytes;
  d["disk_bytes"] = e.disk_bytes;
  d["report"] = FormatMemoryReport(e, 0);
  return d;
}

}  // namespace
}  // namespace kvlab

PYBIND11_MODULE(_kvlab, m) {
  using namespace kvlab;
  m.doc() = "kvlab's C++ core (use the kvlab package, which wraps it)";
  // glibc serves allocations past M_MMAP_THRESHOLD with a fresh mmap each
  // time, page faults and all. In a Python process with torch the threshold
  // stays low, and the engine's per-step buffers (and a Python policy's
  // tensors) took that path: a llama-3.1-8b layer's decode step ran at 96 ms
  // in Python against 33 ms from `kvlab generate`, and 31 ms with the
  // threshold at glibc's largest, 32 MiB, set here for the whole process
  // (docs/python.md says so).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  static py::exception<ModuleError> error(m, "Error");
  py::register_exception<PolicyError>(m, "PolicyError", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ModuleError& e) {
      error(e.what());
    } catch (const std::invalid_argument& e) {
      error(e.what());
    }
  });
  m.def("policies", &Policies, "The policy registry: one dict per policy (name, summary, paper, concerns, params).");
  m.def("memory", &Memory, py::arg("model"), py::arg("tokens"), py::arg("policies"), py::arg("bits") = 16,
        "The KV memory calculator (`kvlab memory`) as a dict; 'report' is the command's text.");
  m.def("register_policy", &RegisterPythonPolicy, py::arg("name"), py::arg("cls"),
        "Registers a kvlab.ScorerPolicy subclass as selection policy `name`.");
  BindEngine(m);
  BindSweep(m);
}
