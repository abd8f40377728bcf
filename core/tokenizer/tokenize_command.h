// `kvlab tokenize`: text to token ids and ids back to text with a model
// directory's tokenizer (tokenizer.json, tokenizer.model, or kvlab's byte
// tokenizer). The body of the subcommand, so that the CLI only parses flags
// and prints; tests may call it directly. Torch-free.
#pragma once

#include <string>

#include "core/base/status.h"

namespace kvlab {

struct TokenizeOptions {
  std::string model;        // --model: a directory (config.json optional), a tokenizer file or a preset
  std::string text;         // --text
  bool has_text = false;    // --text was given (it may be empty)
  std::string file;         // --file: text read as bytes
  std::string decode;       // --decode: ids, "1,2,3" (commas and/or whitespace)
  bool no_special = false;  // --no-special: no BOS/EOS/template tokens added
};

// Exactly one of --text, --file, --decode. *output: the ids comma-separated on
// one line (no newline), or the decoded text (special tokens skipped). Errors
// name the flag, the file or the directory.
Status RunTokenize(const TokenizeOptions& options, std::string* output);

}  // namespace kvlab
