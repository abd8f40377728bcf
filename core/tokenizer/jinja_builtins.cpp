// Tests, str and dict methods and globals of core/tokenizer/jinja.h's renderer:
// jinja2's builtin tests, the methods its sandbox lets templates call (none
// that mutate), and the globals transformers' environment has: range,
// namespace, dict, raise_exception and strftime_now.
#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include <unicode/uchar.h>

#include "core/tokenizer/jinja_internal.h"

namespace kvlab {
namespace jinja {
namespace {

using TestFn = bool (*)(Evaluator& ev, const Value& v, const Args& a, bool* out, std::string* err);

bool IsStr(const Value& v) { return v.is_data() && v.data().is_string(); }
const std::string& Str(const Value& v) { return v.data().get_ref<const std::string&>(); }
Value Of(Json j) { return Value::Of(std::move(j)); }
bool Fail(std::string* err, std::string what) {
  *err = std::move(what);
  return false;
}
bool IsType(const Value& v, Json::value_t t) { return v.is_data() && v.data().type() == t; }

// Python's str.islower() / isupper(): some cased character, and all in that case.
bool AllCased(const std::string& s, bool lower) {
  bool any = false;
  for (uint32_t cp : Utf8Decode(s)) {
    const auto c = static_cast<UChar32>(cp);
    if (lower ? (u_isupper(c) || u_istitle(c)) : (u_islower(c) || u_istitle(c))) return false;
    any = any || (lower ? u_islower(c) : u_isupper(c));
  }
  return any;
}

// ---- tests ----
#define KVLAB_TEST(name, expr)                                                        \
  bool name(Evaluator&, const Value& v, const Args& a, bool* out, std::string*) {    \
    (void)a;                                                                          \
    (void)v;                                                                          \
    *out = (expr);                                                                    \
    return true;                                                                      \
  }
KVLAB_TEST(TDefined, !v.is_undefined())
KVLAB_TEST(TUndefined, v.is_undefined())
KVLAB_TEST(TNone, IsType(v, Json::value_t::null))
KVLAB_TEST(TString, IsStr(v))
KVLAB_TEST(TNumber, v.is_data() && (v.data().is_number() || v.data().is_boolean()))
KVLAB_TEST(TInteger, v.is_data() && v.data().is_number_integer())
KVLAB_TEST(TFloat, v.is_data() && v.data().is_number_float())
KVLAB_TEST(TBoolean, v.is_data() && v.data().is_boolean())
KVLAB_TEST(TTrue, v.is_data() && v.data().is_boolean() && v.data().get<bool>())
KVLAB_TEST(TFalse, v.is_data() && v.data().is_boolean() && !v.data().get<bool>())
KVLAB_TEST(TMapping, (v.is_data() && v.data().is_object()) || v.kind() == Value::Kind::kNamespace)
KVLAB_TEST(TIterable, v.is_undefined() || (v.is_data() && (v.data().is_array() || v.data().is_object() || IsStr(v))))
KVLAB_TEST(TSequence, v.is_data() && (v.data().is_array() || v.data().is_object() || IsStr(v)))
KVLAB_TEST(TCallable, v.kind() == Value::Kind::kCallable)
KVLAB_TEST(TEscaped, false)
KVLAB_TEST(TLower, IsStr(v) && AllCased(Str(v), true))
KVLAB_TEST(TUpper, IsStr(v) && AllCased(Str(v), false))
#undef KVLAB_TEST

bool Other(const Args& a, Value* other, std::string* err) {
  const Value* o = a.Get(0, "other");
  if (!o) return Fail(err, "needs a value to compare with");
  *other = *o;
  return true;
}
template <int kOp>  // 0 ==, 1 !=, 2 <, 3 >, 4 <=, 5 >=, 6 in
bool TCompare(Evaluator&, const Value& v, const Args& a, bool* out, std::string* err) {
  static const char* kOps[] = {"==", "!=", "<", ">", "<=", ">=", "in"};
  Value other;
  if (!Other(a, &other, err)) return false;
  return CompareOp(kOps[kOp], v, other, out, err);
}
bool TSameAs(Evaluator&, const Value& v, const Args& a, bool* out, std::string* err) {
  Value other;
  if (!Other(a, &other, err)) return false;
  *out = Equal(v, other) && v.is_data() && other.is_data() && v.data().type() == other.data().type() &&
         (v.data().is_null() || v.data().is_boolean());
  return true;
}
bool TOddEven(const Value& v, int parity, bool* out, std::string* err) {
  int64_t i = 0;
  if (!AsInt(v, &i)) return Fail(err, "needs an integer, not " + TypeName(v));
  *out = ((i % 2) + 2) % 2 == parity;
  return true;
}
bool TOdd(Evaluator&, const Value& v, const Args&, bool* out, std::string* err) { return TOddEven(v, 1, out, err); }
bool TEven(Evaluator&, const Value& v, const Args&, bool* out, std::string* err) { return TOddEven(v, 0, out, err); }
bool TDivisibleBy(Evaluator&, const Value& v, const Args& a, bool* out, std::string* err) {
  int64_t i = 0, n = 0;
  const Value* d = a.Get(0, "num");
  if (!AsInt(v, &i) || !d || !AsInt(*d, &n) || n == 0) return Fail(err, "needs a non-zero integer divisor");
  *out = i % n == 0;
  return true;
}

const std::map<std::string, TestFn>& Tests() {
  static const std::map<std::string, TestFn> t = {
      {"defined", TDefined},   {"undefined", TUndefined},   {"none", TNone},         {"string", TString},
      {"number", TNumber},     {"integer", TInteger},       {"float", TFloat},       {"boolean", TBoolean},
      {"true", TTrue},         {"false", TFalse},           {"mapping", TMapping},   {"iterable", TIterable},
      {"sequence", TSequence}, {"callable", TCallable},     {"escaped", TEscaped},   {"lower", TLower},
      {"upper", TUpper},       {"eq", TCompare<0>},         {"equalto", TCompare<0>}, {"==", TCompare<0>},
      {"ne", TCompare<1>},     {"!=", TCompare<1>},         {"lt", TCompare<2>},     {"lessthan", TCompare<2>},
      {"<", TCompare<2>},      {"gt", TCompare<3>},         {"greaterthan", TCompare<3>}, {">", TCompare<3>},
      {"le", TCompare<4>},     {"<=", TCompare<4>},         {"ge", TCompare<5>},     {">=", TCompare<5>},
      {"in", TCompare<6>},     {"sameas", TSameAs},         {"odd", TOdd},           {"even", TEven},
      {"divisibleby", TDivisibleBy},
  };
  return t;
}

// ---- str methods ----
const Value* Param(const Args& a, size_t i, const char* name) {
  const Value* v = a.Get(i, name);
  return v && !(v->is_data() && v->data().is_null()) ? v : nullptr;
}

bool MStrip(const Value& self, const Args& a, bool left, bool right, Value* out, std::string* err) {
  const Value* chars = Param(a, 0, "chars");
  if (chars && !IsStr(*chars)) return Fail(err, "chars must be a string or none");
  *out = Of(PyStrip(Str(self), chars ? &Str(*chars) : nullptr, left, right));
  return true;
}
bool MStripBoth(Evaluator&, const Value& s, const Args& a, Value* out, std::string* e) {
  return MStrip(s, a, true, true, out, e);
}
bool MLStrip(Evaluator&, const Value& s, const Args& a, Value* out, std::string* e) {
  return MStrip(s, a, true, false, out, e);
}
bool MRStrip(Evaluator&, const Value& s, const Args& a, Value* out, std::string* e) {
  return MStrip(s, a, false, true, out, e);
}

// str.split(sep=None, maxsplit=-1): on runs of whitespace, or on each sep.
bool MSplit(Evaluator& ev, const Value& self, const Args& a, Value* out, std::string* err) {
  const Value* sep = Param(a, 0, "sep");
  const Value* maxv = Param(a, 1, "maxsplit");
  int64_t max = -1;
  if (maxv && !AsInt(*maxv, &max)) return Fail(err, "maxsplit must be an integer");
  if (sep && (!IsStr(*sep) || Str(*sep).empty())) return Fail(err, "the separator must be a non-empty string");
  const std::string& s = Str(self);
  Json r = Json::array();
  if (sep) {
    const std::string& d = Str(*sep);
    size_t pos = 0;
    for (size_t hit; (max < 0 || static_cast<int64_t>(r.size()) < max) && (hit = s.find(d, pos)) != std::string::npos;
         pos = hit + d.size())
      r.push_back(s.substr(pos, hit - pos));
    r.push_back(s.substr(pos));
  } else {
    const std::vector<uint32_t> cps = Utf8Decode(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsPySpace(cps[i])) ++i;
      if (i == cps.size()) break;
      size_t j = i;
      if (max >= 0 && static_cast<int64_t>(r.size()) == max) {
        size_t e = cps.size();
        while (e > i && IsPySpace(cps[e - 1])) --e;
        j = e;
      } else {
        while (j < cps.size() && !IsPySpace(cps[j])) ++j;
      }
      r.push_back(Utf8Encode(std::vector<uint32_t>(cps.begin() + static_cast<std::ptrdiff_t>(i),
                                                   cps.begin() + static_cast<std::ptrdiff_t>(j))));
      i = j;
    }
  }
  if (!ev.Step(static_cast<int64_t>(r.size()), err)) return false;
  *out = Of(std::move(r));
  return true;
}

bool MFix(const Value& self, const Args& a, bool starts, Value* out, std::string* err) {
  const Value* p = a.Get(0, "prefix");
  if (!p) return Fail(err, "needs a prefix or suffix");
  std::vector<std::string> options;
  const Json j = p->ToJson();
  if (j.is_string()) options.push_back(j.get<std::string>());
  if (j.is_array())
    for (const Json& x : j)
      if (x.is_string()) options.push_back(x.get<std::string>());
  if (options.empty()) return Fail(err, "the prefix or suffix must be a string or a list of strings");
  const std::string& s = Str(self);
  bool hit = false;
  for (const std::string& o : options)
    hit = hit || (o.size() <= s.size() && (starts ? s.compare(0, o.size(), o) == 0
                                                  : s.compare(s.size() - o.size(), o.size(), o) == 0));
  *out = Of(hit);
  return true;
}
bool MStartsWith(Evaluator&, const Value& s, const Args& a, Value* out, std::string* e) {
  return MFix(s, a, true, out, e);
}
bool MEndsWith(Evaluator&, const Value& s, const Args& a, Value* out, std::string* e) {
  return MFix(s, a, false, out, e);
}

// Methods that are filters of the same name and arguments.
template <int kWhich>
bool MAsFilter(Evaluator& ev, const Value& s, const Args& a, Value* out, std::string* e) {
  static const char* kNames[] = {"replace", "upper", "lower", "title", "capitalize"};
  return ApplyFilter(ev, kNames[kWhich], s, a, out, e);
}

bool MFind(Evaluator&, const Value& self, const Args& a, Value* out, std::string* err) {
  const Value* sub = a.Get(0, "sub");
  if (!sub || !IsStr(*sub)) return Fail(err, "needs a string to find");
  const size_t at = Str(self).find(Str(*sub));
  *out = Of(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(Utf8Length(Str(self).substr(0, at))));
  return true;
}

bool MJoin(Evaluator& ev, const Value& self, const Args& a, Value* out, std::string* err) {
  const Value* seq = a.Get(0, "iterable");
  std::vector<Value> items;
  if (!seq || !Iterate(*seq, &items, err)) return err->empty() ? Fail(err, "needs a list") : false;
  std::string r;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!IsStr(items[i])) return Fail(err, "item " + std::to_string(i) + " is " + TypeName(items[i]) + ", not str");
    if (i) r += Str(self);
    r += Str(items[i]);
    if (!ev.CheckSize(r.size(), err)) return false;
  }
  if (!ev.CountText(r.size(), err)) return false;
  *out = Of(std::move(r));
  return true;
}

// ---- dict methods ----
bool DItems(Evaluator& ev, const Value& self, const Args& a, Value* out, std::string* err) {
  return ApplyFilter(ev, "items", self, a, out, err);
}
bool DKeys(Evaluator&, const Value& self, const Args&, Value* out, std::string*) {
  Json r = Json::array();
  for (auto it = self.data().begin(); it != self.data().end(); ++it) r.push_back(it.key());
  *out = Of(std::move(r));
  return true;
}
bool DValues(Evaluator&, const Value& self, const Args&, Value* out, std::string*) {
  Json r = Json::array();
  for (const Json& v : self.data()) r.push_back(v);
  *out = Of(std::move(r));
  return true;
}
bool DGet(Evaluator&, const Value& self, const Args& a, Value* out, std::string* err) {
  const Value* key = a.Get(0, "key");
  if (!key) return Fail(err, "needs a key");
  const Value* dflt = a.Get(1, "default");
  auto it = IsStr(*key) ? self.data().find(Str(*key)) : self.data().end();
  *out = it != self.data().end() ? self.Sub(&*it) : dflt ? *dflt : Of(nullptr);
  return true;
}

// ---- globals ----
bool GRange(Evaluator& ev, const Value&, const Args& a, Value* out, std::string* err) {
  int64_t v[3] = {0, 0, 1};
  if (a.pos.empty() || a.pos.size() > 3) return Fail(err, "takes 1 to 3 integers");
  for (size_t i = 0; i < a.pos.size(); ++i)
    if (!AsInt(a.pos[i], &v[i])) return Fail(err, "takes integers, not " + TypeName(a.pos[i]));
  int64_t start = a.pos.size() == 1 ? 0 : v[0], stop = a.pos.size() == 1 ? v[0] : v[1], step = v[2];
  if (step == 0) return Fail(err, "step must not be zero");
  Json r = Json::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (r.size() >= 100000) return Fail(err, "a range of more than 100000 items (jinja2's sandbox limit)");
    r.push_back(i);
  }
  if (!ev.Step(static_cast<int64_t>(r.size()), err)) return false;
  *out = Of(std::move(r));
  return true;
}

bool KwObject(const Args& a, Json* obj, std::string* err) {
  *obj = Json::object();
  for (const Value& p : a.pos) {
    const Json j = p.ToJson();
    if (!j.is_object()) return Fail(err, "positional arguments must be dicts, not " + TypeName(p));
    for (auto it = j.begin(); it != j.end(); ++it) (*obj)[it.key()] = it.value();
  }
  for (const auto& [k, v] : a.kw) (*obj)[k] = v.ToJson();
  return true;
}
bool GNamespace(Evaluator&, const Value&, const Args& a, Value* out, std::string* err) {
  auto ns = std::make_shared<Json>();
  if (!KwObject(a, ns.get(), err)) return false;
  *out = Value::Namespace(ns);
  return true;
}
bool GDict(Evaluator&, const Value&, const Args& a, Value* out, std::string* err) {
  Json obj;
  if (!KwObject(a, &obj, err)) return false;
  *out = Of(std::move(obj));
  return true;
}
bool GRaise(Evaluator&, const Value&, const Args& a, Value*, std::string* err) {
  const Value* m = a.Get(0, "message");
  return Fail(err, m ? ToStr(*m) : std::string("(no message)"));
}
bool GStrftimeNow(Evaluator& ev, const Value&, const Args& a, Value* out, std::string* err) {
  const Value* f = a.Get(0, "format");
  if (!f || !IsStr(*f)) return Fail(err, "needs a format string");
  if (ev.env().strftime_now) {
    *out = Of(ev.env().strftime_now(Str(*f)));
    return true;
  }
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof(buf), Str(*f).c_str(), &tm);
  *out = Of(std::string(buf, n));
  return true;
}

Value Bound(const char* name, BuiltinFn fn, const Value& self) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->builtin = fn;
  c->self = self;
  return Value::Function(c);
}

}  // namespace

bool IsTest(const std::string& name) { return Tests().count(name) != 0; }

bool ApplyTest(Evaluator& ev, const std::string& name, const Value& v, const Args& args, bool* out,
               std::string* error) {
  auto it = Tests().find(name);
  if (it == Tests().end()) return Fail(error, "unknown test '" + name + "'");
  return it->second(ev, v, args, out, error);
}

bool LookupMethod(const Value& self, const std::string& name, Value* out) {
  static const std::map<std::string, BuiltinFn> kStr = {
      {"strip", MStripBoth},    {"lstrip", MLStrip},        {"rstrip", MRStrip},     {"split", MSplit},
      {"startswith", MStartsWith}, {"endswith", MEndsWith}, {"replace", MAsFilter<0>}, {"upper", MAsFilter<1>},
      {"lower", MAsFilter<2>},  {"title", MAsFilter<3>},    {"capitalize", MAsFilter<4>}, {"find", MFind},
      {"join", MJoin},
  };
  static const std::map<std::string, BuiltinFn> kDict = {
      {"items", DItems}, {"keys", DKeys}, {"values", DValues}, {"get", DGet}};
  if (!self.is_data() || !(self.data().is_string() || self.data().is_object())) return false;
  const auto& table = self.data().is_string() ? kStr : kDict;
  auto it = table.find(name);
  if (it == table.end()) return false;
  *out = Bound(it->first.c_str(), it->second, self);
  return true;
}

bool LookupGlobal(const std::string& name, Value* out) {
  static const std::map<std::string, BuiltinFn> kGlobals = {
      {"range", GRange}, {"namespace", GNamespace}, {"dict", GDict},
      {"raise_exception", GRaise}, {"strftime_now", GStrftimeNow}};
  auto it = kGlobals.find(name);
  if (it == kGlobals.end()) return false;
  *out = Bound(it->first.c_str(), it->second, Value());
  return true;
}

}  // namespace jinja
}  // namespace kvlab
