// InfiniteBench's base-model prompts, scorers and files (infinitebench.h).
#include "datasets/tasks/infinitebench.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/base/untrusted_json.h"
#include "datasets/tasks/dataset_records.h"

namespace kvlab {

using json = nlohmann::json;
using namespace dataset_internal;  // NOLINT

namespace {

// Every `from` in s replaced by `to` (str.replace).
std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

std::string Strip(const std::string& s) {
  const char* ws = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(ws);
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(ws) + 1 - b);
}

std::vector<std::string> Words(const std::string& s) {  // str.split()
  std::vector<std::string> out;
  std::string w;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  if (!w.empty()) out.push_back(w);
  return out;
}

std::string Blank(std::string s, const std::vector<std::string>& chars) {
  for (const std::string& c : chars) s = ReplaceAll(s, c, " ");
  return s;
}

// while "  " in s: s = s.replace("  ", " ")
std::string Collapse(std::string s) {
  while (s.find("  ") != std::string::npos) s = ReplaceAll(s, "  ", " ");
  return s;
}

std::vector<std::string> DigitRuns(const std::string& s) {  // re.split("[^0-9]"), empties dropped
  std::vector<std::string> out;
  std::string run;
  for (char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c))) run += c;
    else if (!run.empty()) out.push_back(run), run.clear();
  }
  if (!run.empty()) out.push_back(run);
  return out;
}

// An integer's text as int() then str() would give it: leading zeros dropped.
std::string IntText(const std::string& digits) {
  size_t b = 0;
  while (b + 1 < digits.size() && digits[b] == '0') ++b;
  return digits.substr(b);
}

// An optional sign and digits (Python's int() of a word, without underscores).
bool ParseIntWord(const std::string& w, std::string* out) {
  size_t b = (w.size() > 1 && (w[0] == '-' || w[0] == '+')) ? 1 : 0;
  if (b >= w.size()) return false;
  for (size_t i = b; i < w.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(w[i]))) return false;
  }
  const std::string mag = IntText(w.substr(b));
  *out = (w[0] == '-' && mag != "0") ? "-" + mag : mag;
  return true;
}

bool StartsWith(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// The text after `prefix` as the scorers take it (pred[idx + len(prefix) + 1:]); false when it ends there.
bool AfterPrefix(const std::string& pred, const std::string& prefix, size_t idx, std::string* after) {
  if (pred.size() < idx + prefix.size() + 1) return false;
  *after = pred.substr(idx + prefix.size() + 1);
  return true;
}

double ChoiceScore(std::string pred, const std::vector<std::string>& label) {
  auto in_label = [&](const std::string& s) { return std::find(label.begin(), label.end(), s) != label.end(); };
  pred = Strip(pred);
  if (pred.empty()) return 0;
  if (std::string("ABCD").find(pred[0]) != std::string::npos) return in_label(std::string(1, pred[0])) ? 1 : 0;
  if (in_label(pred)) return 1;
  pred = Collapse(Blank(pred, {"\n", "\"", "'", ".", ",", "?", "!", "{", "}"}));
  for (const std::string prefix : {"answer is:", "answer:", "answer is", "option is"}) {
    const size_t idx = pred.find(prefix);
    if (idx == std::string::npos) continue;
    std::string after;
    if (!AfterPrefix(pred, prefix, idx, &after)) return 0;
    for (const std::string& s : label) {
      if (StartsWith(after, s)) return 1;
    }
    return 0;
  }
  for (const std::string& w : Words(pred)) {
    if (std::string("ABCD").find(w) != std::string::npos) return in_label(w) ? 1 : 0;  // `word in "ABCD"`: a substring
  }
  return 0;
}

double CodeDebugScore(std::string pred, const std::vector<std::string>& label) {
  const std::string& fn = label[0];
  const std::string& letter = label[1];
  pred = Strip(pred);
  if (pred.substr(0, 2) == letter + "." || pred.substr(0, 2) == letter + ":") return 1;
  pred = Collapse(Blank(pred, {"\n", "`", "'", "\"", "-", "*", "Option", "option"}));
  for (const std::string prefix : {"answer is:", "is:", "answer:", "correct option is:"}) {
    const size_t idx = pred.find(prefix);
    if (idx == std::string::npos) continue;
    std::string after;
    if (!AfterPrefix(pred, prefix, idx, &after)) return 0;
    return StartsWith(after, letter) || StartsWith(after, fn) ? 1 : 0;
  }
  return 0;
}

// re.search(r"\d+\.\d+|\d+", pred): the first number, with its fraction if any.
std::string FirstNumber(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) continue;
    size_t e = i;
    while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
    if (e + 1 < s.size() && s[e] == '.' && std::isdigit(static_cast<unsigned char>(s[e + 1]))) {
      size_t f = e + 1;
      while (f < s.size() && std::isdigit(static_cast<unsigned char>(s[f]))) ++f;
      return s.substr(i, f - i);
    }
    return s.substr(i, e - i);
  }
  return "";
}

// A label's text: a string as it is, a number as its JSON text.
bool LabelText(const json& v, std::string* out) {
  if (v.is_string()) *out = v.get<std::string>();
  else if (v.is_number()) *out = v.dump();
  else return false;
  return true;
}

}  // namespace

const std::vector<InfiniteBenchTask>& InfiniteBenchTasks() {
  static const std::vector<InfiniteBenchTask> t = {
      {"passkey", "passkey", 6},          {"number_string", "passkey", 12},      {"kv_retrieval", "kv_retrieval", 50},
      {"longbook_choice_eng", "choice", 40}, {"longbook_qa_eng", "qa_f1", 40},  {"longbook_qa_chn", "qa_f1_zh", 40},
      {"longdialogue_qa_eng", "dialogue", 40}, {"math_find", "math_find", 3},  {"math_calc", "math_calc", 30000},
      {"code_run", "code_run", 5},        {"code_debug", "code_debug", 5},  {"longbook_sum_eng", "rouge_lsum", 1200},
  };
  return t;
}

const InfiniteBenchTask* FindInfiniteBenchTask(const std::string& name) {
  for (const InfiniteBenchTask& t : InfiniteBenchTasks()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

SplitPrompt InfiniteBenchPrompt(const InfiniteBenchTask& t, const InfiniteBenchRecord& r) {
  const std::string hide = "There is an important info hidden inside a lot of irrelevant text. Find it";
  auto options = [&] {
    return "A. " + r.options[0] + "\nB. " + r.options[1] + "\nC. " + r.options[2] + "\nD. " + r.options[3];
  };
  const std::string& n = t.name;
  if (n == "passkey") {
    return {hide + " and memorize it. I will quiz you about the important information.\n\n" + r.context,
            "\n\n" + r.input + "\n\nThe pass key is"};
  }
  if (n == "number_string") {
    return {hide + ". I will quiz you about the important information there.\n\n" + r.context,
            "\n\n" + r.input + "\n\nThe sequence of digits is"};
  }
  if (n == "kv_retrieval") {
    return {"Extract the value corresponding to the specified key in the JSON object below.\n\n" + r.context,
            "\n\n" + r.input};
  }
  if (n == "longbook_choice_eng") {
    return {"Read the book and answer the question.\n\n" + r.context,
            "\n\nQuestion: " + r.input + "\n" + options() + "\n\nThe letter of the correct answer is"};
  }
  if (n == "longbook_qa_eng") {
    return {"Read the book and answer the question. Be very concise in your answer.\n\n" + r.context,
            "\n\nQuestion: " + r.input + "\nAnswer:"};
  }
  if (n == "longbook_sum_eng") return {"Summarize the book below.\n\n" + r.context, "\n\nSummary:"};
  if (n == "longbook_qa_chn") return {"阅读以下书籍然后回答问题。\n\n" + r.context, "\n\n问题：" + r.input + "\n答案："};
  if (n == "longdialogue_qa_eng") {
    return {"Below is a dialogue script where one random occurrence of a character name is replaced with "
            "\"$$MASK$$\", and you should try to guess who that character is.\n\n" + r.context,
            "\n\nThe name that has been replaced with $$MASK$$ is likely"};
  }
  if (n == "math_find") {
    return {"What is " + r.target + " in the following list?\n\n" + r.context, "\n\n" + r.input};
  }
  if (n == "math_calc") {
    return {"Let us calculate the intermediate values of an expression.\n\nExpression: 1 + 3 + 4\nValues: [1, 4, 8]"
            "\n\nExpression: 8 - 3 + 2 - 4\nValues: [8, 5, 7, 3]\n\nExpression: " + r.context,
            "\nValues:"};
  }
  if (n == "code_run") {
    return {"There is a function called " + r.func + " in the following Python code.\n\n" + r.context,
            "\n\nPlease compute the exact value of " + r.func_call + ". The value of " + r.func_call + " is"};
  }
  // code_debug
  return {"Following is a Python code where exactly one of the functions/methods has a deliberate error that makes "
          "it crash.\n\n" + r.context,
          "\n\nOptions:\n" + options() + "\n\nThe correct option is:"};
}

double InfiniteBenchScore(const InfiniteBenchTask& t, const std::string& prediction, const InfiniteBenchRecord& r) {
  const std::string& m = t.metric;
  const std::string& label = r.labels[0];
  if (m == "passkey") {  // label == first_int_match(pred)
    const std::vector<std::string> runs = DigitRuns(prediction);
    return !runs.empty() && runs[0] == label ? 1 : 0;
  }
  if (m == "kv_retrieval") {
    const std::vector<std::string> w = Words(Blank(prediction, {"\n", ":", "\"", "'", ".", ",", "?", "!", "{", "}"}));
    return std::find(w.begin(), w.end(), label) != w.end() ? 1 : 0;
  }
  if (m == "dialogue") {  // the first label among the prediction's words, upper-cased
    std::vector<std::string> w = Words(Blank(Strip(prediction), {"\n", ":", "\"", "'", ".", ",", "?", "!", "{", "}"}));
    for (std::string& x : w) {
      for (char& c : x) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    return std::find(w.begin(), w.end(), label) != w.end() ? 1 : 0;
  }
  if (m == "choice") return ChoiceScore(prediction, r.labels);
  if (m == "code_debug") return CodeDebugScore(prediction, r.labels);
  if (m == "qa_f1" || m == "qa_f1_zh" || m == "rouge_lsum") {  // the best over the answers
    double best = 0;
    for (const std::string& l : r.labels) {
      best = std::max(best, m == "qa_f1" ? QaF1Score(prediction, l)
                            : m == "qa_f1_zh" ? QaF1ZhCharsScore(prediction, l) : RougeLsumScore(prediction, l));
    }
    return best;
  }
  if (m == "code_run") {  // int(the last word) == label
    const std::vector<std::string> w = Words(Blank(Strip(prediction), {"\n", ".", "`", "'", "\"", ":"}));
    std::string v;
    return !w.empty() && ParseIntWord(w.back(), &v) && v == label ? 1 : 0;
  }
  if (m == "math_find") {
    const std::string first = FirstNumber(prediction);
    if (first.empty()) return 0;
    if (r.float_label) return std::strtod(first.c_str(), nullptr) == std::strtod(label.c_str(), nullptr) ? 1 : 0;
    // int(first) of "3.5" raises in InfiniteBench's scorer; kvlab scores it 0.
    return first.find('.') == std::string::npos && IntText(first) == label ? 1 : 0;
  }
  // math_calc: the share of the values matched from the start, up to the first miss.
  const std::vector<std::string> runs = DigitRuns(prediction);
  size_t count = 0;
  while (count < r.values.size() && count < runs.size() && IntText(runs[count]) == r.values[count]) ++count;
  return static_cast<double>(count) / static_cast<double>(r.values.size());
}

namespace {

// answer: a string, a number, or a non-empty list of them (math_calc: of integers, or a list holding that list).
Status ReadLabels(const json& o, const std::string& path, int64_t line, const InfiniteBenchTask& t,
                  InfiniteBenchRecord* r) {
  const auto it = o.find("answer");
  if (it == o.end()) return FieldError(path, line, "answer", "is missing");
  const json& a = *it;
  if (t.metric == "math_calc") {
    const json& vals = a.is_array() && a.size() == 1 && a[0].is_array() ? a[0] : a;
    if (!vals.is_array() || vals.empty()) {
      return FieldError(path, line, "answer", "is " + QuoteJson(a) + ", expected a non-empty list of integers");
    }
    for (const json& v : vals) {
      if (!v.is_number_integer()) return FieldError(path, line, "answer", "holds " + QuoteJson(v) + ", expected integers");
      r->values.push_back(v.dump());
    }
    r->labels = {a.dump()};
    return Status::OK();
  }
  std::vector<json> items = a.is_array() ? std::vector<json>(a.begin(), a.end()) : std::vector<json>{a};
  if (items.empty()) return FieldError(path, line, "answer", "is an empty list: nothing to score against");
  for (const json& v : items) {
    std::string s;
    if (!LabelText(v, &s)) return FieldError(path, line, "answer", "holds " + QuoteJson(v) + ", expected strings or numbers");
    r->labels.push_back(s);
  }
  if (t.metric == "choice" || t.metric == "code_debug") {  // get_answer: [the option's text, its letter]
    KVLAB_RETURN_IF_ERROR(GetStrings(o, path, line, "options", false, &r->options));
    if (r->options.size() != 4) {
      return FieldError(path, line, "options", "has " + std::to_string(r->options.size()) + " entries, expected 4");
    }
    const bool pair = r->labels.size() == 2 && r->labels[1].size() == 1 && r->labels[1][0] >= 'A' && r->labels[1][0] <= 'D';
    if (!pair) {
      const auto at = std::find(r->options.begin(), r->options.end(), r->labels[0]);
      if (r->labels.size() != 1 || at == r->options.end()) {
        return FieldError(path, line, "answer", "is " + QuoteJson(a) + ", expected one of the options (or [option, letter])");
      }
      r->labels.push_back(std::string(1, static_cast<char>('A' + (at - r->options.begin()))));
    }
  }
  std::string v;
  if (t.metric == "code_run") {
    if (!ParseIntWord(r->labels[0], &v)) return FieldError(path, line, "answer", "is " + QuoteJson(a) + ", expected an integer");
    r->labels[0] = v;
  }
  if (t.metric == "math_find") {
    r->float_label = items[0].is_number_float() || r->labels[0].find('.') != std::string::npos;
    char* end = nullptr;
    std::strtod(r->labels[0].c_str(), &end);
    if (r->labels[0].empty() || *end != '\0') return FieldError(path, line, "answer", "is " + QuoteJson(a) + ", expected a number");
    if (!r->float_label) {
      if (!ParseIntWord(r->labels[0], &v)) return FieldError(path, line, "answer", "is " + QuoteJson(a) + ", expected a number");
      r->labels[0] = v;
    }
  }
  return Status::OK();
}

// What create_prompt takes from `input`: code_run's call, math_find's target.
Status ReadInputParts(const std::string& path, int64_t line, const InfiniteBenchTask& t, InfiniteBenchRecord* r) {
  if (t.name == "code_run") {  // re.findall(r"func_[0-9]+\(\-?[0-9]+\)", input)[0]
    for (size_t at = r->input.find("func_"); at != std::string::npos; at = r->input.find("func_", at + 1)) {
      size_t i = at + 5, d = i;
      while (i < r->input.size() && std::isdigit(static_cast<unsigned char>(r->input[i]))) ++i;
      if (i == d || i >= r->input.size() || r->input[i] != '(') continue;
      size_t j = i + 1;
      if (j < r->input.size() && r->input[j] == '-') ++j;
      const size_t k = j;
      while (j < r->input.size() && std::isdigit(static_cast<unsigned char>(r->input[j]))) ++j;
      if (j == k || j >= r->input.size() || r->input[j] != ')') continue;
      r->func = r->input.substr(at, i - at);
      r->func_call = r->input.substr(at, j + 1 - at);
      return Status::OK();
    }
    return FieldError(path, line, "input", "names no call func_N(M): " + QuoteJson(json(r->input)));
  }
  if (t.name == "math_find") {  // re.findall(r"The .+ of", input)[0].lower()[:-3]: greedy, within a line
    for (size_t at = r->input.find("The "); at != std::string::npos; at = r->input.find("The ", at + 1)) {
      size_t eol = r->input.find('\n', at);
      if (eol == std::string::npos) eol = r->input.size();
      const std::string rest = r->input.substr(at, eol - at);
      const size_t of = rest.rfind(" of");
      if (of == std::string::npos || of < 5) continue;  // ".+" needs a character after "The "
      std::string target = rest.substr(0, of);
      for (char& c : target) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r->target = target;
      return Status::OK();
    }
    return FieldError(path, line, "input", "names no \"The ... of\" to ask for: " + QuoteJson(json(r->input)));
  }
  return Status::OK();
}

}  // namespace

Status LoadInfiniteBenchFile(const std::string& path, const std::string& text, const InfiniteBenchTask& t,
                             int64_t max_records, std::vector<InfiniteBenchRecord>* out) {
  out->clear();
  std::vector<std::pair<json, int64_t>> objs;
  KVLAB_RETURN_IF_ERROR(ParseObjects(path, text, &objs));
  for (const auto& [o, line] : objs) {
    InfiniteBenchRecord r;
    r.line = line;
    KVLAB_RETURN_IF_ERROR(GetString(o, path, line, "context", &r.context));
    KVLAB_RETURN_IF_ERROR(GetString(o, path, line, "input", &r.input));
    KVLAB_RETURN_IF_ERROR(ReadLabels(o, path, line, t, &r));
    KVLAB_RETURN_IF_ERROR(ReadInputParts(path, line, t, &r));
    if (max_records <= 0 || static_cast<int64_t>(out->size()) < max_records) out->push_back(std::move(r));
  }
  return Status::OK();
}

}  // namespace kvlab
