#include "core/tokenizer/tokenizer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/base/untrusted_json.h"
#include "core/tokenizer/hf_tokenizer.h"

namespace kvlab {

std::vector<int32_t> ByteTokenizer::Encode(const std::string& text, bool add_bos) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  if (add_bos) ids.push_back(kBos);
  for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c));
  return ids;
}

std::string ByteTokenizer::Decode(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
  }
  return out;
}

Status ByteTokenizer::Encode(const std::string& text, bool add_bos, std::vector<int32_t>* ids) const {
  *ids = Encode(text, add_bos);
  return Status::OK();
}

Status ByteTokenizer::Decode(const std::vector<int32_t>& ids, std::string* text) const {
  *text = Decode(ids);
  return Status::OK();
}

Status LoadTokenizer(const std::string& model, const ModelConfig& config, std::unique_ptr<Tokenizer>* out) {
  // Presets have no directory, hence no tokenizer.model.
  std::string dir;
  ModelConfig preset;
  if (!PresetConfig(model, &preset).ok()) {
    // The directory of the config.json the model names.
    const std::string path = ModelConfigPath(model);
    dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  }
  if (!dir.empty()) {
    // Checkpoints that ship both files mean tokenizer.json (transformers prefers it too).
    const std::string hf = dir + "/tokenizer.json", spm = dir + "/tokenizer.model";
    const bool have_hf = std::ifstream(hf).good();
    if (have_hf || std::ifstream(spm).good()) {
      std::unique_ptr<Tokenizer> t;
      if (have_hf) KVLAB_RETURN_IF_ERROR(NewHfTokenizer(hf, config.bos_token_id, config.eos_token_id, &t));
      else KVLAB_RETURN_IF_ERROR(NewSentencePieceTokenizer(spm, config.bos_token_id, config.eos_token_id, &t));
      if (t->vocab_size() > config.vocab_size) {
        return Status::InvalidArgument((have_hf ? hf : spm) + ": " + std::to_string(t->vocab_size()) +
                                       " tokens, more than the model's vocabulary (" +
                                       std::to_string(config.vocab_size) + ")");
      }
      *out = std::move(t);
      return Status::OK();
    }
  }
  if (config.vocab_size == ByteTokenizer::kVocabSize) {
    *out = std::make_unique<ByteTokenizer>();
    return Status::OK();
  }
  return Status::InvalidArgument(
      "model '" + model + "' has no tokenizer: its vocabulary (" + std::to_string(config.vocab_size) +
      ") is not the byte tokenizer's (" + std::to_string(ByteTokenizer::kVocabSize) + ") and " +
      (dir.empty() ? std::string("a preset has no tokenizer.json or tokenizer.model")
                   : "there is no " + dir + "/tokenizer.json or " + dir + "/tokenizer.model") +
      "; give token ids instead of text (a token-id file, FILE.ids)");
}

namespace {

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// bos_token_id / eos_token_id / vocab_size of DIR/config.json, read without
// judging the model_type (tokenizing needs no model). -1: not stated.
Status ReadTokenIdsOfConfig(const std::string& path, int64_t* bos, int64_t* eos, int64_t* vocab) {
  *bos = *eos = *vocab = -1;
  std::string text;
  if (!std::ifstream(path, std::ios::binary)) return Status::OK();
  KVLAB_RETURN_IF_ERROR(ReadFileBounded(path, kMaxConfigBytes, &text));
  KVLAB_RETURN_IF_ERROR(CheckJsonText(text, path, kMaxConfigBytes));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument(path + ": not a JSON object");
  const auto id = [&](const char* key, int64_t* out) -> Status {
    if (!j.contains(key) || j[key].is_null()) return Status::OK();
    const nlohmann::json& v = j[key].is_array() && !j[key].empty() ? j[key][0] : j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Status::InvalidArgument(path + ": " + key + " is " + QuoteJson(j[key]) + ", not a token id");
    }
    *out = v.get<int64_t>();
    return Status::OK();
  };
  KVLAB_RETURN_IF_ERROR(id("bos_token_id", bos));
  KVLAB_RETURN_IF_ERROR(id("eos_token_id", eos));
  return id("vocab_size", vocab);
}

}  // namespace

Status LoadTokenizerFromDir(const std::string& dir_or_file, std::unique_ptr<Tokenizer>* out) {
  ModelConfig preset;
  if (PresetConfig(dir_or_file, &preset).ok()) return LoadTokenizer(dir_or_file, preset, out);
  std::string dir = dir_or_file, file;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (EndsWith(dir_or_file, "tokenizer.json") || EndsWith(dir_or_file, "tokenizer.model") ||
      EndsWith(dir_or_file, "config.json")) {
    const size_t slash = dir_or_file.rfind('/');
    dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir_or_file.substr(0, slash);
    if (!EndsWith(dir_or_file, "config.json")) file = dir_or_file;
  }
  int64_t bos = -1, eos = -1, vocab = -1;
  KVLAB_RETURN_IF_ERROR(ReadTokenIdsOfConfig(dir + "/config.json", &bos, &eos, &vocab));
  const std::string hf = dir + "/tokenizer.json", spm = dir + "/tokenizer.model";
  if (file.empty()) file = std::ifstream(hf).good() ? hf : std::ifstream(spm).good() ? spm : "";
  if (!file.empty() && !std::ifstream(file).good()) return Status::NotFound(file + ": cannot open");
  if (EndsWith(file, "tokenizer.json")) return NewHfTokenizer(file, bos, eos, out);
  if (EndsWith(file, "tokenizer.model")) return NewSentencePieceTokenizer(file, bos, eos, out);
  if (vocab == ByteTokenizer::kVocabSize) {
    *out = std::make_unique<ByteTokenizer>();
    return Status::OK();
  }
  return Status::NotFound("'" + dir + "' has no tokenizer: looked for " + hf + " and " + spm +
                          " (and a config.json with the byte tokenizer's vocab_size " +
                          std::to_string(ByteTokenizer::kVocabSize) + ")");
}

Status ParseTokenIds(const std::string& text, int64_t vocab, const std::string& what, std::vector<int32_t>* out) {
  out->clear();
  size_t i = 0;
  int64_t line = 1;
  const bool multiline = text.find('\n') != std::string::npos && text.find('\n') + 1 < text.size();
  while (i < text.size()) {
    if (text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i]))) {
      if (text[i] == '\n') ++line;
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] != ',' && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    const std::string tok = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(tok.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || v < 0 || v >= vocab) {
      const std::string where = multiline ? what + ":" + std::to_string(line) : what;
      return Status::InvalidArgument(where + ": token id '" + tok.substr(0, 32) + "' is not an integer in [0, " +
                                     std::to_string(vocab) + ")");
    }
    out->push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (out->empty()) return Status::InvalidArgument(what + ": no token ids");
  return Status::OK();
}

bool IsTokenIdFile(const std::string& path) {
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".ids") == 0;
}

Status ReadTokenIdFile(const std::string& path, int64_t vocab, std::vector<int32_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open token-id file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseTokenIds(ss.str(), vocab, path, out);
}

Status ReadPromptFile(const std::string& path, const Tokenizer* tokenizer, int64_t vocab, std::vector<int32_t>* out) {
  if (IsTokenIdFile(path)) return ReadTokenIdFile(path, vocab, out);
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open prompt file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (tokenizer == nullptr) {
    return Status::InvalidArgument(path + ": a text prompt needs the model's tokenizer; give token ids (a .ids file)");
  }
  KVLAB_RETURN_IF_ERROR(tokenizer->Encode(ss.str(), /*add_bos=*/true, out));
  if (out->empty()) return Status::InvalidArgument(path + ": empty prompt");
  return Status::OK();
}

}  // namespace kvlab
