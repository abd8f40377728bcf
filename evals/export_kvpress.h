// `kvlab export --format kvpress results/NAME`: a sweep's records rewritten in
// the layout of NVIDIA/kvpress's evaluation (evaluation/evaluate.py), so that a
// kvpress user can set kvlab's numbers beside theirs. Called by the CLI
// (evals/cli/) and its tests; torch-free.
//
// One directory per (dataset, model, press, compression ratio) as
// EvaluationConfig.get_results_dir names it,
// DATASET__DATA_DIR__MODEL__PRESS__RATIO[__max_contextN][__query_aware], holding
// predictions.csv (evaluate.py's _save_results: one row per sample, the
// generated text in predicted_answer), metrics.json (the benchmark's
// calculate_metrics shape: evaluation/benchmarks/*/calculate_metrics.py),
// config.yaml (EvaluationConfig's fields only, so evaluate.py --config_file
// reads it) and kvlab.json (what kvpress has no field for: the kvlab stack,
// the mapping note, the records, n and 95% intervals). docs/sweeps.md,
// "Export to kvpress", has the layout and the policy -> press table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace kvlab {

// How a kvlab stack's kept share becomes kvpress's compression_ratio (the
// share of the context's KV pairs removed: 1 - kept share).
enum class KvpressRatioKind {
  kNone,      // full: 0
  kFraction,  // a ratio parameter: 1 - keep_fraction
  kTokens,    // a token budget: 1 - keep_tokens / context tokens (per sample)
  kHeads,     // duo: head_compression_ratio = 1 - fraction (kvpress derives compression_ratio at run time)
  kBytes,     // no press (quantization, head sharing, offload, compositions): 1 - end KV bytes / the baseline's
};

struct KvpressPress {
  std::string press_name;    // a key of kvpress's PRESS_REGISTRY, "no_press", or kvlab_<stack> when none maps
  bool mapped = false;       // press_name is kvpress's
  KvpressRatioKind ratio_kind = KvpressRatioKind::kNone;
  double keep_fraction = 1;  // kFraction
  int64_t keep_tokens = 0;   // kTokens
  double head_compression_ratio = 0;  // kHeads
  // str(press) as kvpress would print it, with kvlab's parameters where they
  // correspond ("{R}" stands for the compression ratio); empty for no_press.
  std::string press_init;
  std::string note;          // how kvlab's rule differs, or why nothing maps
};

// Maps a record's resolved stack (its `policy`, "snapkv(budget=0,...,ratio=0.25,...)",
// policies joined by '+' outside parentheses) and its label (`stack`, the
// given parameters: the name of an unmapped stack). An error names a
// description it cannot parse.
Status MapStackToKvpress(const std::string& policy, const std::string& stack_label, KvpressPress* out);

// kvpress's compression_ratio for one sample whose compressed context holds
// `context_tokens` tokens; `bytes_ratio` is the record's end KV bytes over
// its baseline's (kBytes; NaN when unknown, then NaN). Clamped to [0, 1].
double KvpressCompressionRatio(const KvpressPress& press, double context_tokens, double bytes_ratio);

// RFC 4180 CSV as Python's csv module writes it with QUOTE_MINIMAL (what
// pandas' to_csv uses): a field holding the delimiter, a quote, CR or LF is
// quoted, quotes doubled; rows end in "\n".
std::string CsvRow(const std::vector<std::string>& fields);

struct ExportOptions {
  std::string format = "kvpress";  // the only format
  std::string out_dir;             // default RESULTS_DIR/kvpress
};

// Writes the export of results_dir/results.jsonl (the latest ok record of each
// point; failed points are counted, not exported). `report` lists the
// directories written, the points without predictions (records made before
// kvlab kept them: their metrics are still written) and the tasks that have
// no kvpress benchmark. Errors: an unknown format, a directory without
// results.jsonl or without an ok record, a record field of the wrong type
// ("PATH/results.jsonl: point KEY: field 'metrics.predictions' ...").
Status ExportResults(const std::string& results_dir, const ExportOptions& options, std::string* report);

}  // namespace kvlab
