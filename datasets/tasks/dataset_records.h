// The record readers the dataset files share (datasets/tasks/longbench_data.cpp
// defines them; infinitebench.cpp uses them too): JSONL or a JSON array of
// objects, each checked before parsing, and field access whose errors name
// the file, the line and the field. Internal to datasets/tasks.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/status.h"

namespace kvlab {
namespace dataset_internal {

// "PATH:LINE"
std::string Where(const std::string& path, int64_t line);
// InvalidArgument "PATH:LINE: field 'FIELD' WHAT".
Status FieldError(const std::string& path, int64_t line, const std::string& field, const std::string& what);
Status GetString(const nlohmann::json& o, const std::string& path, int64_t line, const std::string& field,
                 std::string* out);
// A list of strings; `allow_null` takes null as an empty list.
Status GetStrings(const nlohmann::json& o, const std::string& path, int64_t line, const std::string& field,
                  bool allow_null, std::vector<std::string>* out);
// Each non-blank line of a JSONL file as an object with its line number (or,
// for a file that starts with '[', each element of its array, numbered from 1).
Status ParseObjects(const std::string& path, const std::string& text,
                    std::vector<std::pair<nlohmann::json, int64_t>>* out);

}  // namespace dataset_internal
}  // namespace kvlab
