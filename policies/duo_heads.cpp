#include "policies/duo_heads.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <toml++/toml.h>

#include "core/base/untrusted.h"

namespace kvlab {
namespace {

constexpr int kMaxHeadsPerFile = 1 << 16;  // layers x heads, far past any model

// "policy 'duo' parameter 'heads' (FILE): WHY"
Status FileError(const char* policy, const char* param, const std::string& path, const std::string& why) {
  return Status::InvalidArgument(std::string("policy '") + policy + "' parameter '" + param + "' (" + path + "): " + why);
}

Status IntKey(const toml::table& t, const char* key, const char* policy, const char* param, const std::string& path,
              int64_t lo, int64_t* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return FileError(policy, param, path, std::string("no key '") + key + "'");
  const auto v = n->value<int64_t>();
  if (!v || !n->is_integer()) return FileError(policy, param, path, std::string("'") + key + "' must be an integer");
  if (*v < lo || *v > kMaxHeadsPerFile) {
    return FileError(policy, param, path, std::string("'") + key + "' is " + std::to_string(*v) + ", outside [" +
                                               std::to_string(lo) + ", " + std::to_string(kMaxHeadsPerFile) + "]");
  }
  *out = *v;
  return Status::OK();
}

}  // namespace

Status ReadDuoHeads(const std::string& path, const char* policy, const char* param, DuoHeadScores* out) {
  std::string text;
  const Status rs = ReadFileBounded(path, kMaxConfigBytes, &text);
  if (!rs.ok()) {
    return FileError(policy, param, path,
                     rs.code() == Status::Code::kNotFound ? "cannot open the head-split file (write one with `kvlab "
                                                            "calibrate-heads`)"
                                                          : rs.message());
  }
  const Status cs = CheckTomlText(text, path, kMaxConfigBytes);
  if (!cs.ok()) return FileError(policy, param, path, cs.message());
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& err) {
    return FileError(policy, param, path,
                     "line " + std::to_string(err.source().begin.line) + ": " + QuoteBytes(err.description(), 240));
  }
  const toml::node* fmt = root.get("format");
  if (fmt == nullptr || fmt->value<std::string>() != std::string("kvlab-duo-heads")) {
    return FileError(policy, param, path, "not a head-split file (format = \"kvlab-duo-heads\" missing)");
  }
  DuoHeadScores s;
  int64_t layers = 0, heads = 0;
  KVLAB_RETURN_IF_ERROR(IntKey(root, "num_layers", policy, param, path, 1, &layers));
  KVLAB_RETURN_IF_ERROR(IntKey(root, "num_kv_heads", policy, param, path, 1, &heads));
  if (layers * heads > kMaxHeadsPerFile) return FileError(policy, param, path, "too many heads");
  s.num_layers = static_cast<int>(layers);
  s.num_kv_heads = static_cast<int>(heads);
  if (const toml::node* n = root.get("model")) s.model = n->value<std::string>().value_or("");
  if (const toml::node* n = root.get("metric")) s.metric = n->value<std::string>().value_or("");
  if (const toml::node* n = root.get("sinks")) s.sinks = n->value<int64_t>().value_or(0);
  if (const toml::node* n = root.get("recent")) s.recent = n->value<int64_t>().value_or(0);
  if (const toml::node* n = root.get("samples")) s.samples = n->value<int64_t>().value_or(0);
  if (const toml::node* n = root.get("length")) s.length = n->value<int64_t>().value_or(0);
  const toml::array* rows = root.get("scores") ? root.get("scores")->as_array() : nullptr;
  if (rows == nullptr) return FileError(policy, param, path, "no array 'scores' ([layer][kv head])");
  if (static_cast<int64_t>(rows->size()) != layers) {
    return FileError(policy, param, path, "'scores' has " + std::to_string(rows->size()) + " rows for num_layers = " +
                                              std::to_string(layers));
  }
  for (size_t l = 0; l < rows->size(); ++l) {
    const toml::array* row = (*rows)[l].as_array();
    if (row == nullptr || static_cast<int64_t>(row->size()) != heads) {
      return FileError(policy, param, path, "'scores' row " + std::to_string(l) + " must hold num_kv_heads = " +
                                                std::to_string(heads) + " numbers");
    }
    for (size_t h = 0; h < row->size(); ++h) {
      const auto v = (*row)[h].value<double>();
      if (!v || !std::isfinite(*v) || *v < 0) {
        return FileError(policy, param, path, "score of layer " + std::to_string(l) + " head " + std::to_string(h) +
                                                  " must be a finite number >= 0");
      }
      s.scores.push_back(*v);
    }
  }
  *out = std::move(s);
  return Status::OK();
}

Status WriteDuoHeads(const std::string& path, const DuoHeadScores& s) {
  if (static_cast<int64_t>(s.scores.size()) != static_cast<int64_t>(s.num_layers) * s.num_kv_heads) {
    return Status::InvalidArgument("WriteDuoHeads: scores do not match num_layers x num_kv_heads");
  }
  std::ofstream f(path);
  if (!f) return Status::IOError(path + ": cannot write the head-split file");
  f << "# DuoAttention head split, written by `kvlab calibrate-heads`: per (layer, KV head) the\n"
       "# deviation of the output when that head alone keeps sinks + recent (higher = retrieval head).\n";
  f << "format = \"kvlab-duo-heads\"\n";
  f << "model = " << toml::value<std::string>(s.model) << "\n";
  f << "num_layers = " << s.num_layers << "\nnum_kv_heads = " << s.num_kv_heads << "\n";
  f << "sinks = " << s.sinks << "\nrecent = " << s.recent << "\n";
  f << "metric = " << toml::value<std::string>(s.metric) << "\n";
  f << "samples = " << s.samples << "\nlength = " << s.length << "\n";
  f << "scores = [\n";
  char buf[40];
  for (int l = 0; l < s.num_layers; ++l) {
    f << "  [";
    for (int h = 0; h < s.num_kv_heads; ++h) {
      std::snprintf(buf, sizeof(buf), "%.6e", s.scores[static_cast<size_t>(l * s.num_kv_heads + h)]);
      f << (h ? ", " : "") << buf;
    }
    f << "],\n";
  }
  f << "]\n";
  if (!f) return Status::IOError(path + ": write failed");
  return Status::OK();
}

int DuoRetrievalCount(size_t num_heads, double fraction) {
  const double k = std::floor(fraction * static_cast<double>(num_heads) + 0.5);
  return static_cast<int>(std::min<double>(static_cast<double>(num_heads), std::max(1.0, k)));
}

std::vector<char> DuoRetrievalMask(const std::vector<double>& scores, double fraction) {
  std::vector<char> mask(scores.size(), 0);
  if (scores.empty()) return mask;
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  const int k = DuoRetrievalCount(scores.size(), fraction);
  for (int i = 0; i < k; ++i) mask[order[static_cast<size_t>(i)]] = 1;
  return mask;
}

Status ParseDuoHeadList(const std::string& text, const char* policy, const char* param,
                        std::vector<std::pair<int, int>>* out) {
  out->clear();
  const auto bad = [&](const std::string& item) {
    return Status::InvalidArgument(std::string("policy '") + policy + "' parameter '" + param + "': '" +
                                   QuoteBytes(item, 40) + "' is not LAYER.HEAD (a list: \"0.1+3.0\")");
  };
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('+', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const size_t dot = item.find('.');
    if (dot == std::string::npos || dot == 0 || dot > 6 || dot + 1 == item.size() || item.size() - dot > 7) {
      return bad(item);
    }
    for (size_t i = 0; i < item.size(); ++i) {
      if (i != dot && (item[i] < '0' || item[i] > '9')) return bad(item);
    }
    out->emplace_back(std::stoi(item.substr(0, dot)), std::stoi(item.substr(dot + 1)));
    start = end + 1;
    if (end + 1 == text.size()) return bad("");  // a trailing '+'
  }
  return Status::OK();
}

}  // namespace kvlab
