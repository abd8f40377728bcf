#include "core/tokenizer/tokenize_command.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace kvlab {

Status RunTokenize(const TokenizeOptions& o, std::string* output) {
  output->clear();
  const int modes = (o.has_text ? 1 : 0) + (o.file.empty() ? 0 : 1) + (o.decode.empty() ? 0 : 1);
  if (modes != 1) return Status::InvalidArgument("tokenize: give exactly one of --text, --file and --decode");
  if (o.model.empty()) return Status::InvalidArgument("tokenize: --model is required");
  std::unique_ptr<Tokenizer> tokenizer;
  KVLAB_RETURN_IF_ERROR(LoadTokenizerFromDir(o.model, &tokenizer));
  if (!o.decode.empty()) {
    std::vector<int32_t> ids;
    KVLAB_RETURN_IF_ERROR(ParseTokenIds(o.decode, tokenizer->vocab_size(), "--decode", &ids));
    return tokenizer->Decode(ids, output);
  }
  std::string text = o.text;
  if (!o.file.empty()) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) return Status::IOError(o.file + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  std::vector<int32_t> ids;
  Status s = tokenizer->Encode(text, /*add_bos=*/!o.no_special, &ids);
  if (!s.ok()) return Status::InvalidArgument((o.file.empty() ? std::string("--text") : o.file) + ": " + s.message());
  for (size_t i = 0; i < ids.size(); ++i) *output += (i ? "," : "") + std::to_string(ids[i]);
  return Status::OK();
}

}  // namespace kvlab
