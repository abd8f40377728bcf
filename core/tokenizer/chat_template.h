// Chat templates of instruct checkpoints: the Jinja template a model directory
// ships (chat_template.jinja, else tokenizer_config.json's "chat_template"),
// rendered by core/tokenizer/jinja.h with the variables transformers'
// apply_chat_template passes: the special tokens (bos_token, eos_token,
// unk_token, sep_token, pad_token, cls_token, mask_token as strings, and
// additional_special_tokens), messages, tools (none), documents (none),
// add_generation_prompt and any extra keyword arguments (enable_thinking...).
// The sweep (evals/) calls it for tasks with chat = true; anyone may. Torch-free.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/tokenizer/jinja.h"
#include "core/tokenizer/tokenizer.h"

namespace kvlab {

// Thread-safety: immutable after Load; Apply may run concurrently.
class ChatTemplate {
 public:
  // The template of `model_dir`: DIR/chat_template.jinja when it exists, else
  // DIR/tokenizer_config.json's chat_template (a string, or a list of
  // {"name", "template"} of which "default" is used). NotFound, naming the
  // directory and the files looked in, when there is none; InvalidArgument
  // naming the file (and, for a template it cannot render, the construct with
  // its line and column) otherwise.
  static Status Load(const std::string& model_dir, std::unique_ptr<ChatTemplate>* out);

  // From a parsed tokenizer_config.json (`file` names it in errors); `source`
  // non-null replaces its chat_template (a chat_template.jinja's text).
  static Status FromConfig(const jinja::Json& config, const std::string& file, const std::string* source,
                           std::unique_ptr<ChatTemplate>* out);

  // Renders `messages` (a list of {"role", "content", ...}). `extra` (an object)
  // adds or replaces variables, as apply_chat_template's keyword arguments do.
  Status Apply(const jinja::Json& messages, bool add_generation_prompt, std::string* out,
               const jinja::Json& extra = jinja::Json::object(), const jinja::Environment& env = {}) const;

  // Token ids of a rendered chat as transformers tokenises it
  // (add_special_tokens=False: the BOS is the template's own, none is added).
  // Special tokens in the text are matched as special tokens where the
  // tokenizer does that (tokenizer.json's added tokens); one that does not (the
  // byte tokenizer, SentencePiece) gets the bos_token the text starts with as
  // its BOS id rather than as text.
  Status Encode(const Tokenizer& tok, const std::string& rendered, std::vector<int32_t>* ids) const;

  // The special-token variables, as transformers' special_tokens_map.
  const jinja::Json& special_tokens() const { return special_tokens_; }
  // "DIR/tokenizer_config.json (chat_template)" or "DIR/chat_template.jinja".
  const std::string& origin() const { return origin_; }

 private:
  std::unique_ptr<jinja::Template> template_;
  jinja::Json special_tokens_;
  std::string origin_;
};

// Whether `model_dir` has a chat template (the files Load reads, with a template in them).
bool HasChatTemplate(const std::string& model_dir);

// ChatTemplate::Load(model_dir) then Apply(messages, add_generation_prompt).
Status ApplyChatTemplate(const std::string& model_dir, const jinja::Json& messages, bool add_generation_prompt,
                         std::string* out);

}  // namespace kvlab
