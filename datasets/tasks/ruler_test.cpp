// RULER's generators (datasets/tasks/ruler.h) at fixed seeds with the byte
// tokenizer's count (one token a byte, plus BOS): each answer is in the
// context, the asked needle at the asked depth, the prompt within 2% of the
// length, RULER's templates word for word; two seeds differ, one seed is one
// sample. And RULER's scoring on worked examples. Lengths in other tokenizers:
// evals/sweep_ruler_test.cpp.
#include "datasets/tasks/ruler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>

#include "datasets/tasks/ruler_internal.h"
#include "datasets/tasks/tasks.h"

namespace kvlab {
namespace {

const TokenCounter kBytes = [](const std::string& t, int64_t* n) {
  *n = static_cast<int64_t>(t.size()) + 1;  // BOS
  return Status::OK();
};

// Prose for the essay haystacks: sentences of the generator's own words, one a line (as the built corpora are).
const std::string& Essay() {
  static const std::string text = [] {
    const char* words[] = {"the", "river", "ran", "past", "a", "quiet", "town", "where", "people", "kept", "old",
                           "books", "and", "new", "ideas", "about", "work", "money", "time", "and", "friends"};
    SplitMix rng(99);
    std::string t;
    for (int s = 0; s < 3000; ++s) {
      const int n = 6 + static_cast<int>(rng.Below(14));
      for (int w = 0; w < n; ++w) {
        std::string word = words[rng.Below(21)];
        if (w == 0) word[0] = static_cast<char>(std::toupper(word[0]));
        t += word + (w + 1 < n ? " " : ".\n");
      }
    }
    return t;
  }();
  return text;
}

RulerSample Make(const std::string& task, int64_t length, uint64_t seed, double depth = 0.5, int fewshot = -1) {
  RulerSpec spec;
  spec.task = task;
  spec.length = length;
  spec.seed = seed;
  spec.depth = depth;
  spec.fewshot = fewshot;
  spec.essay = &Essay();
  RulerSample s;
  const Status st = MakeRulerSample(spec, kBytes, &s);
  EXPECT_TRUE(st.ok()) << task << " " << length << ": " << st.ToString();
  return s;
}

int64_t Count(const std::string& hay, const std::string& needle) {
  int64_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

// vt and cwe at a byte-level 1024 or 2048 leave little or no room for RULER's worked example (fewshot = 0 there).
int FewshotFor(const std::string& task, int64_t length) { return (task == "vt" || task == "cwe") && length <= 2048 ? 0 : -1; }

TEST(RulerTest, EveryTaskFitsItsLengthWithItsAnswersInTheContext) {
  for (const std::string& task : RulerTaskNames()) {
    for (int64_t length : {1024, 2048, 8192}) {
      // cwe's short form (10 words 6 times) takes about 1,000 bytes by itself.
      if (task == "cwe" && length < 2048) continue;
      for (uint64_t seed : {1u, 2u, 3u}) {
        const RulerSample s = Make(task, length, seed, 0.5, FewshotFor(task, length));
        const std::string what = task + " L=" + std::to_string(length) + " seed=" + std::to_string(seed);
        // Prompt + generation budget: at most the length, and within 2% of it.
        EXPECT_EQ(s.prompt_tokens, static_cast<int64_t>(s.prompt.size()) + 1) << what;
        EXPECT_LE(s.prompt_tokens + s.tokens_to_generate, length) << what;
        EXPECT_GE(s.prompt_tokens + s.tokens_to_generate, 0.98 * static_cast<double>(length)) << what;
        ASSERT_FALSE(s.outputs.empty()) << what;
        const std::string context = s.prompt.substr(static_cast<size_t>(s.context_begin),
                                                    static_cast<size_t>(s.context_end - s.context_begin));
        for (const std::string& o : s.outputs) EXPECT_NE(context.find(o), std::string::npos) << what << ": " << o;
        EXPECT_EQ(s.prompt.substr(s.prompt.size() - s.answer_prefix.size()), s.answer_prefix) << what;
        EXPECT_EQ(s.metric, "string_match_all");
        // Nothing of the answer is in the question: the prompt past the context holds no reference,
        // except vt, whose question gives the value and cwe/fwe, whose words are the answers.
        if (task.rfind("niah", 0) == 0) {
          const std::string after = s.prompt.substr(static_cast<size_t>(s.context_end));
          for (const std::string& o : s.outputs) EXPECT_EQ(after.find(o), std::string::npos) << what;
        }
      }
    }
  }
}

// The asked needle is at the asked depth: the haystack before it over the
// whole haystack, to within a unit (a sentence, a noise block, a line).
TEST(RulerTest, TheAskedNeedleSitsAtTheAskedDepth) {
  for (const char* task : {"niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_2", "niah_multikey_3"}) {
    for (double depth : {0.0, 0.25, 0.5, 0.75, 1.0}) {
      const RulerSample s = Make(task, 8192, 5, depth);
      const std::string what = std::string(task) + " depth " + std::to_string(depth);
      EXPECT_DOUBLE_EQ(s.depth, depth);
      ASSERT_GE(s.needle_offset, s.context_begin) << what;
      EXPECT_EQ(s.prompt.compare(static_cast<size_t>(s.needle_offset), s.needle.size(), s.needle), 0) << what;
      EXPECT_NE(s.needle.find(s.outputs[0]), std::string::npos) << what;
      EXPECT_EQ(s.needle.rfind("One of the special magic ", 0), 0u) << what;
      // One needle in the single tasks: the haystack is the context without it.
      const double hay = static_cast<double>(s.context_end - s.context_begin) - static_cast<double>(s.needle.size());
      const double before = static_cast<double>(s.needle_offset - s.context_begin);
      const double unit = task == std::string("niah_multikey_3") ? 110 : 160;  // a line or sentence, at most
      EXPECT_NEAR(before / hay, depth, unit / hay) << what;
      EXPECT_EQ(Count(s.prompt, s.outputs[0]), 1) << what;
    }
  }
  // Several needles: the asked one at its depth, the others at RULER's depths.
  const RulerSample m = Make("niah_multikey_1", 8192, 6, 0.25);
  const double hay = static_cast<double>(m.context_end - m.context_begin);
  EXPECT_NEAR(static_cast<double>(m.needle_offset - m.context_begin) / hay, 0.25, 0.06);
  EXPECT_EQ(Count(m.prompt, "One of the special magic numbers for "), 4);
  // No depth asked: drawn from RULER's 40.
  const RulerSample d = Make("niah_single_2", 4096, 7, -1);
  const std::vector<int>& depths = ruler_internal::RulerDepths();
  EXPECT_NE(std::find(depths.begin(), depths.end(), static_cast<int>(std::lround(d.depth * 100))), depths.end());
}

TEST(RulerTest, SeedsDifferAndASeedIsOneSample) {
  for (const std::string& task : RulerTaskNames()) {
    const int64_t L = task == "cwe" ? 2048 : 1024;
    const int fs = FewshotFor(task, L);
    const RulerSample a = Make(task, L, 11, 0.5, fs), b = Make(task, L, 12, 0.5, fs), again = Make(task, L, 11, 0.5, fs);
    EXPECT_NE(a.prompt, b.prompt) << task;
    EXPECT_NE(a.outputs, b.outputs) << task;
    EXPECT_EQ(a.prompt, again.prompt) << task;
    if (task != "fwe") {  // fwe's coded vocabulary is sized by the length, as RULER sizes it
      // The same keys and values at another length: only the haystack grows.
      EXPECT_EQ(Make(task, 2 * L, 11, 0.5, fs).outputs, a.outputs) << task;
    }
  }
}

TEST(RulerTest, TemplatesAreRulers) {
  const RulerSample s = Make("niah_single_1", 1024, 3, 0.5);
  const std::string key = s.needle.substr(37, s.needle.find(" is: ") - 37);  // "One of the special magic numbers for KEY is: N."
  EXPECT_EQ(s.needle, "One of the special magic numbers for " + key + " is: " + s.outputs[0] + ".");
  EXPECT_EQ(s.prompt.rfind("A special magic number is hidden within the following text. Make sure to memorize it. "
                           "I will quiz you about the number afterwards.\n", 0), 0u);
  const std::string tail = "\nWhat is the special magic number for " + key + " mentioned in the provided text? "
                           "The special magic number for " + key + " mentioned in the provided text is";
  EXPECT_EQ(s.prompt.substr(s.prompt.size() - tail.size()), tail);
  EXPECT_EQ(s.answer_prefix, " The special magic number for " + key + " mentioned in the provided text is");
  EXPECT_EQ(s.outputs[0].size(), 7u);
  EXPECT_NE(s.prompt.find("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n"),
            std::string::npos);
  EXPECT_TRUE(std::regex_match(key, std::regex("[a-z]+-[a-z]+")));

  // Four answers: RULER's plural template.
  const RulerSample mv = Make("niah_multivalue", 2048, 3);
  EXPECT_EQ(mv.prompt.rfind("Some special magic numbers are hidden within the following text.", 0), 0u);
  EXPECT_NE(mv.prompt.find("\nWhat are all the special magic numbers for "), std::string::npos);
  EXPECT_EQ(mv.outputs.size(), 4u);
  const RulerSample mq = Make("niah_multiquery", 2048, 3);
  EXPECT_TRUE(std::regex_search(mq.prompt, std::regex("for [a-z]+-[a-z]+, [a-z]+-[a-z]+, [a-z]+-[a-z]+, and [a-z]+-[a-z]+ "
                                                      "mentioned in the provided text are$")));
  EXPECT_EQ(mq.outputs.size(), 4u);

  // UUIDs as Python's uuid4 writes them.
  const RulerSample u = Make("niah_multikey_3", 2048, 3);
  const std::regex uuid("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  EXPECT_TRUE(std::regex_match(u.outputs[0], uuid)) << u.outputs[0];
  // Its haystack is distractor needles; the asked key is in exactly one of them.
  const std::string asked = u.needle.substr(35, 36);  // "One of the special magic uuids for " is 35 characters
  EXPECT_TRUE(std::regex_match(asked, uuid)) << asked;
  EXPECT_EQ(Count(u.prompt.substr(0, static_cast<size_t>(u.context_end)), asked), 1);
  EXPECT_GT(Count(u.prompt, "One of the special magic uuids for "), 10);

  // vt: the chain, in order, in the noise; RULER's question and answer prefix.
  const RulerSample vt = Make("vt", 2048, 3, -1, 0);
  ASSERT_EQ(vt.outputs.size(), 5u);
  size_t at = 0;
  const std::string value = vt.needle.substr(vt.needle.rfind(' ') + 1);
  EXPECT_EQ(vt.needle, "VAR " + vt.outputs[0] + " = " + value);
  for (size_t j = 1; j < 5; ++j) {
    at = vt.prompt.find("VAR " + vt.outputs[j] + " = VAR " + vt.outputs[j - 1] + " \n", at);
    EXPECT_NE(at, std::string::npos) << j;
  }
  EXPECT_EQ(vt.prompt.rfind("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n", 0), 0u);
  const std::string vt_tail = "\nQuestion: Find all variables that are assigned the value " + value +
                              " in the text above. Answer: According to the chain(s) of variable assignment in the text "
                              "above, 5 variables are assigned the value " + value + ", they are: ";
  EXPECT_EQ(vt.prompt.substr(vt.prompt.size() - vt_tail.size()), vt_tail);
  // With RULER's worked example: another chain, answered, before the task.
  const RulerSample vt1 = Make("vt", 4096, 3, -1, 1);
  EXPECT_EQ(Count(vt1.prompt, "Memorize and track the chain(s)"), 2);
  EXPECT_EQ(Count(vt1.prompt, ", they are: "), 2);
  EXPECT_EQ(vt1.prompt.find("12345"), std::string::npos);  // the example's value was replaced

  // cwe: the 10 answers repeated 6 times each below 4096 tokens, the other words once.
  const RulerSample cwe = Make("cwe", 2048, 3, -1, 0);
  const std::string list = cwe.prompt.substr(static_cast<size_t>(cwe.context_begin),
                                             static_cast<size_t>(cwe.context_end - cwe.context_begin));
  std::map<std::string, int> freq;
  const std::regex entry("[0-9]+\\. ([a-z-]+)");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), entry); it != std::sregex_iterator(); ++it) ++freq[(*it)[1]];
  ASSERT_EQ(cwe.outputs.size(), 10u);
  for (const auto& [w, n] : freq) {
    const bool common = std::find(cwe.outputs.begin(), cwe.outputs.end(), w) != cwe.outputs.end();
    EXPECT_EQ(n, common ? 6 : 1) << w;
  }
  EXPECT_EQ(cwe.prompt.rfind("Below is a numbered list of words. In these words, some appear more often than others. "
                             "Memorize the ones that appear most often.\n1. ", 0), 0u);
  EXPECT_EQ(cwe.answer_prefix, " Answer: The top 10 words that appear most often in the list are:");

  // fwe: the three answers are the most frequent words after the noise "...", in that order.
  const RulerSample fwe = Make("fwe", 2048, 3);
  std::map<std::string, int> f;
  const std::string text = fwe.prompt.substr(static_cast<size_t>(fwe.context_begin),
                                             static_cast<size_t>(fwe.context_end - fwe.context_begin));
  for (size_t i = 0; i < text.size();) {
    const size_t j = std::min(text.find(' ', i), text.size());
    ++f[text.substr(i, j - i)];
    i = j + 1;
  }
  ASSERT_EQ(fwe.outputs.size(), 3u);
  EXPECT_GT(f["..."], f[fwe.outputs[0]]);
  EXPECT_GT(f[fwe.outputs[0]], f[fwe.outputs[1]]);
  EXPECT_GT(f[fwe.outputs[1]], f[fwe.outputs[2]]);
  for (const auto& [w, n] : f) {
    if (w != "..." && std::find(fwe.outputs.begin(), fwe.outputs.end(), w) == fwe.outputs.end()) {
      EXPECT_LE(n, f[fwe.outputs[2]]) << w;
    }
  }
  EXPECT_EQ(fwe.answer_prefix, " Answer: According to the coded text above, the three most frequently appeared words are:");
}

// cwe's shortest list is about 900 bytes: at 1,024 byte tokens (with RULER's
// 120-token budget) it fits most seeds, not all (docs/sweeps.md quotes the count).
TEST(RulerTest, CweAtOneThousandBytesFitsMostSeeds) {
  int fits = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    RulerSpec spec;
    spec.task = "cwe";
    spec.length = 1024;
    spec.seed = seed;
    spec.fewshot = 0;
    RulerSample s;
    fits += MakeRulerSample(spec, kBytes, &s).ok() ? 1 : 0;
  }
  std::printf("cwe at 1024 byte tokens: %d of 200 seeds fit\n", fits);
  EXPECT_EQ(fits, 157);
}

TEST(RulerTest, ErrorsNameTheTaskAndLength) {
  RulerSpec spec;
  RulerSample s;
  spec.task = "niah_single_9";
  Status st = MakeRulerSample(spec, kBytes, &s);
  EXPECT_NE(st.message().find("unknown RULER task 'niah_single_9'; valid: niah_single_1"), std::string::npos) << st.message();
  spec.task = "niah_single_2";  // an essay task without an essay
  st = MakeRulerSample(spec, kBytes, &s);
  EXPECT_NE(st.message().find("RULER task 'niah_single_2' at length 4096: needs an essay text"), std::string::npos) << st.message();
  spec.task = "niah_single_1";
  spec.length = 256;
  st = MakeRulerSample(spec, kBytes, &s);
  EXPECT_NE(st.message().find("RULER task 'niah_single_1' at length 256: too short"), std::string::npos) << st.message();
  spec.task = "vt";
  spec.length = 1024;  // its worked example alone is longer
  st = MakeRulerSample(spec, kBytes, &s);
  EXPECT_NE(st.message().find("fewshot = 0 drops it"), std::string::npos) << st.message();
  // A tokenizer's error comes through.
  st = MakeRulerSample(spec, [](const std::string&, int64_t*) { return Status::InvalidArgument("no tokenizer"); }, &s);
  EXPECT_NE(st.message().find("no tokenizer"), std::string::npos);
}

// RULER's aggregate, as scripts/eval/synthetic/constants.py computes it: the
// mean of the per-sample scores, times 100, rounded to 2 places.
double Aggregate(double (*metric)(const std::string&, const std::vector<std::string>&),
                 const std::vector<std::string>& preds, const std::vector<std::vector<std::string>>& refs) {
  double sum = 0;
  for (size_t i = 0; i < preds.size(); ++i) sum += metric(preds[i], refs[i]);
  return std::round(sum / static_cast<double>(preds.size()) * 100 * 100) / 100;
}

TEST(RulerTest, ScoringFollowsRulersDefinitions) {
  // One sample right, one wrong: 50.
  EXPECT_DOUBLE_EQ(Aggregate(StringMatchAll, {"The special magic number is 1234567.", "I do not know"},
                             {{"1234567"}, {"7654321"}}), 50.0);
  // Two of four values: string_match_all gives half, string_match_part all.
  const std::vector<std::string> four = {"1234567", "2345678", "3456789", "4567890"};
  EXPECT_DOUBLE_EQ(StringMatchAll("1234567, 2345678 and 9999999", four), 0.5);
  EXPECT_DOUBLE_EQ(StringMatchPart("1234567, 2345678 and 9999999", four), 1.0);
  EXPECT_DOUBLE_EQ(Aggregate(StringMatchPart, {"Paris", "in the year 1066", "no idea"},
                             {{"paris", "Paris, France"}, {"1066"}, {"London"}}), 66.67);
  // Case-insensitive substring matching (a reference inside a longer word counts, as in RULER).
  EXPECT_DOUBLE_EQ(StringMatchAll("answer: qdcsl KSEXT", {"QDCSL", "ksext"}), 1.0);
  EXPECT_DOUBLE_EQ(StringMatchAll("category", {"cat"}), 1.0);
  EXPECT_DOUBLE_EQ(StringMatchAll("", {"x"}), 0.0);
  // postprocess_pred: strip; control characters become newlines.
  EXPECT_EQ(RulerPostprocess("\x01  1234567\t\n"), "1234567");
  EXPECT_EQ(RulerPostprocess("12\x07" "34"), "12\n34");
  RulerSample s;
  s.outputs = {"1234"};
  s.metric = "string_match_all";
  EXPECT_DOUBLE_EQ(RulerScore(s, "12\x07" "34"), 0.0);  // the control character split it
  EXPECT_DOUBLE_EQ(RulerScore(s, "  1234 is the number"), 1.0);
}

TEST(RulerTest, SentencesSplitAtSentenceEnds) {
  const std::vector<std::string> s = ruler_internal::SplitSentences(
      "Mr. Smith went to Washington. He said \"no.\" Then 3 men left! Did they? Yes. A. B. Jones agreed.");
  const std::vector<std::string> want = {"Mr. Smith went to Washington.", "He said \"no.\"", "Then 3 men left!",
                                         "Did they?", "Yes.", "A. B. Jones agreed."};
  EXPECT_EQ(s, want);
  EXPECT_EQ(ruler_internal::RulerDepths().size(), 40u);
  EXPECT_EQ(ruler_internal::RulerDepths()[1], 3);  // round(100/39)
  EXPECT_EQ(ruler_internal::RulerDepths()[39], 100);
}

}  // namespace
}  // namespace kvlab
