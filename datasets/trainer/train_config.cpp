#include "datasets/trainer/train_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <toml++/toml.h>

#include "core/engine/run_config.h"
#include "core/tokenizer/tokenizer.h"
#include "datasets/tasks/ruler.h"

namespace kvlab {

namespace {

// Reads the keys of one table through a map of setters; unknown keys and
// type errors name file:line:col and list the valid keys.
class TableReader {
 public:
  TableReader(const std::string& path, const std::string& table) : path_(path), table_(table) {}

  void Int(const std::string& key, int64_t* dst, int64_t lo = 0) {
    setters_[key] = [this, key, dst, lo](const toml::node& n, const std::string& where) -> Status {
      if (!n.is_integer()) return Status::InvalidArgument(where + ": '" + Name(key) + "' must be an integer");
      if (n.as_integer()->get() < lo) {
        return Status::InvalidArgument(where + ": '" + Name(key) + "' must be >= " + std::to_string(lo));
      }
      *dst = n.as_integer()->get();
      return Status::OK();
    };
  }
  void Float(const std::string& key, double* dst, double lo = 0) {
    setters_[key] = [this, key, dst, lo](const toml::node& n, const std::string& where) -> Status {
      auto v = n.value<double>();
      if (!v || n.is_boolean() || n.is_string()) return Status::InvalidArgument(where + ": '" + Name(key) + "' must be a number");
      if (*v < lo) return Status::InvalidArgument(where + ": '" + Name(key) + "' must be >= " + std::to_string(lo));
      *dst = *v;
      return Status::OK();
    };
  }
  void Bool(const std::string& key, bool* dst) {
    setters_[key] = [this, key, dst](const toml::node& n, const std::string& where) -> Status {
      if (!n.is_boolean()) return Status::InvalidArgument(where + ": '" + Name(key) + "' must be true or false");
      *dst = n.as_boolean()->get();
      return Status::OK();
    };
  }
  void Strings(const std::string& key, std::vector<std::string>* dst) {
    setters_[key] = [this, key, dst](const toml::node& n, const std::string& where) -> Status {
      const toml::array* a = n.as_array();
      if (a == nullptr) return Status::InvalidArgument(where + ": '" + Name(key) + "' must be an array of strings");
      dst->clear();
      for (const toml::node& e : *a) {
        if (!e.is_string()) return Status::InvalidArgument(where + ": '" + Name(key) + "' must be an array of strings");
        dst->push_back(e.as_string()->get());
      }
      return Status::OK();
    };
  }
  void String(const std::string& key, std::string* dst) {
    setters_[key] = [this, key, dst](const toml::node& n, const std::string& where) -> Status {
      if (!n.is_string()) return Status::InvalidArgument(where + ": '" + Name(key) + "' must be a string");
      *dst = n.as_string()->get();
      return Status::OK();
    };
  }
  Status Read(const toml::table& t) {
    for (const auto& kv : t) {
      const std::string key(kv.first.str());
      const std::string where = TomlWhere(path_, kv.second.source());
      auto it = setters_.find(key);
      if (it == setters_.end()) {
        std::string valid;
        for (const auto& s : setters_) valid += (valid.empty() ? "" : ", ") + s.first;
        return Status::InvalidArgument(where + ": unknown key '" + Name(key) + "'; valid keys: " + valid);
      }
      KVLAB_RETURN_IF_ERROR(it->second(kv.second, where));
    }
    return Status::OK();
  }

 private:
  std::string Name(const std::string& key) const { return table_.empty() ? key : table_ + "." + key; }
  std::string path_, table_;
  std::map<std::string, std::function<Status(const toml::node&, const std::string&)>> setters_;
};

std::string Resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return dir + "/" + p;
}

}  // namespace

int64_t TrainConfig::TotalSteps() const {
  int64_t n = 0;
  for (const TrainPhase& p : phases) n += p.steps;
  return n;
}

double TrainConfig::LearningRateAt(int64_t step) const {
  int64_t total = TotalSteps(), phase_start = 0;
  for (const TrainPhase& p : phases) {
    if (phase_start > step) break;
    if (p.schedule_steps > 0) total = p.schedule_steps;
    phase_start += p.steps;
  }
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(std::max<int64_t>(1, total - warmup_steps));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
}

const TrainPhase& TrainConfig::PhaseAt(int64_t step) const {
  int64_t end = 0;
  for (const TrainPhase& p : phases) {
    end += p.steps;
    if (step < end) return p;
  }
  return phases.back();
}

Status ParseTrainConfig(const std::string& text, const std::string& path, TrainConfig* out) {
  toml::table root;
  KVLAB_RETURN_IF_ERROR(ParseTomlText(text, path, &root));
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  TrainConfig c;
  c.path = path;
  bool needs_essay = false;  // a phase's ruler_tasks read [data] essay
  // Model defaults: the tiny models' shape; the vocabulary is the byte tokenizer's.
  ModelConfig& m = c.model;
  m.name = "kvlab-tiny";
  m.vocab_size = ByteTokenizer::kVocabSize;
  m.hidden_size = 256;
  m.intermediate_size = 704;
  m.num_hidden_layers = 4;
  m.num_attention_heads = 8;
  m.num_key_value_heads = 8;
  m.head_dim = 0;
  m.rope_theta = 10000;
  m.max_position_embeddings = 2048;
  m.tie_word_embeddings = true;
  m.rms_norm_eps = 1e-5;
  m.bos_token_id = ByteTokenizer::kBos;
  m.eos_token_id = ByteTokenizer::kEos;
  m.pad_token_id = ByteTokenizer::kPad;

  for (const auto& kv : root) {
    const std::string key(kv.first.str());
    const std::string where = TomlWhere(path, kv.second.source());
    if (key == "model") {
      const toml::table* t = kv.second.as_table();
      if (t == nullptr) return Status::InvalidArgument(where + ": 'model' must be a table");
      std::string preset;
      if (const toml::node* p = t->get("preset")) {
        if (!p->is_string()) return Status::InvalidArgument(TomlWhere(path, p->source()) + ": 'model.preset' must be a string");
        preset = p->as_string()->get();
        KVLAB_RETURN_IF_ERROR(PresetConfig(preset, &m));
        m.head_dim = 0;
      }
      TableReader r(path, "model");
      r.String("preset", &preset);
      r.String("name", &m.name);
      r.Int("hidden_size", &m.hidden_size, 1);
      r.Int("intermediate_size", &m.intermediate_size, 1);
      r.Int("num_hidden_layers", &m.num_hidden_layers, 1);
      r.Int("num_attention_heads", &m.num_attention_heads, 1);
      r.Int("num_key_value_heads", &m.num_key_value_heads, 1);
      r.Int("head_dim", &m.head_dim, 0);
      r.Int("max_position_embeddings", &m.max_position_embeddings, 1);
      r.Float("rope_theta", &m.rope_theta, 1e-9);
      r.Float("rms_norm_eps", &m.rms_norm_eps, 1e-12);
      r.Bool("tie_word_embeddings", &m.tie_word_embeddings);
      KVLAB_RETURN_IF_ERROR(r.Read(*t));
    } else if (key == "train") {
      const toml::table* t = kv.second.as_table();
      if (t == nullptr) return Status::InvalidArgument(where + ": 'train' must be a table");
      TableReader r(path, "train");
      int64_t seed = static_cast<int64_t>(c.seed);
      r.Int("seed", &seed);
      r.Float("lr", &c.lr);
      r.Float("min_lr", &c.min_lr);
      r.Float("weight_decay", &c.weight_decay);
      r.Float("beta1", &c.beta1);
      r.Float("beta2", &c.beta2);
      r.Float("grad_clip", &c.grad_clip);
      r.Int("warmup_steps", &c.warmup_steps);
      r.Int("threads", &c.threads);
      r.Int("log_every", &c.log_every, 1);
      r.Int("eval_every", &c.eval_every);
      r.Int("checkpoint_every", &c.checkpoint_every);
      r.Int("eval_tokens", &c.eval_tokens);
      r.Int("eval_seq_len", &c.eval_seq_len);
      KVLAB_RETURN_IF_ERROR(r.Read(*t));
      c.seed = static_cast<uint64_t>(seed);
    } else if (key == "data") {
      const toml::table* t = kv.second.as_table();
      if (t == nullptr) return Status::InvalidArgument(where + ": 'data' must be a table");
      TableReader r(path, "data");
      r.String("train", &c.train_data);
      r.String("heldout", &c.heldout_data);
      r.String("boost", &c.boost_data);
      r.Float("boost_share", &c.boost_share);
      r.String("essay", &c.essay_data);
      KVLAB_RETURN_IF_ERROR(r.Read(*t));
    } else if (key == "phase") {
      const toml::array* arr = kv.second.as_array();
      if (arr == nullptr) return Status::InvalidArgument(where + ": 'phase' must be an array of tables ([[phase]])");
      for (const toml::node& el : *arr) {
        const toml::table* t = el.as_table();
        if (t == nullptr) return Status::InvalidArgument(TomlWhere(path, el.source()) + ": each phase must be a table");
        TrainPhase ph;
        ph.where = TomlWhere(path, t->source());
        TableReader r(path, "phase");
        r.Int("steps", &ph.steps, 1);
        r.Int("seq_len", &ph.seq_len, 16);
        r.Int("batch", &ph.batch, 1);
        r.Float("text", &ph.text);
        r.Float("passkey", &ph.passkey);
        r.Float("multi_needle", &ph.multi_needle);
        r.Float("recall", &ph.recall);
        r.Float("copy", &ph.copy);
        r.Float("ruler", &ph.ruler);
        r.Strings("ruler_tasks", &ph.ruler_tasks);
        r.Float("answer_weight", &ph.answer_weight);
        r.Float("filler_weight", &ph.filler_weight);
        r.Float("min_length", &ph.min_length);
        const bool has_schedule = t->contains("schedule_steps");
        r.Int("schedule_steps", &ph.schedule_steps);
        KVLAB_RETURN_IF_ERROR(r.Read(*t));
        int64_t phase_end = ph.steps;
        for (const TrainPhase& q : c.phases) phase_end += q.steps;
        if (has_schedule && ph.schedule_steps < phase_end) {
          return Status::InvalidArgument(ph.where + ": schedule_steps must be at least the step this phase ends at (" +
                                         std::to_string(phase_end) + "), got " + std::to_string(ph.schedule_steps));
        }
        if (!(ph.min_length > 0 && ph.min_length <= 1)) {
          return Status::InvalidArgument(ph.where + ": min_length must be in (0, 1] (a fraction of seq_len), got " +
                                         std::to_string(ph.min_length));
        }
        if (ph.text + ph.passkey + ph.multi_needle + ph.recall + ph.copy + ph.ruler <= 0) {
          return Status::InvalidArgument(ph.where +
                                         ": phase mix weights (text, passkey, multi_needle, recall, copy, ruler) sum to 0");
        }
        if (ph.ruler > 0 && ph.ruler_tasks.empty()) {
          return Status::InvalidArgument(ph.where + ": 'ruler' > 0 needs 'ruler_tasks' (RULER task names to draw from)");
        }
        for (const std::string& task : ph.ruler_tasks) {
          RulerTaskInfo info;
          const Status st = GetRulerTask(task, &info);
          if (!st.ok()) return Status::InvalidArgument(ph.where + ": 'ruler_tasks': " + st.message());
          if (info.needs_essay) needs_essay = true;
        }
        if (ph.passkey + ph.multi_needle > 0 && ph.seq_len < 160) {
          return Status::InvalidArgument(ph.where + ": passkey and multi_needle need seq_len >= 160");
        }
        c.phases.push_back(ph);
      }
    } else {
      if (key != "out" && key != "init") {
        return Status::InvalidArgument(where + ": unknown key '" + key +
                                       "'; valid keys: out, init, model, train, data, phase");
      }
      if (!kv.second.is_string()) return Status::InvalidArgument(where + ": '" + key + "' must be a string");
      (key == "out" ? c.out : c.init) = kv.second.as_string()->get();
    }
  }
  if (m.head_dim == 0 && m.num_attention_heads > 0) m.head_dim = m.hidden_size / m.num_attention_heads;
  KVLAB_RETURN_IF_ERROR(m.Validate(path + " [model]"));
  if (c.out.empty()) return Status::InvalidArgument(path + ": missing key 'out' (the output checkpoint directory)");
  if (c.phases.empty()) return Status::InvalidArgument(path + ": no [[phase]]: give at least one training phase");
  const bool needs_text = [&] {
    for (const TrainPhase& p : c.phases) if (p.text > 0) return true;
    return false;
  }();
  if (needs_essay && c.essay_data.empty()) {
    return Status::InvalidArgument(path + ": a phase's ruler_tasks read an essay haystack but [data] has no 'essay'");
  }
  if (needs_text && c.train_data.empty()) return Status::InvalidArgument(path + ": a phase mixes text but [data] has no 'train'");
  if (c.boost_share >= 1) return Status::InvalidArgument(path + " [data]: 'boost_share' must be below 1 (the share of text rows drawn from 'boost')");
  if (c.boost_data.empty() != (c.boost_share == 0)) {
    return Status::InvalidArgument(path + " [data]: 'boost' and 'boost_share' go together: give both or neither");
  }
  for (const TrainPhase& p : c.phases) {
    if (p.seq_len > m.max_position_embeddings) {
      return Status::InvalidArgument(p.where + ": seq_len " + std::to_string(p.seq_len) +
                                     " exceeds model.max_position_embeddings " + std::to_string(m.max_position_embeddings));
    }
  }
  c.out = Resolve(dir, c.out);
  c.init = Resolve(dir, c.init);
  c.train_data = Resolve(dir, c.train_data);
  c.heldout_data = Resolve(dir, c.heldout_data);
  c.boost_data = Resolve(dir, c.boost_data);
  c.essay_data = Resolve(dir, c.essay_data);
  *out = std::move(c);
  return Status::OK();
}

Status LoadTrainConfig(const std::string& path, TrainConfig* out) {
  std::string text;
  KVLAB_RETURN_IF_ERROR(ReadTomlFile(path, "config file", &text));
  return ParseTrainConfig(text, path, out);
}

}  // namespace kvlab
