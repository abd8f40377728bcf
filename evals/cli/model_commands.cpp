// Subcommands about models, their tokenizers and caches: logits, memory, init,
// models, tokenize.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include "core/base/untrusted.h"
#include "core/engine/engine.h"
#include "core/model/memory_calc.h"
#include "core/model/model_families.h"
#include "core/tokenizer/tokenize_command.h"
#include "core/tokenizer/tokenizer.h"
#include "evals/cli/cli.h"

namespace kvlab {
namespace {

struct LogitsArgs {
  std::string model, tokens, tokens_file, out, mode = "prefill", dtype = "f32";
  std::vector<std::string> policy_args;  // --policy, repeated to stack (none: full)
  int block = 16;
  int threads = 0;  // 0: all cores
  int64_t chunk = 0;  // prefill mode: tokens per chunk (0: one chunk)
  int64_t max_step_tokens = EngineOptions().max_step_tokens;
  bool allow_long_context = false;
};

// Teacher-forced logits through the engine under a policy stack: prefill
// chunks of `chunk` tokens (0: one chunk), or one token a step (the stack
// acts after each, so a lossy policy's effect shows in the logits).
Status EngineLogits(const EngineOptions& o, const std::vector<PolicySpec>& policies, const std::vector<int32_t>& ids,
                    bool decode, int64_t chunk, std::vector<float>* out) {
  std::unique_ptr<Engine> engine;
  KVLAB_RETURN_IF_ERROR(Engine::Create(o, policies, &engine));
  KVLAB_RETURN_IF_ERROR(engine->AddSequence(0));
  std::vector<std::vector<float>> logits;
  if (!decode) {
    const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : std::max<size_t>(ids.size(), 1);
    for (size_t i = 0; i < ids.size(); i += step) {
      const std::vector<int32_t> part(ids.begin() + static_cast<std::ptrdiff_t>(i),
                                      ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), i + step)));
      KVLAB_RETURN_IF_ERROR(engine->Forward({SeqChunk{0, part}}, true, &logits));
      out->insert(out->end(), logits[0].begin(), logits[0].end());
    }
  } else {
    for (size_t i = 0; i < ids.size(); ++i) {
      KVLAB_RETURN_IF_ERROR(engine->Forward({SeqChunk{0, {ids[i]}}}, false, &logits));
      out->insert(out->end(), logits[0].begin(), logits[0].end());
    }
  }
  // What the stack held (and, for offload, where), so that a byte-for-byte
  // comparison of two policies' logits can show the policy really acted.
  PrintEngineMemory(*engine, engine->Memory(), static_cast<int64_t>(ids.size()));
  return Status::OK();
}

int RunLogits(const LogitsArgs& a) {
  EngineOptions o;
  o.model = a.model;
  o.block_size = a.block;
  o.num_threads = a.threads;
  o.max_step_tokens = a.max_step_tokens;
  if (a.threads < 0) return Fail(Status::InvalidArgument("--threads must be >= 0 (0: all cores), got " +
                                                         std::to_string(a.threads)));
  // dense and nocache run the model without the paged cache, so no policy
  // could act there; refusing beats silently printing full's logits.
  if ((a.mode == "dense" || a.mode == "nocache") && !a.policy_args.empty()) {
    return Fail(Status::InvalidArgument("--policy: --mode " + a.mode +
                                        " runs without the paged cache, so no policy applies; use --mode prefill "
                                        "or decode"));
  }
  std::vector<PolicySpec> policies;
  Status ps = ParsePolicyArgs(a.policy_args, &policies);
  if (!ps.ok()) return Fail(ps);
  if (!ParseDType(a.dtype, &o.kv_dtype)) return Fail(Status::InvalidArgument("--kv-dtype: expected f32, f16 or bf16"));
  ModelConfig mc;
  Status s = ResolveModelConfig(a.model, &mc);
  if (!s.ok()) return Fail(s);
  std::vector<int32_t> ids;
  if (!a.tokens_file.empty()) s = ReadTokenIdFile(a.tokens_file, mc.vocab_size, &ids);
  else if (!a.tokens.empty()) s = ParseTokenIds(a.tokens, mc.vocab_size, "--tokens", &ids);
  else s = Status::InvalidArgument("logits: give the tokens, --tokens 5,17,42 or --tokens-file FILE.ids");
  if (!s.ok()) return Fail(s);
  o.max_context = static_cast<int64_t>(ids.size());
  o.allow_long_context = a.allow_long_context;
  s = CheckContextLength(mc, 0, o.max_context, a.allow_long_context, "the token list");
  if (!s.ok()) return Fail(s);
  std::vector<float> out;
  if (a.mode == "prefill" || a.mode == "decode") {
    s = EngineLogits(o, policies, ids, a.mode == "decode", a.chunk, &out);
  } else if (a.mode == "dense" || a.mode == "nocache") {
    s = DenseLogits(o, ids, a.mode == "nocache", &out);
  } else {
    s = Status::InvalidArgument("--mode: expected prefill, decode, dense or nocache, got '" + a.mode + "'");
  }
  if (!s.ok()) return Fail(s);
  std::ofstream f(a.out, std::ios::binary);
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  if (!f) return Fail(Status::IOError(a.out + ": cannot write"));
  std::printf("wrote %zu x %lld logits to %s\n", ids.size(), static_cast<long long>(mc.vocab_size), a.out.c_str());
  return 0;
}

struct MemoryArgs {
  std::string model = "llama-3.1-8b";
  int64_t tokens = 8192;
  int bits = 16;
  double pool_gb = 0;
  bool pool_gb_given = false;
  std::vector<std::string> policies;
};

int RunMemory(const MemoryArgs& a) {
  ModelConfig mc;
  std::string unverified;
  Status s = ResolveKvShape(a.model, &mc, &unverified);
  if (!s.ok()) return Fail(s);
  std::vector<PolicySpec> specs;
  s = ParsePolicyArgs(a.policies, &specs);
  PolicyStack stack;
  if (s.ok()) s = PolicyStack::Create(specs, &stack);
  MemoryEstimate e;
  if (s.ok()) s = EstimateKVMemory(mc, a.tokens, a.bits, stack, &e);
  if (!s.ok()) return Fail(s);
  e.unverified_model_type = unverified;
  int64_t pool_bytes = 0;
  if (a.pool_gb_given) {
    // Up to 10^9 GB (an exabyte): a pool's share, not a size anything allocates.
    if (!(std::isfinite(a.pool_gb) && a.pool_gb > 0 && a.pool_gb <= 1e9)) {
      char got[32];
      std::snprintf(got, sizeof(got), "%g", a.pool_gb);
      return Fail(Status::InvalidArgument(std::string("--pool-gb must be a number of GB in (0, 1e9], got ") + got));
    }
    pool_bytes = std::max<int64_t>(1, std::llround(a.pool_gb * 1e9));
  }
  std::printf("model          %s\n", a.model.c_str());
  std::printf("%s", FormatMemoryReport(e, pool_bytes).c_str());
  return 0;
}

struct InitArgs {
  std::string model = "small", out;
  uint64_t seed = 0;
  double std = 0.02;
  std::string dtype = "f32";
  int64_t layers = 0;  // 0: the shape's own count
};

int RunInit(const InitArgs& a) {
  DType dtype;
  if (!ParseDType(a.dtype, &dtype)) {
    return Fail(Status::InvalidArgument("--dtype: expected f32, bf16 or f16, got '" + a.dtype + "'"));
  }
  ModelConfig mc;
  Status s = ResolveModelConfig(a.model, &mc);
  if (s.ok() && a.layers != 0) {
    if (a.layers < 1 || a.layers > mc.num_hidden_layers) {
      return Fail(Status::InvalidArgument("--layers: expected 1 to " + std::to_string(mc.num_hidden_layers) + " (" +
                                          a.model + "'s num_hidden_layers), got " + std::to_string(a.layers)));
    }
    mc.KeepFirstLayers(a.layers);
  }
  if (s.ok()) s = WriteRandomCheckpoint(mc, a.seed, a.std, a.out, dtype);
  if (!s.ok()) return Fail(s);
  std::printf("wrote %s (config.json, model.safetensors)\n", a.out.c_str());
  return 0;
}

int RunModels() {
  std::printf("%-16s %-12s %6s %7s %5s %5s %5s %8s %16s\n", "preset", "model_type", "layers", "d_model", "H_q", "H_kv",
              "d_h", "vocab", "KV B/token@16b");
  for (const std::string& n : PresetNames()) {
    ModelConfig c;
    PresetConfig(n, &c);
    std::printf("%-16s %-12s %6lld %7lld %5lld %5lld %5lld %8lld %16s\n", n.c_str(), c.spec.model_type.c_str(),
                static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
                static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
                static_cast<long long>(c.head_dim), static_cast<long long>(c.vocab_size),
                WithCommas(c.KVBytesPerToken(2)).c_str());
  }
  std::string families;
  for (const std::string& f : FamilyNames()) families += (families.empty() ? "" : ", ") + f;
  std::printf("Families (model_type): %s.\nAny Hugging Face directory of these (config.json + model.safetensors) "
              "also works as --model.\n", families.c_str());
  return 0;
}

}  // namespace

Command AddLogitsCommand(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  CLI::App* lg =
      app.add_subcommand("logits", "Write next-token logits of a token list (teacher forced) as raw float32");
  lg->add_option("--model", a->model, "Preset or model directory")->required();
  CLI::Option* tokens_opt = lg->add_option("--tokens", a->tokens, "Token ids: 5,17,42");
  lg->add_option("--tokens-file", a->tokens_file,
                 "Token ids from a token-id file (FILE.ids: ids separated by commas or whitespace)")
      ->excludes(tokens_opt);
  lg->add_option("--out", a->out, "Output file: [num_tokens, vocab] float32, little-endian")->required();
  lg->add_option("--mode", a->mode, "prefill (one chunk), decode (one token per step), dense, nocache")
      ->capture_default_str();
  lg->add_option("--kv-dtype", a->dtype, "Cache storage dtype")->capture_default_str();
  lg->add_option("--block-size", a->block, "Tokens per KV block")->capture_default_str();
  lg->add_option("--prefill-chunk", a->chunk, "prefill mode: feed the tokens this many at a time (chunked prefill)");
  lg->add_option("--policy", a->policy_args,
                 "prefill and decode modes: policy NAME or NAME:key=value,...; repeat to stack (default full)");
  lg->add_option("--max-step-tokens", a->max_step_tokens,
                 "With selection, an encoding or offload: the most tokens a step adds (0 = chunks as given)")
      ->capture_default_str();
  lg->add_option("--threads", a->threads, "Threads (0 = all cores)")->capture_default_str();
  lg->add_flag("--allow-long-context", a->allow_long_context,
               "Run past the model's max_position_embeddings (otherwise an error)");
  return {lg, [a] { return RunLogits(*a); }};
}

Command AddMemoryCommand(CLI::App& app) {
  auto a = std::make_shared<MemoryArgs>();
  CLI::App* mem = app.add_subcommand("memory", "KV-cache size calculator: 2 x layers x KV heads x head_dim x tokens x bytes");
  mem->add_option("--model", a->model, "Preset, config.json or model directory")->capture_default_str();
  mem->add_option("--tokens", a->tokens, "Sequence length S")->capture_default_str();
  mem->add_option("--bits", a->bits, "Bits per stored number (32, 16, 8, 4, 2)")->capture_default_str();
  CLI::Option* pool = mem->add_option("--pool-gb", a->pool_gb,
                                      "Also report the share of a KV pool of this many GB (10^9 bytes; > 0)");
  mem->add_option("--policy", a->policies, "Policy stack, as for generate");
  return {mem, [a, pool] {
            a->pool_gb_given = pool->count() > 0;
            return RunMemory(*a);
          }};
}

Command AddInitCommand(CLI::App& app) {
  auto a = std::make_shared<InitArgs>();
  CLI::App* init =
      app.add_subcommand("init", "Write a random-weight checkpoint (HF layout) of a preset or config.json");
  init->add_option("--model", a->model, "Preset, config.json or model directory (its shape)")->capture_default_str();
  init->add_option("--out", a->out, "Output directory")->required();
  init->add_option("--seed", a->seed, "Weight seed")->capture_default_str();
  init->add_option("--std", a->std, "Standard deviation of the weights")->capture_default_str();
  init->add_option("--layers", a->layers, "Keep only the first this many layers of the shape (default: all)");
  init->add_option("--dtype", a->dtype,
                   "Stored dtype of the weights: f32, bf16 or f16 (the same draws, rounded; written a tensor at a "
                   "time, so an 8B bf16 checkpoint needs no 32 GB)")
      ->capture_default_str();
  return {init, [a] { return RunInit(*a); }};
}

Command AddTokenizeCommand(CLI::App& app) {
  auto a = std::make_shared<TokenizeOptions>();
  CLI::App* tk = app.add_subcommand("tokenize", "Text to token ids (comma-separated, one line), or ids back to text, "
                                                "with a model directory's tokenizer");
  tk->add_option("--model", a->model,
                 "Model directory (tokenizer.json or tokenizer.model; config.json optional), tokenizer file or preset")
      ->required();
  CLI::Option* text = tk->add_option("--text", a->text, "Text to encode");
  CLI::Option* file = tk->add_option("--file", a->file, "Encode this file's text (read as bytes)");
  CLI::Option* decode = tk->add_option("--decode", a->decode, "Token ids to decode: 1,2,3");
  text->excludes(file)->excludes(decode);
  file->excludes(decode);
  tk->add_flag("--no-special", a->no_special, "Add no BOS/EOS or template tokens");
  return {tk, [a, text] {
            a->has_text = text->count() > 0;
            std::string out;
            const Status s = RunTokenize(*a, &out);
            if (!s.ok()) return Fail(s);
            std::printf("%s\n", out.c_str());
            return 0;
          }};
}

Command AddModelsCommand(CLI::App& app) {
  return {app.add_subcommand("models", "List model presets"), [] { return RunModels(); }};
}

}  // namespace kvlab
