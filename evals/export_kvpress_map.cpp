// kvlab's policy stacks as kvpress presses (export_kvpress.h): which press of
// kvpress's PRESS_REGISTRY (evaluation/evaluate_registry.py) follows the same
// rule, kvlab's budget as kvpress's compression_ratio, and what differs. The
// presses' rules are read from kvpress/presses/*_press.py. The table is in
// docs/sweeps.md, "Export to kvpress".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "evals/export_kvpress.h"

namespace kvlab {

namespace {

struct ParsedPolicy {
  std::string name;
  std::map<std::string, std::string> params;
};

// "a(x=1,y=2)+b(z=3)" -> [a{x,y}, b{z}]; '+' inside parentheses (duo's
// `streaming` list) does not split.
Status ParseDescription(const std::string& policy, std::vector<ParsedPolicy>* out) {
  out->clear();
  int depth = 0;
  std::string part;
  std::vector<std::string> parts;
  for (char c : policy) {
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (depth < 0) break;
    if (c == '+' && depth == 0) {
      parts.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  parts.push_back(part);
  const Status bad = Status::InvalidArgument("field 'policy' is \"" + policy +
                                             "\", expected NAME(KEY=VALUE,...) joined by '+'");
  if (depth != 0) return bad;
  for (const std::string& p : parts) {
    ParsedPolicy pp;
    const size_t open = p.find('(');
    pp.name = p.substr(0, open);
    if (pp.name.empty()) return bad;
    if (open != std::string::npos) {
      if (p.back() != ')') return bad;
      const std::string inner = p.substr(open + 1, p.size() - open - 2);
      size_t start = 0;
      while (start < inner.size()) {
        size_t end = inner.find(',', start);
        if (end == std::string::npos) end = inner.size();
        const std::string kv = inner.substr(start, end - start);
        const size_t eq = kv.find('=');
        if (eq == std::string::npos) return bad;
        pp.params[kv.substr(0, eq)] = kv.substr(eq + 1);
        start = end + 1;
      }
    }
    out->push_back(std::move(pp));
  }
  return Status::OK();
}

double Param(const ParsedPolicy& p, const std::string& key, double dflt) {
  const auto it = p.params.find(key);
  if (it == p.params.end()) return dflt;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  return end != it->second.c_str() ? v : dflt;
}

std::string Text(const ParsedPolicy& p, const std::string& key) {
  const auto it = p.params.find(key);
  return it == p.params.end() ? "" : it->second;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// kvlab_ + the label, kept to [A-Za-z0-9.-] with one '_' for each run of
// other characters (never "__", kvpress's separator in directory names).
std::string OwnName(const std::string& label) {
  std::string out = "kvlab_";
  for (char c : label) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    if (keep) {
      out += c;
    } else if (out.back() != '_') {
      out += '_';
    }
  }
  while (out.size() > 6 && out.back() == '_') out.pop_back();
  return out;
}

// budget > 0: a token count; else the ratio parameter (a kept share).
void BudgetOrRatio(const ParsedPolicy& p, double default_ratio, KvpressPress* out) {
  const double budget = Param(p, "budget", 0);
  if (budget > 0) {
    out->ratio_kind = KvpressRatioKind::kTokens;
    out->keep_tokens = static_cast<int64_t>(budget);
  } else {
    out->ratio_kind = KvpressRatioKind::kFraction;
    out->keep_fraction = Param(p, "ratio", default_ratio);
  }
}

const char* kEveryStep =
    " kvpress prunes the context once, at the end of the prefill, to (1 - compression_ratio) of its tokens, and "
    "keeps every question and generated token; kvlab's policies act after every step, decode included, so the "
    "question and the generated tokens are subject to eviction too.";

// The single selection policies that have a press of the same rule.
bool MapSelection(const ParsedPolicy& p, KvpressPress* out) {
  const std::string& n = p.name;
  const std::string W = Num(Param(p, "window", 32)), K = Num(Param(p, "kernel", 7));
  if (n == "sink") {
    out->press_name = "streaming_llm";
    out->ratio_kind = KvpressRatioKind::kTokens;
    out->keep_tokens = static_cast<int64_t>(Param(p, "n_sink", 4) + Param(p, "window", 1020));
    out->press_init = "StreamingLLMPress(compression_ratio={R}, n_sink=" + Num(Param(p, "n_sink", 4)) + ")";
    out->note = std::string("kvlab keeps n_sink + window slots; the ratio is 1 - (n_sink + window) / context tokens.") +
                (Text(p, "positions") == "original" ? "" : " positions=cache re-rotates keys to their cache slots "
                "(as the paper; kvpress: KeyRerotationPress(StreamingLLMPress())).") + kEveryStep;
  } else if (n == "h2o") {
    out->press_name = "observed_attention";
    BudgetOrRatio(p, 0.2, out);
    out->press_init = "ObservedAttentionPress(compression_ratio={R})";
    out->note = "H2O keeps the `recent` newest slots plus the heavy hitters by attention accumulated over every "
                "query so far, re-deciding at every step; ObservedAttentionPress scores each key once, by the "
                "attention the prefill's queries gave it divided by how many queries could see it, with no recent "
                "window, and prunes once after the prefill." + std::string(kEveryStep);
  } else if (n == "random") {
    out->press_name = "random";
    BudgetOrRatio(p, 0.2, out);
    out->press_init = "RandomPress(compression_ratio={R}, seed=" + Text(p, "seed") + ")";
    out->note = "kvlab always keeps the newest slot; the draws differ." + std::string(kEveryStep);
  } else if (n == "snapkv" || n == "pyramidkv") {
    const bool pyr = n == "pyramidkv";
    out->press_name = n;
    BudgetOrRatio(p, 0.25, out);
    out->press_init = std::string(pyr ? "PyramidKVPress" : "SnapKVPress") + "(compression_ratio={R}, window_size=" +
                      W + ", kernel_size=" + K + (pyr ? ", beta=" + Num(Param(p, "beta", 20)) : "") + ")";
    out->note = "kvpress's defaults are window_size 64, kernel_size 5, and its scores are the window's mean "
                "attention average-pooled; kvlab's are summed and " + Text(p, "pooling") + "-pooled (window " + W +
                ", kernel " + K + "), re-selected once a stream is `every` slots past the budget." + kEveryStep;
  } else if (n == "adakv" && Text(p, "layers") != "pyramid") {
    out->press_name = "adakv_snapkv";
    BudgetOrRatio(p, 0.25, out);
    out->press_init = "AdaKVPress(press=SnapKVPress(compression_ratio={R}, window_size=" + W + ", kernel_size=" + K +
                      "), alpha_safeguard=" + Num(Param(p, "alpha", 0.2)) + ")";
    out->note = "SnapKV's scores allocated across a layer's heads with Ada-KV's safeguard, as AdaKVPress(SnapKVPress);"
                " the window and pooling differ as for snapkv." + std::string(kEveryStep);
  } else if (n == "tova") {
    out->press_name = "tova";
    BudgetOrRatio(p, 0.125, out);
    out->press_init = "TOVAPress(compression_ratio={R})";
    out->note = std::string(Text(p, "heads") == "each" ? "heads=each chooses per KV head; TOVAPress averages the "
                "last query's attention over heads (kvlab's heads=mean). " : "") +
                "TOVA evicts one slot per decode step once over the budget." + kEveryStep;
  } else if (n == "key-norm") {
    out->press_name = "knorm";
    BudgetOrRatio(p, 0.5, out);
    out->press_init = "KnormPress(compression_ratio={R})";
    out->note = "both keep the keys of lowest L2 norm; kvlab also keeps the `recent` newest slots (" +
                Text(p, "recent") + ")." + std::string(kEveryStep);
  } else if (n == "keydiff") {
    out->press_name = "keydiff";
    BudgetOrRatio(p, 0.5, out);
    out->press_init = "KeyDiffPress(compression_ratio={R})";
    out->note = "the same score, -cos(key, mean of the unit keys); kvlab also keeps the newest slot." +
                std::string(kEveryStep);
  } else if (n == "lagkv") {
    out->press_name = "lagkv";
    BudgetOrRatio(p, 0.5, out);
    out->press_init = "LagKVPress(compression_ratio={R}, n_sink=" + Text(p, "n_sink") + ", lag_size=" +
                      Text(p, "lag_size") + ")";
    out->note = "the same lag-relative scores; kvlab also keeps the newest slot." + std::string(kEveryStep);
  } else if (n == "cur") {
    out->press_name = "cur";
    BudgetOrRatio(p, 0.5, out);
    const bool local = Text(p, "local_window") != "0";
    out->press_init = "CURPress(compression_ratio={R}, num_sinks=" + Text(p, "num_sinks") + ", leverage_type=\"" +
                      Text(p, "leverage") + "\", use_local_approximation=" + (local ? "True" : "False") +
                      (local ? ", local_window_size=" + Text(p, "local_window") : std::string()) + ")";
    out->note = "the same leverage scores; kvlab also keeps the newest slot." + std::string(kEveryStep);
  } else if (n == "chunkkv") {
    const std::map<std::string, std::string> inner = {{"keydiff", "KeyDiffPress"}, {"lagkv", "LagKVPress"},
                                                      {"cur", "CURPress"}, {"key-norm", "KnormPress"},
                                                      {"h2o", "ObservedAttentionPress"}};
    const auto it = inner.find(Text(p, "score"));
    if (it == inner.end()) return false;
    out->press_name = "chunkkv";
    BudgetOrRatio(p, 0.5, out);
    out->press_init = "ChunkKVPress(press=" + it->second + "(compression_ratio={R}), chunk_length=" +
                      Text(p, "chunk_length") + ")";
    out->note = "ChunkKVPress sums the heads' scores and keeps the same chunks in every head of a layer, and a "
                "number of chunks; kvlab ranks each KV head's chunks by their own mean score, keeps the newest "
                "chunk and fills the budget in tokens." + std::string(kEveryStep);
  } else if (n == "duo") {
    out->press_name = "duo_attention";
    out->ratio_kind = KvpressRatioKind::kHeads;
    out->head_compression_ratio = 1 - Param(p, "fraction", 0.5);
    out->press_init = "DuoAttentionPress(head_compression_ratio={H})";
    out->note = "kvlab's fraction is the share of retrieval heads, so head_compression_ratio = 1 - fraction; "
                "DuoAttentionPress loads the published head patterns (sink and recent sizes with them), kvlab "
                "uses its own calibration (kvlab calibrate-heads) or an explicit list, sinks " + Text(p, "sinks") +
                ", recent " + Text(p, "recent") + ".";
  } else {
    return false;
  }
  out->mapped = true;
  return true;
}

// Why a single policy has no press.
std::string NoPressNote(const ParsedPolicy& p) {
  const std::string& n = p.name;
  if (n == "kivi" || n == "quant") {
    return n + " quantizes the cache: kvpress has no press for it; its README passes transformers' QuantizedCache "
               "(cache=QuantizedCache(backend=\"quanto\", nbits=" + (n == "kivi" ? Text(p, "bits") : "8") +
           ")) to the pipeline, an option evaluate.py does not offer";
  }
  if (n == "offload") return "offload moves blocks to host memory and disk, losslessly: kvpress does not offload";
  if (n == "gqa-reuse") return "gqa-reuse shares KV heads (GQA's conversion): no kvpress press";
  if (n == "window") return "window is StreamingLLMPress(n_sink=0)'s rule, which kvpress's registry does not name";
  if (n == "adakv") return "adakv with layers=pyramid is AdaKVPress(PyramidKVPress()), which kvpress's registry "
                           "does not name";
  return n + ": no kvpress press";
}

}  // namespace

Status MapStackToKvpress(const std::string& policy, const std::string& stack_label, KvpressPress* out) {
  *out = KvpressPress();
  std::vector<ParsedPolicy> parts;
  KVLAB_RETURN_IF_ERROR(ParseDescription(policy, &parts));
  if (parts.size() == 1 && parts[0].name == "full") {
    out->press_name = "no_press";
    out->mapped = true;
    out->note = "the full cache: kvpress's no_press (compression_ratio 0)";
    return Status::OK();
  }
  if (parts.size() == 1 && MapSelection(parts[0], out)) return Status::OK();
  out->press_name = OwnName(stack_label.empty() ? policy : stack_label);
  out->ratio_kind = KvpressRatioKind::kBytes;
  std::string why;
  for (const ParsedPolicy& p : parts) {
    KvpressPress one;
    std::string part;
    if (MapSelection(p, &one)) {
      part = p.name + " alone would be " + one.press_name;
    } else {
      part = NoPressNote(p);
    }
    why += (why.empty() ? "" : "; ") + part;
  }
  out->note = (parts.size() > 1 ? "a stack of " + std::to_string(parts.size()) + " policies, which no press composes: "
                                : std::string()) + why +
              ". Exported under kvlab's name; compression_ratio is 1 - the end KV bytes over the full cache's.";
  return Status::OK();
}

double KvpressCompressionRatio(const KvpressPress& press, double context_tokens, double bytes_ratio) {
  double r = NAN;
  switch (press.ratio_kind) {
    case KvpressRatioKind::kNone: r = 0; break;
    case KvpressRatioKind::kFraction: r = 1 - press.keep_fraction; break;
    case KvpressRatioKind::kTokens:
      r = context_tokens > 0 ? 1 - static_cast<double>(press.keep_tokens) / context_tokens : NAN;
      break;
    case KvpressRatioKind::kHeads: r = press.head_compression_ratio; break;
    case KvpressRatioKind::kBytes: r = std::isfinite(bytes_ratio) ? 1 - bytes_ratio : NAN; break;
  }
  return std::isfinite(r) ? std::min(1.0, std::max(0.0, r)) : NAN;
}

std::string CsvRow(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += ',';
    const std::string& f = fields[i];
    if (f.find_first_of(",\"\r\n") == std::string::npos) {
      out += f;
      continue;
    }
    out += '"';
    for (char c : f) {
      if (c == '"') out += '"';
      out += c;
    }
    out += '"';
  }
  return out + "\n";
}

}  // namespace kvlab
