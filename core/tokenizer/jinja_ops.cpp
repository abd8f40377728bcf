// Operators of core/tokenizer/jinja.h's renderer with Python's semantics: + - * /
// // % ** ~, comparisons, `in`, attribute and item access as jinja2's sandbox
// does them (getattr first for methods, a missing key is undefined), slices
// and iteration.
#include <cmath>
#include <string>
#include <vector>

#include "core/tokenizer/jinja_internal.h"

namespace kvlab {
namespace jinja {
namespace {

bool IsInt(const Value& v) {
  return v.is_data() && (v.data().is_number_integer() || v.data().is_boolean());
}
bool IsNum(const Value& v) { return v.is_data() && (v.data().is_number() || v.data().is_boolean()); }
double Num(const Value& v) { return v.data().is_boolean() ? (v.data().get<bool>() ? 1 : 0) : v.data().get<double>(); }
bool IsStr(const Value& v) { return v.is_data() && v.data().is_string(); }
const std::string& Str(const Value& v) { return v.data().get_ref<const std::string&>(); }
bool IsList(const Value& v) { return v.is_data() && v.data().is_array(); }

bool TypeError(const char* op, const Value& a, const Value& b, std::string* error) {
  if (a.is_undefined() || b.is_undefined()) {
    *error = a.is_undefined() ? a.why() : b.why();
    return false;
  }
  *error = std::string("unsupported operand types for ") + op + ": '" + TypeName(a) + "' and '" + TypeName(b) + "'";
  return false;
}

bool IntOp(const std::string& op, int64_t x, int64_t y, Value* out, std::string* error) {
  int64_t r = 0;
  bool overflow = false;
  if (op == "+") {
    overflow = __builtin_add_overflow(x, y, &r);
  } else if (op == "-") {
    overflow = __builtin_sub_overflow(x, y, &r);
  } else if (op == "*") {
    overflow = __builtin_mul_overflow(x, y, &r);
  } else if (op == "//" || op == "%") {
    if (y == 0) {
      *error = "integer division or modulo by zero";
      return false;
    }
    if (x == INT64_MIN && y == -1) {
      overflow = true;
    } else {
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
        --q;
        m += y;
      }
      r = op == "//" ? q : m;
    }
  } else if (op == "**") {
    if (y < 0) {
      *out = Value::Of(Json(std::pow(static_cast<double>(x), static_cast<double>(y))));
      return true;
    }
    r = 1;  // by squaring: y may be huge when x is 0, 1 or -1
    for (int64_t base = x, e = y; e > 0 && !overflow; e >>= 1) {
      if (e & 1) overflow = __builtin_mul_overflow(r, base, &r);
      if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
    }
  }
  if (overflow) {
    *error = "integer overflow in " + std::to_string(x) + " " + op + " " + std::to_string(y);
    return false;
  }
  *out = Value::Of(Json(r));
  return true;
}

bool FloatOp(const std::string& op, double x, double y, Value* out, std::string* error) {
  double r = 0;
  if (op == "+") r = x + y;
  if (op == "-") r = x - y;
  if (op == "*") r = x * y;
  if (op == "**") r = std::pow(x, y);
  if (op == "/" || op == "//" || op == "%") {
    if (y == 0) {
      *error = "float division by zero";
      return false;
    }
    if (op == "/") r = x / y;
    if (op == "//") r = std::floor(x / y);
    if (op == "%") {
      r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
    }
  }
  *out = Value::Of(Json(r));
  return true;
}

bool Repeat(Evaluator& ev, const Value& seq, int64_t n, Value* out, std::string* error) {
  if (n < 0) n = 0;
  if (IsStr(seq)) {
    const std::string& s = Str(seq);
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(n), s.size(), &bytes)) bytes = UINT64_MAX;
    if (!ev.CheckSize(bytes, error) || !ev.CountText(bytes, error)) return false;
    std::string r;
    for (int64_t i = 0; i < n; ++i) r += s;
    *out = Value::Of(Json(std::move(r)));
    return true;
  }
  int64_t items = 0;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(seq.data().size()), &items)) items = INT64_MAX;
  if (!ev.Step(items, error)) return false;
  Json r = Json::array();
  for (int64_t i = 0; i < n; ++i)
    for (const Json& x : seq.data()) r.push_back(x);
  *out = Value::Of(std::move(r));
  return true;
}

}  // namespace

bool AsInt(const Value& v, int64_t* out) {
  if (!IsInt(v)) return false;
  *out = v.data().is_boolean() ? (v.data().get<bool>() ? 1 : 0) : v.data().get<int64_t>();
  return true;
}

bool BinaryOp(Evaluator& ev, const std::string& op, const Value& a, const Value& b, Value* out, std::string* error) {
  if (op == "~") {
    std::string s = ToStr(a);
    const std::string t = ToStr(b);
    if (!ev.CheckSize(s.size() + t.size(), error) || !ev.CountText(s.size() + t.size(), error)) return false;
    *out = Value::Of(Json(s + t));
    return true;
  }
  if (IsNum(a) && IsNum(b)) {
    int64_t x = 0, y = 0;
    if (op != "/" && AsInt(a, &x) && AsInt(b, &y)) return IntOp(op, x, y, out, error);
    return FloatOp(op, Num(a), Num(b), out, error);
  }
  if (op == "+" && IsStr(a) && IsStr(b)) {
    const uint64_t bytes = Str(a).size() + Str(b).size();
    if (!ev.CheckSize(bytes, error) || !ev.CountText(bytes, error)) return false;
    *out = Value::Of(Json(Str(a) + Str(b)));
    return true;
  }
  if (op == "+" && IsList(a) && IsList(b)) {
    if (!ev.Step(static_cast<int64_t>(a.data().size() + b.data().size()), error)) return false;
    Json r = a.data();
    for (const Json& x : b.data()) r.push_back(x);
    *out = Value::Of(std::move(r));
    return true;
  }
  int64_t n = 0;
  if (op == "*" && (IsStr(a) || IsList(a)) && AsInt(b, &n)) return Repeat(ev, a, n, out, error);
  if (op == "*" && (IsStr(b) || IsList(b)) && AsInt(a, &n)) return Repeat(ev, b, n, out, error);
  return TypeError(op.c_str(), a, b, error);
}

bool Contains(const Value& container, const Value& item, bool* out, std::string* error) {
  *out = false;
  if (container.is_undefined()) return true;
  if (IsStr(container)) {
    if (!IsStr(item)) {
      *error = "'in <string>' requires a string as left operand, not " + TypeName(item);
      return false;
    }
    *out = Str(container).find(Str(item)) != std::string::npos;
    return true;
  }
  if (IsList(container)) {
    for (const Json& x : container.data())
      if (Equal(container.Sub(&x), item)) *out = true;
    return true;
  }
  if (container.is_data() && container.data().is_object()) {
    *out = IsStr(item) && container.data().contains(Str(item));
    return true;
  }
  if (container.kind() == Value::Kind::kNamespace) {
    *out = IsStr(item) && container.ns().contains(Str(item));
    return true;
  }
  *error = "argument of type '" + TypeName(container) + "' is not iterable";
  return false;
}

bool CompareOp(const std::string& op, const Value& a, const Value& b, bool* out, std::string* error) {
  if (op == "==" || op == "!=") {
    *out = Equal(a, b) == (op == "==");
    return true;
  }
  if (op == "in" || op == "not in") {
    if (!Contains(b, a, out, error)) return false;
    if (op == "not in") *out = !*out;
    return true;
  }
  int c = 0;
  if (IsNum(a) && IsNum(b)) {
    const double x = Num(a), y = Num(b);
    int64_t i = 0, j = 0;
    if (AsInt(a, &i) && AsInt(b, &j))
      c = i < j ? -1 : i > j ? 1 : 0;
    else
      c = x < y ? -1 : x > y ? 1 : 0;
  } else if (IsStr(a) && IsStr(b)) {
    c = Str(a).compare(Str(b));  // UTF-8 byte order is code point order
  } else {
    if (a.is_undefined() || b.is_undefined()) {
      *error = a.is_undefined() ? a.why() : b.why();
    } else {
      *error = "'" + op + "' not supported between instances of '" + TypeName(a) + "' and '" + TypeName(b) + "'";
    }
    return false;
  }
  *out = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
  return true;
}

bool GetAttr(const Value& obj, const std::string& name, Value* out, std::string* error) {
  if (obj.is_undefined()) {
    *error = obj.why();
    return false;
  }
  if (obj.kind() == Value::Kind::kNamespace) {
    auto it = obj.ns().find(name);
    *out = it == obj.ns().end() ? Value::Undefined("namespace has no attribute '" + name + "'") : Value::Of(*it);
    return true;
  }
  if (LookupMethod(obj, name, out)) return true;
  if (obj.is_data() && obj.data().is_object()) {
    auto it = obj.data().find(name);
    if (it != obj.data().end()) {
      *out = obj.Sub(&*it);
      return true;
    }
  }
  *out = Value::Undefined("'" + TypeName(obj) + " object' has no attribute '" + name + "'");
  return true;
}

bool GetItem(const Value& obj, const Value& key, Value* out, std::string* error) {
  if (obj.is_undefined()) {
    *error = obj.why();
    return false;
  }
  int64_t i = 0;
  if (obj.is_data() && obj.data().is_object() && IsStr(key)) {
    auto it = obj.data().find(Str(key));
    if (it != obj.data().end()) {
      *out = obj.Sub(&*it);
      return true;
    }
    return GetAttr(obj, Str(key), out, error);
  }
  if ((IsList(obj) || IsStr(obj)) && AsInt(key, &i)) {
    if (IsList(obj)) {
      const int64_t n = static_cast<int64_t>(obj.data().size());
      const int64_t k = i < 0 ? i + n : i;
      *out = k < 0 || k >= n ? Value::Undefined("'list object' has no element " + std::to_string(i))
                             : obj.Sub(&obj.data()[static_cast<size_t>(k)]);
      return true;
    }
    const std::vector<uint32_t> cps = Utf8Decode(Str(obj));
    const int64_t n = static_cast<int64_t>(cps.size());
    const int64_t k = i < 0 ? i + n : i;
    *out = k < 0 || k >= n ? Value::Undefined("'str object' has no element " + std::to_string(i))
                           : Value::Of(Json(Utf8Encode({cps[static_cast<size_t>(k)]})));
    return true;
  }
  if (obj.kind() == Value::Kind::kNamespace && IsStr(key)) return GetAttr(obj, Str(key), out, error);
  *out = Value::Undefined("'" + TypeName(obj) + " object' has no element " + ToStr(key));
  return true;
}

bool Slice(const Value& obj, const Value& start, const Value& stop, const Value& step, Value* out,
           std::string* error) {
  if (obj.is_undefined()) {
    *error = obj.why();
    return false;
  }
  if (!IsList(obj) && !IsStr(obj)) {
    *error = "'" + TypeName(obj) + "' object cannot be sliced";
    return false;
  }
  auto part = [&](const Value& v, int64_t* x, bool* given) {
    *given = !(v.is_undefined() || (v.is_data() && v.data().is_null()));
    if (*given && !AsInt(v, x)) {
      *error = "slice indices must be integers or none, not " + TypeName(v);
      return false;
    }
    return true;
  };
  int64_t a = 0, b = 0, s = 1;
  bool has_a = false, has_b = false, has_s = false;
  if (!part(start, &a, &has_a) || !part(stop, &b, &has_b) || !part(step, &s, &has_s)) return false;
  if (!has_s) s = 1;
  if (s == 0) {
    *error = "slice step cannot be zero";
    return false;
  }
  const std::vector<uint32_t> cps = IsStr(obj) ? Utf8Decode(Str(obj)) : std::vector<uint32_t>();
  const int64_t n = IsStr(obj) ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.data().size());
  // Python's slice.indices(n)
  const int64_t lower = s < 0 ? -1 : 0, upper = s < 0 ? n - 1 : n;
  auto clamp = [&](int64_t x, bool given, int64_t dflt) {
    if (!given) return dflt;
    if (x < 0) x += n;
    return x < lower ? lower : x > upper ? upper : x;
  };
  a = clamp(a, has_a, s < 0 ? upper : lower);
  b = clamp(b, has_b, s < 0 ? lower : upper);
  std::vector<int64_t> picks;
  for (int64_t i = a; s > 0 ? i < b : i > b; i += s) picks.push_back(i);
  if (IsStr(obj)) {
    std::vector<uint32_t> r;
    for (int64_t i : picks) r.push_back(cps[static_cast<size_t>(i)]);
    *out = Value::Of(Json(Utf8Encode(r)));
  } else {
    Json r = Json::array();
    for (int64_t i : picks) r.push_back(obj.data()[static_cast<size_t>(i)]);
    *out = Value::Of(std::move(r));
  }
  return true;
}

bool Iterate(const Value& v, std::vector<Value>* items, std::string* error) {
  items->clear();
  if (v.is_undefined()) return true;
  if (v.kind() == Value::Kind::kNamespace || v.kind() == Value::Kind::kCallable || !v.is_data() ||
      !(v.data().is_array() || v.data().is_object() || v.data().is_string())) {
    *error = "'" + TypeName(v) + "' object is not iterable";
    return false;
  }
  const Json& j = v.data();
  if (j.is_array()) {
    for (const Json& x : j) items->push_back(v.Sub(&x));
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) items->push_back(Value::Of(Json(it.key())));
  } else {
    for (uint32_t cp : Utf8Decode(Str(v))) items->push_back(Value::Of(Json(Utf8Encode({cp}))));
  }
  return true;
}

}  // namespace jinja
}  // namespace kvlab
