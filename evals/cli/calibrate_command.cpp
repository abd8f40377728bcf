// `kvlab calibrate-heads`: DuoAttention's per-(layer, KV head) scores of a
// model, written as the head-split file the `duo` policy reads
// (evals/calibrate_heads.h).
#include <cstdio>
#include <memory>

#include "evals/calibrate_heads.h"
#include "evals/cli/cli.h"

namespace kvlab {
namespace {

struct CalibrateArgs {
  CalibrateHeadsOptions o;
  std::string out;
};

void PrintProgress(const std::string& line) { std::fprintf(stderr, "calibrate-heads: %s\n", line.c_str()); }

int RunCalibrate(const CalibrateArgs& a) {
  if (a.o.threads < 0) return Fail(Status::InvalidArgument("--threads must be >= 0 (0: all cores)"));
  DuoHeadScores s;
  Status st = CalibrateHeads(a.o, &s, PrintProgress);
  if (st.ok()) st = WriteDuoHeads(a.out, s);
  if (!st.ok()) return Fail(st);
  std::printf("wrote %s: %d layers x %d KV heads, KL of the answer when each head alone keeps %lld sinks + %lld "
              "recent (%lld passkey prompts of %lld tokens)\n",
              a.out.c_str(), s.num_layers, s.num_kv_heads, static_cast<long long>(s.sinks),
              static_cast<long long>(s.recent), static_cast<long long>(s.samples), static_cast<long long>(s.length));
  return 0;
}

}  // namespace

Command AddCalibrateHeadsCommand(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* c = app.add_subcommand(
      "calibrate-heads",
      "DuoAttention's head split: score each (layer, KV head) by the KL of the answer's logits on passkey prompts "
      "when that head alone keeps sinks + recent; writes the file policy duo reads (heads=FILE)");
  c->add_option("--model", a->o.model, "Model directory (with its tokenizer)")->required();
  c->add_option("--out", a->out, "Head-split file to write (TOML)")->required();
  c->add_option("--samples", a->o.samples, "Passkey prompts (needle depths spread over [0, 1])")->capture_default_str();
  c->add_option("--length", a->o.length, "Tokens per prompt, answer included")->capture_default_str();
  c->add_option("--sinks", a->o.sinks, "Sink slots of the streaming head measured")->capture_default_str();
  c->add_option("--recent", a->o.recent, "Recent slots of the streaming head measured")->capture_default_str();
  c->add_option("--kv-dtype", a->o.kv_dtype, "Cache storage dtype")->capture_default_str();
  c->add_option("--block-size", a->o.block_size, "Tokens per KV block")->capture_default_str();
  c->add_option("--threads", a->o.threads, "Threads (0 = all cores)")->capture_default_str();
  return {c, [a] { return RunCalibrate(*a); }};
}

}  // namespace kvlab
