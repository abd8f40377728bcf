// kvlab.Model's C++ side: a model (preset or Hugging Face directory) with
// its tokenizer, and an engine per call for generate and teacher-forced
// logits (each call sizes its cache for its own prompt and stack).
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/torch.h>

#include <memory>

#include "core/engine/engine.h"
#include "core/model/model_config.h"
#include "core/tokenizer/tokenizer.h"
#include "python/module_common.h"
#include "python/py_policy.h"

namespace py = pybind11;

namespace kvlab {
namespace {

// Runs f without the GIL; a Python policy's error that came of Ctrl-C raises
// KeyboardInterrupt instead.
template <typename F>
void WithoutGil(F f) {
  ClearPythonInterrupt();
  try {
    py::gil_scoped_release nogil;
    f();
  } catch (const PolicyError&) {
    if (!PythonInterruptPending()) throw;
    ClearPythonInterrupt();
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
}

class PyModel {
 public:
  PyModel(const std::string& model, const std::string& kv_dtype, int block_size, int threads, uint64_t weight_seed,
          int64_t max_step_tokens, int64_t prefill_chunk, int run_blocks, bool allow_long_context) {
    eo_.model = model;
    if (!ParseDType(kv_dtype, &eo_.kv_dtype)) {
      throw ModuleError("kv_dtype: expected f32, f16 or bf16, got '" + kv_dtype + "'");
    }
    eo_.block_size = block_size;
    eo_.num_threads = threads;
    eo_.weight_seed = weight_seed;
    eo_.max_step_tokens = max_step_tokens;
    eo_.prefill_chunk = prefill_chunk;
    eo_.run_blocks = run_blocks;
    eo_.allow_long_context = allow_long_context;
    ThrowIfError(ResolveModelConfig(model, &mc_));
    if (!LoadTokenizer(model, mc_, &tokenizer_).ok()) tokenizer_.reset();
  }

  std::vector<int32_t> Encode(const std::string& text, bool add_bos) const {
    if (!tokenizer_) throw ModuleError("model '" + eo_.model + "' has no tokenizer: pass token ids");
    std::vector<int32_t> ids;
    ThrowIfError(tokenizer_->Encode(text, add_bos, &ids));
    return ids;
  }
  py::object Decode(const std::vector<int32_t>& ids) const {
    if (!tokenizer_) return py::none();
    std::string text;
    ThrowIfError(tokenizer_->Decode(ids, &text));
    return py::bytes(text).attr("decode")("utf-8", "replace");
  }

  py::dict Generate(const std::vector<int32_t>& ids, const std::vector<std::string>& policies, int64_t max_new_tokens,
                    double temperature, double top_p, uint64_t seed, bool stop_at_eos) {
    const std::vector<PolicySpec> specs = ParsePolicies(policies);
    if (max_new_tokens < 0) throw ModuleError("max_new_tokens must be >= 0");
    GenerateOptions go;
    go.max_new_tokens = max_new_tokens;
    go.sampling.temperature = temperature;
    go.sampling.top_p = top_p;
    go.sampling.seed = seed;
    go.stop_at_eos = stop_at_eos;
    std::vector<GenerateResult> results;
    GenerateStats stats;
    std::string describe;
    WithoutGil([&] {
      std::unique_ptr<Engine> engine = MakeEngine(specs, static_cast<int64_t>(ids.size()) + max_new_tokens);
      ThrowIfError(engine->Generate({ids}, go, &results, &stats));
      describe = engine->policies().Describe();
    });
    py::dict d;
    d["tokens"] = results.at(0).tokens;
    d["text"] = Decode(results.at(0).tokens);
    d["policy"] = describe;
    d["prefill_ms"] = stats.prefill_ms;
    d["decode_step_ms"] = stats.decode_step_ms;
    d["memory"] = MemoryDict(stats.memory_at_end);
    return d;
  }

  // Every position's next-token logits [n, vocab] with the stack acting as
  // the tokens go in; with kept, also each (layer, KV head)'s kept positions.
  py::object Logits(const std::vector<int32_t>& ids, const std::vector<std::string>& policies, bool kept) {
    const std::vector<PolicySpec> specs = ParsePolicies(policies);
    if (ids.empty()) throw ModuleError("logits: no tokens");
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<std::vector<int64_t>>> positions;
    MemoryStats memory;
    WithoutGil([&] {
      std::unique_ptr<Engine> engine = MakeEngine(specs, static_cast<int64_t>(ids.size()));
      ThrowIfError(engine->AddSequence(0));
      ThrowIfError(engine->Forward({SeqChunk{0, ids}}, /*all_logits=*/true, &logits));
      memory = engine->Memory();
      const CacheShape& shape = engine->cache().shape();
      for (int l = 0; l < shape.num_layers; ++l) {
        positions.emplace_back();
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          const Stream& st = engine->cache().stream(0, l, h);
          std::vector<int64_t> p;
          for (int64_t t = 0; t < st.num_tokens; ++t) {
            if (!st.Dead(t)) p.push_back(st.positions[static_cast<size_t>(t)]);
          }
          positions.back().push_back(std::move(p));
        }
      }
      ThrowIfError(engine->RemoveSequence(0));
    });
    const int64_t vocab = mc_.vocab_size;
    at::Tensor t = torch::from_blob(logits.at(0).data(), {static_cast<int64_t>(ids.size()), vocab}, torch::kFloat32).clone();
    if (!kept) return py::cast(t);
    py::dict extra;
    extra["kept"] = positions;
    extra["memory"] = MemoryDict(memory);
    return py::make_tuple(t, extra);
  }

  py::dict Config() const {
    py::dict d;
    d["model"] = eo_.model;
    d["model_type"] = mc_.spec.model_type;
    d["vocab_size"] = mc_.vocab_size;
    d["num_layers"] = mc_.num_hidden_layers;
    d["hidden_size"] = mc_.hidden_size;
    d["num_attention_heads"] = mc_.num_attention_heads;
    d["num_key_value_heads"] = mc_.num_key_value_heads;
    d["head_dim"] = mc_.head_dim;
    d["has_tokenizer"] = tokenizer_ != nullptr;
    return d;
  }

 private:
  std::unique_ptr<Engine> MakeEngine(const std::vector<PolicySpec>& specs, int64_t context) const {
    EngineOptions eo = eo_;
    eo.max_seqs = 1;
    eo.max_context = context;
    ThrowIfError(CheckContextLength(mc_, context, 0, eo.allow_long_context, "the prompt and the tokens to generate"));
    std::unique_ptr<Engine> engine;
    ThrowIfError(Engine::Create(eo, specs, &engine));
    return engine;
  }

  static py::dict MemoryDict(const MemoryStats& m) {
    py::dict d;
    d["bytes_in_use"] = m.bytes_in_use;
    d["peak_bytes_in_use"] = m.peak_bytes_in_use;
    d["bytes_reserved"] = m.bytes_reserved;
    d["full_bytes_reserved"] = m.full_bytes_reserved;
    d["blocks_in_use"] = m.blocks_in_use;
    d["block_bytes"] = m.block_bytes;
    d["plain_blocks_in_use"] = m.plain_blocks_in_use;
    d["encoded_blocks_in_use"] = m.encoded_blocks_in_use;
    d["slots_in_use"] = m.slots_in_use;
    d["tokens_seen"] = m.tokens_seen;
    d["device_bytes"] = m.device_bytes;
    d["host_bytes"] = m.host_bytes;
    d["disk_bytes"] = m.disk_bytes;
    d["run_reserve_bytes"] = m.run_reserve_bytes;
    return d;
  }

  EngineOptions eo_;
  ModelConfig mc_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

}  // namespace

void BindEngine(py::module_& m) {
  py::class_<PyModel>(m, "Model")
      .def(py::init<const std::string&, const std::string&, int, int, uint64_t, int64_t, int64_t, int, bool>(),
           py::arg("model"), py::arg("kv_dtype") = "bf16", py::arg("block_size") = 16, py::arg("threads") = 0,
           py::arg("weight_seed") = 0, py::arg("max_step_tokens") = 64, py::arg("prefill_chunk") = 512,
           py::arg("run_blocks") = 32, py::arg("allow_long_context") = false)
      .def("encode", &PyModel::Encode, py::arg("text"), py::arg("add_bos") = true)
      .def("decode", &PyModel::Decode, py::arg("ids"))
      .def("generate", &PyModel::Generate, py::arg("ids"), py::arg("policies"), py::arg("max_new_tokens"),
           py::arg("temperature"), py::arg("top_p"), py::arg("seed"), py::arg("stop_at_eos"))
      .def("logits", &PyModel::Logits, py::arg("ids"), py::arg("policies"), py::arg("kept"))
      .def("config", &PyModel::Config);
}

}  // namespace kvlab
