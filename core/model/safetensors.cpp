#include "core/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/base/untrusted_json.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors is little-endian; kvlab reads it in place, so the host must be too"
#endif

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// HF's reader refuses larger headers; a bound keeps a hostile file from making us
// parse gigabytes of JSON.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool ParseSafetensorsDType(const std::string& s, DType* out) {
  if (s == "F32") { *out = DType::kF32; return true; }
  if (s == "F16") { *out = DType::kF16; return true; }
  if (s == "BF16") { *out = DType::kBF16; return true; }
  return false;
}

// A JSON value that is a non-negative integer fitting int64 (floats like 3.0 refused).
bool AsNonNegInt(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    *out = i;
    return true;
  }
  return false;
}

// numel * elem_bytes with overflow checks; false when it does not fit int64.
bool ByteSize(const std::vector<int64_t>& shape, int elem_bytes, int64_t* nbytes) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return false;
  }
  return !__builtin_mul_overflow(n, static_cast<int64_t>(elem_bytes), nbytes);
}

// Parses one header entry. `data` is the start of the data region of `data_bytes` bytes.
Status ParseTensorEntry(const std::string& path, const std::string& name, const json& e,
                        const uint8_t* data, uint64_t data_bytes, TensorView* t) {
  const std::string where = path + ": tensor '" + QuoteBytes(name) + "'";
  if (!e.is_object()) return Status::Corruption(where + ": header entry must be a JSON object");
  const auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) return Status::Corruption(where + ": missing string 'dtype'");
  if (!ParseSafetensorsDType(dt->get<std::string>(), &t->dtype)) {
    return Status::InvalidArgument(where + ": unsupported dtype '" + QuoteBytes(dt->get<std::string>()) +
                                   "' (expected F32, F16 or BF16)");
  }
  const auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) return Status::Corruption(where + ": missing array 'shape'");
  for (const json& d : *sh) {
    int64_t v;
    if (!AsNonNegInt(d, &v)) {
      return Status::Corruption(where + ": shape " + QuoteJson(*sh) + " must hold non-negative integers");
    }
    t->shape.push_back(v);
  }
  const auto off = e.find("data_offsets");
  int64_t begin, end;
  if (off == e.end() || !off->is_array() || off->size() != 2 || !AsNonNegInt((*off)[0], &begin) ||
      !AsNonNegInt((*off)[1], &end)) {
    return Status::Corruption(where + ": 'data_offsets' must be two non-negative integers");
  }
  if (end < begin) {
    return Status::Corruption(where + ": data_offsets end " + std::to_string(end) + " < begin " +
                              std::to_string(begin));
  }
  if (static_cast<uint64_t>(end) > data_bytes) {
    return Status::Corruption(where + ": data_offsets [" + std::to_string(begin) + ", " +
                              std::to_string(end) + ") past the end of the data (" +
                              std::to_string(data_bytes) + " bytes; file truncated?)");
  }
  if (!ByteSize(t->shape, DTypeBytes(t->dtype), &t->nbytes)) {
    return Status::Corruption(where + ": shape " + ShapeString(t->shape) + " overflows int64");
  }
  if (t->nbytes != end - begin) {
    return Status::Corruption(where + ": shape " + ShapeString(t->shape) + " of " + dt->get<std::string>() +
                              " needs " + std::to_string(t->nbytes) + " bytes but data_offsets span " +
                              std::to_string(end - begin));
  }
  t->name = name;
  t->data = data + begin;
  t->file = path;
  return Status::OK();
}

// The keys each JSON object of a header repeats. nlohmann keeps the last of a
// repeated key and drops the others without a word, so a header that names a
// tensor twice would load one of the two; ParseSafetensorsBytes refuses it.
class RepeatedKeyFinder {
 public:
  // The callback for ParseJsonText; valid while this object lives.
  json::parser_callback_t Callback() {
    return [this](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) {
        open_.emplace_back();
      } else if (event == json::parse_event_t::object_end) {
        open_.pop_back();
      } else if (event == json::parse_event_t::key && !open_.empty()) {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (depth == 1) entry_ = key;
        if (!open_.back().insert(key).second && !found_) {
          found_ = true;
          key_ = key;
          key_entry_ = entry_;
          key_depth_ = depth;
        }
      }
      return true;
    };
  }

  // OK, or Corruption naming the first repeated key and where it is.
  Status Check(const std::string& path) const {
    if (!found_) return Status::OK();
    const std::string key = "'" + QuoteBytes(key_) + "'";
    if (key_depth_ == 1 && key_ == "__metadata__") {
      return Status::Corruption(path + ": '__metadata__' appears twice in the header (header keys must be unique)");
    }
    if (key_depth_ == 1) {
      return Status::Corruption(path + ": tensor " + key + " is named twice in the header (tensor names must be unique)");
    }
    const std::string in = key_entry_ == "__metadata__" ? std::string("'__metadata__'")
                                                         : "tensor '" + QuoteBytes(key_entry_) + "'";
    return Status::Corruption(path + ": " + in + ": key " + key +
                              " appears twice in its header entry (header keys must be unique)");
  }

 private:
  std::vector<std::set<std::string>> open_;  // the keys seen so far in each object being parsed
  std::string entry_;                        // the top-level key whose value is being parsed
  bool found_ = false;
  std::string key_, key_entry_;
  int key_depth_ = 0;
};

// The reference reader's layout rule (the Rust safetensors crate's
// Metadata::validate and its MetadataIncompleteBuffer check): sorted by
// offsets, the tensors tile the data region exactly. The first starts at 0,
// each starts where the one before it ends, the last ends at the end of the
// file. Overlapping tensors would read each other's bytes; bytes no tensor
// covers mean the header and the data disagree.
Status CheckLayout(const std::string& path, const std::map<std::string, TensorView>& tensors, const uint8_t* data,
                   uint64_t data_bytes) {
  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  spans.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    const uint64_t begin = static_cast<uint64_t>(t.data - data);
    spans.push_back({begin, begin + static_cast<uint64_t>(t.nbytes), &name});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : *a.name < *b.name;
  });
  auto range = [](uint64_t b, uint64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + ")"; };
  auto tensor = [](const Span& s) { return "tensor '" + QuoteBytes(*s.name) + "'"; };
  const Span* prev = nullptr;  // the tensor that ends at `covered`
  uint64_t covered = 0;
  for (const Span& s : spans) {
    if (s.begin < covered) {
      return Status::Corruption(path + ": " + tensor(s) + " bytes " + range(s.begin, s.end) + " overlap " +
                                tensor(*prev) + " bytes " + range(prev->begin, prev->end) +
                                " (tensors must not share bytes)");
    }
    if (s.begin > covered) {
      if (prev == nullptr) {
        return Status::Corruption(path + ": data bytes " + range(0, s.begin) + " belong to no tensor: the first, " +
                                  tensor(s) + ", starts at " + std::to_string(s.begin) +
                                  " (the first tensor must start at offset 0)");
      }
      return Status::Corruption(path + ": data bytes " + range(covered, s.begin) + " belong to no tensor: " +
                                tensor(*prev) + " ends at " + std::to_string(covered) + ", " + tensor(s) +
                                " starts at " + std::to_string(s.begin) +
                                " (each tensor must start where the one before it ends)");
    }
    covered = s.end;
    prev = &s;
  }
  if (covered != data_bytes) {
    const std::string rule = " (the data must end where the last tensor ends)";
    auto bytes = [](uint64_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); };
    if (prev == nullptr) {
      return Status::Corruption(path + ": " + bytes(data_bytes) + " of data, but the header names no tensor" + rule);
    }
    return Status::Corruption(path + ": " + bytes(data_bytes - covered) + " past the last tensor's end: " +
                              tensor(*prev) + " ends at " + std::to_string(covered) + " of " +
                              std::to_string(data_bytes) + " data bytes" + rule);
  }
  return Status::OK();
}

// Hugging Face names shards as plain file names; anything that leaves the directory
// would let an index read arbitrary files.
bool IsPlainFileName(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos;
}

bool Exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

const TensorView* SafetensorsFile::Find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status ParseSafetensorsBytes(const uint8_t* base, uint64_t file_bytes, const std::string& path,
                             std::map<std::string, TensorView>* tensors, std::map<std::string, std::string>* metadata) {
  tensors->clear();
  metadata->clear();
  if (file_bytes < 8) {
    return Status::Corruption(path + ": " + std::to_string(file_bytes) +
                              " bytes, too short for the 8-byte safetensors header length");
  }

  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | base[i];
  if (header_bytes > file_bytes - 8) {
    return Status::Corruption(path + ": header length " + std::to_string(header_bytes) +
                              " runs past the end of the file (" + std::to_string(file_bytes) +
                              " bytes); not a safetensors file or truncated");
  }
  if (header_bytes > kMaxHeaderBytes) {
    return Status::Corruption(path + ": header length " + std::to_string(header_bytes) + " exceeds " +
                              std::to_string(kMaxHeaderBytes) + " bytes");
  }
  const char* hdr = reinterpret_cast<const char*>(base + 8);
  json header;
  RepeatedKeyFinder repeats;
  // Bounded depth: nlohmann's copy and dump() recurse once per level.
  const Status parsed = ParseJsonText(std::string_view(hdr, header_bytes), path, kMaxHeaderBytes, &header,
                                      "header JSON", repeats.Callback());
  if (!parsed.ok()) return Status::Corruption(parsed.message());
  if (!header.is_object()) return Status::Corruption(path + ": header JSON must be an object");
  KVLAB_RETURN_IF_ERROR(repeats.Check(path));

  const uint8_t* data = base + 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  try {
    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__") {
        if (!value.is_object()) return Status::Corruption(path + ": '__metadata__' must be an object");
        for (const auto& [mk, mv] : value.items()) {
          (*metadata)[mk] = mv.is_string() ? mv.get<std::string>() : mv.dump();
        }
        continue;
      }
      TensorView t;
      KVLAB_RETURN_IF_ERROR(ParseTensorEntry(path, key, value, data, data_bytes, &t));
      tensors->emplace(key, std::move(t));
    }
  } catch (const std::exception& e) {  // json accessors; should not happen after the checks
    return Status::Corruption(path + ": bad header: " + e.what());
  }
  return CheckLayout(path, *tensors, data, data_bytes);
}

Status SafetensorsFile::Open(const std::string& path, std::unique_ptr<SafetensorsFile>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::IOError(path + ": not a regular file");
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    return Status::Corruption(path + ": " + std::to_string(file_bytes) +
                              " bytes, too short for the 8-byte safetensors header length");
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_bytes_ = static_cast<size_t>(file_bytes);
  void* m = mmap(nullptr, f->map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) return Status::IOError(path + ": mmap failed: " + std::strerror(mmap_errno));
  f->map_ = m;
  KVLAB_RETURN_IF_ERROR(ParseSafetensorsBytes(static_cast<const uint8_t*>(m), file_bytes, path, &f->tensors_,
                                              &f->metadata_));
  *out = std::move(f);
  return Status::OK();
}

Status CheckpointReader::Open(const std::string& dir, std::unique_ptr<CheckpointReader>* out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound(dir + ": not a directory");
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::unique_ptr<CheckpointReader> r(new CheckpointReader());
  r->dir_ = dir;

  if (Exists(single)) {  // transformers also prefers the single file when both exist
    r->source_ = single.string();
    std::unique_ptr<SafetensorsFile> f;
    KVLAB_RETURN_IF_ERROR(SafetensorsFile::Open(single.string(), &f));
    for (const auto& [name, view] : f->tensors()) r->by_name_[name] = &view;
    r->files_.push_back(std::move(f));
  } else if (Exists(index)) {
    r->source_ = index.string();
    std::string text;
    KVLAB_RETURN_IF_ERROR(ReadFileBounded(index.string(), kMaxConfigBytes, &text));
    json j;
    const Status parsed = ParseJsonText(text, index.string(), kMaxConfigBytes, &j);
    if (!parsed.ok()) return Status::Corruption(parsed.message());
    const auto wm = j.is_object() ? j.find("weight_map") : j.end();
    if (wm == j.end() || !wm->is_object()) {
      return Status::Corruption(index.string() + ": missing object 'weight_map'");
    }
    std::map<std::string, SafetensorsFile*> shards;
    for (const auto& [name, shard] : wm->items()) {
      if (!shard.is_string() || !IsPlainFileName(shard.get<std::string>())) {
        return Status::Corruption(index.string() + ": weight_map['" + QuoteBytes(name) + "'] = " + QuoteJson(shard) +
                                  "; expected a shard file name in " + dir);
      }
      const std::string shard_name = shard.get<std::string>();
      auto it = shards.find(shard_name);
      if (it == shards.end()) {
        const fs::path shard_path = fs::path(dir) / shard_name;
        if (!Exists(shard_path)) {
          return Status::NotFound(index.string() + ": shard file '" + QuoteBytes(shard_name) + "' (holding tensor '" +
                                  QuoteBytes(name) + "') does not exist in " + dir);
        }
        std::unique_ptr<SafetensorsFile> f;
        KVLAB_RETURN_IF_ERROR(SafetensorsFile::Open(shard_path.string(), &f));
        it = shards.emplace(shard_name, f.get()).first;
        r->files_.push_back(std::move(f));
      }
      const TensorView* v = it->second->Find(name);
      if (v == nullptr) {
        return Status::Corruption(index.string() + ": weight_map puts tensor '" + QuoteBytes(name) + "' in " +
                                  it->second->path() + ", which does not contain it");
      }
      r->by_name_[name] = v;
    }
  } else {
    // Name any pickle checkpoint explicitly, so the user knows why it was not used.
    std::string pickles;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string ext = it->path().extension().string();
      if (ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt") {
        pickles += (pickles.empty() ? "" : ", ") + it->path().filename().string();
      }
    }
    std::string msg = dir + ": neither model.safetensors nor model.safetensors.index.json exists";
    if (!pickles.empty()) {
      msg += "; found only pickle-based checkpoint files (" + pickles +
             "), which kvlab never reads because loading them can run code: safetensors is required "
             "(convert with transformers' save_pretrained(..., safe_serialization=True))";
    }
    return Status::NotFound(msg);
  }
  *out = std::move(r);
  return Status::OK();
}

Status CheckpointReader::Get(const std::string& name, TensorView* out) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return Status::NotFound(source_ + ": no tensor '" + name + "'");
  *out = *it->second;
  return Status::OK();
}

Status CheckpointReader::GetChecked(const std::string& name, const std::vector<int64_t>& expected_shape,
                                    TensorView* out) const {
  TensorView t;
  KVLAB_RETURN_IF_ERROR(Get(name, &t));
  if (t.shape != expected_shape) {
    return Status::InvalidArgument(t.file + ": tensor '" + name + "' has shape " + ShapeString(t.shape) +
                                   ", expected " + ShapeString(expected_shape));
  }
  *out = std::move(t);
  return Status::OK();
}

bool CheckpointReader::Has(const std::string& name) const { return by_name_.count(name) != 0; }

std::vector<std::string> CheckpointReader::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(by_name_.size());
  for (const auto& kv : by_name_) names.push_back(kv.first);
  return names;
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  if (!meta.contains("format")) meta["format"] = "pt";
  header["__metadata__"] = meta;
  std::set<std::string> seen;
  std::vector<int64_t> sizes;
  int64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string where = path + ": tensor '" + t.name + "'";
    if (t.name.empty() || t.name == "__metadata__" || !seen.insert(t.name).second) {
      return Status::InvalidArgument(where + ": name must be non-empty, unique and not '__metadata__'");
    }
    int64_t nbytes = 0, end = 0;
    bool ok = ByteSize(t.shape, DTypeBytes(t.dtype), &nbytes) && !__builtin_add_overflow(offset, nbytes, &end);
    for (int64_t d : t.shape) ok = ok && d >= 0;
    if (!ok) return Status::InvalidArgument(where + ": bad shape " + ShapeString(t.shape));
    if (nbytes > 0 && t.data == nullptr && !t.produce) return Status::InvalidArgument(where + ": data is null");
    header[t.name] = {{"dtype", SafetensorsDTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, end}}};
    sizes.push_back(nbytes);
    offset = end;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keeps the data region 8-byte aligned
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));

  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::IOError(tmp + ": cannot create: " + std::strerror(errno));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  bool produced = true;
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    const size_t n = static_cast<size_t>(sizes[i]);
    const void* data = tensors[i].data != nullptr || !tensors[i].produce ? tensors[i].data : tensors[i].produce();
    produced = n == 0 || data != nullptr;
    ok = produced && (n == 0 || std::fwrite(data, 1, n, f) == n);
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    if (!produced) return Status::Internal(path + ": a tensor's bytes could not be produced");
    return Status::IOError(path + ": write failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    return Status::IOError(path + ": cannot rename from " + tmp + ": " + err);
  }
  return Status::OK();
}

}  // namespace kvlab
