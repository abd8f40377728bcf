// Filters and tests of core/tokenizer/jinja.h's renderer: jinja2's builtins that
// chat templates use, with jinja2's argument names and defaults, and
// transformers' tojson (json.dumps with ensure_ascii=False, indent,
// separators, sort_keys; no HTML escaping).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <unicode/uchar.h>

#include "core/tokenizer/jinja_internal.h"

namespace kvlab {
namespace jinja {
namespace {

using Filter = bool (*)(Evaluator& ev, const Value& v, const Args& a, Value* out, std::string* err);
using Test = bool (*)(Evaluator& ev, const Value& v, const Args& a, bool* out, std::string* err);

bool IsStr(const Value& v) { return v.is_data() && v.data().is_string(); }
const std::string& Str(const Value& v) { return v.data().get_ref<const std::string&>(); }
Value Of(Json j) { return Value::Of(std::move(j)); }

// Case mapping per code point (ICU's simple case mapping; Python's full
// mapping differs only for a few characters such as U+0130 and U+00DF).
enum class Case { kLower, kUpper, kTitle, kCapitalize };
std::string MapCase(const std::string& s, Case how) {
  std::vector<uint32_t> cps = Utf8Decode(s);
  bool prev_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    const auto c = static_cast<UChar32>(cps[i]);
    const bool cased = u_islower(c) || u_isupper(c) || u_istitle(c);
    UChar32 r = c;
    switch (how) {
      case Case::kLower: r = u_tolower(c); break;
      case Case::kUpper: r = u_toupper(c); break;
      case Case::kTitle: r = prev_cased ? u_tolower(c) : u_totitle(c); break;
      case Case::kCapitalize: r = i == 0 ? u_totitle(c) : u_tolower(c); break;
    }
    prev_cased = cased;
    cps[i] = static_cast<uint32_t>(r);
  }
  return Utf8Encode(cps);
}

bool Arg(const Args& a, size_t i, const char* name, Value* out) {
  const Value* v = a.Get(i, name);
  if (v) *out = *v;
  return v != nullptr;
}
bool Flag(const Args& a, size_t i, const char* name) {
  const Value* v = a.Get(i, name);
  return v && Truthy(*v);
}
bool Fail(std::string* err, std::string what) {
  *err = std::move(what);
  return false;
}

bool FTrim(Evaluator&, const Value& v, const Args& a, Value* out, std::string*) {
  Value chars;
  const bool has = Arg(a, 0, "chars", &chars) && IsStr(chars);
  *out = Of(PyStrip(ToStr(v), has ? &Str(chars) : nullptr, true, true));
  return true;
}

bool FToJson(Evaluator& ev, const Value& v, const Args& a, Value* out, std::string* err) {
  if (v.is_undefined()) return Fail(err, "Object of type Undefined is not JSON serializable (" + v.why() + ")");
  if (Flag(a, 0, "ensure_ascii")) return Fail(err, "ensure_ascii=true is not supported");
  Value indent, seps;
  std::string ind;
  const bool has_indent = Arg(a, 1, "indent", &indent) && !(indent.is_data() && indent.data().is_null());
  int64_t n = 0;
  if (has_indent) {
    if (AsInt(indent, &n)) {
      if (n < 0 || n > 64) return Fail(err, "indent " + std::to_string(n) + " is outside 0..64");
      ind.assign(static_cast<size_t>(n), ' ');
    } else if (IsStr(indent)) {
      ind = Str(indent);
    } else {
      return Fail(err, "indent must be an integer or a string, not " + TypeName(indent));
    }
  }
  std::string item_sep = has_indent ? "," : ", ", key_sep = ": ";
  if (Arg(a, 2, "separators", &seps) && !(seps.is_data() && seps.data().is_null())) {
    const Json& s = seps.ToJson();
    if (!s.is_array() || s.size() != 2 || !s[0].is_string() || !s[1].is_string())
      return Fail(err, "separators must be a pair of strings");
    item_sep = s[0].get<std::string>();
    key_sep = s[1].get<std::string>();
  }
  std::string text = DumpJson(v.ToJson(), has_indent ? &ind : nullptr, item_sep, key_sep, Flag(a, 3, "sort_keys"));
  if (!ev.CheckSize(text.size(), err) || !ev.CountText(text.size(), err)) return false;
  *out = Of(std::move(text));
  return true;
}

bool FLength(Evaluator&, const Value& v, const Args&, Value* out, std::string* err) {
  if (v.is_undefined()) {
    *out = Of(0);
  } else if (IsStr(v)) {
    *out = Of(static_cast<int64_t>(Utf8Length(Str(v))));
  } else if (v.is_data() && (v.data().is_array() || v.data().is_object())) {
    *out = Of(static_cast<int64_t>(v.data().size()));
  } else {
    return Fail(err, "object of type '" + TypeName(v) + "' has no len()");
  }
  return true;
}

template <Case kHow>
bool FCase(Evaluator&, const Value& v, const Args&, Value* out, std::string*) {
  *out = Of(MapCase(ToStr(v), kHow));
  return true;
}
bool FString(Evaluator&, const Value& v, const Args&, Value* out, std::string*) {
  *out = Of(ToStr(v));
  return true;
}
bool FSafe(Evaluator&, const Value& v, const Args&, Value* out, std::string*) {
  *out = v;
  return true;
}
bool FEscape(Evaluator&, const Value& v, const Args&, Value* out, std::string*) {
  std::string r;
  for (char c : ToStr(v)) {
    switch (c) {
      case '&': r += "&amp;"; break;
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '"': r += "&#34;"; break;
      case '\'': r += "&#39;"; break;
      default: r += c;
    }
  }
  *out = Of(std::move(r));
  return true;
}

bool FDefault(Evaluator&, const Value& v, const Args& a, Value* out, std::string*) {
  Value d = Of("");
  Arg(a, 0, "default_value", &d);
  const bool use = v.is_undefined() || (Flag(a, 1, "boolean") && !Truthy(v));
  *out = use ? d : v;
  return true;
}

bool Items(const Value& v, std::vector<Value>* items, std::string* err) { return Iterate(v, items, err); }

bool FJoin(Evaluator& ev, const Value& v, const Args& a, Value* out, std::string* err) {
  std::vector<Value> items;
  if (!Items(v, &items, err)) return false;
  Value sep = Of(""), attr;
  Arg(a, 0, "d", &sep);
  const bool by_attr = Arg(a, 1, "attribute", &attr);
  std::string r;
  for (size_t i = 0; i < items.size(); ++i) {
    Value x = items[i];
    if (by_attr && !GetItem(items[i], attr, &x, err)) return false;
    if (i) r += ToStr(sep);
    r += ToStr(x);
    if (!ev.CheckSize(r.size(), err)) return false;
  }
  if (!ev.CountText(r.size(), err)) return false;
  *out = Of(std::move(r));
  return true;
}

bool FFirstLast(const Value& v, bool first, Value* out, std::string* err) {
  std::vector<Value> items;
  if (!Items(v, &items, err)) return false;
  *out = items.empty() ? Value::Undefined("no first or last item of an empty sequence")
                       : (first ? items.front() : items.back());
  return true;
}
bool FFirst(Evaluator&, const Value& v, const Args&, Value* out, std::string* err) {
  return FFirstLast(v, true, out, err);
}
bool FLast(Evaluator&, const Value& v, const Args&, Value* out, std::string* err) {
  return FFirstLast(v, false, out, err);
}

bool FItems(Evaluator&, const Value& v, const Args&, Value* out, std::string* err) {
  if (v.is_undefined()) {
    *out = Of(Json::array());
    return true;
  }
  const Json j = v.ToJson();
  if (!j.is_object()) return Fail(err, "can only get item pairs from a mapping, not " + TypeName(v));
  Json r = Json::array();
  for (auto it = j.begin(); it != j.end(); ++it) r.push_back(Json::array({it.key(), it.value()}));
  *out = Of(std::move(r));
  return true;
}

bool FList(Evaluator&, const Value& v, const Args&, Value* out, std::string* err) {
  std::vector<Value> items;
  if (!Items(v, &items, err)) return false;
  Json r = Json::array();
  for (const Value& x : items) r.push_back(x.ToJson());
  *out = Of(std::move(r));
  return true;
}

bool FReplace(Evaluator& ev, const Value& v, const Args& a, Value* out, std::string* err) {
  Value oldv, newv, count;
  if (!Arg(a, 0, "old", &oldv) || !Arg(a, 1, "new", &newv)) return Fail(err, "needs old and new");
  int64_t n = -1;
  if (Arg(a, 2, "count", &count) && !AsInt(count, &n)) return Fail(err, "count must be an integer");
  const std::string s = ToStr(v), o = ToStr(oldv), w = ToStr(newv);
  std::string r;
  size_t pos = 0;
  for (int64_t done = 0; n < 0 || done < n; ++done) {
    const size_t hit = o.empty() ? (pos <= s.size() ? pos : std::string::npos) : s.find(o, pos);
    if (hit == std::string::npos) break;
    r.append(s, pos, hit - pos);
    r += w;
    if (o.empty()) {
      if (hit < s.size()) r += s[hit];
      pos = hit + 1;
    } else {
      pos = hit + o.size();
    }
    if (!ev.CheckSize(r.size(), err)) return false;
  }
  if (pos < s.size()) r.append(s, pos, std::string::npos);
  if (!ev.CountText(r.size(), err)) return false;
  *out = Of(std::move(r));
  return true;
}

bool FReverse(Evaluator&, const Value& v, const Args&, Value* out, std::string* err) {
  if (IsStr(v)) {
    std::vector<uint32_t> cps = Utf8Decode(Str(v));
    std::reverse(cps.begin(), cps.end());
    *out = Of(Utf8Encode(cps));
    return true;
  }
  std::vector<Value> items;
  if (!Items(v, &items, err)) return false;
  Json r = Json::array();
  for (auto it = items.rbegin(); it != items.rend(); ++it) r.push_back(it->ToJson());
  *out = Of(std::move(r));
  return true;
}

// selectattr / rejectattr / select / reject: items whose (attribute's) test passes (or fails).
bool Pick(Evaluator& ev, const Value& v, const Args& a, bool by_attr, bool keep, Value* out, std::string* err) {
  std::vector<Value> items;
  if (!Items(v, &items, err)) return false;
  size_t next = 0;
  Value attr, test_name;
  if (by_attr && !Arg(a, next++, "attribute", &attr)) return Fail(err, "needs an attribute name");
  const bool has_test = next < a.pos.size();
  if (has_test) test_name = a.pos[next++];
  if (has_test && !IsStr(test_name)) return Fail(err, "the test name must be a string");
  Args targs;
  targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(std::min(next, a.pos.size())), a.pos.end());
  Json r = Json::array();
  for (const Value& item : items) {
    Value x = item;
    if (by_attr && !GetItem(item, attr, &x, err)) return false;
    bool pass = Truthy(x);
    if (has_test && !ApplyTest(ev, Str(test_name), x, targs, &pass, err)) return false;
    if (pass == keep) r.push_back(item.ToJson());
  }
  *out = Of(std::move(r));
  return true;
}
bool FSelectAttr(Evaluator& ev, const Value& v, const Args& a, Value* out, std::string* err) {
  return Pick(ev, v, a, true, true, out, err);
}
bool FRejectAttr(Evaluator& ev, const Value& v, const Args& a, Value* out, std::string* err) {
  return Pick(ev, v, a, true, false, out, err);
}
bool FSelect(Evaluator& ev, const Value& v, const Args& a, Value* out, std::string* err) {
  return Pick(ev, v, a, false, true, out, err);
}
bool FReject(Evaluator& ev, const Value& v, const Args& a, Value* out, std::string* err) {
  return Pick(ev, v, a, false, false, out, err);
}

// map(attribute='x', default=...) or map('filter', args...).
bool FMap(Evaluator& ev, const Value& v, const Args& a, Value* out, std::string* err) {
  std::vector<Value> items;
  if (!Items(v, &items, err)) return false;
  Value attr, dflt;
  const bool by_attr = Arg(a, 99, "attribute", &attr);
  const bool has_default = Arg(a, 99, "default", &dflt);
  if (!by_attr && (a.pos.empty() || !IsStr(a.pos[0]))) return Fail(err, "needs attribute= or a filter name");
  Args fargs;
  if (!by_attr) fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  Json r = Json::array();
  for (const Value& item : items) {
    Value x;
    if (by_attr) {
      if (!GetItem(item, attr, &x, err)) return false;
      if (x.is_undefined() && has_default) x = dflt;
    } else if (!ApplyFilter(ev, Str(a.pos[0]), item, fargs, &x, err)) {
      return false;
    }
    r.push_back(x.ToJson());
  }
  *out = Of(std::move(r));
  return true;
}

bool FUnique(Evaluator& ev, const Value& v, const Args&, Value* out, std::string* err) {
  std::vector<Value> items;
  if (!Items(v, &items, err)) return false;
  std::vector<Value> kept;
  for (const Value& x : items) {
    if (!ev.Step(static_cast<int64_t>(kept.size()), err)) return false;  // quadratic: each comparison counts
    bool seen = false;
    for (const Value& k : kept) seen = seen || Equal(k, x);
    if (!seen) kept.push_back(x);
  }
  Json r = Json::array();
  for (const Value& x : kept) r.push_back(x.ToJson());
  *out = Of(std::move(r));
  return true;
}

bool FInt(Evaluator&, const Value& v, const Args& a, Value* out, std::string*) {
  Value d = Of(0);
  Arg(a, 0, "default", &d);
  int64_t i = 0;
  if (AsInt(v, &i)) {
    *out = Of(i);
  } else if (v.is_data() && v.data().is_number_float()) {
    *out = Of(static_cast<int64_t>(v.data().get<double>()));
  } else if (IsStr(v)) {
    const std::string s = PyStrip(Str(v), nullptr, true, true);
    char* end = nullptr;
    const long long x = std::strtoll(s.c_str(), &end, 10);
    *out = !s.empty() && *end == 0 ? Of(static_cast<int64_t>(x)) : d;
  } else {
    *out = d;
  }
  return true;
}

bool FFloat(Evaluator&, const Value& v, const Args& a, Value* out, std::string*) {
  Value d = Of(0.0);
  Arg(a, 0, "default", &d);
  if (v.is_data() && (v.data().is_number() || v.data().is_boolean())) {
    *out = Of(v.data().is_boolean() ? (v.data().get<bool>() ? 1.0 : 0.0) : v.data().get<double>());
  } else if (IsStr(v)) {
    const std::string s = PyStrip(Str(v), nullptr, true, true);
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    *out = !s.empty() && *end == 0 ? Of(x) : d;
  } else {
    *out = d;
  }
  return true;
}

bool FAbs(Evaluator&, const Value& v, const Args&, Value* out, std::string* err) {
  int64_t i = 0;
  if (AsInt(v, &i) && i != INT64_MIN) {
    *out = Of(i < 0 ? -i : i);
  } else if (v.is_data() && v.data().is_number_float()) {
    *out = Of(std::fabs(v.data().get<double>()));
  } else {
    return Fail(err, "bad operand type for abs(): '" + TypeName(v) + "'");
  }
  return true;
}

// jinja2's indent: every line but the first (first=true: it too), blank lines only when blank=true.
bool FIndent(Evaluator& ev, const Value& v, const Args& a, Value* out, std::string* err) {
  Value w = Of(4);
  Arg(a, 0, "width", &w);
  int64_t n = 0;
  const std::string pad =
      AsInt(w, &n) ? std::string(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(n, 256))), ' ') : ToStr(w);
  const bool first = Flag(a, 1, "first"), blank = Flag(a, 2, "blank");
  const std::string s = ToStr(v);
  std::string r = first ? pad : "";
  size_t start = 0;
  for (bool line0 = true;; line0 = false) {
    const size_t nl = s.find('\n', start);
    const size_t len = nl == std::string::npos ? std::string::npos : nl - start;
    if (!line0) {
      r += '\n';
      if (blank || len != 0) r += pad;
    }
    r.append(s, start, len);
    if (!ev.CheckSize(r.size(), err)) return false;
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  if (!ev.CountText(r.size(), err)) return false;
  *out = Of(std::move(r));
  return true;
}

const std::map<std::string, Filter>& Filters() {
  static const std::map<std::string, Filter> f = {
      {"trim", FTrim},       {"tojson", FToJson},         {"length", FLength},         {"count", FLength},
      {"upper", FCase<Case::kUpper>}, {"lower", FCase<Case::kLower>}, {"capitalize", FCase<Case::kCapitalize>},
      {"title", FCase<Case::kTitle>},
      {"string", FString},   {"safe", FSafe},             {"escape", FEscape},         {"e", FEscape},
      {"default", FDefault}, {"d", FDefault},             {"join", FJoin},             {"first", FFirst},
      {"last", FLast},       {"items", FItems},           {"list", FList},             {"replace", FReplace},
      {"reverse", FReverse}, {"selectattr", FSelectAttr}, {"rejectattr", FRejectAttr}, {"select", FSelect},
      {"reject", FReject},   {"map", FMap},               {"unique", FUnique},         {"int", FInt},
      {"float", FFloat},     {"abs", FAbs},               {"indent", FIndent},
  };
  return f;
}

}  // namespace

bool IsFilter(const std::string& name) { return Filters().count(name) != 0; }

bool ApplyFilter(Evaluator& ev, const std::string& name, const Value& v, const Args& args, Value* out,
                 std::string* error) {
  auto it = Filters().find(name);
  if (it == Filters().end()) return Fail(error, "unknown filter '" + name + "'");
  return it->second(ev, v, args, out, error);
}

}  // namespace jinja
}  // namespace kvlab
