// The pieces of core/tokenizer/jinja.h's renderer: tokens (jinja_lexer.cpp), the
// syntax tree (jinja_parser.cpp), values and their Python semantics
// (jinja_value.cpp), filters, tests and methods (jinja_builtins.cpp) and the
// evaluator (jinja_eval.cpp). Only those files include it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/tokenizer/jinja.h"

namespace kvlab {
namespace jinja {

// A place in the template source, 1-based (columns count characters).
struct Pos {
  int line = 1, column = 1;
};

// "ORIGIN: line L, column C: what".
Status ErrorAt(const std::string& origin, Pos pos, const std::string& what);

// ---- tokens ----------------------------------------------------------------
enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  Tok kind;
  std::string text;  // text, name, operator, or a string literal's decoded value
  int64_t int_value = 0;
  double float_value = 0;
  Pos pos;
};

// Splits the template into text and tag tokens, applying whitespace control,
// trim_blocks and lstrip_blocks as jinja2's lexer does. Comments are dropped;
// {% raw %} bodies become text. The last token is kEnd.
Status Lex(const std::string& source, const std::string& origin, std::vector<Token>* out);

// ---- syntax tree -----------------------------------------------------------
struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts are absent)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..])
    kNot, kNeg, kPos,
    kBinary,   // args[0] name args[1]: + - * / // % ** ~
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...
    kAnd, kOr,
    kCond,     // args[0] if args[1] else args[2] (args[2] may be null)
    kList, kTuple,
    kDict,     // keys and values alternate in args
  };
  Kind kind;
  Pos pos;
  std::string name;
  std::shared_ptr<const Json> literal;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;  // kTest: `is not`
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kGeneration };
  Kind kind;
  Pos pos;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kSet value, kFor iterable
  std::vector<std::string> targets;  // kFor / kSet / kSetBlock names; kMacro: its name
  std::string attr;                  // kSet: `set targets[0].attr = ...`
  ExprPtr cond;                      // kFor: `if` filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: if/elif (cond), else (null cond)
  Body body, else_body;              // kFor, kSetBlock, kMacro, kGeneration
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: names and defaults (null: none)
};

struct Program {
  std::string origin;
  Body body;
};

Status ParseTokens(const std::vector<Token>& tokens, const std::string& origin, Body* out);

// ---- values ----------------------------------------------------------------
struct Callable;

// A value: JSON data (shared, not copied on access), undefined (with the
// message its misuse gives), a namespace() object or something callable.
class Value {
 public:
  enum class Kind { kUndefined, kData, kNamespace, kCallable };
  Value() = default;  // undefined
  static Value Undefined(std::string why);
  static Value Of(Json j);
  static Value At(std::shared_ptr<const Json> root, const Json* at);
  static Value Namespace(std::shared_ptr<Json> attrs);
  static Value Function(std::shared_ptr<const Callable> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_data() const { return kind_ == Kind::kData; }
  const Json& data() const { return *at_; }        // REQUIRES: is_data()
  const Json& ns() const { return *ns_; }          // REQUIRES: kNamespace
  Json& ns_mut() const { return *ns_; }            // REQUIRES: kNamespace
  const Callable& fn() const { return *fn_; }      // REQUIRES: kCallable
  const std::string& why() const { return why_; }  // kUndefined: "'x' is undefined"
  // The value as JSON (a namespace as its attributes; undefined and callables as null).
  Json ToJson() const;
  // A part of this value's data (child points into data()), sharing its storage.
  Value Sub(const Json* child) const { return At(root_, child); }

 private:
  Kind kind_ = Kind::kUndefined;
  std::shared_ptr<const Json> root_;
  const Json* at_ = nullptr;
  std::shared_ptr<Json> ns_;
  std::shared_ptr<const Callable> fn_;
  std::string why_ = "undefined value";
};

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument named `name` or at position `index`, else undefined.
  const Value* Get(size_t index, const char* name) const;
};

class Evaluator;
// A global function or a bound method: fills *out and returns true, or returns
// false with a message (no position: the evaluator adds it) in *error.
using BuiltinFn = bool (*)(Evaluator& ev, const Value& self, const Args& args, Value* out, std::string* error);

struct Callable {
  std::string name;
  BuiltinFn builtin = nullptr;
  Value self;                 // a bound method's receiver
  const Stmt* macro = nullptr;
};

// Python's semantics on values (jinja_value.cpp).
bool Truthy(const Value& v);
// str(v): strings as they are, numbers and containers as Python prints them.
std::string ToStr(const Value& v);
std::string PyRepr(const Json& j);
std::string PyFloat(double d);
// Python's ==.
bool Equal(const Value& a, const Value& b);
// json.dumps(j, ensure_ascii=False, indent, separators, sort_keys) as
// transformers' tojson calls it; indent null: all on one line.
std::string DumpJson(const Json& j, const std::string* indent, const std::string& item_sep,
                     const std::string& key_sep, bool sort_keys);
// Python's type name for error messages: 'str', 'int', 'list', 'dict', 'NoneType'...
std::string TypeName(const Value& v);
// UTF-8 strings as code points, for len(), indexing and slicing.
std::vector<uint32_t> Utf8Decode(const std::string& s);
std::string Utf8Encode(const std::vector<uint32_t>& cps);
size_t Utf8Length(const std::string& s);
// Python's str.isspace() for one code point; Strip as str.strip(chars) (chars
// null: whitespace).
bool IsPySpace(uint32_t cp);
std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right);

// ---- operators (jinja_ops.cpp): false with a message in *error on failure ----
bool BinaryOp(Evaluator& ev, const std::string& op, const Value& a, const Value& b, Value* out, std::string* error);
bool CompareOp(const std::string& op, const Value& a, const Value& b, bool* out, std::string* error);
bool Contains(const Value& container, const Value& item, bool* out, std::string* error);
// obj.name and obj[key] as jinja2's getattr / getitem: a missing one is
// undefined; an undefined obj is an error.
bool GetAttr(const Value& obj, const std::string& name, Value* out, std::string* error);
bool GetItem(const Value& obj, const Value& key, Value* out, std::string* error);
// obj[start:stop:step] (undefined parts are absent) of a list or a string.
bool Slice(const Value& obj, const Value& start, const Value& stop, const Value& step, Value* out,
           std::string* error);
// The items `for` visits: a list's items, a dict's keys, a string's characters;
// undefined gives none.
bool Iterate(const Value& v, std::vector<Value>* items, std::string* error);
// An integer argument (bool counts, as in Python).
bool AsInt(const Value& v, int64_t* out);

// ---- builtins (jinja_builtins.cpp) -----------------------------------------
bool IsFilter(const std::string& name);
bool IsTest(const std::string& name);
// The filter / test named `name`, applied: false with a message (no position;
// the evaluator adds it) in *error when it fails.
bool ApplyFilter(Evaluator& ev, const std::string& name, const Value& v, const Args& args, Value* out,
                 std::string* error);
bool ApplyTest(Evaluator& ev, const std::string& name, const Value& v, const Args& args, bool* out,
               std::string* error);
// `self.name` for a str or dict method: a bound Callable, or false when none.
bool LookupMethod(const Value& self, const std::string& name, Value* out);
// The globals: range, namespace, dict, raise_exception, strftime_now.
bool LookupGlobal(const std::string& name, Value* out);

// The evaluator's services the builtins need.
class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual const Environment& env() const = 0;
  // Counts n steps of work against the budget (RenderLimits::max_steps and
  // max_render_ms); false (with *error set) once either is spent.
  virtual bool Step(int64_t n, std::string* error) = 0;
  // False (with *error set) when a string of `bytes` would pass max_output_bytes.
  virtual bool CheckSize(uint64_t bytes, std::string* error) const = 0;
  // Counts a string of `bytes` built (a step per KiB) as Step counts work.
  virtual bool CountText(uint64_t bytes, std::string* error) = 0;
};

}  // namespace jinja
}  // namespace kvlab
