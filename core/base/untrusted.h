// Bounds and quoting for bytes kvlab reads from files it did not write (checkpoints,
// config.json, tokenizers, TOML configs, results.jsonl). Every loader checks a
// document with CheckJsonText / CheckTomlText before parsing it, and every error
// message that echoes file content quotes it through QuoteBytes.
//
// Why: nlohmann's copy and dump() and toml++'s tables recurse once per nesting
// level, so a 200 KB file of 100,000 nested brackets overflows the stack; and an
// error message that carries raw file bytes is not text (not UTF-8, several lines).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace kvlab {

// serde_json's default; real configs and tokenizers nest fewer than 10 levels.
constexpr int kMaxNestingDepth = 128;

// Size bounds per kind of document (bytes). Larger files are refused up front.
constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;      // config.json, *_config.json, index, TOML
constexpr uint64_t kMaxTokenizerBytes = uint64_t{256} << 20;  // tokenizer.json (the largest are ~35 MB)
constexpr uint64_t kMaxRecordBytes = uint64_t{16} << 20;      // one line of results.jsonl
constexpr uint64_t kMaxResultsBytes = uint64_t{4} << 30;      // a whole results.jsonl

// Bounds on the sizes a user or a file gives (lengths, batches, counts), so
// that a typo or a hostile file is an error before work starts, not a 5 GB
// allocation, a wrapped integer or a hang. Generous: far past real use.
constexpr int64_t kMaxContextTokens = int64_t{1} << 24;  // positions in one sequence (16,777,216)
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;      // token ids (config.json's vocab_size, tokenizer.json's ids)
constexpr int64_t kMaxBatch = int64_t{1} << 16;          // sequences in one batch
constexpr int64_t kMaxBlockSize = 4096;                  // tokens per KV block
constexpr int64_t kMaxRunBlocks = 4096;                  // blocks per run reserved ahead (EngineOptions::run_blocks)
constexpr int64_t kMaxThreads = 1024;                    // threads for one process
constexpr int64_t kMaxCount = int64_t{1} << 20;          // requests, samples, repetitions, ...

// OK when lo <= v <= hi; else InvalidArgument "WHAT is V, more than HI" (or
// "less than LO"), naming both numbers.
Status CheckIntIn(const std::string& what, int64_t v, int64_t lo, int64_t hi);
// The same for a number, which must also be finite (NaN and Inf are refused).
Status CheckFiniteIn(const std::string& what, double v, double lo, double hi);

// The bytes this host can still give a process without swapping
// (/proc/meminfo's MemAvailable); -1 when it cannot be read.
int64_t HostAvailableBytes();
// OK when `bytes` fit in `available` (HostAvailableBytes() when negative, and
// always OK when that is unknown); else ResourceExhausted "WHAT needs B bytes,
// more than the A bytes this host has available (MemAvailable)".
Status CheckHostMemory(const std::string& what, int64_t bytes, int64_t available = -1);

// OK when `text` is at most max_bytes long and no array or object in it nests
// deeper than max_depth; else InvalidArgument naming `file`, the limit and the
// line (counted from first_line: a record of a .jsonl file is its line). Strings
// are skipped; the text need not be valid JSON (the parser that runs next
// reports syntax errors).
Status CheckJsonText(std::string_view text, const std::string& file, uint64_t max_bytes,
                     int max_depth = kMaxNestingDepth, int64_t first_line = 1);

// The same for TOML: the depth counts the components of a [table.header], of a
// dotted.key and the inline arrays and tables of its value.
Status CheckTomlText(std::string_view text, const std::string& file, uint64_t max_bytes,
                     int max_depth = kMaxNestingDepth);

// Reads the whole file at `path` when it is a regular file of at most max_bytes;
// else NotFound (cannot open) or InvalidArgument (too large), naming the path.
Status ReadFileBounded(const std::string& path, uint64_t max_bytes, std::string* out);

// `bytes` made fit for an error message: valid UTF-8 on one line. Control bytes
// and bytes that are not UTF-8 become \n, \t, \r or \xNN; at most max_bytes of the
// input are kept, cut at a character, with "... (N bytes)" after a cut ("..."
// alone without with_size). Idempotent on its own output: quoting a message
// twice (with room for all of it) changes nothing.
std::string QuoteBytes(std::string_view bytes, size_t max_bytes = 80, bool with_size = true);

}  // namespace kvlab
