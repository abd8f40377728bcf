// Chat templates (core/tokenizer/chat_template.h): finding the template in a model
// directory, the special-token variables, and rendering.
#include "core/tokenizer/chat_template.h"

#include <fstream>
#include <string>

#include "core/base/untrusted.h"
#include "core/base/untrusted_json.h"

namespace kvlab {
namespace {

using jinja::Json;

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

// "<s>" or {"content": "<s>", ...}: the token's text; false for anything else.
bool TokenText(const Json& v, std::string* out) {
  const Json* s = &v;
  if (v.is_object()) {
    auto it = v.find("content");
    if (it == v.end()) return false;
    s = &*it;
  }
  if (!s->is_string()) return false;
  *out = s->get<std::string>();
  return true;
}

Status SpecialTokens(const Json& cfg, const std::string& file, Json* out) {
  *out = Json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) continue;
    std::string text;
    if (!TokenText(*it, &text)) return Status::InvalidArgument(file + ": " + key + " is " + QuoteJson(*it) + ", not a token");
    (*out)[key] = text;
  }
  auto extra = cfg.find("additional_special_tokens");
  if (extra != cfg.end() && !extra->is_null()) {
    if (!extra->is_array())
      return Status::InvalidArgument(file + ": additional_special_tokens is " + QuoteJson(*extra) + ", not a list");
    Json list = Json::array();
    for (const Json& t : *extra) {
      std::string text;
      if (!TokenText(t, &text))
        return Status::InvalidArgument(file + ": additional_special_tokens has " + QuoteJson(t) + ", not a token");
      list.push_back(text);
    }
    if (!list.empty()) (*out)["additional_special_tokens"] = list;
  }
  return Status::OK();
}

// chat_template as a string, or the "default" of a list of {name, template}.
Status TemplateText(const Json& cfg, const std::string& file, std::string* out) {
  const Json& t = cfg.at("chat_template");
  if (t.is_string()) {
    *out = t.get<std::string>();
    return Status::OK();
  }
  if (t.is_array()) {
    for (const Json& e : t) {
      if (e.is_object() && e.value("name", Json()) == "default" && e.contains("template") && e["template"].is_string()) {
        *out = e["template"].get<std::string>();
        return Status::OK();
      }
    }
    return Status::InvalidArgument(file + ": chat_template is a list with no {\"name\": \"default\", \"template\": ...}");
  }
  return Status::InvalidArgument(file + ": chat_template is " + QuoteJson(t) +
                                 ", not a string (or a list of {\"name\", \"template\"})");
}

}  // namespace

Status ChatTemplate::FromConfig(const Json& config, const std::string& file, const std::string* source,
                                std::unique_ptr<ChatTemplate>* out) {
  if (!config.is_object()) return Status::InvalidArgument(file + ": not a JSON object");
  auto t = std::make_unique<ChatTemplate>();
  KVLAB_RETURN_IF_ERROR(SpecialTokens(config, file, &t->special_tokens_));
  std::string text;
  if (source) {
    text = *source;
  } else {
    auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) return Status::NotFound(file + ": no chat_template");
    KVLAB_RETURN_IF_ERROR(TemplateText(config, file, &text));
  }
  t->origin_ = source ? file : file + " (chat_template)";
  KVLAB_RETURN_IF_ERROR(jinja::Template::Parse(text, t->origin_, &t->template_));
  *out = std::move(t);
  return Status::OK();
}

Status ChatTemplate::Load(const std::string& model_dir, std::unique_ptr<ChatTemplate>* out) {
  const std::string cfg_file = model_dir + "/tokenizer_config.json";
  const std::string jinja_file = model_dir + "/chat_template.jinja";
  Json cfg = Json::object();
  if (Exists(cfg_file)) {
    std::string text;
    KVLAB_RETURN_IF_ERROR(ReadFileBounded(cfg_file, kMaxConfigBytes, &text));
    KVLAB_RETURN_IF_ERROR(ParseJsonText(text, cfg_file, kMaxConfigBytes, &cfg));
    if (!cfg.is_object()) return Status::InvalidArgument(cfg_file + ": not a JSON object");
  }
  if (Exists(jinja_file)) {
    std::string source;
    KVLAB_RETURN_IF_ERROR(ReadFileBounded(jinja_file, kMaxConfigBytes, &source));
    return FromConfig(cfg, jinja_file, &source, out);
  }
  if (!cfg.contains("chat_template") || cfg["chat_template"].is_null())
    return Status::NotFound(model_dir + " has no chat template (looked for chat_template.jinja and a chat_template in "
                                        "tokenizer_config.json)");
  return FromConfig(cfg, cfg_file, nullptr, out);
}

Status ChatTemplate::Apply(const Json& messages, bool add_generation_prompt, std::string* out, const Json& extra,
                           const jinja::Environment& env) const {
  if (!messages.is_array()) return Status::InvalidArgument(origin_ + ": messages must be a list");
  if (!extra.is_object()) return Status::InvalidArgument(origin_ + ": extra template variables must be an object");
  Json vars = special_tokens_;
  vars["messages"] = messages;
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = add_generation_prompt;
  for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  return template_->Render(vars, env, out);
}

Status ChatTemplate::Encode(const Tokenizer& tok, const std::string& rendered, std::vector<int32_t>* ids) const {
  KVLAB_RETURN_IF_ERROR(tok.Encode(rendered, /*add_bos=*/false, ids));
  auto bos = special_tokens_.find("bos_token");
  if (bos == special_tokens_.end() || tok.bos_id() < 0) return Status::OK();
  const std::string& text = bos->get_ref<const std::string&>();
  if (text.empty() || rendered.compare(0, text.size(), text) != 0) return Status::OK();
  if (!ids->empty() && (*ids)[0] == tok.bos_id()) return Status::OK();
  KVLAB_RETURN_IF_ERROR(tok.Encode(rendered.substr(text.size()), /*add_bos=*/false, ids));
  ids->insert(ids->begin(), tok.bos_id());
  return Status::OK();
}

bool HasChatTemplate(const std::string& model_dir) {
  std::unique_ptr<ChatTemplate> t;
  const Status s = ChatTemplate::Load(model_dir, &t);
  return s.code() != Status::Code::kNotFound;
}

Status ApplyChatTemplate(const std::string& model_dir, const Json& messages, bool add_generation_prompt,
                         std::string* out) {
  std::unique_ptr<ChatTemplate> t;
  KVLAB_RETURN_IF_ERROR(ChatTemplate::Load(model_dir, &t));
  return t->Apply(messages, add_generation_prompt, out);
}

}  // namespace kvlab
