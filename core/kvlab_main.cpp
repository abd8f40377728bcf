// kvlab: the command-line front end. Subcommands parse arguments (CLI11),
// call the library, print results; every library error is printed once as
// "kvlab: error: ..." with exit status 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>

#include "core/engine.h"
#include "core/memory_calc.h"
#include "core/model_families.h"
#include "core/model_config.h"
#include "core/run_config.h"
#include "core/serve_bench.h"
#include "core/tokenizer.h"
#include "core/train_config.h"
#include "core/trainer.h"
#include "evals/sweep.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

// "name" or "name:key=value,key=value".
Status ParsePolicyArg(const std::string& arg, PolicySpec* out) {
  out->source = "--policy " + arg;
  const size_t colon = arg.find(':');
  out->name = arg.substr(0, colon);
  if (colon == std::string::npos) return Status::OK();
  std::stringstream ss(arg.substr(colon + 1));
  std::string kv;
  while (std::getline(ss, kv, ',')) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument("--policy " + arg + ": expected NAME:key=value[,key=value], got '" + kv + "'");
    }
    out->params[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return Status::OK();
}

Status ParsePolicyArgs(const std::vector<std::string>& args, std::vector<PolicySpec>* out) {
  out->clear();
  for (const std::string& a : args) {
    PolicySpec spec;
    KVLAB_RETURN_IF_ERROR(ParsePolicyArg(a, &spec));
    out->push_back(std::move(spec));
  }
  if (out->empty()) out->push_back(PolicySpec{"full", {}, "--policy"});
  return Status::OK();
}

// A preset name, a config.json path, or a model directory.
Status ResolveModelConfig(const std::string& model, ModelConfig* out) {
  if (PresetConfig(model, out).ok()) return Status::OK();
  const bool is_json = model.size() >= 5 && model.compare(model.size() - 5, 5, ".json") == 0;
  const std::string path = is_json ? model : model + "/config.json";
  std::ifstream probe(path);
  if (!probe) {
    std::string names;
    for (const auto& n : PresetNames()) names += (names.empty() ? "" : ", ") + n;
    return Status::NotFound("model '" + model + "' is neither a preset (" + names + ") nor a readable " + path);
  }
  return LoadModelConfig(path, out);
}

void PrintEngineMemory(const Engine& engine, const MemoryStats& m, int64_t tokens_per_seq_total) {
  const CacheShape& s = engine.cache().shape();
  std::printf("KV cache (%s, block_size %d, %s storage):\n", engine.policies().Describe().c_str(), s.block_size,
              DTypeName(s.dtype));
  std::printf("  in use    %s B in %lld blocks of %s B\n", WithCommas(m.bytes_in_use).c_str(),
              static_cast<long long>(m.blocks_in_use), WithCommas(m.block_bytes).c_str());
  std::printf("  peak      %s B\n", WithCommas(m.peak_bytes_in_use).c_str());
  std::printf("  reserved  %s B (pool capacity)\n", WithCommas(m.bytes_reserved).c_str());
  if (m.host_bytes + m.disk_bytes > 0) {
    std::printf("  tiers     device %s B (peak %s B), host %s B, disk %s B\n", WithCommas(m.device_bytes).c_str(),
                WithCommas(m.peak_device_bytes).c_str(), WithCommas(m.host_bytes).c_str(),
                WithCommas(m.disk_bytes).c_str());
  }
  const int64_t formula = 2LL * s.num_layers * engine.model_config().num_key_value_heads * s.head_dim *
                          DTypeBytes(s.dtype) * tokens_per_seq_total;
  std::printf("  uncompressed 2 x L x H_kv x d_h x S x b = %s B for the S = %lld tokens seen; held/uncompressed = %.3f\n",
              WithCommas(formula).c_str(), static_cast<long long>(tokens_per_seq_total),
              formula > 0 ? static_cast<double>(m.bytes_in_use) / static_cast<double>(formula) : 0.0);
}

int Fail(const Status& s) {
  std::fprintf(stderr, "kvlab: error: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int Main(int argc, char** argv) {
  CLI::App app{"kvlab: a testbed for KV-cache compression policies on a paged decode engine"};
  app.require_subcommand(1);

  // --- generate ---
  CLI::App* gen = app.add_subcommand("generate", "Generate from a prompt and report KV memory");
  std::string gen_config, prompt, prompt_file, token_text;
  std::vector<std::string> policy_args;
  EngineOptions eo;
  GenerateOptions go;
  std::string kv_dtype = "bf16";
  int batch = 1;
  gen->add_option("--config", gen_config,
                  "TOML run config (then only --prompt, --prompt-file and --tokens are taken from the command line)");
  gen->add_option("--model", eo.model, "Preset name (random weights) or Hugging Face model directory")->capture_default_str();
  CLI::Option* prompt_opt = gen->add_option("--prompt", prompt, "Prompt text (the model's tokenizer, BOS first)");
  CLI::Option* prompt_file_opt =
      gen->add_option("--prompt-file", prompt_file, "Prompt from a file: text, or token ids when it ends in .ids");
  CLI::Option* tokens_opt = gen->add_option("--tokens", token_text, "Prompt as token ids: 5,17,42");
  prompt_opt->excludes(prompt_file_opt)->excludes(tokens_opt);
  prompt_file_opt->excludes(tokens_opt);
  gen->add_option("--policy", policy_args, "Policy NAME or NAME:key=value,...; repeat to stack (default full)");
  gen->add_option("--max-new-tokens", go.max_new_tokens, "Tokens to generate")->capture_default_str();
  gen->add_option("--kv-dtype", kv_dtype, "Cache storage dtype: f32, f16, bf16")->capture_default_str();
  gen->add_option("--block-size", eo.block_size, "Tokens per KV block")->capture_default_str();
  gen->add_option("--temperature", go.sampling.temperature, "0 = greedy")->capture_default_str();
  gen->add_option("--top-p", go.sampling.top_p, "Nucleus sampling mass")->capture_default_str();
  gen->add_option("--seed", go.sampling.seed, "Sampling seed")->capture_default_str();
  gen->add_option("--batch", batch, "Decode this many copies of the prompt together")->capture_default_str();
  gen->add_option("--layers", eo.num_layers, "Keep only this many layers of a preset");
  gen->add_option("--prefill-chunk", eo.prefill_chunk, "Prompt tokens per prefill step")->capture_default_str();
  gen->add_option("--weight-seed", eo.weight_seed, "Seed of a preset's random weights")->capture_default_str();
  gen->add_option("--attention", eo.attention, "cpu or reference")->capture_default_str();
  gen->add_option("--device", eo.device, "cpu, or cuda (model and KV pools on the GPU; docs/kernels.md)")
      ->capture_default_str();
  gen->add_option("--threads", eo.num_threads, "Threads (0 = all cores)")->capture_default_str();

  // --- logits ---
  CLI::App* lg = app.add_subcommand("logits", "Write next-token logits of a token list (teacher forced) as raw float32");
  std::string lg_model, lg_tokens, lg_tokens_file, lg_out, lg_mode = "prefill", lg_dtype = "f32";
  int lg_block = 16;
  int64_t lg_chunk = 0;
  lg->add_option("--model", lg_model, "Preset or model directory")->required();
  CLI::Option* lg_tokens_opt = lg->add_option("--tokens", lg_tokens, "Token ids: 5,17,42");
  lg->add_option("--tokens-file", lg_tokens_file,
                 "Token ids from a token-id file (FILE.ids: ids separated by commas or whitespace)")
      ->excludes(lg_tokens_opt);
  lg->add_option("--out", lg_out, "Output file: [num_tokens, vocab] float32, little-endian")->required();
  lg->add_option("--mode", lg_mode, "prefill (one chunk), decode (one token per step), dense, nocache")->capture_default_str();
  lg->add_option("--kv-dtype", lg_dtype, "Cache storage dtype")->capture_default_str();
  lg->add_option("--block-size", lg_block, "Tokens per KV block")->capture_default_str();
  lg->add_option("--prefill-chunk", lg_chunk, "prefill mode: feed the tokens this many at a time (chunked prefill)");

  // --- memory ---
  CLI::App* mem = app.add_subcommand("memory", "KV-cache size calculator (the seed article's formula)");
  std::string mem_model = "llama-3.1-8b";
  int64_t mem_tokens = 8192;
  int mem_bits = 16;
  double pool_gb = 0;
  std::vector<std::string> mem_policies;
  mem->add_option("--model", mem_model, "Preset, config.json or model directory")->capture_default_str();
  mem->add_option("--tokens", mem_tokens, "Sequence length S")->capture_default_str();
  mem->add_option("--bits", mem_bits, "Bits per stored number (32, 16, 8, 4, 2)")->capture_default_str();
  mem->add_option("--pool-gb", pool_gb, "Also report the share of a KV pool of this many GB (10^9 bytes)");
  mem->add_option("--policy", mem_policies, "Policy stack, as for generate");

  // --- init ---
  CLI::App* init = app.add_subcommand("init", "Write a random-weight checkpoint (HF layout) of a preset or config.json");
  std::string init_model = "small", init_out;
  uint64_t init_seed = 0;
  double init_std = 0.02;
  init->add_option("--model", init_model, "Preset, config.json or model directory (its shape)")->capture_default_str();
  init->add_option("--out", init_out, "Output directory")->required();
  init->add_option("--seed", init_seed, "Weight seed")->capture_default_str();
  init->add_option("--std", init_std, "Standard deviation of the weights")->capture_default_str();

  // --- serve-bench ---
  CLI::App* sb = app.add_subcommand(
      "serve-bench", "Serve a seeded chat workload through the scheduler (engine or model-free pools) and report "
                     "throughput, TTFT, TPOT, preemptions and KV occupancy");
  std::string sb_config;
  ServeBenchOverrides sb_over;
  sb->add_option("config", sb_config, "serve-bench TOML config (docs/scenarios.md)")->required();
  sb->add_option("--csv", sb_over.csv_path, "Write pool occupancy per step to this CSV");
  sb->add_option("--json", sb_over.json_path, "Append the summary as one JSON line to this file");
  sb->add_option("--set", sb_over.sets, "Override a config key: KEY=VALUE (VALUE in TOML), repeatable")
      ->allow_extra_args(false);
  sb->add_option("--max-steps", sb_over.max_steps, "Stop after this many steps (replaces the config's max_steps)");

  // --- train / convert ---
  CLI::App* tr = app.add_subcommand("train", "Train a small Llama model from a TOML config (resumes from its last checkpoint)");
  std::string tr_config;
  TrainOptions tr_opts;
  bool tr_restart = false;
  tr->add_option("config", tr_config, "Training TOML config (datasets/models/*/train.toml)")->required();
  tr->add_option("--max-steps", tr_opts.max_steps, "Stop (with a checkpoint) after this many steps of this run");
  tr->add_flag("--restart", tr_restart, "Ignore an existing checkpoint in the output directory and start from step 0");
  tr->add_flag("--quiet", tr_opts.quiet, "No progress lines");
  std::string tr_init, tr_out;
  tr->add_option("--init", tr_init, "Start from this checkpoint (replaces the config's init; uptraining)");
  tr->add_option("--out", tr_out, "Output directory (replaces the config's out)");
  CLI::App* cv = app.add_subcommand("convert", "Pool the KV heads of a checkpoint (MHA -> GQA/MQA, the GQA paper's conversion)");
  std::string cv_in, cv_out, cv_merge = "mean";
  int cv_group = 0;
  cv->add_option("input", cv_in, "Checkpoint directory (config.json + model.safetensors)")->required();
  cv->add_option("output", cv_out, "Output directory")->required();
  cv->add_option("--pool-kv-heads", cv_group, "Merge each group of G adjacent KV heads into one")->required();
  cv->add_option("--merge", cv_merge, "mean (the GQA paper) or first")->capture_default_str();

  // --- run / merge ---
  CLI::App* run = app.add_subcommand("run", "Run a policy sweep (evals/configs/*.toml): memory, latency and accuracy "
                                            "against the full-cache baseline");
  std::string run_config, run_shard;
  std::vector<std::string> run_sets;
  RunSweepOptions run_opts;
  bool run_quiet = false;
  run->add_option("config", run_config, "Sweep TOML config")->required();
  run->add_option("--set", run_sets, "Override a config key: KEY=VALUE (VALUE in TOML), repeatable")
      ->allow_extra_args(false);
  run->add_option("--out", run_opts.out_dir, "Output directory (default results/NAME)");
  run->add_option("--shard", run_shard, "I/N: run every N-th point starting at I (0-based)");
  run->add_flag("--dry-run", run_opts.dry_run, "List the points and an estimate of the time; run nothing");
  run->add_flag("--retry-failed", run_opts.retry_failed, "Rerun points whose record holds an error");
  run->add_flag("--no-progress", run_quiet, "No progress bar on stderr");
  CLI::App* mg = app.add_subcommand("merge", "Join the results of sweep shards into one directory");
  std::vector<std::string> mg_dirs;
  std::string mg_out;
  mg->add_option("dirs", mg_dirs, "Shard output directories")->required();
  mg->add_option("--out", mg_out, "Merged output directory")->required();

  CLI::App* models = app.add_subcommand("models", "List model presets");
  CLI::App* pols = app.add_subcommand("policies", "List registered policies and their parameters");

  CLI11_PARSE(app, argc, argv);

  if (*gen) {
    RunConfig rc;
    if (!gen_config.empty()) {
      Status s = LoadRunConfig(gen_config, &rc);
      if (!s.ok()) return Fail(s);
      eo = rc.engine;
      go = rc.generate;
      // A prompt on the command line replaces the config's.
      if (!prompt.empty() || !prompt_file.empty() || !token_text.empty()) {
        rc.prompt = prompt;
        rc.prompt_file = prompt_file;
        rc.tokens.clear();
      }
    } else {
      Status s = ParsePolicyArgs(policy_args, &rc.policies);
      if (!s.ok()) return Fail(s);
      if (!ParseDType(kv_dtype, &eo.kv_dtype)) return Fail(Status::InvalidArgument("--kv-dtype: expected f32, f16 or bf16, got '" + kv_dtype + "'"));
      rc.prompt = prompt;
      rc.prompt_file = prompt_file;
    }
    if (batch < 1) return Fail(Status::InvalidArgument("--batch must be >= 1"));
    ModelConfig mc;
    Status s = ResolveModelConfig(eo.model, &mc);
    if (!s.ok()) return Fail(s);
    // The model's tokenizer encodes text prompts and decodes the output; a
    // model without one (e.g. a preset with a large vocabulary) takes token ids.
    std::unique_ptr<Tokenizer> tokenizer;
    Status tok_status = LoadTokenizer(eo.model, mc, &tokenizer);
    if (tok_status.code() == Status::Code::kInvalidArgument) {
      tok_status = Status::InvalidArgument(tok_status.message() + "; here: --tokens 5,17,42 or --prompt-file FILE.ids");
    }
    std::vector<int32_t> ids = rc.tokens;
    if (ids.empty() && !token_text.empty()) {
      s = ParseTokenIds(token_text, mc.vocab_size, "--tokens", &ids);
    } else if (ids.empty() && !rc.prompt_file.empty()) {
      if (!IsTokenIdFile(rc.prompt_file) && !tok_status.ok()) return Fail(tok_status);
      s = ReadPromptFile(rc.prompt_file, tokenizer.get(), mc.vocab_size, &ids);
    } else if (ids.empty()) {
      if (!tok_status.ok()) return Fail(tok_status);
      s = tokenizer->Encode(rc.prompt.empty() ? std::string("The KV cache") : rc.prompt, /*add_bos=*/true, &ids);
    }
    if (!s.ok()) return Fail(s);
    eo.max_seqs = batch;
    eo.max_context = static_cast<int64_t>(ids.size()) + go.max_new_tokens;
    std::unique_ptr<Engine> engine;
    s = Engine::Create(eo, rc.policies, &engine);
    if (!s.ok()) return Fail(s);
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch), ids);
    std::vector<GenerateResult> results;
    GenerateStats stats;
    s = engine->Generate(prompts, go, &results, &stats);
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
                batch, stats.prefill_ms, d.size(), d.empty() ? 0.0 : d[d.size() / 2], batch);
    PrintEngineMemory(*engine, stats.memory_at_end, stats.memory_at_end.tokens_seen);
    return 0;
  }

  if (*lg) {
    EngineOptions o;
    o.model = lg_model;
    o.block_size = lg_block;
    if (!ParseDType(lg_dtype, &o.kv_dtype)) return Fail(Status::InvalidArgument("--kv-dtype: expected f32, f16 or bf16"));
    ModelConfig mc;
    Status s = ResolveModelConfig(lg_model, &mc);
    if (!s.ok()) return Fail(s);
    std::vector<int32_t> ids;
    if (!lg_tokens_file.empty()) s = ReadTokenIdFile(lg_tokens_file, mc.vocab_size, &ids);
    else if (!lg_tokens.empty()) s = ParseTokenIds(lg_tokens, mc.vocab_size, "--tokens", &ids);
    else s = Status::InvalidArgument("logits: give the tokens, --tokens 5,17,42 or --tokens-file FILE.ids");
    if (!s.ok()) return Fail(s);
    o.max_context = static_cast<int64_t>(ids.size());
    std::vector<float> out;
    if (lg_mode == "prefill" || lg_mode == "decode") {
      std::unique_ptr<Engine> engine;
      s = Engine::Create(o, {PolicySpec{"full", {}, "logits"}}, &engine);
      if (!s.ok()) return Fail(s);
      s = engine->AddSequence(0);
      std::vector<std::vector<float>> logits;
      if (lg_mode == "prefill") {
        const size_t step = lg_chunk > 0 ? static_cast<size_t>(lg_chunk) : std::max<size_t>(ids.size(), 1);
        for (size_t i = 0; i < ids.size() && s.ok(); i += step) {
          const std::vector<int32_t> chunk(ids.begin() + static_cast<std::ptrdiff_t>(i),
                                           ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), i + step)));
          s = engine->Forward({SeqChunk{0, chunk}}, true, &logits);
          if (s.ok()) out.insert(out.end(), logits[0].begin(), logits[0].end());
        }
      } else {
        for (size_t i = 0; i < ids.size() && s.ok(); ++i) {
          s = engine->Forward({SeqChunk{0, {ids[i]}}}, false, &logits);
          if (s.ok()) out.insert(out.end(), logits[0].begin(), logits[0].end());
        }
      }
      if (!s.ok()) return Fail(s);
    } else if (lg_mode == "dense" || lg_mode == "nocache") {
      Status ds = DenseLogits(o, ids, lg_mode == "nocache", &out);
      if (!ds.ok()) return Fail(ds);
    } else {
      return Fail(Status::InvalidArgument("--mode: expected prefill, decode, dense or nocache, got '" + lg_mode + "'"));
    }
    std::ofstream f(lg_out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
    if (!f) return Fail(Status::IOError(lg_out + ": cannot write"));
    std::printf("wrote %zu x %lld logits to %s\n", ids.size(), static_cast<long long>(mc.vocab_size), lg_out.c_str());
    return 0;
  }

  if (*mem) {
    ModelConfig mc;
    std::string unverified;
    Status s = ResolveKvShape(mem_model, &mc, &unverified);
    if (!s.ok()) return Fail(s);
    std::vector<PolicySpec> specs;
    s = ParsePolicyArgs(mem_policies, &specs);
    PolicyStack stack;
    if (s.ok()) s = PolicyStack::Create(specs, &stack);
    MemoryEstimate e;
    if (s.ok()) s = EstimateKVMemory(mc, mem_tokens, mem_bits, stack, &e);
    if (!s.ok()) return Fail(s);
    e.unverified_model_type = unverified;
    std::printf("model          %s\n", mem_model.c_str());
    std::printf("%s", FormatMemoryReport(e, static_cast<int64_t>(pool_gb * 1e9)).c_str());
    return 0;
  }

  if (*init) {
    ModelConfig mc;
    Status s = ResolveModelConfig(init_model, &mc);
    if (s.ok()) s = WriteRandomCheckpoint(mc, init_seed, init_std, init_out);
    if (!s.ok()) return Fail(s);
    std::printf("wrote %s (config.json, model.safetensors)\n", init_out.c_str());
    return 0;
  }

  if (*sb) {
    std::string report;
    Status s = RunServeBench(sb_config, sb_over, &report);
    if (!s.ok()) return Fail(s);
    std::printf("%s", report.c_str());
    return 0;
  }

  if (*run) {
    if (!run_shard.empty()) {
      int i = -1, n = -1;
      char extra = 0;
      if (std::sscanf(run_shard.c_str(), "%d/%d%c", &i, &n, &extra) != 2 || n < 1 || i < 0 || i >= n) {
        return Fail(Status::InvalidArgument("--shard: expected I/N with 0 <= I < N, got '" + run_shard + "'"));
      }
      run_opts.shard = i;
      run_opts.num_shards = n;
    }
    run_opts.progress = !run_quiet;
    SweepConfig sc;
    Status s = LoadSweepConfig(run_config, run_sets, &sc);
    std::string report;
    if (s.ok()) s = RunSweep(sc, run_opts, &report);
    std::printf("%s", report.c_str());
    if (!s.ok()) return Fail(s);
    return 0;
  }

  if (*mg) {
    std::string report;
    Status s = MergeResults(mg_dirs, mg_out, &report);
    if (!s.ok()) return Fail(s);
    std::printf("%s", report.c_str());
    return 0;
  }

  if (*tr) {
    TrainConfig tc;
    Status s = LoadTrainConfig(tr_config, &tc);
    if (!tr_init.empty()) tc.init = tr_init;
    if (!tr_out.empty()) tc.out = tr_out;
    tr_opts.resume = !tr_restart;
    TrainResult r;
    if (s.ok()) {
      KeepFreedMemoryInHeap();  // process-wide: this program is about to train
      s = Train(tc, tr_opts, &r);
    }
    if (!s.ok()) return Fail(s);
    std::printf("trained %s: step %lld of %lld", tc.out.c_str(), static_cast<long long>(r.steps_done),
                static_cast<long long>(tc.TotalSteps()));
    if (r.heldout_bpb >= 0) std::printf(", held-out %.3f bits per byte", r.heldout_bpb);
    std::printf("\n");
    return 0;
  }

  if (*cv) {
    if (cv_merge != "mean" && cv_merge != "first") {
      return Fail(Status::InvalidArgument("--merge: expected mean or first, got '" + cv_merge + "'"));
    }
    Status s = ConvertPoolKvHeads(cv_in, cv_out, cv_group, cv_merge == "mean");
    if (!s.ok()) return Fail(s);
    std::printf("wrote %s (KV heads pooled by %d, %s)\n", cv_out.c_str(), cv_group, cv_merge.c_str());
    return 0;
  }

  if (*models) {
    std::printf("%-16s %-12s %6s %7s %5s %5s %5s %8s %16s\n", "preset", "model_type", "layers", "d_model", "H_q",
                "H_kv", "d_h", "vocab", "KV B/token@16b");
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

  if (*pols) {
    for (const PolicyInfo& i : PolicyRegistry::Global().infos()) {
      std::printf("%s  [%s]\n  %s\n", i.name.c_str(), ConcernList(i.concerns).c_str(), i.summary.c_str());
      if (i.paper != "-") std::printf("  paper: %s\n", i.paper.c_str());
      for (const ParamSpec& p : i.params) {
        std::printf("    %-15s default %-11s %s\n", p.name.c_str(), p.default_value.empty() ? "\"\"" : p.default_value.c_str(),
                    p.help.c_str());
      }
    }
    return 0;
  }
  return 0;
}

}  // namespace kvlab

int main(int argc, char** argv) {
  try {
    return kvlab::Main(argc, argv);
  } catch (const std::exception& e) {
    // Library code returns Status; this only catches what a dependency threw.
    std::fprintf(stderr, "kvlab: error: %s\n", e.what());
    return 1;
  }
}
