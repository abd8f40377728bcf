// JSON documents from untrusted files: parsed only after CheckJsonText bounds
// their size and depth, and quoted into error messages by a prefix, never whole.
// Header-only over nlohmann::basic_json (json and ordered_json); every room that
// reads JSON (core/model loaders, the sweep's results.jsonl) uses it.
#pragma once

#include <exception>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/base/status.h"
#include "core/base/untrusted.h"

namespace kvlab {

// Checks `text` (CheckJsonText) and parses it into *out. A syntax error becomes
// InvalidArgument "FILE: malformed KIND: <the parser's message, quoted>".
// `callback`, when given, sees every parse event (nlohmann's parser callback).
template <class Json>
Status ParseJsonText(std::string_view text, const std::string& file, uint64_t max_bytes, Json* out,
                     const char* kind = "JSON", const typename Json::parser_callback_t& callback = nullptr) {
  KVLAB_RETURN_IF_ERROR(CheckJsonText(text, file, max_bytes));
  try {
    *out = Json::parse(text.begin(), text.end(), callback);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(file + ": malformed " + kind + ": " + QuoteBytes(e.what(), 240));
  }
  return Status::OK();
}

namespace untrusted_json_internal {

// Appends v as compact JSON until *out holds more than max_bytes; recursion is
// bounded by the depth check every parsed document passed, and by kMaxNestingDepth.
template <class Json>
void AppendPrefix(const Json& v, size_t max_bytes, int depth, std::string* out) {
  if (out->size() > max_bytes) return;
  if (depth > kMaxNestingDepth) {
    *out += "...";
    return;
  }
  if (v.is_object() || v.is_array()) {
    *out += v.is_object() ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (out->size() > max_bytes) return;
      if (!first) *out += ", ";
      first = false;
      if (v.is_object()) *out += "\"" + it.key().substr(0, max_bytes) + "\": ";
      AppendPrefix(*it, max_bytes, depth + 1, out);
    }
    *out += v.is_object() ? '}' : ']';
  } else if (v.is_string()) {  // as dump() writes it: quoted, with " and \ escaped
    *out += '"';
    const std::string& s = v.template get_ref<const std::string&>();
    for (size_t i = 0; i < s.size() && out->size() <= max_bytes; ++i) {
      if (s[i] == '"' || s[i] == '\\') *out += '\\';
      *out += s[i];
    }
    *out += '"';
  } else {
    *out += v.dump();  // a number, true, false or null: short
  }
}

}  // namespace untrusted_json_internal

// A JSON value for an error message: its compact text, at most about max_bytes
// of it (then "..."), valid UTF-8 on one line.
template <class Json>
std::string QuoteJson(const Json& v, size_t max_bytes = 80) {
  std::string s;
  untrusted_json_internal::AppendPrefix(v, max_bytes, 0, &s);
  return QuoteBytes(s, max_bytes, /*with_size=*/false);
}

}  // namespace kvlab
