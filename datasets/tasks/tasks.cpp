#include "datasets/tasks/tasks.h"

#include <algorithm>

namespace kvlab {

namespace {

// Filler sentences: no digits, no colons (see tasks.h), in the spirit of the
// passkey papers' "The grass is green. The sky is blue." with more variety.
const char* const kFiller[] = {
    "The grass is green. ",        "The sky is blue. ",           "The sun is yellow. ",
    "Here we go. ",                "There and back again. ",      "The river runs to the sea. ",
    "A bird sings in the tree. ",  "The road is long and dry. ",  "Snow falls on the hills. ",
    "The wind is cold tonight. ",  "A boat drifts on the lake. ", "The old man walks slowly. ",
    "Bread is baked at dawn. ",    "The cat sleeps by the fire. ", "Stars shine over the town. ",
    "The bell rings at noon. ",    "Leaves turn red in autumn. ", "The door is open. ",
    "A child laughs in the yard. ", "The clock ticks on the wall. ",
};
constexpr int kNumFiller = sizeof(kFiller) / sizeof(kFiller[0]);

// Filler of exactly n characters (whole sentences, the last one cut).
std::string Filler(SplitMix& rng, int64_t n) {
  std::string s;
  while (static_cast<int64_t>(s.size()) < n) s += kFiller[rng.Below(kNumFiller)];
  s.resize(static_cast<size_t>(std::max<int64_t>(n, 0)));
  return s;
}

std::string Digits(SplitMix& rng, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>('0' + (i == 0 ? 1 + rng.Below(9) : rng.Below(10)));
  return s;
}

std::string Letters(SplitMix& rng, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>('a' + rng.Below(26));
  return s;
}

// Moves a cut point in filler to just after the nearest sentence end, so
// needles sit between sentences.
int64_t SentenceBoundary(const std::string& filler, int64_t at) {
  at = std::clamp<int64_t>(at, 0, static_cast<int64_t>(filler.size()));
  for (int64_t i = at; i > 0; --i) {
    if (filler[static_cast<size_t>(i - 1)] == ' ' && i >= 2 && filler[static_cast<size_t>(i - 2)] == '.') return i;
  }
  return 0;
}

// Inserts pieces into filler at the given fractions (sorted); returns the
// text and each piece's offset.
std::string InsertAt(const std::string& filler, const std::vector<std::pair<double, std::string>>& pieces,
                     std::vector<int64_t>* offsets) {
  std::string out;
  int64_t prev = 0;
  for (const auto& p : pieces) {
    const int64_t cut = std::max(prev, SentenceBoundary(filler, static_cast<int64_t>(p.first * static_cast<double>(filler.size()))));
    out += filler.substr(static_cast<size_t>(prev), static_cast<size_t>(cut - prev));
    offsets->push_back(static_cast<int64_t>(out.size()));
    out += p.second;
    prev = cut;
  }
  out += filler.substr(static_cast<size_t>(prev));
  return out;
}

Status TooShort(const TaskSpec& spec, int64_t need) {
  return Status::InvalidArgument(std::string("task '") + TaskKindName(spec.kind) + "' needs length >= " +
                                 std::to_string(need) + ", got " + std::to_string(spec.length));
}

void Finish(std::string prompt, std::string answer, TaskSample* out) {
  out->target_mask.assign(prompt.size() + answer.size(), 0);
  std::fill(out->target_mask.begin() + static_cast<int64_t>(prompt.size()), out->target_mask.end(), 1);
  out->prompt = std::move(prompt);
  out->answer = std::move(answer);
}

}  // namespace

uint64_t SplitMix::Next() {
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Status ParseTaskKind(const std::string& name, TaskKind* out) {
  if (name == "passkey") { *out = TaskKind::kPasskey; return Status::OK(); }
  if (name == "multi-needle") { *out = TaskKind::kMultiNeedle; return Status::OK(); }
  if (name == "recall") { *out = TaskKind::kRecall; return Status::OK(); }
  if (name == "copy") { *out = TaskKind::kCopy; return Status::OK(); }
  return Status::InvalidArgument("unknown task '" + name + "' (valid: passkey, multi-needle, recall, copy)");
}

const char* TaskKindName(TaskKind kind) {
  switch (kind) {
    case TaskKind::kPasskey: return "passkey";
    case TaskKind::kMultiNeedle: return "multi-needle";
    case TaskKind::kRecall: return "recall";
    case TaskKind::kCopy: return "copy";
  }
  return "?";
}

Status MakeTask(const TaskSpec& spec, TaskSample* out) {
  *out = TaskSample();
  SplitMix rng(spec.seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(spec.kind) + 1);
  if (spec.depth < 0 || spec.depth > 1) return Status::InvalidArgument("task depth must be in [0, 1]");
  if (spec.digits < 1 || spec.digits > 18) return Status::InvalidArgument("task digits must be in [1, 18]");
  switch (spec.kind) {
    case TaskKind::kPasskey: {
      const std::string key = Digits(rng, spec.digits);
      const std::string needle = "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
      const std::string question = "What is the pass key? The pass key is ";
      const int64_t fill = spec.length - static_cast<int64_t>(needle.size() + question.size() + key.size());
      if (fill < 0) return TooShort(spec, spec.length - fill);
      std::vector<int64_t> at;
      const std::string body = InsertAt(Filler(rng, fill), {{spec.depth, needle}}, &at);
      out->depth = fill == 0 ? 0.0 : static_cast<double>(at[0]) / static_cast<double>(fill);
      Finish(body + question, key, out);
      return Status::OK();
    }
    case TaskKind::kMultiNeedle: {
      const int n = std::max(1, spec.num_needles);
      std::vector<std::string> keys, values;
      for (int i = 0; i < n; ++i) {
        std::string k;
        do { k = Letters(rng, 4); } while (std::find(keys.begin(), keys.end(), k) != keys.end());
        keys.push_back(k);
        values.push_back(Digits(rng, spec.digits));
      }
      std::vector<std::pair<double, std::string>> pieces;
      int64_t used = 0;
      for (int i = 0; i < n; ++i) {
        pieces.push_back({rng.Uniform(), "The value of key " + keys[static_cast<size_t>(i)] + " is " +
                                             values[static_cast<size_t>(i)] + ". "});
        used += static_cast<int64_t>(pieces.back().second.size());
      }
      std::sort(pieces.begin(), pieces.end());
      const size_t ask = rng.Below(static_cast<uint64_t>(n));
      const std::string question =
          "What is the value of key " + keys[ask] + "? The value of key " + keys[ask] + " is ";
      const int64_t fill = spec.length - used - static_cast<int64_t>(question.size() + values[ask].size());
      if (fill < 0) return TooShort(spec, spec.length - fill);
      std::vector<int64_t> at;
      const std::string body = InsertAt(Filler(rng, fill), pieces, &at);
      // The asked needle's depth.
      const std::string asked = "key " + keys[ask] + " is ";
      const size_t pos = body.find(asked);
      out->depth = body.empty() ? 0.0 : static_cast<double>(pos) / static_cast<double>(body.size());
      Finish(body + question, values[ask], out);
      return Status::OK();
    }
    case TaskKind::kRecall: {
      int pairs = spec.num_pairs > 0 ? spec.num_pairs : 8;
      pairs = std::min(pairs, 26);
      std::vector<int> keys(26);
      for (int i = 0; i < 26; ++i) keys[static_cast<size_t>(i)] = i;
      for (int i = 25; i > 0; --i) std::swap(keys[static_cast<size_t>(i)], keys[rng.Below(static_cast<uint64_t>(i + 1))]);
      std::string block;
      std::vector<char> values;
      for (int i = 0; i < pairs; ++i) {
        values.push_back(static_cast<char>('0' + rng.Below(10)));
        block += static_cast<char>('a' + keys[static_cast<size_t>(i)]);
        block += ':';
        block += values.back();
        block += ' ';
      }
      const size_t ask = rng.Below(static_cast<uint64_t>(pairs));
      const std::string question = std::string("? ") + static_cast<char>('a' + keys[ask]) + ":";
      const int64_t fill = spec.length - static_cast<int64_t>(block.size() + question.size() + 1);
      if (fill < 0) return TooShort(spec, spec.length - fill);
      std::vector<int64_t> at;
      const std::string body = InsertAt(Filler(rng, fill), {{spec.depth, block}}, &at);
      out->depth = fill == 0 ? 0.0 : static_cast<double>(at[0]) / static_cast<double>(fill);
      Finish(body + question, std::string(1, values[ask]), out);
      return Status::OK();
    }
    case TaskKind::kCopy: {
      // "[S] filler [S] filler [S]": the mask covers every repeat of S and
      // its closing bracket; the filler between copies is short.
      const int64_t max_span = std::max<int64_t>(8, std::min<int64_t>(64, spec.length / 4));
      const int64_t span = 8 + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(max_span - 7)));
      std::string s;
      for (int64_t i = 0; i < span; ++i) {
        const uint64_t r = rng.Below(36);
        s += static_cast<char>(r < 26 ? 'a' + r : '0' + (r - 26));
      }
      std::string text;
      std::vector<uint8_t> mask;
      bool first = true;
      while (static_cast<int64_t>(text.size() + s.size() + 2) <= spec.length) {
        text += '[';
        mask.push_back(0);
        text += s;
        text += ']';
        mask.insert(mask.end(), s.size() + 1, first ? 0 : 1);
        first = false;
        const int64_t room = spec.length - static_cast<int64_t>(text.size());
        const int64_t gap = std::min<int64_t>(room, static_cast<int64_t>(rng.Below(static_cast<uint64_t>(span + 1))));
        const std::string f = Filler(rng, gap);
        text += f;
        mask.insert(mask.end(), f.size(), 0);
      }
      if (first) return TooShort(spec, static_cast<int64_t>(s.size()) + 2);
      // The copy has no separate answer: the whole text is the "prompt".
      out->prompt = text;
      out->answer.clear();
      out->target_mask = mask;
      out->depth = 0;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown task kind");
}

double ScoreExact(const TaskSample& sample, const std::string& generated) {
  return generated.compare(0, sample.answer.size(), sample.answer) == 0 ? 1.0 : 0.0;
}

double ScoreChars(const TaskSample& sample, const std::string& generated) {
  if (sample.answer.empty()) return 1.0;
  size_t ok = 0;
  for (size_t i = 0; i < sample.answer.size() && i < generated.size(); ++i) ok += generated[i] == sample.answer[i];
  return static_cast<double>(ok) / static_cast<double>(sample.answer.size());
}

}  // namespace kvlab
