// tokenizer.json (core/tokenizer/hf_tokenizer.h). A file it accepts encodes a
// fixed text (every pre-tokenizer and normalizer it built runs) and decodes
// the ids back, plus ids outside the vocabulary.
#include <memory>
#include <string>
#include <vector>

#include "core/tokenizer/hf_tokenizer.h"
#include "evals/fuzz/fuzz_target.h"

KVLAB_FUZZ_TARGET(tokenizer) {
  const std::string path = kvlab::fuzz::WriteScratchFile("tokenizer.json", data, size);
  std::unique_ptr<kvlab::Tokenizer> tok;
  if (!kvlab::NewHfTokenizer(path, -1, -1, &tok).ok()) return 0;
  std::vector<int32_t> ids;
  if (tok->Encode("Hello, world! 123  caf\xc3\xa9\n\tx  \xe2\x96\x81y", true, &ids).ok()) {
    ids.push_back(-1);
    ids.push_back(static_cast<int32_t>(tok->vocab_size()));
    ids.push_back(2147483647);
    std::string text;
    (void)tok->Decode(ids, &text);
  }
  return 0;
}
