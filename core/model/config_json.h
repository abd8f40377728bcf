// JSON getters shared by the config.json readers (model_config.cpp and
// model_families.cpp): each names the file and the key in its error.
// Internal to core/; torch-free.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/status.h"
#include "core/base/untrusted_json.h"

namespace kvlab {
namespace config_json {

using json = nlohmann::json;

inline std::string TypeName(const json& v) { return v.type_name(); }

// Each getter leaves *out alone when the key is absent and not required, so the
// struct's defaults (HF's defaults) apply.
inline Status GetInt(const std::string& file, const json& j, const std::string& key, bool required, int64_t* out) {
  const auto it = j.find(key);
  if (it == j.end()) {
    return required ? Status::InvalidArgument(file + ": missing required key '" + key + "'") : Status::OK();
  }
  if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX)) {
    return Status::InvalidArgument(file + ": key '" + key + "' must be an integer, got " + TypeName(*it) +
                                   " " + QuoteJson(*it));
  }
  *out = it->get<int64_t>();
  return Status::OK();
}

inline Status GetDouble(const std::string& file, const json& j, const std::string& key, bool required, double* out) {
  const auto it = j.find(key);
  if (it == j.end()) {
    return required ? Status::InvalidArgument(file + ": missing required key '" + key + "'") : Status::OK();
  }
  if (!it->is_number()) {
    return Status::InvalidArgument(file + ": key '" + key + "' must be a number, got " + TypeName(*it) + " " +
                                   QuoteJson(*it));
  }
  *out = it->get<double>();
  return Status::OK();
}

inline Status GetBool(const std::string& file, const json& j, const std::string& key, bool* out) {
  const auto it = j.find(key);
  if (it == j.end()) return Status::OK();
  if (!it->is_boolean()) {
    return Status::InvalidArgument(file + ": key '" + key + "' must be true or false, got " + QuoteJson(*it));
  }
  *out = it->get<bool>();
  return Status::OK();
}

// A token id: integer, null (none), or, for eos_token_id, a list whose first entry counts.
inline Status GetTokenId(const std::string& file, const json& j, const std::string& key, int64_t* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::OK();
  const json* v = &*it;
  if (v->is_array()) {
    if (v->empty()) return Status::OK();
    v = &(*v)[0];
  }
  if (!v->is_number_integer()) {
    return Status::InvalidArgument(file + ": key '" + key + "' must be an integer, a list of integers or null, got " +
                                   QuoteJson(*it));
  }
  *out = v->get<int64_t>();
  return Status::OK();
}

}  // namespace config_json
}  // namespace kvlab
