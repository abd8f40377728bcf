#include "core/base/untrusted.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

namespace kvlab {
namespace {

int64_t LineAt(std::string_view text, size_t pos, int64_t first_line = 1) {
  int64_t line = first_line;
  for (size_t i = 0; i < pos && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

Status TooLarge(const std::string& file, const char* kind, uint64_t bytes, uint64_t max_bytes) {
  return Status::InvalidArgument(file + ": " + std::to_string(bytes) + " bytes of " + kind + ", more than the " +
                                 std::to_string(max_bytes) + " kvlab reads for this file; refused");
}

Status TooDeep(const std::string& file, const char* kind, std::string_view text, size_t pos, int max_depth,
               int64_t first_line = 1) {
  return Status::InvalidArgument(file + ":" + std::to_string(LineAt(text, pos, first_line)) + ": " + kind +
                                 " nested deeper than " + std::to_string(max_depth) +
                                 " levels; refused (kvlab's limit for untrusted files)");
}

// Length of the UTF-8 sequence starting at s[i], or 0 when it is not one
// (overlong forms, surrogates and code points past U+10FFFF included).
size_t Utf8Length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

// TOML strings: "basic", 'literal', and their """multi-line""" forms. Returns
// the position just past the closing quote (text.size() when unterminated).
size_t SkipTomlString(std::string_view t, size_t i) {
  const char q = t[i];
  const bool multi = t.compare(i, 3, std::string(3, q)) == 0;
  i += multi ? 3 : 1;
  while (i < t.size()) {
    if (q == '"' && t[i] == '\\') { i += 2; continue; }
    if (!multi && (t[i] == q || t[i] == '\n')) return i + 1;
    if (multi && t.compare(i, 3, std::string(3, q)) == 0) {
      i += 3;
      for (int extra = 0; extra < 2 && i < t.size() && t[i] == q; ++extra) ++i;  // """a"""" ends in a quote
      return i;
    }
    ++i;
  }
  return i;
}

}  // namespace

Status CheckJsonText(std::string_view text, const std::string& file, uint64_t max_bytes, int max_depth,
                     int64_t first_line) {
  if (text.size() > max_bytes) return TooLarge(file, "JSON", text.size(), max_bytes);
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) i += text[i] == '\\';
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return TooDeep(file, "JSON", text, i, max_depth, first_line);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return Status::OK();
}

// A scan of TOML's structure, not a parser: it over-counts rather than misses
// (every dot of a key and every bracket of a value adds a level), which real
// configs, a few levels deep, never notice.
Status CheckTomlText(std::string_view t, const std::string& file, uint64_t max_bytes, int max_depth) {
  if (t.size() > max_bytes) return TooLarge(file, "TOML", t.size(), max_bytes);
  int header = 0;            // levels of the current [table] header
  int line_key = 1;          // components of the dotted key on this line
  std::vector<int> entry;    // per open inline bracket: components of its entry's key ('{') or 0 ('[')
  std::vector<char> open;    // the open inline brackets
  int entry_sum = 0;
  bool key = true, line_start = true;
  const auto depth = [&] { return header + line_key + static_cast<int>(open.size()) + entry_sum; };
  for (size_t i = 0; i < t.size();) {
    const char c = t[i];
    if (c == '"' || c == '\'') { i = SkipTomlString(t, i); line_start = false; continue; }
    if (c == '#') { while (i < t.size() && t[i] != '\n') ++i; continue; }
    if (c == '\n') {
      if (open.empty()) { key = true; line_key = 1; line_start = true; }
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') { ++i; continue; }
    if (line_start && open.empty() && c == '[') {  // [a.b.c] or [[a.b.c]]
      header = 1;
      if (i + 1 < t.size() && t[i + 1] == '[') { ++header; ++i; }
      for (++i; i < t.size() && t[i] != ']' && t[i] != '\n';) {
        if (t[i] == '"' || t[i] == '\'') { i = SkipTomlString(t, i); continue; }
        if (t[i] == '.' && ++header > max_depth) return TooDeep(file, "TOML tables", t, i, max_depth);
        ++i;
      }
      line_start = false;
      key = false;
      continue;
    }
    line_start = false;
    if (key) {
      if (c == '.') {
        int& n = open.empty() ? line_key : entry.back();
        ++n;
        if (!open.empty()) ++entry_sum;
        if (depth() > max_depth) return TooDeep(file, "TOML keys", t, i, max_depth);
      } else if (c == '=') {
        key = false;
      }
      ++i;
      continue;
    }
    if (c == '[' || c == '{') {
      open.push_back(c);
      entry.push_back(c == '{' ? 1 : 0);
      entry_sum += entry.back();
      key = c == '{';
      if (depth() > max_depth) return TooDeep(file, "TOML values", t, i, max_depth);
    } else if ((c == ']' || c == '}') && !open.empty()) {
      entry_sum -= entry.back();
      entry.pop_back();
      open.pop_back();
    } else if (c == ',' && !open.empty() && open.back() == '{') {
      entry_sum -= entry.back() - 1;
      entry.back() = 1;
      key = true;
    }
    ++i;
  }
  return Status::OK();
}

Status CheckIntIn(const std::string& what, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo) return Status::InvalidArgument(what + " is " + std::to_string(v) + ", less than " + std::to_string(lo));
  if (v > hi) {
    return Status::InvalidArgument(what + " is " + std::to_string(v) + ", more than " + std::to_string(hi) +
                                   " (kvlab's limit)");
  }
  return Status::OK();
}

int64_t HostAvailableBytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kib = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    long long v = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

Status CheckHostMemory(const std::string& what, int64_t bytes, int64_t available) {
  if (available < 0) available = HostAvailableBytes();
  if (available < 0 || bytes <= available) return Status::OK();
  return Status::ResourceExhausted(what + " needs " + std::to_string(bytes) + " bytes, more than the " +
                                   std::to_string(available) + " bytes this host has available (MemAvailable)");
}

Status CheckFiniteIn(const std::string& what, double v, double lo, double hi) {
  if (std::isfinite(v) && v >= lo && v <= hi) return Status::OK();
  char buf[160];
  std::snprintf(buf, sizeof(buf), " is %.17g; expected a finite number in [%.17g, %.17g]", v, lo, hi);
  return Status::InvalidArgument(what + buf);
}

Status ReadFileBounded(const std::string& path, uint64_t max_bytes, std::string* out) {
  const auto too_large = [&](uint64_t bytes, const char* at_least) {
    return Status::InvalidArgument(path + ": " + at_least + std::to_string(bytes) + " bytes, more than the " +
                                   std::to_string(max_bytes) + " kvlab reads for this file; refused");
  };
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return Status::InvalidArgument(path + ": is a directory, not a file");
  // A regular file is judged by its size before a byte is read; a pipe
  // (`--config <(...)`) by what it yields.
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) return too_large(st.st_size, "");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  out->clear();
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    out->append(buf.data(), static_cast<size_t>(in.gcount()));
    if (out->size() > max_bytes) return too_large(out->size(), "at least ");
  }
  if (in.bad()) return Status::IOError(path + ": read failed");
  return Status::OK();
}

std::string QuoteBytes(std::string_view bytes, size_t max_bytes, bool with_size) {
  std::string out;
  size_t i = 0;
  for (; i < bytes.size() && i < max_bytes;) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    const size_t n = Utf8Length(bytes, i);
    if (n > 1) {
      if (i + n > max_bytes) break;  // cut at a character, never inside one
      out.append(bytes.substr(i, n));
      i += n;
      continue;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (n == 1 && c >= 0x20 && c != 0x7F) out += static_cast<char>(c);
    else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
    ++i;
  }
  if (i < bytes.size()) out += with_size ? "... (" + std::to_string(bytes.size()) + " bytes)" : std::string("...");
  return out;
}

}  // namespace kvlab
