// A Jinja subset for chat templates (tokenizer_config.json's "chat_template"):
// the constructs Llama 3.x, Qwen2/3, Gemma 2/3, Mistral, Phi-3 and DeepSeek
// templates use, rendered as transformers renders them (jinja2's
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, its own
// tojson, raise_exception and strftime_now). core/tokenizer/chat_template.h is the
// caller; anyone may use it directly. Torch-free.
//
// Supported: {{ }}, {% %}, {# #}, whitespace control (- and +), {% raw %};
// if/elif/else, for (loop.*, `for x in y if c`, else, tuple targets), set
// (names, ns.attr, {% set x %}...{% endset %}), macro, break/continue,
// generation; literals, lists, dicts, tuples; + - * / // % ** ~, comparisons,
// in / not in, and/or/not, `a if c else b`, attribute and item access,
// slices; the filters, tests, globals and str/dict methods that
// jinja_builtins.cpp lists. Anything else (an unknown tag, filter or test,
// include/extends/import, recursive loops) is refused by Parse with an error
// naming the construct and its line and column.
//
// Bounds (templates come from downloaded files): nesting depth at parse time,
// macro recursion, output and string sizes, and a budget of steps and of
// wall-clock time at render time (RenderLimits); exceeding one is an error,
// never a crash or a hang.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/base/status.h"

namespace kvlab {
namespace jinja {

// Insertion-ordered, as Python's dicts are: tojson and items() keep key order.
using Json = nlohmann::ordered_json;

struct RenderLimits {
  uint64_t max_output_bytes = uint64_t{256} << 20;  // the rendered text, and any one string built
  int max_call_depth = 64;                          // nested macro calls
  // The budget, which a runaway template (nested loops, a string grown in a
  // loop, macros that call themselves twice) reaches in about a second: steps
  // (a statement run, an item iterated or compared, a KiB of text built; the
  // golden conversations of chat_template_test take a few hundred each) and
  // wall-clock time, which also bounds work no step counts.
  int64_t max_steps = 1'000'000;
  int64_t max_render_ms = 1000;
};

// What the template may call besides its variables.
struct Environment {
  // strftime_now(format): transformers passes datetime.now().strftime(format).
  // Empty: the local time now (std::strftime). Set it for reproducible output.
  std::function<std::string(const std::string& format)> strftime_now;
  RenderLimits limits;
};

struct Program;  // the parsed template (jinja_internal.h)

// Thread-safety: a parsed Template is immutable; Render may run concurrently.
class Template {
 public:
  // Parses `source`. `origin` names it in errors ("DIR/tokenizer_config.json
  // (chat_template)"): every error reads "ORIGIN: line L, column C: what".
  static Status Parse(const std::string& source, const std::string& origin, std::unique_ptr<Template>* out);
  ~Template();

  // Renders with `vars` (a JSON object: the template's variables). An error
  // (raise_exception's message, an undefined value used, a type error, a
  // limit) names the origin, line and column.
  Status Render(const Json& vars, const Environment& env, std::string* out) const;

 private:
  Template();
  std::unique_ptr<Program> program_;
};

}  // namespace jinja
}  // namespace kvlab
