// quest: Quest. Tang, Zhao, Zhu, Xiao, Kasikci, Han, "Quest: Query-Aware
// Sparsity for Efficient Long-Context LLM Inference" (ICML 2024),
// arXiv:2406.10774; reference code github.com/mit-han-lab/Quest.
//
// Parameters
//   token_budget  (int, 1024)   tokens a decode step reads per (layer, KV head), the
//                               recent page included: k = floor(token_budget / page)
//                               pages, the page being the cache's block (block_size,
//                               16 by default, Quest's page_size). The passkey and
//                               text-generation scripts of the reference default to
//                               1024; its papers' sweeps use 256 to 4096.
//   dense_layers  (int, 2)      the first layers read every page (the paper and its
//                               code skip 2)
//   gqa           (max | sum)   how the bounds of the query heads sharing a KV head
//                               combine into the page's score (below); max
//
// What it reads: the cache stays whole; at each decode step, for each stream
// of a layer past dense_layers, the page holding the step's token plus the
// k - 1 other pages with the largest upper bound of q.k over the page,
// sum_c max(q_c * min_c, q_c * max_c), min and max being the channel-wise
// bounds of the page's keys (ties to the earlier page); all pages while the
// stream has at most k. Prefill reads everything.
//
// Over KIVI (["kivi", "quest"]): KIVI shrinks what is stored, Quest what is
// read. A sealed group is a page of `group` tokens whose bounds are the range
// of its decoded keys, from its own key scales and zeros (no extra memory);
// the residual's plain blocks keep their min/max. token_budget then counts
// tokens read, encoded and plain alike (a group costs `group`, a plain page
// block_size, the recent page included): the pages are taken in the order of
// their bound (ties to the earlier page), each that still fits the budget
// left, so the groups read are the top groups by the bound; all pages while
// the stream holds at most token_budget tokens of pages. Over quant (int8 /
// fp8, a scale per token) and think, whose blocks carry no key range, each
// sealed block keeps the min/max of its decoded keys from its seal (the
// cache's Stream::enc_key_min) and is ranked by them the same way.
//
// GQA: Quest's code is multi-head (its Llama-3.1 evaluation repeats the KV
// heads, so each query head picks its own pages). Here one stream serves a
// group of query heads and the pages read are one list per stream, so the
// per-head bounds are combined: `max` (default) ranks a page by the largest
// bound of any head of the group, so a page one head needs is kept even when
// the others ignore it, which is the closest one list of k pages comes to the
// union of the heads' own top-k; `sum` ranks by the group's summed bound,
// which favours pages several heads want but lets one head's need be
// outvoted (and adds logits of different softmaxes).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/page_bounds.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

class QuestPolicy : public KVPolicy {
 public:
  QuestPolicy(PolicyParams p, int64_t token_budget, int64_t dense_layers, bool sum_heads)
      : KVPolicy(std::move(p)), token_budget_(token_budget), dense_layers_(dense_layers), sum_heads_(sum_heads) {}

  const char* Name() const override { return "quest"; }
  uint32_t Concerns() const override { return kConcernRead; }
  bool NeedsBlockKeyBounds() const override { return true; }

  Status CheckShape(int /*kv_heads*/, int /*head_dim*/, int block_size) const override {
    if (token_budget_ < block_size) {
      return Status::InvalidArgument("policy 'quest' parameter 'token_budget' is " + std::to_string(token_budget_) +
                                     ", below one page (the cache's block_size " + std::to_string(block_size) +
                                     "): a step must read at least the page holding its own token");
    }
    return Status::OK();
  }

  bool SelectReadBlocks(const StreamReadState& s, std::vector<int32_t>* blocks) const override {
    if (s.layer < dense_layers_) return false;
    if (s.num_group_pages > 0) return SelectOverGroups(s, blocks);
    const int64_t pages = token_budget_ / s.block_size;
    if (s.num_blocks <= pages) return false;
    const int64_t candidates = s.num_blocks - 1;  // every page but the one holding the step's token
    // One key per page whose ascending order is the rule's (RankKeys); then an
    // O(n) selection of the first k - 1 keys (the set is exact: the keys are
    // distinct).
    std::vector<uint64_t> key = RankKeys(s, candidates);
    const auto top = key.begin() + (pages - 1);
    std::nth_element(key.begin(), top, key.end());
    blocks->resize(static_cast<size_t>(pages - 1));
    for (int64_t i = 0; i < pages - 1; ++i) {
      (*blocks)[static_cast<size_t>(i)] = static_cast<int32_t>(key[static_cast<size_t>(i)] & 0xffffffffu);
    }
    std::sort(blocks->begin(), blocks->end());
    blocks->push_back(static_cast<int32_t>(s.num_blocks - 1));
    return true;
  }

 private:
  // Bits of f that sort in descending order of f as unsigned integers, with
  // -0 and +0 the same (they are equal scores); a NaN score sorts before
  // +inf or after -inf by its sign.
  static uint32_t DescendingBits(float f) {
    f += 0.0f;  // -0 becomes +0
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;  // ascending order of f
    return ~u;
  }

  // Each candidate page's score (PageBoundScores: vectorised, the same bits on
  // every CPU path) as a key whose ascending order is the rule's: larger score
  // first, ties to the earlier page.
  std::vector<uint64_t> RankKeys(const StreamReadState& s, int64_t candidates) const {
    PageBoundsArgs args;
    args.queries = s.queries;
    args.num_queries = s.num_queries;
    args.head_dim = s.head_dim;
    args.key_min = s.key_min;
    args.key_max = s.key_max;
    args.dtype = s.bound_dtype;
    args.num_pages = candidates;
    args.sum_heads = sum_heads_;
    std::vector<float> score(static_cast<size_t>(candidates));
    PageBoundScores(args, score.data());
    std::vector<uint64_t> key(static_cast<size_t>(candidates));
    for (int64_t b = 0; b < candidates; ++b) {
      key[static_cast<size_t>(b)] = uint64_t{DescendingBits(score[static_cast<size_t>(b)])} << 32 | static_cast<uint64_t>(b);
    }
    return key;
  }

  // Sealed groups (s.group_tokens each) then plain pages (s.block_size each):
  // the budget in tokens, filled in the order of the bound.
  bool SelectOverGroups(const StreamReadState& s, std::vector<int32_t>* blocks) const {
    const int64_t groups = s.num_group_pages, candidates = s.num_blocks - 1;
    auto cost = [&s, groups](int64_t b) -> int64_t { return b < groups ? s.group_tokens : s.block_size; };
    if (groups * s.group_tokens + (s.num_blocks - groups) * s.block_size <= token_budget_) return false;
    std::vector<uint64_t> key = RankKeys(s, candidates);
    std::sort(key.begin(), key.end());
    int64_t left = token_budget_ - s.block_size;  // the recent page
    blocks->clear();
    for (uint64_t k : key) {
      const auto b = static_cast<int32_t>(k & 0xffffffffu);
      if (left < std::min<int64_t>(s.block_size, s.group_tokens)) break;  // nothing fits any more
      if (cost(b) > left) continue;
      blocks->push_back(b);
      left -= cost(b);
    }
    std::sort(blocks->begin(), blocks->end());
    blocks->push_back(static_cast<int32_t>(candidates));
    return true;
  }

  int64_t token_budget_, dense_layers_;
  bool sum_heads_;
};

}  // namespace

void RegisterQuestPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "quest";
  info.summary = "Quest: keeps the whole cache; a decode step reads per KV head only the recent page and the top "
                 "pages by the bound of q.k from each page's channel-wise key min/max";
  info.paper = "Tang et al. 2024, Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference";
  info.concerns = kConcernRead;
  info.params = {
      {"token_budget", ParamSpec::Type::kInt, "1024",
       "tokens a decode step reads per (layer, KV head), the recent page included: floor(token_budget / block_size) "
       "pages, a page being the cache's block; at least one block (over kivi, quant or think: a sealed block is a page "
       "of its own tokens, and the budget counts encoded and plain tokens alike)", {}, ParamRange::Closed(1, 1 << 24)},
      {"dense_layers", ParamSpec::Type::kInt, "2", "the first layers read every page (the paper: 2)", {},
       ParamRange::Closed(0, 1 << 16)},
      {"gqa", ParamSpec::Type::kString, "max",
       "how the bounds of the query heads of one KV head combine: max (a page any head needs) or sum", {"max", "sum"}},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    const int64_t budget = p.GetInt("token_budget"), dense = p.GetInt("dense_layers");
    const bool sum = p.GetString("gqa") == "sum";
    out->reset(new QuestPolicy(std::move(p), budget, dense, sum));
    return Status::OK();
  };
  // The engine conformance model (2 layers, a few hundred tokens): two pages
  // a step, every layer selecting.
  info.test_params = {{"token_budget", "32"}, {"dense_layers", "0"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab
