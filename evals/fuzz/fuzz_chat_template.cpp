// A checkpoint's chat template (core/tokenizer/chat_template.h, the Jinja subset of
// core/tokenizer/jinja*.cpp): the bytes as a model directory's
// chat_template.jinja, loaded (lexed, parsed) and rendered over a short
// conversation with and without the generation prompt. Parse and render
// errors are expected; the subset's bounds (depth, output size, the budget of
// steps and time) must stop every runaway template with an error.
#include <memory>
#include <string>

#include "core/tokenizer/chat_template.h"
#include "evals/fuzz/fuzz_target.h"

KVLAB_FUZZ_TARGET(chat_template) {
  (void)kvlab::fuzz::WriteScratchFile("chat_template.jinja", data, size);
  std::unique_ptr<kvlab::ChatTemplate> t;
  if (!kvlab::ChatTemplate::Load(kvlab::fuzz::ScratchDir(), &t).ok()) return 0;
  const kvlab::jinja::Json messages = kvlab::jinja::Json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is the key?"},)"
      R"( {"role": "assistant", "content": "<think>x</think>In the box."}, {"role": "user", "content": "Sure?"}])");
  std::string out;
  (void)t->Apply(messages, /*add_generation_prompt=*/false, &out);
  (void)t->Apply(messages, /*add_generation_prompt=*/true, &out);
  return 0;
}
