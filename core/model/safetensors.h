// Safetensors files (read through a read-only mmap, every size and offset checked
// against the file's length before use; write with the HF header layout) and the
// Hugging Face checkpoint directory (model.safetensors or a sharded index). Torch-free;
// called by the model loader, `kvlab train` and the converters. Pickle formats
// (pytorch_model.bin, *.pt) are refused and never opened: loading must not run code.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/status.h"

namespace kvlab {

// A tensor inside a mapped file. Non-owning: valid while its SafetensorsFile (or
// CheckpointReader) lives. `data` is not guaranteed aligned to the dtype's size
// (files from other writers may not pad), so read it with memcpy/ConvertToF32.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;
  std::string file;  // path of the file holding it, for error messages
  int64_t numel() const;
};

// One .safetensors file. Immutable after Open, so concurrent reads are safe.
class SafetensorsFile {
 public:
  // Maps `path` and validates the whole header as the reference reader (the
  // Rust safetensors crate) does: each entry's dtype, shape and data_offsets;
  // no key twice; and the layout: sorted by offsets, the tensors start at 0,
  // each where the one before it ends (no overlap, no gap), and the file ends
  // where the last one ends. Each broken rule is Corruption naming the file,
  // the tensor(s) and the rule. On error *out is untouched.
  static Status Open(const std::string& path, std::unique_ptr<SafetensorsFile>* out);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  // The header's "__metadata__" (non-string values kept as their JSON text).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Returns nullptr when the file has no tensor `name`.
  const TensorView* Find(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The bytes of a whole .safetensors file (8-byte header length, header JSON,
// data), validated as Open validates a mapped file: *tensors point into
// `bytes` and are valid while it is. `path` names the file in messages.
// Open calls it on its mapping; the fuzz target (evals/fuzz) on raw bytes.
Status ParseSafetensorsBytes(const uint8_t* bytes, uint64_t size, const std::string& path,
                             std::map<std::string, TensorView>* tensors, std::map<std::string, std::string>* metadata);

// A Hugging Face model directory: model.safetensors, or model.safetensors.index.json
// whose "weight_map" names the shard of each tensor. All shards are mapped at Open,
// so a missing or corrupt shard is reported there. Immutable after Open.
class CheckpointReader {
 public:
  static Status Open(const std::string& dir, std::unique_ptr<CheckpointReader>* out);

  // NotFound naming the tensor and the file or index that was searched.
  Status Get(const std::string& name, TensorView* out) const;
  // As Get, and InvalidArgument when the shape differs (names tensor, file, both shapes).
  Status GetChecked(const std::string& name, const std::vector<int64_t>& expected_shape,
                    TensorView* out) const;
  bool Has(const std::string& name) const;
  // All tensor names, sorted.
  std::vector<std::string> TensorNames() const;
  const std::string& dir() const { return dir_; }
  // model.safetensors or the index file: what error messages cite.
  const std::string& source() const { return source_; }

 private:
  CheckpointReader() = default;
  std::string dir_;
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> by_name_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel * DTypeBytes(dtype) bytes, host memory
  // Instead of data: called when the tensor's turn to be written comes (in
  // order), returning its bytes (valid until the next call) or nullptr on
  // failure, so a checkpoint larger than memory can be written a tensor at
  // a time.
  std::function<const void*()> produce = nullptr;
};

// Writes a safetensors file: tensors laid out in the given order, header JSON padded
// with spaces to a multiple of 8 (as HF does), "__metadata__" = `metadata` plus
// {"format": "pt"} unless given, so transformers loads it. Writes PATH.tmp and renames,
// so a crash never leaves a truncated file under `path`.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

// "f32" → "F32" etc.: the dtype strings of the safetensors header.
const char* SafetensorsDTypeName(DType t);

}  // namespace kvlab
