// The evaluator of core/tokenizer/jinja.h: statements and expressions of the
// syntax tree over Values, with jinja2's scoping (each for-loop iteration and
// each macro call has a scope of its own; `set` writes to the innermost one,
// which is why templates carry state across iterations in namespace()
// objects), and the render limits.
#include <chrono>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "core/tokenizer/jinja_internal.h"

namespace kvlab {
namespace jinja {
namespace {

using Frame = std::map<std::string, Value>;
using Clock = std::chrono::steady_clock;

// Text built counts a step per this many bytes.
constexpr uint64_t kBytesPerStep = 1024;
// Step reads the clock at every this many calls: a read costs up to 100 ns in
// a VM, a tenth of a loop iteration, and a call stands for at most tens of ms
// of work no step counts (copying a value of up to max_steps items, an `in`
// over such a list), so the time budget is overrun by well under a second.
constexpr int64_t kCallsPerClockRead = 16;

class Renderer final : public Evaluator {
 public:
  Renderer(const Program& p, const Environment& env) : prog_(p), env_(env), start_(Clock::now()) {}

  const Environment& env() const override { return env_; }
  bool Step(int64_t n, std::string* error) override {
    if (n < 0 || __builtin_add_overflow(steps_, n, &steps_) || steps_ > env_.limits.max_steps) {
      *error = "the template exceeded its step budget: more than " + std::to_string(env_.limits.max_steps) +
               " steps (RenderLimits::max_steps; a step is a statement, an item iterated or compared, or a KiB of "
               "text built)";
      return false;
    }
    if (++step_calls_ % kCallsPerClockRead == 0 &&
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count() >=
            env_.limits.max_render_ms) {
      *error = "the template exceeded its time budget: rendering took more than " +
               std::to_string(env_.limits.max_render_ms) + " ms (RenderLimits::max_render_ms)";
      return false;
    }
    return true;
  }
  bool CheckSize(uint64_t bytes, std::string* error) const override {
    if (bytes <= env_.limits.max_output_bytes) return true;
    *error = "a string of " + std::to_string(bytes) + " bytes, more than RenderLimits::max_output_bytes (" +
             std::to_string(env_.limits.max_output_bytes) + ")";
    return false;
  }
  bool CountText(uint64_t bytes, std::string* error) override {
    return Step(static_cast<int64_t>(bytes / kBytesPerStep), error);
  }

  Status Run(const Json& vars, std::string* out) {
    if (!vars.is_object()) return Status::InvalidArgument(prog_.origin + ": the template's variables are not an object");
    auto root = std::make_shared<const Json>(vars);
    frames_.emplace_back();
    for (auto it = root->begin(); it != root->end(); ++it) frames_[0][it.key()] = Value::At(root, &it.value());
    Flow flow = Flow::kNormal;
    out->clear();
    return Exec(prog_.body, out, &flow);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Status Err(Pos pos, const std::string& what) const { return ErrorAt(prog_.origin, pos, what); }

  Status Append(Pos pos, const std::string& s, std::string* out) {
    std::string error;
    if (!CheckSize(out->size() + s.size(), &error)) return Err(pos, "the output would be " + error);
    if (!CountText(s.size(), &error)) return Err(pos, error);
    *out += s;
    return Status::OK();
  }

  Value Lookup(const std::string& name) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
      auto it = f->find(name);
      if (it != f->end()) return it->second;
    }
    Value g;
    if (LookupGlobal(name, &g)) return g;
    return Value::Undefined("'" + name + "' is undefined");
  }

  // ---- statements ----
  Status Exec(const Body& body, std::string* out, Flow* flow) {
    for (const auto& s : body) {
      KVLAB_RETURN_IF_ERROR(ExecStmt(*s, out, flow));
      if (*flow != Flow::kNormal) return Status::OK();
    }
    return Status::OK();
  }

  Status ExecStmt(const Stmt& s, std::string* out, Flow* flow) {
    std::string error;
    if (!Step(1, &error)) return Err(s.pos, error);
    switch (s.kind) {
      case Stmt::Kind::kText: return Append(s.pos, s.text, out);
      case Stmt::Kind::kOutput: {
        Value v;
        KVLAB_RETURN_IF_ERROR(Eval(*s.expr, &v));
        return Append(s.pos, ToStr(v), out);
      }
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches) {
          bool take = true;
          if (cond) {
            Value c;
            KVLAB_RETURN_IF_ERROR(Eval(*cond, &c));
            take = Truthy(c);
          }
          if (take) return Exec(body, out, flow);
        }
        return Status::OK();
      case Stmt::Kind::kFor: return ExecFor(s, out);
      case Stmt::Kind::kSet: return ExecSet(s);
      case Stmt::Kind::kSetBlock: {
        std::string text;
        Flow inner = Flow::kNormal;
        KVLAB_RETURN_IF_ERROR(Exec(s.body, &text, &inner));
        frames_.back()[s.targets[0]] = Value::Of(Json(std::move(text)));
        return Status::OK();
      }
      case Stmt::Kind::kMacro: {
        auto fn = std::make_shared<Callable>();
        fn->name = s.targets[0];
        fn->macro = &s;
        frames_.back()[s.targets[0]] = Value::Function(fn);
        return Status::OK();
      }
      case Stmt::Kind::kBreak: *flow = Flow::kBreak; return Status::OK();
      case Stmt::Kind::kContinue: *flow = Flow::kContinue; return Status::OK();
      case Stmt::Kind::kGeneration: return Exec(s.body, out, flow);
    }
    return Status::OK();
  }

  // Binds `targets` to `item` in `frame` (several targets unpack a list).
  Status Bind(const std::vector<std::string>& targets, const Value& item, Pos pos, Frame* frame) {
    if (targets.size() == 1) {
      (*frame)[targets[0]] = item;
      return Status::OK();
    }
    if (!item.is_data() || !item.data().is_array() || item.data().size() != targets.size())
      return Err(pos, "cannot unpack " + TypeName(item) + " into " + std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) (*frame)[targets[i]] = item.Sub(&item.data()[i]);
    return Status::OK();
  }

  Status ExecFor(const Stmt& s, std::string* out) {
    Value seq;
    KVLAB_RETURN_IF_ERROR(Eval(*s.expr, &seq));
    std::vector<Value> items;
    std::string error;
    if (!Iterate(seq, &items, &error)) return Err(s.expr->pos, error);
    if (s.cond) {  // `for x in xs if c`: the loop sees only the items that pass
      std::vector<Value> kept;
      for (const Value& item : items) {
        frames_.emplace_back();
        Status st = Bind(s.targets, item, s.pos, &frames_.back());
        Value c;
        if (st.ok()) st = Eval(*s.cond, &c);
        frames_.pop_back();
        KVLAB_RETURN_IF_ERROR(st);
        if (Truthy(c)) kept.push_back(item);
      }
      items.swap(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    bool completed = false;  // jinja2 runs `else` unless some iteration reached the end of the body
    for (int64_t i = 0; i < n; ++i) {
      if (!Step(1, &error)) return Err(s.pos, error);
      frames_.emplace_back();
      Json loop = {{"index", i + 1},      {"index0", i},       {"revindex", n - i}, {"revindex0", n - i - 1},
                   {"first", i == 0},     {"last", i == n - 1}, {"length", n},       {"depth", 1},
                   {"depth0", 0}};
      frames_.back()["loop"] = Value::Of(std::move(loop));
      Status st = Bind(s.targets, items[static_cast<size_t>(i)], s.pos, &frames_.back());
      Flow flow = Flow::kNormal;
      if (st.ok()) st = Exec(s.body, out, &flow);
      frames_.pop_back();
      KVLAB_RETURN_IF_ERROR(st);
      if (flow == Flow::kBreak) break;
      completed = completed || flow == Flow::kNormal;
    }
    if (!completed && !s.else_body.empty()) {
      Flow flow = Flow::kNormal;
      return Exec(s.else_body, out, &flow);
    }
    return Status::OK();
  }

  Status ExecSet(const Stmt& s) {
    Value v;
    KVLAB_RETURN_IF_ERROR(Eval(*s.expr, &v));
    if (s.attr.empty()) return Bind(s.targets, v, s.pos, &frames_.back());
    const Value target = Lookup(s.targets[0]);
    if (target.kind() != Value::Kind::kNamespace)
      return Err(s.pos, "cannot set attribute '" + s.attr + "' of '" + s.targets[0] + "', which is " +
                            (target.is_undefined() ? std::string("undefined") : "a " + TypeName(target)) +
                            ", not a namespace()");
    target.ns_mut()[s.attr] = v.ToJson();
    return Status::OK();
  }

  // ---- expressions ----
  Status EvalArgs(const Expr& e, size_t first, Args* args) {
    for (size_t i = first; i < e.args.size(); ++i) {
      args->pos.emplace_back();
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[i], &args->pos.back()));
    }
    for (const auto& [k, x] : e.kwargs) {
      args->kw.emplace_back(k, Value());
      KVLAB_RETURN_IF_ERROR(Eval(*x, &args->kw.back().second));
    }
    return Status::OK();
  }

  Status Eval(const Expr& e, Value* out);
  Status EvalCall(const Expr& e, Value* out);
  Status CallMacro(const Expr& e, const Stmt& m, const Args& args, Value* out);
  Status EvalCollection(const Expr& e, Value* out);

  const Program& prog_;
  const Environment& env_;
  const Clock::time_point start_;
  std::vector<Frame> frames_;
  int64_t steps_ = 0;
  int64_t step_calls_ = 0;
  int call_depth_ = 0;
};

Status Renderer::Eval(const Expr& e, Value* out) {
  std::string error;
  auto fail = [&](const std::string& what) { return Err(e.pos, what); };
  switch (e.kind) {
    case Expr::Kind::kLiteral: *out = Value::At(e.literal, e.literal.get()); return Status::OK();
    case Expr::Kind::kName: *out = Lookup(e.name); return Status::OK();
    case Expr::Kind::kAttr: {
      Value obj;
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[0], &obj));
      return GetAttr(obj, e.name, out, &error) ? Status::OK() : fail(error);
    }
    case Expr::Kind::kItem: {
      Value obj, key;
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[0], &obj));
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[1], &key));
      return GetItem(obj, key, out, &error) ? Status::OK() : fail(error);
    }
    case Expr::Kind::kSlice: {
      Value parts[4];
      for (int i = 0; i < 4; ++i)
        if (e.args[i]) KVLAB_RETURN_IF_ERROR(Eval(*e.args[i], &parts[i]));
      return Slice(parts[0], parts[1], parts[2], parts[3], out, &error) ? Status::OK() : fail(error);
    }
    case Expr::Kind::kCall: return EvalCall(e, out);
    case Expr::Kind::kFilter: case Expr::Kind::kTest: {
      Value subject;
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[0], &subject));
      Args args;
      KVLAB_RETURN_IF_ERROR(EvalArgs(e, 1, &args));
      if (e.kind == Expr::Kind::kFilter) {
        if (!ApplyFilter(*this, e.name, subject, args, out, &error)) return fail("filter '" + e.name + "': " + error);
        return Status::OK();
      }
      bool r = false;
      if (!ApplyTest(*this, e.name, subject, args, &r, &error)) return fail("test '" + e.name + "': " + error);
      *out = Value::Of(Json(r != e.negated));
      return Status::OK();
    }
    case Expr::Kind::kNot: case Expr::Kind::kNeg: case Expr::Kind::kPos: {
      Value v;
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[0], &v));
      if (e.kind == Expr::Kind::kNot) {
        *out = Value::Of(Json(!Truthy(v)));
        return Status::OK();
      }
      const Value zero = Value::Of(Json(0));
      const char* op = e.kind == Expr::Kind::kNeg ? "-" : "+";
      if (!v.is_data() || !(v.data().is_number() || v.data().is_boolean()))
        return fail(v.is_undefined() ? v.why() : std::string("bad operand type for unary ") + op + ": '" + TypeName(v) + "'");
      return BinaryOp(*this, op, zero, v, out, &error) ? Status::OK() : fail(error);
    }
    case Expr::Kind::kBinary: {
      Value a, b;
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[0], &a));
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[1], &b));
      return BinaryOp(*this, e.name, a, b, out, &error) ? Status::OK() : fail(error);
    }
    case Expr::Kind::kCompare: {
      Value left;
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[0], &left));
      bool r = true;
      for (size_t i = 0; i < e.ops.size() && r; ++i) {
        Value right;
        KVLAB_RETURN_IF_ERROR(Eval(*e.args[i + 1], &right));
        if (!CompareOp(e.ops[i], left, right, &r, &error)) return fail(error);
        left = right;
      }
      *out = Value::Of(Json(r));
      return Status::OK();
    }
    case Expr::Kind::kAnd: case Expr::Kind::kOr: {  // Python's: the deciding operand itself
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[0], out));
      if (Truthy(*out) == (e.kind == Expr::Kind::kOr)) return Status::OK();
      return Eval(*e.args[1], out);
    }
    case Expr::Kind::kCond: {
      Value c;
      KVLAB_RETURN_IF_ERROR(Eval(*e.args[1], &c));
      if (Truthy(c)) return Eval(*e.args[0], out);
      if (e.args[2]) return Eval(*e.args[2], out);
      *out = Value::Undefined("the inline if-expression evaluated to false and has no else");
      return Status::OK();
    }
    case Expr::Kind::kList: case Expr::Kind::kTuple: case Expr::Kind::kDict: return EvalCollection(e, out);
  }
  return Status::OK();
}

Status Renderer::EvalCollection(const Expr& e, Value* out) {
  std::string error;
  Json j = e.kind == Expr::Kind::kDict ? Json::object() : Json::array();
  for (size_t i = 0; i < e.args.size(); ++i) {
    Value v;
    KVLAB_RETURN_IF_ERROR(Eval(*e.args[i], &v));
    if (e.kind != Expr::Kind::kDict) {
      j.push_back(v.ToJson());
      continue;
    }
    if (!v.is_data() || !v.data().is_string())
      return Err(e.args[i]->pos, "dict keys must be strings here, not " + TypeName(v));
    Value val;
    KVLAB_RETURN_IF_ERROR(Eval(*e.args[++i], &val));
    j[v.data().get<std::string>()] = val.ToJson();
  }
  *out = Value::Of(std::move(j));
  return Status::OK();
}

Status Renderer::EvalCall(const Expr& e, Value* out) {
  Value fn;
  KVLAB_RETURN_IF_ERROR(Eval(*e.args[0], &fn));
  if (fn.is_undefined()) return Err(e.args[0]->pos, fn.why());
  if (fn.kind() != Value::Kind::kCallable) return Err(e.pos, "'" + TypeName(fn) + "' object is not callable");
  Args args;
  KVLAB_RETURN_IF_ERROR(EvalArgs(e, 1, &args));
  const Callable& c = fn.fn();
  if (c.macro) return CallMacro(e, *c.macro, args, out);
  std::string error;
  if (!c.builtin(*this, c.self, args, out, &error)) return Err(e.args[0]->pos, c.name + ": " + error);
  return Status::OK();
}

// A macro call: its own scope over the template's top-level variables, its
// parameters bound from the arguments or their defaults; the result is its output.
Status Renderer::CallMacro(const Expr& e, const Stmt& m, const Args& args, Value* out) {
  const std::string& name = m.targets[0];
  if (call_depth_ >= env_.limits.max_call_depth)
    return Err(e.pos, "macro calls nest more than " + std::to_string(env_.limits.max_call_depth) +
                          " deep (RenderLimits::max_call_depth)");
  if (args.pos.size() > m.params.size())
    return Err(e.args[0]->pos, "macro '" + name + "' takes " + std::to_string(m.params.size()) + " arguments, not " +
                          std::to_string(args.pos.size()));
  for (const auto& kv : args.kw) {
    bool known = false;
    for (const auto& p : m.params) known = known || p.first == kv.first;
    if (!known) return Err(e.pos, "macro '" + name + "' has no parameter '" + kv.first + "'");
  }
  std::vector<Frame> saved(frames_.begin() + 1, frames_.end());
  frames_.resize(1);
  frames_.emplace_back();
  Status st;
  for (size_t i = 0; i < m.params.size() && st.ok(); ++i) {
    const Value* given = args.Get(i, m.params[i].first.c_str());
    Value v = given ? *given : Value::Undefined("'" + m.params[i].first + "' is undefined");
    if (!given && m.params[i].second) st = Eval(*m.params[i].second, &v);
    frames_.back()[m.params[i].first] = v;
  }
  std::string text;
  ++call_depth_;
  Flow flow = Flow::kNormal;
  if (st.ok()) st = Exec(m.body, &text, &flow);
  --call_depth_;
  frames_.resize(1);
  frames_.insert(frames_.end(), saved.begin(), saved.end());
  KVLAB_RETURN_IF_ERROR(st);
  *out = Value::Of(Json(std::move(text)));
  return Status::OK();
}

}  // namespace

Template::Template() = default;
Template::~Template() = default;

Status Template::Parse(const std::string& source, const std::string& origin, std::unique_ptr<Template>* out) {
  std::vector<Token> tokens;
  KVLAB_RETURN_IF_ERROR(Lex(source, origin, &tokens));
  std::unique_ptr<Template> t(new Template());
  t->program_ = std::make_unique<Program>();
  t->program_->origin = origin;
  KVLAB_RETURN_IF_ERROR(ParseTokens(tokens, origin, &t->program_->body));
  *out = std::move(t);
  return Status::OK();
}

Status Template::Render(const Json& vars, const Environment& env, std::string* out) const {
  return Renderer(*program_, env).Run(vars, out);
}

}  // namespace jinja
}  // namespace kvlab
