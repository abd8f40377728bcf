// LongBench's metrics (datasets/tasks/longbench.h) on cases computed by hand
// from metrics.py's definitions and on the published examples of the
// libraries it calls (fuzzywuzzy's README, the `rouge` package's README);
// eval.py's scorer rules; LongBench v2's prompt and answer extraction; and
// the files read as untrusted input (errors name the file, line and field).
#include "datasets/tasks/longbench.h"

#include <gtest/gtest.h>

namespace kvlab {
namespace {

TEST(LongBenchMetricsTest, NormalizeAnswerAsSquad) {
  EXPECT_EQ(NormalizeAnswer("The  Cat, an apple!"), "cat apple");
  EXPECT_EQ(NormalizeAnswer("Theory and Anthem"), "theory and anthem");  // whole words only
  EXPECT_EQ(NormalizeAnswer("A.B. the-end"), "ab theend");               // punctuation first, then articles
  EXPECT_EQ(NormalizeAnswer("  \t\n"), "");
}

TEST(LongBenchMetricsTest, QaF1ByHand) {
  EXPECT_DOUBLE_EQ(QaF1Score("Denver Broncos", "Denver Broncos"), 1.0);
  // [ada, finch, built, it] vs [ada, finch]: p = 1/2, r = 1.
  EXPECT_NEAR(QaF1Score("The Ada Finch built it.", "Ada Finch"), 2.0 / 3, 1e-12);
  // Counter intersection: x:1, y:1 of [x x y] and [x y y]: p = r = 2/3.
  EXPECT_NEAR(QaF1Score("x x y", "x y y"), 2.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(QaF1Score("nothing alike", "Ada Finch"), 0.0);
  EXPECT_DOUBLE_EQ(QaF1Score("", "Ada Finch"), 0.0);
  EXPECT_DOUBLE_EQ(QaF1Score("the", "a"), 0.0);  // both normalise to no words
}

TEST(LongBenchMetricsTest, QaF1ZhOverCharacters) {
  // [艾 达 芬 奇] vs [芬 奇]: p = 1/2, r = 1; punctuation dropped.
  EXPECT_NEAR(QaF1ZhScore("艾达芬奇。", "芬奇"), 2.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(QaF1ZhScore("北京", "北京！"), 1.0);
  EXPECT_DOUBLE_EQ(QaF1ZhScore("ABC 北京", "abc北京"), 1.0);  // ASCII runs lower-cased
}

TEST(LongBenchMetricsTest, RougeLAsTheRougePackage) {
  // One sentence each: sets of 5 distinct words; the union LCS {the, cat, on,
  // mat} is 4 words (the package counts distinct words, where plain ROUGE-L
  // would give 5/6): p = r = 4/5.
  EXPECT_NEAR(RougeLScore("the cat sat on the mat", "the cat was on the mat"), 2 * 0.64 / (1.6 + 1e-8), 1e-12);
  // Two hypothesis sentences: LCS [a b] with the first, [d e] with the second:
  // union 4 of the reference's 4, the hypothesis's 5 distinct words: p = 4/5, r = 1.
  EXPECT_NEAR(RougeLScore("a b c. d e", "a b d e"), 2 * 0.8 / (1.8 + 1e-8), 1e-12);
  // ". " leaves a sentence of spaces, which becomes one empty word: n = 3.
  EXPECT_NEAR(RougeLScore("a b. ", "a b"), 2 * (2.0 / 3) / (2.0 / 3 + 1 + 1e-8), 1e-12);
  EXPECT_DOUBLE_EQ(RougeLScore("", "a b"), 0.0);     // no sentence: the package raises, LongBench scores 0
  EXPECT_DOUBLE_EQ(RougeLScore("...", "a b"), 0.0);
  EXPECT_DOUBLE_EQ(RougeLScore("x y", "a b"), 0.0);
  EXPECT_NEAR(RougeLScore("Ada Finch", "Ada Finch"), 1.0, 1e-8);
  // The `rouge` package's README example. Its README prints rouge-l "f"
  // 0.447 from before the package counted distinct words; its release 1.0.1
  // (what pip installs for LongBench), run on the pair, gives 0.4819277059660328.
  const std::string hyp =
      "the #### transcript is a written version of each day 's cnn student news program use this transcript to help "
      "students with reading comprehension and vocabulary use the weekly newsquiz to test your knowledge of storie s "
      "you saw on cnn student news";
  const std::string ref =
      "this page includes the show transcript use the transcript to help students with reading comprehension and "
      "vocabulary at the bottom of the page , comment for a chance to be mentioned on cnn student news . you must be "
      "a teacher or a student age # # or older to request a mention on the cnn student news roll call . the weekly "
      "newsquiz tests students ' knowledge of even ts in the news";
  EXPECT_NEAR(RougeLScore(hyp, ref), 0.4819277059660328, 1e-12);
}

TEST(LongBenchMetricsTest, ClassificationWithLongBenchsLoop) {
  const std::vector<std::string> classes = {"Individual", "Date", "City"};
  EXPECT_DOUBLE_EQ(ClassificationScore("Individual", "Individual", classes), 1.0);
  EXPECT_DOUBLE_EQ(ClassificationScore("City or Individual", "Individual", classes), 0.5);
  EXPECT_DOUBLE_EQ(ClassificationScore("Date", "Individual", classes), 0.0);
  // A named class inside the reference is dropped: only "Other location" counts.
  EXPECT_DOUBLE_EQ(ClassificationScore("Other location", "Other location", {"Other location", "location"}), 1.0);
  // The loop removes from the list it walks: after "ab" goes, "a" is skipped
  // and stays, so two classes remain named (1/2, not 1).
  EXPECT_DOUBLE_EQ(ClassificationScore("abc", "abc", {"ab", "a", "b", "abc"}), 0.5);
}

TEST(LongBenchMetricsTest, RetrievalAndCount) {
  EXPECT_DOUBLE_EQ(RetrievalScore("Paragraph 12", "Paragraph 12"), 1.0);
  EXPECT_DOUBLE_EQ(RetrievalScore("Paragraph 3 or Paragraph 12", "Paragraph 12"), 0.5);
  EXPECT_DOUBLE_EQ(RetrievalScore("Paragraph 120", "Paragraph 12"), 0.0);
  EXPECT_DOUBLE_EQ(RetrievalScore("none", "Paragraph 12"), 0.0);
  EXPECT_DOUBLE_EQ(RetrievalScore("段落5", "段落5", true), 1.0);
  EXPECT_DOUBLE_EQ(CountScore("There are 7 unique paragraphs out of 10", "7"), 0.5);
  EXPECT_DOUBLE_EQ(CountScore("07", "7"), 0.0);  // compared as strings
  EXPECT_DOUBLE_EQ(CountScore("seven", "7"), 0.0);
}

TEST(LongBenchMetricsTest, FuzzRatioAsFuzzywuzzy) {
  // fuzzywuzzy's README examples.
  EXPECT_DOUBLE_EQ(FuzzRatio("this is a test", "this is a test!"), 0.97);
  EXPECT_DOUBLE_EQ(FuzzRatio("fuzzy wuzzy was a bear", "wuzzy fuzzy was a bear"), 0.91);
  // kitten / sitting: LCS "ittn", 2 * 4 / 13 = 61.5% -> 62.
  EXPECT_DOUBLE_EQ(FuzzRatio("kitten", "sitting"), 0.62);
  // 2 * 1 / 16 = 12.5% exactly: Python's round goes to even, 12.
  EXPECT_DOUBLE_EQ(FuzzRatio("a", "abbbbbbbbbbbbbb"), 0.12);
  EXPECT_DOUBLE_EQ(FuzzRatio("", ""), 1.0);
  EXPECT_DOUBLE_EQ(FuzzRatio("", "x"), 0.0);
  EXPECT_DOUBLE_EQ(FuzzRatio("北京", "北京市"), 0.8);  // code points: 2 * 2 / 5
}

TEST(LongBenchMetricsTest, CodeSimTakesTheFirstCodeLine) {
  EXPECT_DOUBLE_EQ(CodeSimScore("\n# comment\n// also\nx = foo(1)\nmore", "x = foo(1)"), 1.0);
  EXPECT_DOUBLE_EQ(CodeSimScore("```python\n", "x = foo(1)"), 0.0);  // the empty second line is taken
  EXPECT_DOUBLE_EQ(CodeSimScore("kitten\nx", "sitting"), 0.62);
}

TEST(LongBenchMetricsTest, ScorerRules) {
  const LongBenchDataset* trec = FindLongBenchDataset("trec");
  const LongBenchDataset* hotpot = FindLongBenchDataset("hotpotqa");
  ASSERT_NE(trec, nullptr);
  ASSERT_NE(hotpot, nullptr);
  EXPECT_EQ(LongBenchDatasets().size(), 21u);
  EXPECT_EQ(FindLongBenchDataset("gov_report")->metric, "rouge");
  EXPECT_EQ(FindLongBenchDataset("gov_report")->max_gen, 512);
  EXPECT_EQ(FindLongBenchDataset("repobench-p")->metric, "code_sim");
  EXPECT_EQ(FindLongBenchDataset("nosuch"), nullptr);
  LongBenchRecord r;
  r.answers = {"Individual"};
  r.all_classes = {"Individual", "Date"};
  // trec scores the first line only: "Date" on the second line does not count.
  EXPECT_DOUBLE_EQ(LongBenchScore(*trec, "\nIndividual\nDate", r), 1.0);
  EXPECT_DOUBLE_EQ(ClassificationScore("\nIndividual\nDate", "Individual", r.all_classes), 0.5);
  // The maximum over the answers.
  LongBenchRecord q;
  q.answers = {"Selby", "the port of Selby"};
  EXPECT_DOUBLE_EQ(LongBenchScore(*hotpot, "port of Selby", q), 1.0);
  EXPECT_DOUBLE_EQ(QaF1Score("port of Selby", "Selby"), 0.5);
  EXPECT_EQ(LongBenchLengthBucket(3999), "0-4k");
  EXPECT_EQ(LongBenchLengthBucket(4000), "4-8k");
  EXPECT_EQ(LongBenchLengthBucket(7999), "4-8k");
  EXPECT_EQ(LongBenchLengthBucket(8000), "8k+");
}

TEST(LongBenchPromptTest, TemplatesSplitWhereTheContextEnds) {
  LongBenchRecord r;
  r.context = "P1 {input} stays";
  r.input = "Who?";
  const SplitPrompt s = LongBenchPrompt(*FindLongBenchDataset("hotpotqa"), r);
  EXPECT_EQ(s.head,
            "Answer the question based on the given passages. Only give me the answer and do not output any other "
            "words.\n\nThe following are given passages.\nP1 {input} stays");
  EXPECT_EQ(s.tail,
            "\n\nAnswer the question based on the given passages. Only give me the answer and do not output any other "
            "words.\n\nQuestion: Who?\nAnswer:");
  const SplitPrompt lcc = LongBenchPrompt(*FindLongBenchDataset("lcc"), r);
  EXPECT_EQ(lcc.head + lcc.tail, "Please complete the code given below. \nP1 {input} staysNext line of code:\n");

  LongBenchV2Record v;
  v.context = "  the text \n";
  v.question = " Q? ";
  v.choices[0] = "a";
  v.choices[1] = "b";
  v.choices[2] = "c";
  v.choices[3] = " d";
  const SplitPrompt p = LongBenchV2Prompt(v);
  EXPECT_EQ(p.head + p.tail,
            "Please read the following text and answer the question below.\n\n<text>\nthe text\n</text>\n\n"
            "What is the correct answer to this question: Q?\nChoices:\n(A) a\n(B) b\n(C) c\n(D) d\n\n"
            "Format your response as follows: \"The correct answer is (insert answer here)\".");
  EXPECT_EQ(p.tail.rfind("\n</text>", 0), 0u);
}

TEST(LongBenchPromptTest, ExtractChoiceAsPredPy) {
  EXPECT_EQ(ExtractChoice("The correct answer is (B)."), "B");
  EXPECT_EQ(ExtractChoice("**The correct answer is** C"), "C");  // '*' removed first
  EXPECT_EQ(ExtractChoice("**The correct answer is C**"), "C");
  EXPECT_EQ(ExtractChoice("The correct answer is E. The correct answer is (D)"), "D");  // the "(X)" form first
  EXPECT_EQ(ExtractChoice("I think (A)"), "");
  EXPECT_EQ(ExtractChoice("the correct answer is (A)"), "");  // case-sensitive, as the regex
}

std::string Fails(const std::string& text, const std::string& dataset = "hotpotqa") {
  std::vector<LongBenchRecord> out;
  const Status s = LoadLongBenchFile("f.jsonl", text, *FindLongBenchDataset(dataset), 0, &out);
  EXPECT_FALSE(s.ok()) << text;
  return s.message();
}

TEST(LongBenchFileTest, ReadsRecordsAndKeepsTheFirst) {
  const std::string text =
      "{\"input\": \"q1\", \"context\": \"c1\", \"answers\": [\"a\"], \"length\": 12, \"all_classes\": null}\n\n"
      "{\"input\": \"q2\", \"context\": \"c2\", \"answers\": [\"b\", \"c\"], \"length\": 4000}\r\n";
  std::vector<LongBenchRecord> out;
  ASSERT_TRUE(LoadLongBenchFile("f.jsonl", text, *FindLongBenchDataset("hotpotqa"), 0, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].line, 3);
  EXPECT_EQ(out[1].answers, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(out[1].length, 4000);
  ASSERT_TRUE(LoadLongBenchFile("f.jsonl", text, *FindLongBenchDataset("hotpotqa"), 1, &out).ok());
  EXPECT_EQ(out.size(), 1u);
  // Every line is checked, also past the records kept.
  const std::string bad = text + "{\"input\": 3}\n";
  EXPECT_FALSE(LoadLongBenchFile("f.jsonl", bad, *FindLongBenchDataset("hotpotqa"), 1, &out).ok());
}

TEST(LongBenchFileTest, BadInputNamesFileLineAndField) {
  const std::string ok = "{\"input\": \"q\", \"context\": \"c\", \"answers\": [\"a\"]}\n";
  EXPECT_EQ(Fails(ok + "{\"context\": \"c\", \"answers\": [\"a\"]}\n"), "f.jsonl:2: field 'input' is missing");
  EXPECT_EQ(Fails("{\"input\": \"q\", \"context\": \"c\", \"answers\": \"a\"}"),
            "f.jsonl:1: field 'answers' is \"a\", expected a list of strings");
  EXPECT_EQ(Fails("{\"input\": \"q\", \"context\": 7, \"answers\": [\"a\"]}"),
            "f.jsonl:1: field 'context' is 7, expected a string");
  EXPECT_EQ(Fails(ok + ok + "{\"input\": \"q\", \"context\": \"c\", \"answers\": []}"),
            "f.jsonl:3: field 'answers' is an empty list: nothing to score against");
  EXPECT_EQ(Fails("{\"input\": \"q\", \"context\": \"c\", \"answers\": [1]}"),
            "f.jsonl:1: field 'answers' holds 1, expected strings");
  EXPECT_EQ(Fails("{\"input\": \"q\", \"context\": \"c\", \"answers\": [\"a\"], \"length\": \"long\"}"),
            "f.jsonl:1: field 'length' is \"long\", expected an integer >= 0");
  EXPECT_NE(Fails(ok + "{\"input\": \"q\", \n").find("f.jsonl:2: malformed JSON record"), std::string::npos);
  EXPECT_EQ(Fails("[1, 2]\n"), "f.jsonl: record 1 is not an object");  // a JSON array file
  EXPECT_EQ(Fails(ok + "\"q\"\n"), "f.jsonl:2: is \"q\", expected a JSON object");
  EXPECT_EQ(Fails("\n\n"), "f.jsonl: no records (an empty file)");
  // Dataset rules: trec needs its classes; passage retrieval's answers name a paragraph.
  EXPECT_EQ(Fails(ok, "trec"), "f.jsonl:1: field 'all_classes' is missing");
  EXPECT_EQ(Fails("{\"input\": \"q\", \"context\": \"c\", \"answers\": [\"a\"], \"all_classes\": null}", "trec"),
            "f.jsonl:1: field 'all_classes' is null, expected a list of strings");
  EXPECT_EQ(Fails(ok, "passage_retrieval_en"), "f.jsonl:1: field 'answers' holds \"a\", expected \"Paragraph N\"");
  // Deeply nested input is refused before parsing.
  EXPECT_NE(Fails("{\"a\": " + std::string(200, '[') + std::string(200, ']') + "}\n").find("f.jsonl:1"),
            std::string::npos);
}

TEST(LongBenchFileTest, V2RecordsAndErrors) {
  const std::string rec =
      "{\"_id\": \"x\", \"domain\": \"d\", \"sub_domain\": \"s\", \"difficulty\": \"hard\", \"length\": \"short\", "
      "\"question\": \"q\", \"choice_A\": \"a\", \"choice_B\": \"b\", \"choice_C\": \"c\", \"choice_D\": \"d\", "
      "\"answer\": \"ANSWER\", \"context\": \"ctx\"}";
  auto with = [&](const std::string& answer) {
    std::string r = rec;
    r.replace(r.find("ANSWER"), 6, answer);
    return r;
  };
  std::vector<LongBenchV2Record> out;
  ASSERT_TRUE(LoadLongBenchV2File("v2.jsonl", with("C") + "\n", 0, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].answer, "C");
  EXPECT_EQ(out[0].difficulty, "hard");
  EXPECT_EQ(out[0].choices[3], "d");
  // A JSON array (LongBench v2's data.json) is read too, records numbered from 1.
  ASSERT_TRUE(LoadLongBenchV2File("v2.json", "[" + with("A") + ", " + with("B") + "]", 0, &out).ok());
  EXPECT_EQ(out.size(), 2u);
  Status s = LoadLongBenchV2File("v2.jsonl", with("E") + "\n", 0, &out);
  EXPECT_EQ(s.message(), "v2.jsonl:1: field 'answer' is \"E\", expected one of A, B, C, D");
  std::string no_b = with("A");
  no_b.erase(no_b.find("\"choice_B\""), std::string("\"choice_B\": \"b\", ").size());
  s = LoadLongBenchV2File("v2.jsonl", with("A") + "\n" + no_b + "\n", 0, &out);
  EXPECT_EQ(s.message(), "v2.jsonl:2: field 'choice_B' is missing");
}

}  // namespace
}  // namespace kvlab
