#include "evals/calibrate_heads.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/engine/engine.h"
#include "core/model/model_config.h"
#include "core/tokenizer/tokenizer.h"
#include "evals/tasks/retrieval.h"

namespace kvlab {
namespace {

struct CalibrationSample {
  std::vector<int32_t> prompt, answer;
};

// Next-token logits at the answer's positions: the prompt's last token, then
// each answer token but the last, teacher forced.
Status AnswerLogits(const EngineOptions& eo, const std::vector<PolicySpec>& stack, const CalibrationSample& s,
                    std::vector<float>* out) {
  std::unique_ptr<Engine> e;
  KVLAB_RETURN_IF_ERROR(Engine::Create(eo, stack, &e));
  KVLAB_RETURN_IF_ERROR(e->AddSequence(0));
  std::vector<std::vector<float>> lg;
  out->clear();
  KVLAB_RETURN_IF_ERROR(e->Forward({SeqChunk{0, s.prompt}}, false, &lg));
  out->insert(out->end(), lg[0].begin(), lg[0].end());
  for (size_t i = 0; i + 1 < s.answer.size(); ++i) {
    KVLAB_RETURN_IF_ERROR(e->Forward({SeqChunk{0, {s.answer[i]}}}, false, &lg));
    out->insert(out->end(), lg[0].begin(), lg[0].end());
  }
  return Status::OK();
}

void LogSoftmax(const float* x, size_t n, std::vector<double>* out) {
  out->resize(n);
  double m = -INFINITY;
  for (size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double z = 0;
  for (size_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(x[i]) - m);
  const double lz = m + std::log(z);
  for (size_t i = 0; i < n; ++i) (*out)[i] = static_cast<double>(x[i]) - lz;
}

// Mean over positions of KL(p || q), logits [positions x vocab].
double MeanKl(const std::vector<float>& p, const std::vector<float>& q, size_t vocab) {
  const size_t positions = p.size() / vocab;
  std::vector<double> lp, lq;
  double total = 0;
  for (size_t t = 0; t < positions; ++t) {
    LogSoftmax(p.data() + t * vocab, vocab, &lp);
    LogSoftmax(q.data() + t * vocab, vocab, &lq);
    double kl = 0;
    for (size_t i = 0; i < vocab; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    total += std::max(0.0, kl);
  }
  return positions > 0 ? total / static_cast<double>(positions) : 0.0;
}

Status MakeSamples(const CalibrateHeadsOptions& o, const Tokenizer& tok, std::vector<CalibrationSample>* out) {
  for (int64_t i = 0; i < o.samples; ++i) {
    TaskSpec spec;
    spec.kind = TaskKind::kPasskey;
    spec.depth = (static_cast<double>(i) + 0.5) / static_cast<double>(o.samples);
    spec.seed = (uint64_t{1} << 40) + static_cast<uint64_t>(i);
    RetrievalPrompt p;
    KVLAB_RETURN_IF_ERROR(BuildRetrievalPrompt(spec, o.length, tok, &p));
    CalibrationSample s;
    s.prompt = p.ids;
    KVLAB_RETURN_IF_ERROR(tok.Encode(p.sample.answer, /*add_bos=*/false, &s.answer));
    if (s.answer.empty()) return Status::InvalidArgument("calibrate-heads: a passkey answer encoded to no tokens");
    out->push_back(std::move(s));
  }
  return Status::OK();
}

}  // namespace

Status CalibrateHeads(const CalibrateHeadsOptions& o, DuoHeadScores* out, void (*progress)(const std::string&)) {
  if (o.samples < 1 || o.samples > 4096) {
    return Status::InvalidArgument("calibrate-heads: --samples must be in [1, 4096], got " + std::to_string(o.samples));
  }
  if (o.sinks < 0 || o.recent < 1) {
    return Status::InvalidArgument("calibrate-heads: --sinks must be >= 0 and --recent >= 1, got " +
                                   std::to_string(o.sinks) + " and " + std::to_string(o.recent));
  }
  if (o.length <= o.sinks + o.recent) {
    return Status::InvalidArgument("calibrate-heads: --length " + std::to_string(o.length) +
                                   " must exceed --sinks + --recent (" + std::to_string(o.sinks + o.recent) +
                                   "), or no head is ever windowed");
  }
  ModelConfig mc;
  KVLAB_RETURN_IF_ERROR(LoadModelConfig(o.model + "/config.json", &mc));
  std::unique_ptr<Tokenizer> tok;
  KVLAB_RETURN_IF_ERROR(LoadTokenizer(o.model, mc, &tok));
  std::vector<CalibrationSample> samples;
  KVLAB_RETURN_IF_ERROR(MakeSamples(o, *tok, &samples));

  EngineOptions eo;
  eo.model = o.model;
  eo.num_threads = o.threads;
  eo.block_size = o.block_size;
  if (!ParseDType(o.kv_dtype, &eo.kv_dtype)) {
    return Status::InvalidArgument("calibrate-heads: --kv-dtype: expected f32, f16 or bf16, got '" + o.kv_dtype + "'");
  }
  eo.max_context = o.length + 1;
  const size_t vocab = static_cast<size_t>(mc.vocab_size);
  std::vector<std::vector<float>> full(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    KVLAB_RETURN_IF_ERROR(AnswerLogits(eo, {PolicySpec{"full", {}, "calibrate-heads"}}, samples[i], &full[i]));
  }
  DuoHeadScores s;
  s.model = std::filesystem::path(o.model).lexically_normal().filename().string();
  if (s.model.empty()) s.model = std::filesystem::path(o.model).lexically_normal().parent_path().filename().string();
  s.num_layers = static_cast<int>(mc.num_hidden_layers);
  s.num_kv_heads = static_cast<int>(mc.num_key_value_heads);
  s.sinks = o.sinks;
  s.recent = o.recent;
  s.samples = o.samples;
  s.length = o.length;
  s.metric = "kl";
  for (int l = 0; l < s.num_layers; ++l) {
    for (int h = 0; h < s.num_kv_heads; ++h) {
      const PolicySpec duo{"duo",
                           {{"streaming", std::to_string(l) + "." + std::to_string(h)},
                            {"sinks", std::to_string(o.sinks)},
                            {"recent", std::to_string(o.recent)}},
                           "calibrate-heads"};
      double total = 0;
      std::vector<float> got;
      for (size_t i = 0; i < samples.size(); ++i) {
        KVLAB_RETURN_IF_ERROR(AnswerLogits(eo, {duo}, samples[i], &got));
        total += MeanKl(full[i], got, vocab);
      }
      s.scores.push_back(total / static_cast<double>(samples.size()));
      if (progress != nullptr) {
        progress("layer " + std::to_string(l) + " head " + std::to_string(h) + ": KL " + std::to_string(s.scores.back()));
      }
    }
  }
  *out = std::move(s);
  return Status::OK();
}

}  // namespace kvlab
