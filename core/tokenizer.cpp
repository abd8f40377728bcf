#include "core/tokenizer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

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

Status ParseTokenIds(const std::string& text, int64_t vocab, const std::string& what, std::vector<int32_t>* out) {
  out->clear();
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i]))) {
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
      return Status::InvalidArgument(what + ": token id '" + tok + "' is not an integer in [0, " +
                                     std::to_string(vocab) + ")");
    }
    out->push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (out->empty()) return Status::InvalidArgument(what + ": no token ids");
  return Status::OK();
}

}  // namespace kvlab
