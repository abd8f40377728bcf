// Jinja's lexer (jinja2/lexer.py) for core/tokenizer/jinja.h: text and tags, with
// the whitespace rules of an environment with trim_blocks and lstrip_blocks
// (transformers' chat template environment):
//   {%- / {{- / {#-  strip all whitespace before the tag;
//   -%} / -}} / -#}  strip all whitespace after it;
//   trim_blocks      the first newline after %} or #} is removed (not after }}, nor after +%});
//   lstrip_blocks    spaces and tabs between a line's start and {% or {# are removed (not before {{, nor {%+).
// Newlines are normalised to \n and one trailing newline is dropped
// (keep_trailing_newline false), as jinja2 does.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/tokenizer/jinja_internal.h"

namespace kvlab {
namespace jinja {

Status ErrorAt(const std::string& origin, Pos pos, const std::string& what) {
  return Status::InvalidArgument(origin + ": line " + std::to_string(pos.line) + ", column " +
                                 std::to_string(pos.column) + ": " + what);
}

namespace {

std::string Normalise(const std::string& in) {
  std::string s;
  s.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      s += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      s += in[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// The code point starting at s[i] and its length in bytes (invalid bytes: one each).
uint32_t CodePointAt(const std::string& s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  *len = static_cast<size_t>(n);
  return cp;
}

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& origin) : src_(Normalise(source)), origin_(origin) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  Status Run(std::vector<Token>* out) {
    out_ = out;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = pos;
      while (start + 1 < src_.size() &&
             !(src_[start] == '{' && std::strchr("{%#", src_[start + 1]) != nullptr && src_[start + 1] != 0))
        ++start;
      if (start + 1 >= src_.size()) {
        Emit(Tok::kText, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[start + 1];
      size_t after = start + 2;
      const char sign = after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after] : 0;
      if (sign) ++after;
      std::string text = src_.substr(pos, start - pos);
      if (sign == '-') {
        text = PyStrip(text, nullptr, false, true);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && AllSpace(text, l_pos)) text.resize(l_pos);
      }
      if (!text.empty()) Emit(Tok::kText, text, pos);
      size_t end = 0;
      if (kind == '#') {
        KVLAB_RETURN_IF_ERROR(Comment(start, after, &end));
      } else if (kind == '%' && IsRaw(after, &end)) {
        KVLAB_RETURN_IF_ERROR(Raw(start, end, &end));
      } else {
        Emit(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", start);
        KVLAB_RETURN_IF_ERROR(Tag(kind, start, after, &end));
      }
      line_starting = end > 0 && src_[end - 1] == '\n';
      pos = end;
    }
    Emit(Tok::kEnd, "", src_.size());
    return Status::OK();
  }

 private:
  Pos PosAt(size_t offset) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      (line_starts_[mid] <= offset ? lo : hi) = mid;
    }
    Pos p;
    p.line = static_cast<int>(lo + 1);
    for (size_t i = line_starts_[lo]; i < offset && i < src_.size(); ++i)
      if ((static_cast<unsigned char>(src_[i]) & 0xc0) != 0x80) ++p.column;
    return p;
  }
  Status Error(size_t offset, const std::string& what) const { return ErrorAt(origin_, PosAt(offset), what); }

  Token& Emit(Tok kind, std::string text, size_t offset) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.pos = PosAt(offset);
    out_->push_back(std::move(t));
    return out_->back();
  }

  static bool AllSpace(const std::string& s, size_t from) {
    for (size_t i = from; i < s.size();) {
      size_t len = 1;
      if (!IsPySpace(CodePointAt(s, i, &len))) return false;
      i += len;
    }
    return true;
  }
  size_t SkipSpace(size_t i) const {
    while (i < src_.size()) {
      size_t len = 1;
      if (!IsPySpace(CodePointAt(src_, i, &len))) break;
      i += len;
    }
    return i;
  }
  bool At(size_t i, const char* s) const { return src_.compare(i, std::strlen(s), s) == 0; }

  // `#}`, `-#}` (then all whitespace) or `+#}`; trim_blocks eats one newline after a plain `#}`.
  Status Comment(size_t start, size_t after, size_t* end) {
    const size_t close = src_.find("#}", after);
    if (close == std::string::npos) return Error(start, "missing end of comment tag '#}'");
    const char before = close > after ? src_[close - 1] : 0;
    *end = close + 2;
    if (before == '-') {
      *end = SkipSpace(*end);
    } else if (before != '+' && *end < src_.size() && src_[*end] == '\n') {
      ++*end;
    }
    return Status::OK();
  }

  // `{% raw %}` (or `{%- raw -%}`): *end is just past its `%}`.
  bool IsRaw(size_t after, size_t* end) const {
    size_t i = SkipSpace(after);
    if (!At(i, "raw")) return false;
    i += 3;
    const size_t j = SkipSpace(i);
    if (At(j, "-%}")) {
      *end = SkipSpace(j + 3);
      return true;
    }
    if (At(j, "%}")) {
      *end = j + 2;
      return true;
    }
    return false;
  }

  Status Raw(size_t start, size_t body, size_t* end) {
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 2)) {
      size_t j = i + 2;
      const char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
      if (sign) ++j;
      j = SkipSpace(j);
      if (!At(j, "endraw")) continue;
      j = SkipSpace(j + 6);
      size_t stop = 0;
      if (At(j, "+%}")) {
        stop = j + 3;
      } else if (At(j, "-%}")) {
        stop = SkipSpace(j + 3);
      } else if (At(j, "%}")) {
        stop = j + 2;
        if (stop < src_.size() && src_[stop] == '\n') ++stop;
      } else {
        continue;
      }
      std::string text = src_.substr(body, i - body);
      if (sign == '-') text = PyStrip(text, nullptr, false, true);
      if (!text.empty()) Emit(Tok::kText, text, body);
      *end = stop;
      return Status::OK();
    }
    return Error(start, "missing {% endraw %} for this {% raw %}");
  }

  // The tokens of a {{ }} or {% %} tag up to its end (at bracket depth 0).
  Status Tag(char kind, size_t start, size_t i, size_t* end) {
    std::vector<char> closers;
    const char* what = kind == '{' ? "'}}'" : "'%}'";
    for (;;) {
      i = SkipSpace(i);
      if (i >= src_.size()) return Error(start, std::string("unexpected end of template: this tag has no ") + what);
      if (closers.empty()) {
        size_t stop = 0;
        if (kind == '{' && At(i, "-}}")) {
          stop = SkipSpace(i + 3);
        } else if (kind == '{' && At(i, "}}")) {
          stop = i + 2;
        } else if (kind == '%' && At(i, "+%}")) {
          stop = i + 3;
        } else if (kind == '%' && At(i, "-%}")) {
          stop = SkipSpace(i + 3);
        } else if (kind == '%' && At(i, "%}")) {
          stop = i + 2;
          if (stop < src_.size() && src_[stop] == '\n') ++stop;
        }
        if (stop) {
          Emit(kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, "", i);
          *end = stop;
          return Status::OK();
        }
      }
      KVLAB_RETURN_IF_ERROR(OneToken(&i, &closers));
    }
  }

  Status OneToken(size_t* i, std::vector<char>* closers) {
    const size_t s = *i;
    const char c = src_[s];
    if (std::isdigit(static_cast<unsigned char>(c))) return Number(i);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = s;
      while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
      Emit(Tok::kName, src_.substr(s, e - s), s);
      *i = e;
      return Status::OK();
    }
    if (c == '\'' || c == '"') return String(i);
    static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (At(s, op)) {
        Emit(Tok::kOp, op, s);
        *i = s + 2;
        return Status::OK();
      }
    }
    if (std::strchr("+-/*%~[](){}><=.:|,;", c) == nullptr) {
      size_t len = 1;
      CodePointAt(src_, s, &len);
      return Error(s, "unexpected character '" + src_.substr(s, len) + "' in a tag");
    }
    if (c == '(' || c == '[' || c == '{') closers->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (closers->empty()) return Error(s, std::string("unexpected '") + c + "'");
      if (closers->back() != c) return Error(s, std::string("unexpected '") + c + "', expected '" + closers->back() + "'");
      closers->pop_back();
    }
    Emit(Tok::kOp, std::string(1, c), s);
    *i = s + 1;
    return Status::OK();
  }

  // Digits with optional underscores; a float has a fraction and/or an exponent.
  Status Number(size_t* i) {
    const size_t s = *i;
    auto digits = [&](size_t k) {
      while (k < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[k])) || src_[k] == '_')) ++k;
      return k;
    };
    size_t e = digits(s);
    bool is_float = false;
    const bool after_dot = s > 0 && src_[s - 1] == '.';  // `x.0.1` is x[0][1], as jinja2's (?<!\.) says
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        e = digits(k);
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = s; k < e; ++k)
      if (src_[k] != '_') text += src_[k];
    Token& t = Emit(is_float ? Tok::kFloat : Tok::kInt, text, s);
    errno = 0;
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Error(s, "integer " + text + " is too large");
    }
    *i = e;
    return Status::OK();
  }

  Status String(size_t* i) {
    const size_t s = *i;
    const char q = src_[s];
    size_t k = s + 1;
    std::string out;
    while (k < src_.size() && src_[k] != q) {
      if (src_[k] != '\\' || k + 1 >= src_.size()) {
        out += src_[k++];
        continue;
      }
      const char e = src_[k + 1];
      k += 2;
      const char* simple = std::strchr("\\'\"abfnrtv", e);
      if (simple != nullptr && e != 0) {
        static const char kOut[] = "\\'\"\a\b\f\n\r\t\v";
        out += kOut[simple - "\\'\"abfnrtv"];
      } else if (e == '\n') {
        // a backslash-newline continues the line
      } else if (e >= '0' && e <= '7') {
        uint32_t v = static_cast<uint32_t>(e - '0');
        for (int n = 0; n < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++n) v = v * 8 + (src_[k++] - '0');
        out += Utf8Encode({v});
      } else if (e == 'x' || e == 'u' || e == 'U') {
        const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (k + n > src_.size()) return Error(s, std::string("truncated \\") + e + " escape in a string");
        const std::string hex = src_.substr(k, n);
        if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
          return Error(s, std::string("truncated \\") + e + " escape in a string");
        const uint32_t v = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
        if (v > 0x10ffff) return Error(s, "illegal Unicode character in a string escape");
        out += Utf8Encode({v});
        k += n;
      } else {
        out += '\\';
        out += e;
      }
    }
    if (k >= src_.size()) return Error(s, "unterminated string");
    Emit(Tok::kString, out, s);
    *i = k + 1;
    return Status::OK();
  }

  const std::string src_;
  const std::string& origin_;
  std::vector<size_t> line_starts_;
  std::vector<Token>* out_ = nullptr;
};

}  // namespace

Status Lex(const std::string& source, const std::string& origin, std::vector<Token>* out) {
  out->clear();
  return Lexer(source, origin).Run(out);
}

}  // namespace jinja
}  // namespace kvlab
