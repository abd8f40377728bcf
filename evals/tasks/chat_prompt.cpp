// chat = true for the prompt tasks (RULER's, the dataset tasks): the task's
// prompt sent as one user message through the model's chat template
// (core/tokenizer/chat_template.h) before tokenising. docs/sweeps.md, "Task options".
#include <algorithm>
#include <string>
#include <vector>

#include "evals/tasks/task.h"

namespace kvlab {

Status PointChatTemplate(const SweepPoint& p, std::unique_ptr<ChatTemplate>* out) {
  const Status s = ChatTemplate::Load(p.model, out);
  if (s.ok()) return s;
  const std::string key = "[task." + p.task + "] chat = true";
  if (s.code() == Status::Code::kNotFound) {
    return Status::InvalidArgument("task '" + p.task + "': " + key + ", but model '" + p.model_label + "' (" + p.model +
                                   ") has no chat template (looked for chat_template.jinja and a chat_template in "
                                   "tokenizer_config.json); set chat = false for a base or byte-level model");
  }
  return Status::InvalidArgument("task '" + p.task + "': " + key + ": " + s.message());
}

namespace {

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Where user[0, head_bytes) ends in `rendered`: templates pass the message as
// it is or trimmed (Llama 3's and Gemma's `| trim`). npos when neither is there.
size_t HeadEnd(const std::string& rendered, const std::string& user, size_t head_bytes) {
  const size_t at = rendered.find(user);
  if (at != std::string::npos) return at + head_bytes;
  const char* ws = " \t\n\r\f\v";
  const size_t lead = user.find_first_not_of(ws);
  if (lead == std::string::npos || head_bytes < lead) return std::string::npos;
  const size_t last = user.find_last_not_of(ws);
  const size_t core_at = rendered.find(user.substr(lead, last - lead + 1));
  if (core_at == std::string::npos) return std::string::npos;
  return core_at + std::min(head_bytes, last + 1) - lead;
}

}  // namespace

Status EncodeTaskPrompt(const Tokenizer& tok, const ChatTemplate* chat, const std::string& user,
                        const std::string& answer_prefix, size_t head_bytes, std::vector<int32_t>* ids,
                        size_t* head_end) {
  if (chat == nullptr) {
    KVLAB_RETURN_IF_ERROR(tok.Encode(user + answer_prefix, /*add_bos=*/true, ids));
    if (head_end) *head_end = SharedPrefix(tok, user.substr(0, head_bytes), *ids);
    return Status::OK();
  }
  const jinja::Json messages = jinja::Json::array({{{"role", "user"}, {"content", user}}});
  std::string rendered;
  KVLAB_RETURN_IF_ERROR(chat->Apply(messages, /*add_generation_prompt=*/true, &rendered));
  KVLAB_RETURN_IF_ERROR(chat->Encode(tok, rendered + answer_prefix, ids));
  if (head_end == nullptr) return Status::OK();
  const size_t end = HeadEnd(rendered, user, head_bytes);
  if (end == std::string::npos) {
    return Status::InvalidArgument(chat->origin() +
                                   ": the rendered chat does not contain the task's prompt as given, so the context "
                                   "cannot be prefilled apart from the question (query_aware = false); use "
                                   "query_aware = true with chat = true for this model");
  }
  std::vector<int32_t> head;
  KVLAB_RETURN_IF_ERROR(chat->Encode(tok, rendered.substr(0, end), &head));
  *head_end = CommonPrefix(head, *ids);
  return Status::OK();
}

Status ChatOverheadTokens(const Tokenizer& tok, const ChatTemplate* chat, int64_t* out) {
  *out = 0;
  if (chat == nullptr) return Status::OK();
  std::vector<int32_t> plain, wrapped;
  KVLAB_RETURN_IF_ERROR(tok.Encode("x", /*add_bos=*/true, &plain));
  KVLAB_RETURN_IF_ERROR(EncodeTaskPrompt(tok, chat, "x", "", 0, &wrapped, nullptr));
  *out = static_cast<int64_t>(wrapped.size()) - static_cast<int64_t>(plain.size());
  return Status::OK();
}

}  // namespace kvlab
