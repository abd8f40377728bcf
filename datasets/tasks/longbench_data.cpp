// LongBench's datasets (eval.py's dataset2metric, config/dataset2maxlen.json,
// config/dataset2prompt.json), LongBench v2's prompt and answer extraction
// (prompts/0shot.txt, pred.py), and their JSONL files read as untrusted input.
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/base/untrusted.h"
#include "core/base/untrusted_json.h"
#include "datasets/tasks/dataset_records.h"
#include "datasets/tasks/infinitebench.h"
#include "datasets/tasks/longbench.h"

namespace kvlab {

using json = nlohmann::json;

namespace {

constexpr const char* kMultiDocQa =
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\n"
    "The following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only give me "
    "the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:";

// One record's line: the file's bytes [begin, end) and its 1-based number.
struct Line {
  std::string_view text;
  int64_t number = 0;
};

std::vector<Line> Lines(const std::string& text) {
  std::vector<Line> out;
  int64_t n = 0;
  size_t b = 0;
  while (b < text.size()) {
    size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    ++n;
    std::string_view l(text.data() + b, e - b);
    while (!l.empty() && (l.back() == '\r' || l.back() == ' ' || l.back() == '\t')) l.remove_suffix(1);
    size_t lead = 0;
    while (lead < l.size() && (l[lead] == ' ' || l[lead] == '\t')) ++lead;
    l.remove_prefix(lead);
    if (!l.empty()) out.push_back({l, n});
    b = e + 1;
  }
  return out;
}

// Replaces the first `key` of `tmpl` (the value is not scanned again).
std::string Fill(const std::string& tmpl, const std::string& key, const std::string& value) {
  const size_t at = tmpl.find(key);
  if (at == std::string::npos) return tmpl;
  return tmpl.substr(0, at) + value + tmpl.substr(at + key.size());
}

std::string Strip(const std::string& s) {
  const char* ws = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) + 1 - b);
}

}  // namespace

namespace dataset_internal {

std::string Where(const std::string& path, int64_t line) { return path + ":" + std::to_string(line); }

Status FieldError(const std::string& path, int64_t line, const std::string& field, const std::string& what) {
  return Status::InvalidArgument(Where(path, line) + ": field '" + field + "' " + what);
}

Status GetString(const json& o, const std::string& path, int64_t line, const std::string& field, std::string* out) {
  const auto it = o.find(field);
  if (it == o.end()) return FieldError(path, line, field, "is missing");
  if (!it->is_string()) return FieldError(path, line, field, "is " + QuoteJson(*it) + ", expected a string");
  *out = it->get<std::string>();
  return Status::OK();
}

// A list of strings; `allow_null` takes null as an empty list (all_classes).
Status GetStrings(const json& o, const std::string& path, int64_t line, const std::string& field, bool allow_null,
                  std::vector<std::string>* out) {
  out->clear();
  const auto it = o.find(field);
  if (it == o.end()) return FieldError(path, line, field, "is missing");
  if (allow_null && it->is_null()) return Status::OK();
  if (!it->is_array()) return FieldError(path, line, field, "is " + QuoteJson(*it) + ", expected a list of strings");
  for (const json& v : *it) {
    if (!v.is_string()) return FieldError(path, line, field, "holds " + QuoteJson(v) + ", expected strings");
    out->push_back(v.get<std::string>());
  }
  return Status::OK();
}

// Each non-blank line of a JSONL file as an object (or, for a file that starts
// with '[', each element of its array, numbered from 1), checked before parsing.
Status ParseObjects(const std::string& path, const std::string& text, std::vector<std::pair<json, int64_t>>* out) {
  out->clear();
  const std::vector<Line> lines = Lines(text);
  if (lines.empty()) return Status::InvalidArgument(path + ": no records (an empty file)");
  if (lines[0].text[0] == '[') {
    json arr;
    KVLAB_RETURN_IF_ERROR(ParseJsonText(text, path, kMaxDatasetBytes, &arr));
    if (!arr.is_array()) return Status::InvalidArgument(path + ": expected a JSON array of records or JSONL");
    int64_t i = 0;
    for (json& v : arr) {
      ++i;
      if (!v.is_object()) return Status::InvalidArgument(path + ": record " + std::to_string(i) + " is not an object");
      out->emplace_back(std::move(v), i);
    }
    return Status::OK();
  }
  for (const Line& l : lines) {
    json o;
    KVLAB_RETURN_IF_ERROR(ParseJsonText(l.text, Where(path, l.number), kMaxDatasetRecordBytes, &o, "JSON record"));
    if (!o.is_object()) {
      return Status::InvalidArgument(Where(path, l.number) + ": is " + QuoteJson(o) + ", expected a JSON object");
    }
    out->emplace_back(std::move(o), l.number);
  }
  return Status::OK();
}

}  // namespace dataset_internal

using namespace dataset_internal;  // NOLINT: this file's own helpers

const std::vector<LongBenchDataset>& LongBenchDatasets() {
  static const std::vector<LongBenchDataset> d = {
      {"narrativeqa", "qa_f1", 128,
       "You are given a story, which can be either a novel or a movie script, and a question. Answer the question "
       "asconcisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: "
       "{context}\n\nNow, answer the question based on the story asconcisely as you can, using a single phrase if "
       "possible. Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:",
       false},
      {"qasper", "qa_f1", 128,
       "You are given a scientific article and a question. Answer the question as concisely as you can, using a "
       "single phrase or sentence if possible. If the question cannot be answered based on the information in the "
       "article, write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or "
       "\"unanswerable\". Do not provide any explanation.\n\nArticle: {context}\n\n Answer the question based on the "
       "above article as concisely as you can, using a single phrase or sentence if possible. If the question cannot "
       "be answered based on the information in the article, write \"unanswerable\". If the question is a yes/no "
       "question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n\nQuestion: "
       "{input}\n\nAnswer:",
       false},
      {"multifieldqa_en", "qa_f1", 64,
       "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on the "
       "above text, only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:",
       false},
      {"multifieldqa_zh", "qa_f1_zh", 64,
       "阅读以下文字并用中文简短回答：\n\n{context}\n\n现在请基于上面的文章回答下面的问题，只告诉我答案，不要输出任何其他字词。"
       "\n\n问题：{input}\n回答：",
       false},
      {"hotpotqa", "qa_f1", 32, kMultiDocQa, false},
      {"2wikimqa", "qa_f1", 32, kMultiDocQa, false},
      {"musique", "qa_f1", 32, kMultiDocQa, false},
      {"dureader", "rouge_zh", 128, "请基于给定的文章回答下述问题。\n\n文章：{context}\n\n请基于上述文章回答下面的问题。\n\n问题：{input}\n回答：",
       false},
      {"gov_report", "rouge", 512,
       "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n"
       "{context}\n\nNow, write a one-page summary of the report.\n\nSummary:",
       false},
      {"qmsum", "rouge", 512,
       "You are given a meeting transcript and a query containing a question or instruction. Answer the query in one "
       "or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting transcript "
       "in one or more sentences.\n\nQuery: {input}\nAnswer:",
       false},
      {"multi_news", "rouge", 512,
       "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\nNow, write "
       "a one-page summary of all the news.\n\nSummary:",
       false},
      {"vcsum", "rouge_zh", 512, "下面有一段会议记录，请你阅读后，写一段总结，总结会议的内容。\n会议记录：\n{context}\n\n会议总结：", false},
      {"trec", "classification", 64,
       "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{input}",
       true},
      {"triviaqa", "qa_f1", 32,
       "Answer the question based on the given passage. Only give me the answer and do not output any other words. "
       "The following are some examples.\n\n{context}\n\n{input}",
       true},
      {"samsum", "rouge", 128,
       "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{input}",
       true},
      {"lsht", "classification", 64, "请判断给定新闻的类别，下面是一些例子。\n\n{context}\n{input}", true},
      {"passage_retrieval_en", "retrieval", 32,
       "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the abstract "
       "is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number of the paragraph "
       "that the abstract is from. The answer format must be like \"Paragraph 1\", \"Paragraph 2\", etc.\n\nThe "
       "answer is: ",
       false},
      {"passage_count", "count", 32,
       "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully read "
       "these paragraphs and determine how many unique paragraphs there are after removing duplicates. In other "
       "words, how many non-repeating paragraphs are there in total?\n\n{context}\n\nPlease enter the final count of "
       "unique paragraphs after removing duplicates. The output format should only contain the number, such as 1, 2, "
       "3, and so on.\n\nThe final answer is: ",
       false},
      {"passage_retrieval_zh", "retrieval_zh", 32,
       "以下是若干段落文字，以及其中一个段落的摘要。请确定给定的摘要出自哪一段。\n\n{context}\n\n下面是一个摘要\n\n{input}\n\n"
       "请输入摘要所属段落的编号。答案格式必须是\"段落1\"，\"段落2\"等格式\n\n答案是：",
       false},
      {"lcc", "code_sim", 64, "Please complete the code given below. \n{context}Next line of code:\n", false},
      {"repobench-p", "code_sim", 64, "Please complete the code given below. \n{context}{input}Next line of code:\n",
       false},
  };
  return d;
}

const LongBenchDataset* FindLongBenchDataset(const std::string& name) {
  for (const LongBenchDataset& d : LongBenchDatasets()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

bool IsDatasetTask(const std::string& task) {
  const std::string lb = "longbench-", ib = "infinitebench-";
  if (task.rfind(ib, 0) == 0) return FindInfiniteBenchTask(task.substr(ib.size())) != nullptr;
  if (task.rfind(lb, 0) != 0) return false;
  return task == "longbench-v2" || FindLongBenchDataset(task.substr(lb.size())) != nullptr;
}

double LongBenchScore(const LongBenchDataset& d, const std::string& prediction, const LongBenchRecord& r) {
  std::string p = prediction;
  if (d.first_line) {
    size_t b = 0;
    while (b < p.size() && p[b] == '\n') ++b;
    p = p.substr(b, p.find('\n', b) == std::string::npos ? std::string::npos : p.find('\n', b) - b);
  }
  double best = 0;
  for (const std::string& a : r.answers) {
    double s = 0;
    if (d.metric == "qa_f1") s = QaF1Score(p, a);
    else if (d.metric == "qa_f1_zh") s = QaF1ZhScore(p, a);
    else if (d.metric == "rouge") s = RougeLScore(p, a);
    else if (d.metric == "rouge_zh") s = RougeLZhScore(p, a);
    else if (d.metric == "classification") s = ClassificationScore(p, a, r.all_classes);
    else if (d.metric == "retrieval") s = RetrievalScore(p, a, false);
    else if (d.metric == "retrieval_zh") s = RetrievalScore(p, a, true);
    else if (d.metric == "count") s = CountScore(p, a);
    else if (d.metric == "code_sim") s = CodeSimScore(p, a);
    best = std::max(best, s);
  }
  return best;
}

std::string LongBenchLengthBucket(int64_t length) {
  if (length < 4000) return "0-4k";
  if (length < 8000) return "4-8k";
  return "8k+";
}

SplitPrompt LongBenchPrompt(const LongBenchDataset& d, const LongBenchRecord& r) {
  const size_t at = d.prompt.find("{context}");
  SplitPrompt s;
  s.head = d.prompt.substr(0, at) + r.context;
  s.tail = Fill(d.prompt.substr(at + 9), "{input}", r.input);
  return s;
}

SplitPrompt LongBenchV2Prompt(const LongBenchV2Record& r) {
  SplitPrompt s;
  s.head = "Please read the following text and answer the question below.\n\n<text>\n" + Strip(r.context);
  s.tail = "\n</text>\n\nWhat is the correct answer to this question: " + Strip(r.question) + "\nChoices:\n";
  const char* labels[] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i) s.tail += std::string("(") + labels[i] + ") " + Strip(r.choices[i]) + "\n";
  s.tail += "\nFormat your response as follows: \"The correct answer is (insert answer here)\".";
  return s;
}

std::string ExtractChoice(const std::string& response) {
  std::string r;
  for (char c : response) {
    if (c != '*') r += c;
  }
  const std::string cue = "The correct answer is ";
  for (int pass = 0; pass < 2; ++pass) {  // "(X)" anywhere first, then a bare "X"
    for (size_t at = r.find(cue); at != std::string::npos; at = r.find(cue, at + 1)) {
      const size_t p = at + cue.size();
      if (pass == 0 && p + 2 < r.size() && r[p] == '(' && r[p + 1] >= 'A' && r[p + 1] <= 'D' && r[p + 2] == ')') {
        return std::string(1, r[p + 1]);
      }
      if (pass == 1 && p < r.size() && r[p] >= 'A' && r[p] <= 'D') return std::string(1, r[p]);
    }
  }
  return "";
}

Status LoadLongBenchFile(const std::string& path, const std::string& text, const LongBenchDataset& d,
                         int64_t max_records, std::vector<LongBenchRecord>* out) {
  out->clear();
  std::vector<std::pair<json, int64_t>> objs;
  KVLAB_RETURN_IF_ERROR(ParseObjects(path, text, &objs));
  for (const auto& [o, line] : objs) {
    LongBenchRecord r;
    r.line = line;
    KVLAB_RETURN_IF_ERROR(GetString(o, path, line, "context", &r.context));
    KVLAB_RETURN_IF_ERROR(GetString(o, path, line, "input", &r.input));
    KVLAB_RETURN_IF_ERROR(GetStrings(o, path, line, "answers", false, &r.answers));
    if (r.answers.empty()) return FieldError(path, line, "answers", "is an empty list: nothing to score against");
    const bool classes = d.metric == "classification";
    if (classes || o.contains("all_classes")) {
      KVLAB_RETURN_IF_ERROR(GetStrings(o, path, line, "all_classes", !classes, &r.all_classes));
      if (classes && r.all_classes.empty()) {
        return FieldError(path, line, "all_classes", "is empty: " + d.name + "'s metric needs the class names");
      }
    }
    if (d.metric == "retrieval" || d.metric == "retrieval_zh") {
      for (const std::string& a : r.answers) {
        if (RetrievalScore(a, a, d.metric == "retrieval_zh") == 0) {
          return FieldError(path, line, "answers", "holds " + QuoteJson(json(a)) + ", expected \"" +
                                                       (d.metric == "retrieval" ? "Paragraph N" : "段落N") + "\"");
        }
      }
    }
    const auto len = o.find("length");
    if (len != o.end() && !len->is_null()) {
      if (!len->is_number_integer() || len->get<int64_t>() < 0) {
        return FieldError(path, line, "length", "is " + QuoteJson(*len) + ", expected an integer >= 0");
      }
      r.length = len->get<int64_t>();
    }
    if (max_records <= 0 || static_cast<int64_t>(out->size()) < max_records) out->push_back(std::move(r));
  }
  return Status::OK();
}

Status LoadLongBenchV2File(const std::string& path, const std::string& text, int64_t max_records,
                           std::vector<LongBenchV2Record>* out) {
  out->clear();
  std::vector<std::pair<json, int64_t>> objs;
  KVLAB_RETURN_IF_ERROR(ParseObjects(path, text, &objs));
  for (const auto& [o, line] : objs) {
    LongBenchV2Record r;
    r.line = line;
    KVLAB_RETURN_IF_ERROR(GetString(o, path, line, "_id", &r.id));
    KVLAB_RETURN_IF_ERROR(GetString(o, path, line, "question", &r.question));
    KVLAB_RETURN_IF_ERROR(GetString(o, path, line, "context", &r.context));
    const char* names[] = {"choice_A", "choice_B", "choice_C", "choice_D"};
    for (int i = 0; i < 4; ++i) KVLAB_RETURN_IF_ERROR(GetString(o, path, line, names[i], &r.choices[i]));
    KVLAB_RETURN_IF_ERROR(GetString(o, path, line, "answer", &r.answer));
    if (r.answer.size() != 1 || r.answer[0] < 'A' || r.answer[0] > 'D') {
      return FieldError(path, line, "answer", "is " + QuoteJson(json(r.answer)) + ", expected one of A, B, C, D");
    }
    for (const char* f : {"domain", "sub_domain", "difficulty", "length"}) {
      std::string v;
      if (o.contains(f)) KVLAB_RETURN_IF_ERROR(GetString(o, path, line, f, &v));
      if (std::string(f) == "domain") r.domain = v;
      else if (std::string(f) == "sub_domain") r.sub_domain = v;
      else if (std::string(f) == "difficulty") r.difficulty = v;
      else r.length = v;
    }
    if (max_records <= 0 || static_cast<int64_t>(out->size()) < max_records) out->push_back(std::move(r));
  }
  return Status::OK();
}

}  // namespace kvlab
