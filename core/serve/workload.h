// Workload: seeded synthetic serving traffic for the scheduler. Populations
// of users open conversations at Poisson arrival times; each conversation has
// a number of turns with long-tailed user-message and answer lengths, and
// every turn resends the whole history (system prompt, earlier turns and
// answers) as its prompt, as chat front ends do. Time is in scheduler steps.
// Deterministic for a seed on every platform (own samplers over
// std::mt19937_64, no std:: distributions). Torch-free.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace kvlab {

// A distribution of non-negative numbers (lengths, counts, times).
struct Distribution {
  enum class Kind { kFixed, kUniform, kLogNormal, kPareto, kExponential };
  Kind kind = Kind::kFixed;
  double value = 0;               // kFixed
  double median = 1, sigma = 1;   // kLogNormal: exp(N(ln median, sigma^2))
  double alpha = 1.5, scale = 1;  // kPareto: scale * U^(-1/alpha), support [scale, inf)
  double mean = 1;                // kExponential
  // kUniform: the range [min, max]; the others: clip bounds (max 0 = none).
  double min = 0, max = 0;

  static Distribution Fixed(double v);
  double Sample(std::mt19937_64* rng) const;
  // Sample rounded to an integer, at least `at_least`.
  int64_t SampleInt(std::mt19937_64* rng, int64_t at_least) const;
  // "lognormal(median=512, sigma=1, min=16, max=8192)".
  std::string Describe() const;
  // `what` (e.g. "FILE:3:1: 'user_tokens'") starts the message.
  Status Validate(const std::string& what) const;
};
const char* DistributionKindName(Distribution::Kind k);
bool ParseDistributionKind(const std::string& s, Distribution::Kind* out);

// One population of users.
struct UserClass {
  std::string name = "users";
  int64_t count = 1;              // conversations
  double start = 0;               // time of the first arrival, in steps
  double arrival_rate = 0;        // conversations per step (Poisson); 0: all arrive at `start`
  Distribution turns = Distribution::Fixed(1);
  Distribution user_tokens = Distribution::Fixed(128);    // tokens of each user message
  Distribution output_tokens = Distribution::Fixed(128);  // answer length (max_new_tokens)
  Distribution think_steps = Distribution::Fixed(0);      // from an answer to the next message
  int64_t system_tokens = 0;      // a system prompt shared by the class's conversations
};

struct WorkloadSpec {
  uint64_t seed = 0;
  std::vector<UserClass> classes;
};

struct ChatTurn {
  std::vector<int32_t> user;   // the user's message
  int64_t max_new_tokens = 1;  // the answer's length
  double think_steps = 0;      // before this turn, after the previous answer (0 for the first)
};

struct Conversation {
  int64_t id = 0;              // index in the generated list
  int user_class = 0;          // index into WorkloadSpec::classes
  double arrival = 0;          // first turn's arrival time
  const std::vector<int32_t>* system = nullptr;  // the class's system prompt (owned by the Workload)
  std::vector<ChatTurn> turns;
};

struct Workload {
  std::vector<std::vector<int32_t>> system_prompts;  // one per class
  std::vector<Conversation> conversations;           // sorted by arrival, then class, then index
  Workload() = default;
  Workload(const Workload&) = delete;  // conversations point into system_prompts
  Workload& operator=(const Workload&) = delete;
  Workload(Workload&&) = default;
  Workload& operator=(Workload&&) = default;
};

// Draws the workload. Token ids are uniform in [0, vocab_size). A
// conversation's lengths depend only on (seed, class index, its index in the
// class), so adding users to one class leaves the others' draws unchanged.
Status GenerateWorkload(const WorkloadSpec& spec, int64_t vocab_size, Workload* out);

// A chat client: keeps a conversation's history (every user message and
// answer) and builds each turn's prompt from all of it.
class ChatSession {
 public:
  // max_context > 0 caps prompt + answer per request: the answer is cut to
  // max_context - 1 and the oldest history tokens are dropped from the
  // prompt (the system prompt is kept while it fits).
  ChatSession(const Conversation* conversation, int64_t max_context);

  bool done() const { return next_turn_ >= conversation_->turns.size(); }
  size_t next_turn() const { return next_turn_; }
  const Conversation& conversation() const { return *conversation_; }
  int64_t history_tokens() const { return static_cast<int64_t>(history_.size()); }
  // The next turn's prompt and answer length; *truncated when the cap cut it.
  // REQUIRES: !done().
  void NextRequest(std::vector<int32_t>* prompt, int64_t* max_new_tokens, bool* truncated) const;
  // Appends the turn's user message and its answer to the history.
  void OnAnswer(const std::vector<int32_t>& answer);

 private:
  const Conversation* conversation_;
  int64_t max_context_;
  size_t next_turn_ = 0;
  std::vector<int32_t> history_;
};

}  // namespace kvlab
