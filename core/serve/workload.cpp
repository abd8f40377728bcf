#include "core/serve/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvlab {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The generator of one (class, stream) pair: independent of every other.
std::mt19937_64 Rng(uint64_t seed, uint64_t cls, uint64_t stream) {
  return std::mt19937_64(SplitMix64(SplitMix64(SplitMix64(seed) ^ cls) ^ stream));
}

// Uniform in [0, 1).
double Uniform01(std::mt19937_64* rng) { return static_cast<double>((*rng)() >> 11) * 0x1.0p-53; }

double StandardNormal(std::mt19937_64* rng) {
  const double u1 = 1.0 - Uniform01(rng);  // (0, 1]
  const double u2 = Uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

const char* DistributionKindName(Distribution::Kind k) {
  switch (k) {
    case Distribution::Kind::kFixed: return "fixed";
    case Distribution::Kind::kUniform: return "uniform";
    case Distribution::Kind::kLogNormal: return "lognormal";
    case Distribution::Kind::kPareto: return "pareto";
    case Distribution::Kind::kExponential: return "exponential";
  }
  return "?";
}

bool ParseDistributionKind(const std::string& s, Distribution::Kind* out) {
  for (Distribution::Kind k : {Distribution::Kind::kFixed, Distribution::Kind::kUniform, Distribution::Kind::kLogNormal,
                               Distribution::Kind::kPareto, Distribution::Kind::kExponential}) {
    if (s == DistributionKindName(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

Distribution Distribution::Fixed(double v) {
  Distribution d;
  d.kind = Kind::kFixed;
  d.value = v;
  return d;
}

double Distribution::Sample(std::mt19937_64* rng) const {
  double v = 0;
  switch (kind) {
    case Kind::kFixed: return value;
    case Kind::kUniform: return min + (max - min) * Uniform01(rng);
    case Kind::kLogNormal: v = median * std::exp(sigma * StandardNormal(rng)); break;
    case Kind::kPareto: v = scale * std::pow(1.0 - Uniform01(rng), -1.0 / alpha); break;
    case Kind::kExponential: v = -mean * std::log(1.0 - Uniform01(rng)); break;
  }
  if (max > 0) v = std::min(v, max);
  return std::max(v, min);
}

int64_t Distribution::SampleInt(std::mt19937_64* rng, int64_t at_least) const {
  return std::max<int64_t>(at_least, std::llround(Sample(rng)));
}

std::string Distribution::Describe() const {
  std::string s;
  switch (kind) {
    case Kind::kFixed: return Num(value);
    case Kind::kUniform: return "uniform(" + Num(min) + ".." + Num(max) + ")";
    case Kind::kLogNormal: s = "lognormal(median=" + Num(median) + ", sigma=" + Num(sigma); break;
    case Kind::kPareto: s = "pareto(alpha=" + Num(alpha) + ", scale=" + Num(scale); break;
    case Kind::kExponential: s = "exponential(mean=" + Num(mean); break;
  }
  if (min > 0) s += ", min=" + Num(min);
  if (max > 0) s += ", max=" + Num(max);
  return s + ")";
}

Status Distribution::Validate(const std::string& what) const {
  auto bad = [&](const std::string& m) { return Status::InvalidArgument(what + ": " + m); };
  if (!(min >= 0) || !(max >= 0)) return bad("'min' and 'max' must be >= 0");
  if (max > 0 && max < min) return bad("'max' (" + Num(max) + ") is below 'min' (" + Num(min) + ")");
  switch (kind) {
    case Kind::kFixed:
      if (!(value >= 0)) return bad("must be >= 0, got " + Num(value));
      break;
    case Kind::kUniform:
      if (!(max >= min) || max == 0) return bad("uniform needs 0 <= min <= max and max > 0");
      break;
    case Kind::kLogNormal:
      if (!(median > 0) || !(sigma >= 0)) return bad("lognormal needs median > 0 and sigma >= 0");
      break;
    case Kind::kPareto:
      if (!(alpha > 0) || !(scale > 0)) return bad("pareto needs alpha > 0 and scale > 0");
      break;
    case Kind::kExponential:
      if (!(mean > 0)) return bad("exponential needs mean > 0");
      break;
  }
  return Status::OK();
}

Status GenerateWorkload(const WorkloadSpec& spec, int64_t vocab_size, Workload* out) {
  if (vocab_size <= 0) return Status::InvalidArgument("workload: vocab_size must be positive");
  Workload w;
  for (size_t c = 0; c < spec.classes.size(); ++c) {
    const UserClass& uc = spec.classes[c];
    const std::string who = "workload users '" + uc.name + "'";
    if (uc.count < 0 || !(uc.start >= 0) || !(uc.arrival_rate >= 0) || uc.system_tokens < 0) {
      return Status::InvalidArgument(who + ": count, start, arrival_rate and system_tokens must be >= 0");
    }
    KVLAB_RETURN_IF_ERROR(uc.turns.Validate(who + " turns"));
    KVLAB_RETURN_IF_ERROR(uc.user_tokens.Validate(who + " user_tokens"));
    KVLAB_RETURN_IF_ERROR(uc.output_tokens.Validate(who + " output_tokens"));
    KVLAB_RETURN_IF_ERROR(uc.think_steps.Validate(who + " think_steps"));
  }
  w.system_prompts.resize(spec.classes.size());
  auto draw_tokens = [vocab_size](std::mt19937_64* rng, int64_t n, std::vector<int32_t>* dst) {
    dst->resize(static_cast<size_t>(n));
    for (int32_t& t : *dst) t = static_cast<int32_t>((*rng)() % static_cast<uint64_t>(vocab_size));
  };
  for (size_t c = 0; c < spec.classes.size(); ++c) {
    const UserClass& uc = spec.classes[c];
    std::mt19937_64 sys_rng = Rng(spec.seed, c, 0);
    draw_tokens(&sys_rng, uc.system_tokens, &w.system_prompts[c]);
    std::mt19937_64 arrivals = Rng(spec.seed, c, ~0ULL);
    double t = uc.start;
    for (int64_t i = 0; i < uc.count; ++i) {
      if (uc.arrival_rate > 0) t += -std::log(1.0 - Uniform01(&arrivals)) / uc.arrival_rate;
      std::mt19937_64 rng = Rng(spec.seed, c, static_cast<uint64_t>(i) + 1);
      Conversation conv;
      conv.user_class = static_cast<int>(c);
      conv.arrival = t;
      conv.system = &w.system_prompts[c];
      const int64_t turns = uc.turns.SampleInt(&rng, 1);
      for (int64_t k = 0; k < turns; ++k) {
        ChatTurn turn;
        draw_tokens(&rng, uc.user_tokens.SampleInt(&rng, 1), &turn.user);
        turn.max_new_tokens = uc.output_tokens.SampleInt(&rng, 1);
        turn.think_steps = k == 0 ? 0.0 : uc.think_steps.Sample(&rng);
        conv.turns.push_back(std::move(turn));
      }
      w.conversations.push_back(std::move(conv));
    }
  }
  // Stable: equal arrivals keep class order, then index order.
  std::stable_sort(w.conversations.begin(), w.conversations.end(),
                   [](const Conversation& a, const Conversation& b) { return a.arrival < b.arrival; });
  for (size_t i = 0; i < w.conversations.size(); ++i) w.conversations[i].id = static_cast<int64_t>(i);
  *out = std::move(w);
  return Status::OK();
}

ChatSession::ChatSession(const Conversation* conversation, int64_t max_context)
    : conversation_(conversation), max_context_(max_context) {}

void ChatSession::NextRequest(std::vector<int32_t>* prompt, int64_t* max_new_tokens, bool* truncated) const {
  const ChatTurn& turn = conversation_->turns[next_turn_];
  const std::vector<int32_t>& system = *conversation_->system;
  int64_t answer = turn.max_new_tokens;
  int64_t room = INT64_MAX;  // prompt tokens allowed
  *truncated = false;
  if (max_context_ > 0) {
    if (answer > max_context_ - 1) {
      answer = std::max<int64_t>(1, max_context_ - 1);
      *truncated = true;
    }
    room = max_context_ - answer;
  }
  const int64_t sys = static_cast<int64_t>(system.size());
  const bool keep_system = sys < room;
  if (keep_system) room -= sys;
  // The rest of the prompt is the most recent `room` tokens of history + message.
  const int64_t rest = static_cast<int64_t>(history_.size() + turn.user.size());
  const int64_t drop = std::max<int64_t>(0, rest - room);
  if (drop > 0 || (!keep_system && sys > 0)) *truncated = true;
  prompt->clear();
  prompt->reserve(static_cast<size_t>((keep_system ? sys : 0) + rest - drop));
  if (keep_system) prompt->insert(prompt->end(), system.begin(), system.end());
  const int64_t hist = static_cast<int64_t>(history_.size());
  if (drop < hist) prompt->insert(prompt->end(), history_.begin() + drop, history_.end());
  const int64_t user_drop = std::max<int64_t>(0, drop - hist);
  prompt->insert(prompt->end(), turn.user.begin() + user_drop, turn.user.end());
  *max_new_tokens = answer;
}

void ChatSession::OnAnswer(const std::vector<int32_t>& answer) {
  const ChatTurn& turn = conversation_->turns[next_turn_];
  history_.insert(history_.end(), turn.user.begin(), turn.user.end());
  history_.insert(history_.end(), answer.begin(), answer.end());
  ++next_turn_;
}

}  // namespace kvlab
