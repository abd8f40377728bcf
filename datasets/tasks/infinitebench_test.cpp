// InfiniteBench's scorers (datasets/tasks/infinitebench.h) on predictions of
// the shapes its published result files hold (results/*/preds_*.jsonl), each
// expected score derived by hand from compute_scores.py's definitions; its
// base-model prompts; and its files read as untrusted input.
#include "datasets/tasks/infinitebench.h"

#include <gtest/gtest.h>

namespace kvlab {
namespace {

InfiniteBenchRecord Labels(std::vector<std::string> labels) {
  InfiniteBenchRecord r;
  r.labels = std::move(labels);
  return r;
}

double Score(const std::string& task, const std::string& pred, const InfiniteBenchRecord& r) {
  return InfiniteBenchScore(*FindInfiniteBenchTask(task), pred, r);
}

TEST(InfiniteBenchScoreTest, RetrievalTasks) {
  // passkey / number_string: the first run of digits equals the label.
  EXPECT_EQ(Score("passkey", " 71432. Remember it. 71432", Labels({"71432"})), 1.0);
  EXPECT_EQ(Score("passkey", " not explicitly stated in the text.", Labels({"69079"})), 0.0);
  EXPECT_EQ(Score("passkey", " 071432", Labels({"71432"})), 0.0);  // compared as text
  EXPECT_EQ(Score("number_string", " 3000077442.\n\nIf you", Labels({"3000077442"})), 1.0);
  // kv_retrieval: the label among the words once : " ' . , ? ! { } and newlines are spaces.
  const std::string uuid = "5e6b7b90-710d-4953-9b18-3e96b2cadbf2";
  EXPECT_EQ(Score("kv_retrieval", "The value is \"" + uuid + "\".", Labels({uuid})), 1.0);
  EXPECT_EQ(Score("kv_retrieval", "The value is " + uuid + "x", Labels({uuid})), 0.0);
}

TEST(InfiniteBenchScoreTest, ChoiceAndCodeDebug) {
  const InfiniteBenchRecord c = Labels({"Walking Georgie", "A"});
  EXPECT_EQ(Score("longbook_choice_eng", " A", c), 1.0);            // the first letter
  EXPECT_EQ(Score("longbook_choice_eng", " B. Snowfield", c), 0.0);
  EXPECT_EQ(Score("longbook_choice_eng", "Walking Georgie", c), 1.0);  // the option's text itself
  EXPECT_EQ(Score("longbook_choice_eng", "The answer is: A", c), 1.0);  // after "answer is:"
  EXPECT_EQ(Score("longbook_choice_eng", "I think the answer is C", c), 0.0);
  EXPECT_EQ(Score("longbook_choice_eng", "so then A", c), 1.0);      // the first word in "ABCD"
  EXPECT_EQ(Score("longbook_choice_eng", "", c), 0.0);
  const InfiniteBenchRecord d = Labels({"repack_carchive", "B"});
  EXPECT_EQ(Score("code_debug", "B. repack", d), 1.0);
  // "option" blanked, spaces collapsed: "The correct is: B", then after "is:" comes "B".
  EXPECT_EQ(Score("code_debug", " The correct option is: B", d), 1.0);
  EXPECT_EQ(Score("code_debug", "answer: repack_carchive()", d), 1.0);
  EXPECT_EQ(Score("code_debug", "answer: C", d), 0.0);
  EXPECT_EQ(Score("code_debug", "B", d), 0.0);  // neither "B." nor a prefix
}

TEST(InfiniteBenchScoreTest, RougeLsum) {
  // Reference [the cat was on the mat]; candidate sentences [the cat sat], [on the mat]:
  // the LCS positions {the, cat} and {on, the, mat} unite to 5 hits of 6 and 6: F = 5/6.
  EXPECT_NEAR(RougeLsumScore("the cat sat\non the mat", "the cat was on the mat"), 5.0 / 6, 1e-12);
  // One sentence: plain ROUGE-L, LCS 5 of 6 words.
  EXPECT_NEAR(RougeLsumScore("the cat sat on the mat", "the cat was on the mat"), 5.0 / 6, 1e-12);
  // The tokenizer: lower case, punctuation a separator.
  EXPECT_DOUBLE_EQ(RougeLsumScore("Hello, World!", "hello world"), 1.0);
  // A token counts once however many reference sentences select it: [a] twice against one "a".
  EXPECT_NEAR(RougeLsumScore("a", "a\na"), 2 * 1.0 * 0.5 / 1.5, 1e-12);
  EXPECT_DOUBLE_EQ(RougeLsumScore("", "a b"), 0.0);
  EXPECT_DOUBLE_EQ(RougeLsumScore("...", "a b"), 0.0);
  // The best over the answers.
  EXPECT_DOUBLE_EQ(Score("longbook_sum_eng", "x y", Labels({"a b", "x y"})), 1.0);
}

TEST(InfiniteBenchScoreTest, QaDialogueMathCode) {
  // [final to perish is mrs deandra mrs deandra] vs [mrs deandra]: p = 2/8, r = 1: F1 0.4.
  EXPECT_NEAR(Score("longbook_qa_eng", " The final to perish is Mrs. Deandra. Mrs. Deandra'", Labels({"\"Mrs. Deandra\""})),
              0.4, 1e-12);
  // One character one token: [北 京 中 国] vs [北 京].
  EXPECT_NEAR(Score("longbook_qa_chn", "北京，中国", Labels({"北京"})), 2.0 / 3, 1e-12);
  EXPECT_EQ(Score("longdialogue_qa_eng", " referring to Nicky Santoro.", Labels({"ACE", "ACE ROTHSTEIN"})), 0.0);
  EXPECT_EQ(Score("longdialogue_qa_eng", " Ace. He was", Labels({"ACE", "ACE ROTHSTEIN"})), 1.0);
  EXPECT_EQ(Score("longdialogue_qa_eng", " Rothstein", Labels({"ACE", "ROTHSTEIN"})), 0.0);  // the first label only
  EXPECT_EQ(Score("math_find", "85\n\nAs an AI", Labels({"88"})), 0.0);
  EXPECT_EQ(Score("math_find", "88 is the largest", Labels({"88"})), 1.0);
  EXPECT_EQ(Score("math_find", "088", Labels({"88"})), 1.0);  // int("088") == 88
  InfiniteBenchRecord f = Labels({"2.5"});
  f.float_label = true;
  EXPECT_EQ(Score("math_find", "it is 2.50", f), 1.0);
  EXPECT_EQ(Score("math_find", "it is 2.5.", Labels({"2"})), 0.0);
  InfiniteBenchRecord calc = Labels({"[1, 4, 9]"});
  calc.values = {"1", "4", "9"};
  EXPECT_NEAR(Score("math_calc", " [1, 4, 8, 9]", calc), 2.0 / 3, 1e-12);  // matched up to the first miss
  EXPECT_EQ(Score("math_calc", "nothing", calc), 0.0);
  // code_run: the last word as an integer.
  EXPECT_EQ(Score("code_run", " 24.\n\nThe value of func_6351(", Labels({"4"})), 0.0);
  EXPECT_EQ(Score("code_run", " is -7.", Labels({"-7"})), 1.0);
  EXPECT_EQ(Score("code_run", " 4", Labels({"4"})), 1.0);
}

std::string Load(const std::string& task, const std::string& text, std::vector<InfiniteBenchRecord>* out) {
  const Status s = LoadInfiniteBenchFile("ib.jsonl", text, *FindInfiniteBenchTask(task), 0, out);
  return s.ok() ? "" : s.message();
}

TEST(InfiniteBenchFileTest, PromptsAndLabelsFromRecords) {
  std::vector<InfiniteBenchRecord> r;
  ASSERT_EQ(Load("passkey", "{\"id\": 0, \"context\": \"CTX\", \"input\": \"What is the pass key?\", \"answer\": [\"71432\"]}", &r), "");
  SplitPrompt p = InfiniteBenchPrompt(*FindInfiniteBenchTask("passkey"), r[0]);
  EXPECT_EQ(p.head + p.tail,
            "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you "
            "about the important information.\n\nCTX\n\nWhat is the pass key?\n\nThe pass key is");
  EXPECT_EQ(p.tail, "\n\nWhat is the pass key?\n\nThe pass key is");
  // The choice tasks' labels: the answer's text and its option's letter.
  ASSERT_EQ(Load("longbook_choice_eng",
                 "{\"context\": \"B\", \"input\": \"Q?\", \"answer\": [\"y\"], \"options\": [\"x\", \"y\", \"z\", \"w\"]}", &r),
            "");
  EXPECT_EQ(r[0].labels, (std::vector<std::string>{"y", "B"}));
  p = InfiniteBenchPrompt(*FindInfiniteBenchTask("longbook_choice_eng"), r[0]);
  EXPECT_EQ(p.tail, "\n\nQuestion: Q?\nA. x\nB. y\nC. z\nD. w\n\nThe letter of the correct answer is");
  ASSERT_EQ(Load("code_run", "{\"context\": \"def f(): pass\", \"input\": \"Compute func_12(-3) please\", \"answer\": [-3]}", &r), "");
  EXPECT_EQ(r[0].func_call, "func_12(-3)");
  EXPECT_EQ(r[0].labels[0], "-3");
  p = InfiniteBenchPrompt(*FindInfiniteBenchTask("code_run"), r[0]);
  EXPECT_EQ(p.head, "There is a function called func_12 in the following Python code.\n\ndef f(): pass");
  EXPECT_EQ(p.tail, "\n\nPlease compute the exact value of func_12(-3). The value of func_12(-3) is");
  ASSERT_EQ(Load("math_find", "{\"context\": \"[1, 9]\", \"input\": \"The sum of the squares of x is?\", \"answer\": [9]}", &r), "");
  EXPECT_EQ(r[0].target, "the sum of the squares");  // greedy, as the regex
  EXPECT_FALSE(r[0].float_label);
  ASSERT_EQ(Load("math_calc", "{\"context\": \"1 + 2\", \"input\": \"\", \"answer\": [[1, 3]]}", &r), "");
  EXPECT_EQ(r[0].values, (std::vector<std::string>{"1", "3"}));
  ASSERT_EQ(Load("kv_retrieval", "{\"context\": \"{}\", \"input\": \"k\", \"answer\": \"v\"}", &r), "");
  EXPECT_EQ(r[0].labels, (std::vector<std::string>{"v"}));
}

TEST(InfiniteBenchFileTest, BadInputNamesFileLineAndField) {
  std::vector<InfiniteBenchRecord> r;
  const std::string ok = "{\"context\": \"c\", \"input\": \"q\", \"answer\": [\"a\"]}\n";
  EXPECT_EQ(Load("passkey", ok + "{\"context\": \"c\", \"input\": \"q\"}", &r), "ib.jsonl:2: field 'answer' is missing");
  EXPECT_EQ(Load("passkey", "{\"context\": \"c\", \"input\": \"q\", \"answer\": []}", &r),
            "ib.jsonl:1: field 'answer' is an empty list: nothing to score against");
  EXPECT_EQ(Load("passkey", "{\"context\": [1], \"input\": \"q\", \"answer\": [\"a\"]}", &r),
            "ib.jsonl:1: field 'context' is [1], expected a string");
  EXPECT_EQ(Load("passkey", "{\"context\": \"c\", \"input\": \"q\", \"answer\": [{}]}", &r),
            "ib.jsonl:1: field 'answer' holds {}, expected strings or numbers");
  EXPECT_EQ(Load("longbook_choice_eng", "{\"context\": \"c\", \"input\": \"q\", \"answer\": [\"v\"], \"options\": [\"x\", \"y\", \"z\", \"w\"]}", &r),
            "ib.jsonl:1: field 'answer' is [\"v\"], expected one of the options (or [option, letter])");
  EXPECT_EQ(Load("code_debug", "{\"context\": \"c\", \"input\": \"q\", \"answer\": [\"x\"], \"options\": [\"x\", \"y\"]}", &r),
            "ib.jsonl:1: field 'options' has 2 entries, expected 4");
  EXPECT_EQ(Load("code_run", "{\"context\": \"c\", \"input\": \"func_1(2)\", \"answer\": [\"four\"]}", &r),
            "ib.jsonl:1: field 'answer' is [\"four\"], expected an integer");
  EXPECT_EQ(Load("code_run", "{\"context\": \"c\", \"input\": \"func_(2)\", \"answer\": [4]}", &r)
                .find("ib.jsonl:1: field 'input' names no call func_N(M)"),
            0u);
  EXPECT_EQ(Load("math_find", "{\"context\": \"c\", \"input\": \"The of\", \"answer\": [4]}", &r)
                .find("ib.jsonl:1: field 'input' names no \"The ... of\""),
            0u);
  EXPECT_EQ(Load("math_find", ok, &r).find("ib.jsonl:1: field 'answer' is [\"a\"], expected a number"), 0u);
  EXPECT_EQ(Load("math_calc", "{\"context\": \"c\", \"input\": \"\", \"answer\": [1, \"2\"]}", &r),
            "ib.jsonl:1: field 'answer' holds \"2\", expected integers");
}

}  // namespace
}  // namespace kvlab
