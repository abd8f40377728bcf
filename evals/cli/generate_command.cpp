// `kvlab generate`: a prompt through the engine with a policy stack, the
// generated tokens and text, step times and the KV memory report.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/engine/engine.h"
#include "core/engine/run_config.h"
#include "core/model/memory_calc.h"
#include "core/tokenizer/tokenizer.h"
#include "evals/cli/cli.h"

namespace kvlab {
namespace {

struct GenerateArgs {
  std::string config, prompt, prompt_file, token_text;
  std::vector<std::string> policy_args;
  EngineOptions eo;
  GenerateOptions go;
  std::string kv_dtype = "bf16";
  int batch = 1;
  bool allow_long_context = false;
  std::string matmul = "f32";
};

// Bytes of a model directory's .safetensors files (0 for a preset).
int64_t CheckpointFileBytes(const std::string& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model, ec)) return 0;
  int64_t total = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(model, ec)) {
    if (e.path().extension() == ".safetensors") total += static_cast<int64_t>(e.file_size(ec));
  }
  return total;
}

// The weights line: their dtype and arithmetic, and the process's peak
// resident memory beside the checkpoint's size (what loading costs).
void PrintWeights(const Engine& engine, const std::string& model) {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const int64_t peak = static_cast<int64_t>(ru.ru_maxrss) * 1024;
  const DType w = engine.weight_dtype();
  const int64_t rows16 = w == DType::kF32 ? 0 : engine.options().matmul16;
  const std::string arithmetic =
      rows16 == 0   ? std::string("f32 arithmetic")
      : rows16 == 1 ? std::string(DTypeName(w)) + " arithmetic"
                    : std::string(DTypeName(w)) + " arithmetic in products of >= " + std::to_string(rows16) +
                          " rows (prefill), f32 in the others (decode)";
  std::printf("weights: %s, %s; peak resident %s B", DTypeName(w), arithmetic.c_str(),
              WithCommas(peak).c_str());
  const int64_t file = CheckpointFileBytes(model);
  if (file > 0) {
    std::printf(" = %.3fx the checkpoint's %s B of .safetensors", static_cast<double>(peak) / static_cast<double>(file),
                WithCommas(file).c_str());
  }
  std::printf("\n");
}

// The run config: from --config (a prompt on the command line replaces the
// config's), or from the command line's options.
Status MakeRunConfig(GenerateArgs& a, RunConfig* rc) {
  if (!a.config.empty()) {
    KVLAB_RETURN_IF_ERROR(LoadRunConfig(a.config, rc));
    a.eo = rc->engine;
    a.go = rc->generate;
    if (!a.prompt.empty() || !a.prompt_file.empty() || !a.token_text.empty()) {
      rc->prompt = a.prompt;
      rc->prompt_file = a.prompt_file;
      rc->tokens.clear();
    }
    return Status::OK();
  }
  KVLAB_RETURN_IF_ERROR(ParsePolicyArgs(a.policy_args, &rc->policies));
  if (!ParseDType(a.kv_dtype, &a.eo.kv_dtype)) {
    return Status::InvalidArgument("--kv-dtype: expected f32, f16 or bf16, got '" + a.kv_dtype + "'");
  }
  rc->prompt = a.prompt;
  rc->prompt_file = a.prompt_file;
  return Status::OK();
}

// The prompt's token ids. The model's tokenizer encodes text prompts and
// decodes the output; a model without one (e.g. a preset with a large
// vocabulary) takes token ids, and *tokenizer stays null.
Status ReadPrompt(const GenerateArgs& a, const RunConfig& rc, const ModelConfig& mc,
                  std::unique_ptr<Tokenizer>* tokenizer, std::vector<int32_t>* ids) {
  Status tok_status = LoadTokenizer(a.eo.model, mc, tokenizer);
  if (tok_status.code() == Status::Code::kInvalidArgument) {
    tok_status = Status::InvalidArgument(tok_status.message() + "; here: --tokens 5,17,42 or --prompt-file FILE.ids");
  }
  *ids = rc.tokens;
  if (!ids->empty()) return Status::OK();
  if (!a.token_text.empty()) return ParseTokenIds(a.token_text, mc.vocab_size, "--tokens", ids);
  if (!rc.prompt_file.empty()) {
    if (!IsTokenIdFile(rc.prompt_file) && !tok_status.ok()) return tok_status;
    return ReadPromptFile(rc.prompt_file, tokenizer->get(), mc.vocab_size, ids);
  }
  if (!tok_status.ok()) return tok_status;
  return (*tokenizer)->Encode(rc.prompt.empty() ? std::string("The KV cache") : rc.prompt, /*add_bos=*/true, ids);
}

int RunGenerate(GenerateArgs& a) {
  RunConfig rc;
  Status s = MakeRunConfig(a, &rc);
  if (!s.ok()) return Fail(s);
  if (a.batch < 1) return Fail(Status::InvalidArgument("--batch must be >= 1"));
  if (a.matmul != "f32" && a.matmul != "weights" && a.matmul != "prefill") {
    return Fail(Status::InvalidArgument("--matmul: expected f32, weights or prefill, got '" + a.matmul + "'"));
  }
  a.eo.matmul16 = a.matmul == "weights" ? 1 : a.matmul == "prefill" ? kMatmul16PrefillRows : 0;
  ModelConfig mc;
  s = ResolveModelConfig(a.eo.model, &mc);
  if (!s.ok()) return Fail(s);
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> ids;
  s = ReadPrompt(a, rc, mc, &tokenizer, &ids);
  if (!s.ok()) return Fail(s);
  if (a.go.max_new_tokens < 0) return Fail(Status::InvalidArgument("--max-new-tokens must be >= 0"));
  if (a.allow_long_context) a.eo.allow_long_context = true;
  s = CheckContextLength(mc, static_cast<int64_t>(ids.size()), a.go.max_new_tokens, a.eo.allow_long_context,
                         "the prompt's " + std::to_string(ids.size()) + " tokens plus --max-new-tokens " +
                             std::to_string(a.go.max_new_tokens));
  if (!s.ok()) return Fail(s);
  a.eo.max_seqs = a.batch;
  a.eo.max_context = static_cast<int64_t>(ids.size()) + a.go.max_new_tokens;
  std::unique_ptr<Engine> engine;
  s = Engine::Create(a.eo, rc.policies, &engine);
  if (!s.ok()) return Fail(s);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(a.batch), ids);
  std::vector<GenerateResult> results;
  GenerateStats stats;
  s = engine->Generate(prompts, a.go, &results, &stats);
  if (!s.ok()) return Fail(s);
  std::printf("tokenizer: %s\n", tokenizer ? tokenizer->Name().c_str() : "none (token ids only)");
  for (size_t i = 0; i < results.size(); ++i) {
    std::string ids_text, text;
    for (int32_t t : results[i].tokens) ids_text += (ids_text.empty() ? "" : ",") + std::to_string(t);
    std::printf("[%zu] tokens: %s\n", i, ids_text.c_str());
    if (tokenizer) {
      s = tokenizer->Decode(results[i].tokens, &text);
      if (!s.ok()) return Fail(s);
      std::printf("[%zu] text: %s\n", i, text.c_str());
    }
  }
  std::vector<double> d = stats.decode_step_ms;
  std::sort(d.begin(), d.end());
  std::printf("prefill: %zu tokens x %d in %.1f ms; decode: %zu steps, median %.2f ms/step (batch %d)\n", ids.size(),
              a.batch, stats.prefill_ms, d.size(), d.empty() ? 0.0 : d[d.size() / 2], a.batch);
  PrintEngineMemory(*engine, stats.memory_at_end, stats.memory_at_end.tokens_seen);
  if (stats.reads.decode_steps > 0 && stats.reads.kv_dense_bytes > 0) {  // a read policy's saving is here, not in memory
    const double steps = static_cast<double>(stats.reads.decode_steps);
    std::printf("KV read per decode step: %.0f B of %.0f B a dense read takes (%.3f); block key bounds read: %.0f B\n",
                static_cast<double>(stats.reads.kv_read_bytes) / steps, static_cast<double>(stats.reads.kv_dense_bytes) / steps,
                static_cast<double>(stats.reads.kv_read_bytes) / static_cast<double>(stats.reads.kv_dense_bytes),
                static_cast<double>(stats.reads.bound_read_bytes) / steps);
  }
  PrintWeights(*engine, a.eo.model);
  return 0;
}

}  // namespace

Command AddGenerateCommand(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* gen = app.add_subcommand("generate", "Generate from a prompt and report KV memory");
  gen->add_option("--config", a->config,
                  "TOML run config (then only --prompt, --prompt-file and --tokens are taken from the command line)");
  gen->add_option("--model", a->eo.model, "Preset name (random weights) or Hugging Face model directory")
      ->capture_default_str();
  CLI::Option* prompt_opt = gen->add_option("--prompt", a->prompt, "Prompt text (the model's tokenizer, BOS first)");
  CLI::Option* prompt_file_opt =
      gen->add_option("--prompt-file", a->prompt_file, "Prompt from a file: text, or token ids when it ends in .ids");
  CLI::Option* tokens_opt = gen->add_option("--tokens", a->token_text, "Prompt as token ids: 5,17,42");
  prompt_opt->excludes(prompt_file_opt)->excludes(tokens_opt);
  prompt_file_opt->excludes(tokens_opt);
  gen->add_option("--policy", a->policy_args, "Policy NAME or NAME:key=value,...; repeat to stack (default full)");
  gen->add_option("--max-new-tokens", a->go.max_new_tokens, "Tokens to generate")->capture_default_str();
  gen->add_option("--kv-dtype", a->kv_dtype, "Cache storage dtype: f32, f16, bf16")->capture_default_str();
  gen->add_option("--block-size", a->eo.block_size, "Tokens per KV block")->capture_default_str();
  gen->add_option("--run-blocks", a->eo.run_blocks, "Decode-time blocks per run reserved ahead for each stream (0 or 1: off)")->capture_default_str();
  gen->add_option("--temperature", a->go.sampling.temperature, "0 = greedy")->capture_default_str();
  gen->add_option("--top-p", a->go.sampling.top_p, "Nucleus sampling mass")->capture_default_str();
  gen->add_option("--seed", a->go.sampling.seed, "Sampling seed")->capture_default_str();
  gen->add_option("--matmul", a->matmul,
                  "Arithmetic of 16-bit weights: f32 (their exact values), weights (in their own dtype; faster "
                  "on CUDA and CPUs with bf16 instructions) or prefill (weights in prefill chunks and batches "
                  "over 8, f32 in decode steps)")
      ->capture_default_str();
  gen->add_option("--batch", a->batch, "Decode this many copies of the prompt together")->capture_default_str();
  gen->add_option("--layers", a->eo.num_layers, "Keep only this many layers of a preset");
  gen->add_option("--prefill-chunk", a->eo.prefill_chunk, "Prompt tokens per prefill step")->capture_default_str();
  gen->add_option("--max-step-tokens", a->eo.max_step_tokens,
                  "With selection, an encoding or offload: the most tokens a step adds to a sequence, so the cache "
                  "never holds more than the policy keeps plus this (0 = chunks as given, pools for the whole context)")
      ->capture_default_str();
  gen->add_option("--weight-seed", a->eo.weight_seed, "Seed of a preset's random weights")->capture_default_str();
  gen->add_option("--attention", a->eo.attention, "cpu or reference")->capture_default_str();
  gen->add_option("--device", a->eo.device, "cpu, or cuda (model and KV pools on the GPU; docs/kernels.md)")
      ->capture_default_str();
  gen->add_option("--threads", a->eo.num_threads, "Threads (0 = all cores)")->capture_default_str();
  gen->add_flag("--allow-long-context", a->allow_long_context,
                "Run past the model's max_position_embeddings (otherwise an error)");
  return {gen, [a] { return RunGenerate(*a); }};
}

}  // namespace kvlab
