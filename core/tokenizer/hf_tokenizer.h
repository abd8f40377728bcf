// The Hugging Face tokenizers format (tokenizer.json), which Llama 3, Qwen2/3,
// Gemma 3 and most recent checkpoints ship: a BPE model (byte-level or
// SentencePiece-style with byte fallback), its normalizer, pre-tokenizer,
// added tokens, post-processor template and decoder, run as the Rust
// `tokenizers` crate runs them. LoadTokenizer (core/tokenizer/tokenizer.h) calls it for
// model directories; everyone else may call NewHfTokenizer directly. Torch-free.
//
// What is read, and what is refused with an error naming the key:
//   model           BPE (merges as "a b" or [a, b]; byte_fallback, ignore_merges,
//                   unk_token, fuse_unk); refused: other models, dropout,
//                   continuing_subword_prefix / end_of_word_suffix (non-empty)
//   normalizer      Sequence, Replace, Prepend, Strip, NFC/NFD/NFKC/NFKD (ICU)
//   pre_tokenizer   Sequence, Split (String or PCRE2 Regex, every behavior,
//                   invert), ByteLevel, Metaspace, Digits, WhitespaceSplit
//   added_tokens    matched before the model, longest first; special, normalized,
//                   lstrip, rstrip, single_word
//   post_processor  TemplateProcessing (single), ByteLevel, Sequence,
//                   BertProcessing, RobertaProcessing: special tokens around A
//   decoder         Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace
// Where tokenizers.js (the golden tests' reference) and the Rust crate differ,
// kvlab follows the Rust crate: (?i:...) folds case Unicode-wide, as Oniguruma
// and PCRE2 do (tokenizers.js: ASCII only); Metaspace splits; ByteFallback
// decodes invalid bytes to one U+FFFD each.
#pragma once

#include <memory>
#include <string>

#include "core/base/status.h"
#include "core/tokenizer/tokenizer.h"

namespace kvlab {

// A tokenizer.json file. tokenizer_config.json beside it, when present, gives
// bos_token / eos_token, clean_up_tokenization_spaces (applied by Decode, as
// transformers does) and additional_special_tokens (skipped by Decode).
// bos_id / eos_id >= 0 replace the ids tokenizer_config.json names (config.json
// is the authority). Encode(text, add_bos): add_bos adds the post-processor's
// special tokens (its template: BOS for Gemma 3 and Llama 3.1; none for a file
// whose post-processor is ByteLevel only), add_bos false adds none. Decode
// skips special tokens and ids outside the vocabulary.
Status NewHfTokenizer(const std::string& tokenizer_json, int64_t bos_id, int64_t eos_id,
                      std::unique_ptr<Tokenizer>* out);

}  // namespace kvlab
