#include "policies/snapkv_scores.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kvlab {

std::vector<ParamSpec> SnapKVParamSpecs() {
  std::vector<ParamSpec> specs = BudgetParams("1024", "0.25", "window included; kvpress's 1 - compression_ratio");
  specs[0].help =
      "slots kept per stream, the observation window included (the paper's max_capacity_prompt; its LongBench "
      "runs: 1024 to 4096); 0 = ratio x the sequence's length so far";
  specs.insert(specs.end(), {
      {"window", ParamSpec::Type::kInt, "32",
       "observation window: the last w prompt tokens, whose attention scores the earlier ones (the paper: 32)", {},
       ParamRange::Closed(1, 1 << 20)},
      {"kernel", ParamSpec::Type::kInt, "7", "pooling kernel over neighbouring slots, odd (the paper: 7)", {},
       ParamRange::Closed(1, 1 << 20)},
      {"pooling", ParamSpec::Type::kString, "max", "\"max\" (the paper) or \"avg\" pooling of the scores",
       {"max", "avg"}},
      {"every", ParamSpec::Type::kInt, "256",
       "slots a stream may add past its budget before the rule runs again (decode steps between re-selections; "
       "a prompt chunk shorter than budget + every is selected once, at its end, as in the paper)",
       {}, ParamRange::Closed(1, 1 << 20)},
  });
  return specs;
}

Status ReadSnapKVOptions(const char* policy, const PolicyParams& p, SnapKVOptions* o) {
  o->budget = p.GetInt("budget");
  o->ratio = p.GetFloat("ratio");
  o->window = p.GetInt("window");
  o->kernel = p.GetInt("kernel");
  o->max_pool = p.GetString("pooling") == "max";
  o->every = p.GetInt("every");
  const std::string name(policy);
  if (o->kernel % 2 == 0) {
    return Status::InvalidArgument(name + ": parameter 'kernel' is " + std::to_string(o->kernel) +
                                   ", must be odd (the pooled score of a slot is centred on it)");
  }
  if (o->budget > 0 && o->budget <= o->window) {
    return Status::InvalidArgument(name + ": parameter 'budget' is " + std::to_string(o->budget) +
                                   ", must be larger than 'window' " + std::to_string(o->window) +
                                   " (the budget includes the window)");
  }
  return Status::OK();
}

int64_t SnapKVLength(const StreamState& s) { return std::max(s.seq_length, s.num_tokens); }

bool SnapKVActs(const StreamState& s, int64_t budget, int64_t every) {
  const int64_t n = s.num_tokens;
  if (n <= budget) return false;
  const bool prompt_end = s.step_tokens == 0 || (s.chunk_end && s.step_tokens > 1);
  return prompt_end || n - budget >= every;
}

void PooledScores(const float* score, int64_t prefix, int64_t kernel, bool max_pool, std::vector<float>* out) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> raw(static_cast<size_t>(std::max<int64_t>(0, prefix)), 0.0f);
  if (score != nullptr) {
    for (int64_t i = 0; i < prefix; ++i) raw[static_cast<size_t>(i)] = std::isnan(score[i]) ? kNegInf : score[i];
  }
  out->assign(raw.size(), 0.0f);
  const int64_t half = kernel / 2;
  for (int64_t i = 0; i < prefix; ++i) {
    const int64_t lo = std::max<int64_t>(0, i - half), hi = std::min(prefix - 1, i + half);
    if (max_pool) {
      float m = kNegInf;
      for (int64_t j = lo; j <= hi; ++j) m = std::max(m, raw[static_cast<size_t>(j)]);
      (*out)[static_cast<size_t>(i)] = m;
    } else {
      double sum = 0;
      for (int64_t j = lo; j <= hi; ++j) sum += raw[static_cast<size_t>(j)];
      (*out)[static_cast<size_t>(i)] = static_cast<float>(sum / static_cast<double>(kernel));
    }
  }
}

void KeepTopAndWindow(const std::vector<int64_t>& top, int64_t prefix, int64_t n, std::vector<int64_t>* keep) {
  keep->assign(top.begin(), top.end());
  for (int64_t i = std::max<int64_t>(0, prefix); i < n; ++i) keep->push_back(i);
}

std::vector<int64_t> PyramidPrefixBudgets(int64_t prefix_budget, int num_layers, double beta) {
  const int L = std::max(1, num_layers);
  std::vector<int64_t> out(static_cast<size_t>(L), prefix_budget);
  if (L == 1 || prefix_budget <= 0) return out;
  const double P = static_cast<double>(prefix_budget);
  const double lo = P / beta, hi = 2 * P - lo;
  const double step = (hi - lo) / (L - 1);
  int64_t sum = 0;
  for (int l = 0; l < L; ++l) {
    out[static_cast<size_t>(l)] = std::max<int64_t>(0, static_cast<int64_t>(std::floor(hi - step * l)));
    sum += out[static_cast<size_t>(l)];
  }
  // In [0, L) up to rounding (each floor lost less than one): the lowest
  // layers get one more (or, should rounding overshoot, the highest one less).
  int64_t rest = prefix_budget * L - sum;
  for (int l = 0; l < L && rest > 0; ++l, --rest) ++out[static_cast<size_t>(l)];
  for (int l = L - 1; l >= 0 && rest < 0; --l) {
    if (out[static_cast<size_t>(l)] > 0) --out[static_cast<size_t>(l)], ++rest;
  }
  return out;
}

int64_t PyramidLayerBudget(const SnapKVOptions& o, double beta, int layer, int num_layers, int64_t length) {
  const int64_t B = o.Budget(length);
  if (num_layers <= 1) return B;
  const int64_t w = std::min(o.window, B);
  const std::vector<int64_t> p = PyramidPrefixBudgets(B - w, num_layers, beta);
  return w + p[static_cast<size_t>(std::clamp(layer, 0, num_layers - 1))];
}

int64_t PyramidBottomBound(const SnapKVOptions& o, double beta, int64_t length) {
  const int64_t B = o.Budget(length);
  const int64_t w = std::min(o.window, B);
  const double P = static_cast<double>(B - w);
  return w + std::max(B - w, static_cast<int64_t>(std::floor(2 * P - P / beta)) + 1);
}

std::vector<std::vector<int64_t>> AdaAllocate(const std::vector<std::vector<float>>& pooled, int64_t prefix_budget,
                                              double alpha) {
  const size_t H = pooled.size();
  const int64_t floor_each = static_cast<int64_t>(std::floor(alpha * static_cast<double>(prefix_budget) + 1e-9));
  std::vector<std::vector<int64_t>> kept(H);
  std::vector<std::vector<char>> taken(H);
  int64_t left = prefix_budget * static_cast<int64_t>(H);
  for (size_t h = 0; h < H; ++h) {
    kept[h] = TopSlots(pooled[h], floor_each);
    taken[h].assign(pooled[h].size(), 0);
    for (int64_t i : kept[h]) taken[h][static_cast<size_t>(i)] = 1;
    left -= static_cast<int64_t>(kept[h].size());
  }
  // The rest jointly: every untaken (head, slot), highest pooled score first.
  struct Cand {
    float score;
    uint32_t head;
    int64_t slot;
  };
  std::vector<Cand> cands;
  for (size_t h = 0; h < H; ++h) {
    for (size_t i = 0; i < pooled[h].size(); ++i) {
      if (!taken[h][i]) cands.push_back({pooled[h][i], static_cast<uint32_t>(h), static_cast<int64_t>(i)});
    }
  }
  auto better = [](const Cand& a, const Cand& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.head != b.head ? a.head < b.head : a.slot < b.slot;
  };
  const int64_t take = std::max<int64_t>(0, std::min<int64_t>(left, static_cast<int64_t>(cands.size())));
  if (take < static_cast<int64_t>(cands.size())) {
    std::nth_element(cands.begin(), cands.begin() + take, cands.end(), better);
    cands.resize(static_cast<size_t>(take));
  }
  for (const Cand& c : cands) kept[c.head].push_back(c.slot);
  for (auto& k : kept) std::sort(k.begin(), k.end());
  return kept;
}

void SnapKVFamily::FoldStepAttention(const SeqStep& info, const float* step, int64_t n, float* score) const {
  if (info.tokens == 1) {  // decode: the window grows
    for (int64_t i = 0; i < n; ++i) score[i] += step[i];
  } else {  // a prefill step (or unknown): its window's attention
    std::copy(step, step + n, score);
  }
}

bool SnapKVFamily::SelectWithBudget(const StreamState& s, int64_t budget, std::vector<int64_t>* keep) const {
  if (!SnapKVActs(s, budget, o_.every)) return false;
  const int64_t n = s.num_tokens;
  const int64_t window = std::min(o_.window, budget);
  const int64_t prefix = n - window;
  std::vector<float> pooled;
  PooledScores(s.score, prefix, o_.kernel, o_.max_pool, &pooled);
  KeepTopAndRecent(pooled.data(), n, budget, window, keep);
  return true;
}

}  // namespace kvlab
