// Values of core/tokenizer/jinja.h's renderer and the Python semantics templates
// rely on: truth, str() and repr(), ==, json.dumps as transformers' tojson
// calls it, whitespace as str.strip() sees it, and strings as code points.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/tokenizer/jinja_internal.h"

namespace kvlab {
namespace jinja {

Value Value::Undefined(std::string why) {
  Value v;
  v.why_ = std::move(why);
  return v;
}

Value Value::Of(Json j) {
  auto root = std::make_shared<const Json>(std::move(j));
  const Json* at = root.get();
  return At(std::move(root), at);
}

Value Value::At(std::shared_ptr<const Json> root, const Json* at) {
  Value v;
  v.kind_ = Kind::kData;
  v.root_ = std::move(root);
  v.at_ = at;
  return v;
}

Value Value::Namespace(std::shared_ptr<Json> attrs) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.ns_ = std::move(attrs);
  return v;
}

Value Value::Function(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::move(fn);
  return v;
}

Json Value::ToJson() const {
  if (kind_ == Kind::kData) return *at_;
  if (kind_ == Kind::kNamespace) return *ns_;
  return nullptr;
}

const Value* Args::Get(size_t index, const char* name) const {
  if (index < pos.size()) return &pos[index];
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kNamespace: case Value::Kind::kCallable: return true;
    case Value::Kind::kData: break;
  }
  const Json& j = v.data();
  switch (j.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return j.get<bool>();
    case Json::value_t::number_integer: return j.get<int64_t>() != 0;
    case Json::value_t::number_unsigned: return j.get<uint64_t>() != 0;
    case Json::value_t::number_float: return j.get<double>() != 0.0;
    case Json::value_t::string: return !j.get_ref<const std::string&>().empty();
    default: return !j.empty();
  }
}

std::string PyFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[40];
  for (int p = 1; p <= 17; ++p) {  // the shortest digits that read back as d, as repr() does
    std::snprintf(buf, sizeof(buf), "%.*e", p - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s(buf);
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  const bool neg = s[0] == '-';
  for (size_t i = neg ? 1 : 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min(digits.size(), static_cast<size_t>(exp) + 1));
      ip.resize(static_cast<size_t>(exp) + 1, '0');
      const std::string frac = digits.size() > static_cast<size_t>(exp) + 1 ? digits.substr(exp + 1) : "0";
      return out + ip + "." + frac;
    }
    return out + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

namespace {

std::string PyStrRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char q = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == q || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + q;
}

void DumpString(const std::string& s, std::string* out) {
  *out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += ch;
        }
    }
  }
  *out += '"';
}

struct Dumper {
  const std::string* indent;
  const std::string& item_sep;
  const std::string& key_sep;
  bool sort_keys;
  std::string* out;

  void Newline(int level) const {
    *out += '\n';
    for (int i = 0; i < level; ++i) *out += *indent;
  }
  void Dump(const Json& j, int level) const {
    switch (j.type()) {
      case Json::value_t::null: *out += "null"; return;
      case Json::value_t::boolean: *out += j.get<bool>() ? "true" : "false"; return;
      case Json::value_t::number_integer: *out += std::to_string(j.get<int64_t>()); return;
      case Json::value_t::number_unsigned: *out += std::to_string(j.get<uint64_t>()); return;
      case Json::value_t::number_float: {
        const double d = j.get<double>();
        *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : PyFloat(d);
        return;
      }
      case Json::value_t::string: DumpString(j.get_ref<const std::string&>(), out); return;
      default: break;
    }
    const bool object = j.is_object();
    if (j.empty()) {
      *out += object ? "{}" : "[]";
      return;
    }
    *out += object ? '{' : '[';
    std::vector<std::pair<const std::string*, const Json*>> items;
    if (object) {
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(&it.key(), &it.value());
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return *a.first < *b.first; });
    } else {
      for (const Json& v : j) items.emplace_back(nullptr, &v);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) *out += item_sep;
      if (indent) Newline(level + 1);
      if (object) {
        DumpString(*items[i].first, out);
        *out += key_sep;
      }
      Dump(*items[i].second, level + 1);
    }
    if (indent) Newline(level);
    *out += object ? '}' : ']';
  }
};

}  // namespace

std::string DumpJson(const Json& j, const std::string* indent, const std::string& item_sep,
                     const std::string& key_sep, bool sort_keys) {
  std::string out;
  Dumper{indent, item_sep, key_sep, sort_keys, &out}.Dump(j, 0);
  return out;
}

std::string PyRepr(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "None";
    case Json::value_t::boolean: return j.get<bool>() ? "True" : "False";
    case Json::value_t::number_integer: return std::to_string(j.get<int64_t>());
    case Json::value_t::number_unsigned: return std::to_string(j.get<uint64_t>());
    case Json::value_t::number_float: return PyFloat(j.get<double>());
    case Json::value_t::string: return PyStrRepr(j.get_ref<const std::string&>());
    case Json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + PyRepr(j[i]);
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        out += (first ? "" : ", ") + PyStrRepr(it.key()) + ": " + PyRepr(it.value());
        first = false;
      }
      return out + "}";
    }
    default: return "None";
  }
}

std::string ToStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNamespace: return "<Namespace " + PyRepr(v.ns()) + ">";
    case Value::Kind::kCallable: return "<function " + v.fn().name + ">";
    case Value::Kind::kData: break;
  }
  if (v.data().is_string()) return v.data().get<std::string>();
  return PyRepr(v.data());
}

namespace {
// Python's numbers: bool is an int.
bool AsNumber(const Json& j, double* d) {
  if (j.is_boolean()) {
    *d = j.get<bool>() ? 1 : 0;
    return true;
  }
  if (!j.is_number()) return false;
  *d = j.get<double>();
  return true;
}

bool JsonEqual(const Json& a, const Json& b) {
  double x = 0, y = 0;
  if (AsNumber(a, &x) && AsNumber(b, &y)) {
    if (a.is_number_integer() && b.is_number_integer()) return a.get<int64_t>() == b.get<int64_t>();
    return x == y;
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!JsonEqual(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto o = b.find(it.key());
      if (o == b.end() || !JsonEqual(it.value(), *o)) return false;
    }
    return true;
  }
  return a == b;
}
}  // namespace

bool Equal(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_data() && b.is_data()) return JsonEqual(a.data(), b.data());
  if (a.kind() == Value::Kind::kNamespace && b.kind() == Value::Kind::kNamespace) return &a.ns() == &b.ns();
  return false;
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kCallable: return "function";
    case Value::Kind::kData: break;
  }
  switch (v.data().type()) {
    case Json::value_t::null: return "NoneType";
    case Json::value_t::boolean: return "bool";
    case Json::value_t::number_integer: case Json::value_t::number_unsigned: return "int";
    case Json::value_t::number_float: return "float";
    case Json::value_t::string: return "str";
    case Json::value_t::array: return "list";
    case Json::value_t::object: return "dict";
    default: return "object";
  }
}

std::vector<uint32_t> Utf8Decode(const std::string& s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    cps.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return cps;
}

std::string Utf8Encode(const std::vector<uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (uint32_t cp : cps) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  return out;
}

size_t Utf8Length(const std::string& s) {
  size_t n = 0;
  for (const char c : s)
    if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++n;
  return n;
}

bool IsPySpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
         cp == 0x3000;
}

std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::vector<uint32_t> cps = Utf8Decode(s);
  const std::vector<uint32_t> set = chars ? Utf8Decode(*chars) : std::vector<uint32_t>();
  auto strip = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : IsPySpace(cp);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip(cps[b])) ++b;
  if (right)
    while (e > b && strip(cps[e - 1])) --e;
  return Utf8Encode(std::vector<uint32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                          cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

}  // namespace jinja
}  // namespace kvlab
