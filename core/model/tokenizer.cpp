#include "core/model/tokenizer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

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
    const bool is_json = model.size() >= 5 && model.compare(model.size() - 5, 5, ".json") == 0;
    if (!is_json) dir = model;
    else dir = model.find('/') == std::string::npos ? "." : model.substr(0, model.rfind('/'));
  }
  if (!dir.empty()) {
    const std::string spm = dir + "/tokenizer.model";
    if (std::ifstream(spm).good()) {
      std::unique_ptr<Tokenizer> t;
      KVLAB_RETURN_IF_ERROR(NewSentencePieceTokenizer(spm, config.bos_token_id, config.eos_token_id, &t));
      if (t->vocab_size() > config.vocab_size) {
        return Status::InvalidArgument(spm + ": " + std::to_string(t->vocab_size()) +
                                       " pieces, more than the model's vocabulary (" +
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
      (dir.empty() ? std::string("a preset has no tokenizer.model") : "there is no " + dir + "/tokenizer.model") +
      "; give token ids instead of text (a token-id file, FILE.ids)");
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
