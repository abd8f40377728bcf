// Subcommands that run experiments: sweeps (run, merge), serving (serve-bench),
// training and checkpoint conversion, and the policy list.
#include <cstdio>
#include <memory>

#include "core/serve/engine_executor.h"
#include "datasets/trainer/train_config.h"
#include "datasets/trainer/trainer.h"
#include "evals/cli/cli.h"
#include "evals/export_kvpress.h"
#include "evals/sweep.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

struct RunArgs {
  std::string config, shard, if_locked = "fail";
  std::vector<std::string> sets;
  RunSweepOptions opts;
  bool quiet = false;
};

int RunSweepCommand(RunArgs& a) {
  if (!a.shard.empty()) {
    int i = -1, n = -1;
    char extra = 0;
    if (std::sscanf(a.shard.c_str(), "%d/%d%c", &i, &n, &extra) != 2 || n < 1 || i < 0 || i >= n) {
      return Fail(Status::InvalidArgument("--shard: expected I/N with 0 <= I < N, got '" + a.shard + "'"));
    }
    a.opts.shard = i;
    a.opts.num_shards = n;
  }
  a.opts.progress = !a.quiet;
  a.opts.wait_if_locked = a.if_locked == "wait";
  SweepConfig sc;
  Status s = LoadSweepConfig(a.config, a.sets, &sc);
  std::string report;
  if (s.ok()) s = RunSweep(sc, a.opts, &report);
  std::printf("%s", report.c_str());
  if (!s.ok()) return Fail(s);
  return 0;
}

struct TrainArgs {
  std::string config, init, out;
  TrainOptions opts;
  bool restart = false;
};

int RunTrain(TrainArgs& a) {
  TrainConfig tc;
  Status s = LoadTrainConfig(a.config, &tc);
  if (!a.init.empty()) tc.init = a.init;
  if (!a.out.empty()) tc.out = a.out;
  a.opts.resume = !a.restart;
  TrainResult r;
  if (s.ok()) {
    KeepFreedMemoryInHeap();  // process-wide: this program is about to train
    s = Train(tc, a.opts, &r);
  }
  if (!s.ok()) return Fail(s);
  std::printf("trained %s: step %lld of %lld", tc.out.c_str(), static_cast<long long>(r.steps_done),
              static_cast<long long>(tc.TotalSteps()));
  if (r.heldout_bpb >= 0) std::printf(", held-out %.3f bits per byte", r.heldout_bpb);
  std::printf("\n");
  return 0;
}

// Prints a library call's report, or its error.
int PrintReport(const Status& s, const std::string& report) {
  if (!s.ok()) return Fail(s);
  std::printf("%s", report.c_str());
  return 0;
}

int RunPolicies() {
  for (const PolicyInfo& i : PolicyRegistry::Global().infos()) {
    std::printf("%s  [%s]\n  %s\n", i.name.c_str(), ConcernList(i.concerns).c_str(), i.summary.c_str());
    if (i.paper != "-") std::printf("  paper: %s\n", i.paper.c_str());
    for (const ParamSpec& p : i.params) {
      std::string valid = p.ValidValues();
      if (valid.empty()) {
        valid = p.type == ParamSpec::Type::kInt     ? "any integer"
                : p.type == ParamSpec::Type::kFloat ? "any number"
                : p.type == ParamSpec::Type::kBool  ? "true or false"
                                                    : "any string";
      }
      std::printf("    %-15s default %-11s %-23s %s\n", p.name.c_str(),
                  p.default_value.empty() ? "\"\"" : p.default_value.c_str(), valid.c_str(), p.help.c_str());
    }
  }
  return 0;
}

}  // namespace

Command AddRunCommand(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand("run", "Run a policy sweep (evals/configs/*.toml): memory, latency and accuracy "
                                            "against the full-cache baseline");
  run->add_option("config", a->config, "Sweep TOML config")->required();
  run->add_option("--set", a->sets, "Override a config key: KEY=VALUE (VALUE in TOML), repeatable")
      ->allow_extra_args(false);
  run->add_option("--out", a->opts.out_dir, "Output directory (default results/NAME)");
  run->add_option("--shard", a->shard, "I/N: run every N-th point starting at I (0-based)");
  run->add_flag("--dry-run", a->opts.dry_run, "List the points and an estimate of the time; run nothing");
  run->add_flag("--retry-failed", a->opts.retry_failed, "Rerun points whose record holds an error");
  run->add_flag("--no-progress", a->quiet, "No progress bar on stderr");
  run->add_option("--if-locked", a->if_locked,
                  "Another kvlab run holds the output directory: fail (default, naming its pid) or wait for it")
      ->check(CLI::IsMember({"fail", "wait"}));
  return {run, [a] { return RunSweepCommand(*a); }};
}

Command AddMergeCommand(CLI::App& app) {
  struct MergeArgs {
    std::vector<std::string> dirs;
    std::string out;
  };
  auto a = std::make_shared<MergeArgs>();
  CLI::App* mg = app.add_subcommand("merge", "Join the results of sweep shards into one directory");
  mg->add_option("dirs", a->dirs, "Shard output directories")->required();
  mg->add_option("--out", a->out, "Merged output directory")->required();
  return {mg, [a] {
            std::string report;
            const Status s = MergeResults(a->dirs, a->out, &report);
            return PrintReport(s, report);
          }};
}

Command AddExportCommand(CLI::App& app) {
  struct ExportArgs {
    std::string dir;
    ExportOptions opts;
  };
  auto a = std::make_shared<ExportArgs>();
  CLI::App* ex = app.add_subcommand("export", "Write a sweep's results in another tool's layout (kvpress: "
                                              "predictions.csv, metrics.json, config.yaml per run)");
  ex->add_option("dir", a->dir, "Results directory of `kvlab run` (holding results.jsonl)")->required();
  ex->add_option("--format", a->opts.format, "Layout to write: kvpress (NVIDIA/kvpress's evaluation/)")
      ->capture_default_str();
  ex->add_option("--out", a->opts.out_dir, "Output directory (default DIR/kvpress)");
  return {ex, [a] {
            std::string report;
            const Status s = ExportResults(a->dir, a->opts, &report);
            return PrintReport(s, report);
          }};
}

Command AddServeBenchCommand(CLI::App& app) {
  struct ServeBenchArgs {
    std::string config;
    ServeBenchOverrides over;
  };
  auto a = std::make_shared<ServeBenchArgs>();
  CLI::App* sb = app.add_subcommand(
      "serve-bench", "Serve a seeded chat workload through the scheduler (engine or model-free pools) and report "
                     "throughput, TTFT, TPOT, preemptions and KV occupancy");
  sb->add_option("config", a->config, "serve-bench TOML config (docs/scenarios.md)")->required();
  sb->add_option("--csv", a->over.csv_path, "Write pool occupancy per step to this CSV");
  sb->add_option("--json", a->over.json_path, "Append the summary as one JSON line to this file");
  sb->add_option("--set", a->over.sets, "Override a config key: KEY=VALUE (VALUE in TOML), repeatable")
      ->allow_extra_args(false);
  sb->add_option("--max-steps", a->over.max_steps, "Stop after this many steps (replaces the config's max_steps)");
  CLI::Option* threads = sb->add_option("--threads", a->over.threads,
                                        "Engine threads, 0 = all cores (replaces the config's threads)");
  return {sb, [a, threads] {
            if (threads->count() > 0 && a->over.threads < 0) {
              return Fail(Status::InvalidArgument("--threads must be >= 0 (0: all cores), got " +
                                                  std::to_string(a->over.threads)));
            }
            std::string report;
            const Status s = RunServeBench(a->config, a->over, &report);
            return PrintReport(s, report);
          }};
}

Command AddTrainCommand(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* tr =
      app.add_subcommand("train", "Train a small Llama model from a TOML config (resumes from its last checkpoint)");
  tr->add_option("config", a->config, "Training TOML config (datasets/models/*/train.toml)")->required();
  tr->add_option("--max-steps", a->opts.max_steps, "Stop (with a checkpoint) after this many steps of this run");
  tr->add_flag("--restart", a->restart, "Ignore an existing checkpoint in the output directory and start from step 0");
  tr->add_flag("--quiet", a->opts.quiet, "No progress lines");
  tr->add_option("--init", a->init, "Start from this checkpoint (replaces the config's init; uptraining)");
  tr->add_option("--out", a->out, "Output directory (replaces the config's out)");
  return {tr, [a] { return RunTrain(*a); }};
}

Command AddConvertCommand(CLI::App& app) {
  struct ConvertArgs {
    std::string in, out, merge = "mean";
    int group = 0;
  };
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* cv =
      app.add_subcommand("convert", "Pool the KV heads of a checkpoint (MHA -> GQA/MQA, the GQA paper's conversion)");
  cv->add_option("input", a->in, "Checkpoint directory (config.json + model.safetensors)")->required();
  cv->add_option("output", a->out, "Output directory")->required();
  cv->add_option("--pool-kv-heads", a->group, "Merge each group of G adjacent KV heads into one")->required();
  cv->add_option("--merge", a->merge, "mean (the GQA paper) or first")->capture_default_str();
  return {cv, [a] {
            if (a->merge != "mean" && a->merge != "first") {
              return Fail(Status::InvalidArgument("--merge: expected mean or first, got '" + a->merge + "'"));
            }
            const Status s = ConvertPoolKvHeads(a->in, a->out, a->group, a->merge == "mean");
            if (!s.ok()) return Fail(s);
            std::printf("wrote %s (KV heads pooled by %d, %s)\n", a->out.c_str(), a->group, a->merge.c_str());
            return 0;
          }};
}

Command AddPoliciesCommand(CLI::App& app) {
  return {app.add_subcommand("policies", "List registered policies and their parameters"), [] { return RunPolicies(); }};
}

}  // namespace kvlab
