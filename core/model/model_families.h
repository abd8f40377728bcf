// The per-family part of Hugging Face config.json: each family's defaults
// (its transformers config class), the keys that fill DecoderSpec and the
// per-layer sliding windows, and what kvlab writes back. Called only by
// model_config.cpp; torch-free.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/model_config.h"
#include "core/base/status.h"

namespace kvlab {

// model_type values LoadModelConfig accepts ("gemma3" means its text_config).
std::vector<std::string> FamilyNames();
bool IsKnownFamily(const std::string& model_type);

// Adds to *j the keys of `model_type`'s transformers config class that *j
// lacks (its defaults, as HF would apply them).
void AddFamilyDefaults(const std::string& model_type, nlohmann::json* j);

// Reads the family keys of *j (already defaulted) into c->spec and
// c->layer_sliding_window; c's common fields (sizes, sliding_window) are
// already read. A value the model does not implement is an error naming
// `file` and the key.
Status ParseFamily(const std::string& file, const nlohmann::json& j, ModelConfig* c);

// Writes the family keys of `c` (model_type, architectures, activation,
// biases, windows, soft-capping, ...) so that transformers rebuilds the same
// model from the file.
void WriteFamily(const ModelConfig& c, nlohmann::ordered_json* j);

}  // namespace kvlab
