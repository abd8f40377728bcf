// Jinja's parser (jinja2/parser.py) for core/tokenizer/jinja.h: tokens to the
// syntax tree of jinja_internal.h, with jinja2's operator precedence (lowest
// first): `a if c else b`, or, and, not, comparisons and in / not in, + -, ~,
// * / // %, **, unary - +, then filters (|), tests (is) and calls, then
// attribute, item and slice access. Unknown tags, filters and tests are errors
// here, as they are when jinja2 compiles a template.
#include "core/tokenizer/jinja_parser.h"

#include <string>
#include <vector>

namespace kvlab {
namespace jinja {

// ---- statements ----
// Statements up to one of `ends` (its name is left in *end, the rest of its tag unread).
Status Parser::ParseBody(const std::vector<std::string>& ends, const std::string& opener, Pos opener_pos, Body* out,
                 std::string* end) {
  Depth d(this);
  KVLAB_RETURN_IF_ERROR(CheckDepth());
  for (;;) {
    const Token& t = Peek();
    if (t.kind == Tok::kEnd) {
      if (ends.empty()) return Status::OK();
      return ErrorAt(origin_, opener_pos, "this '" + opener + "' is never closed: the template ends before {% " +
                                              ends.back() + " %}");
    }
    if (t.kind == Tok::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kText;
      s->pos = t.pos;
      s->text = Next().text;
      out->push_back(std::move(s));
    } else if (t.kind == Tok::kVarBegin) {
      Next();
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kOutput;
      s->pos = t.pos;
      KVLAB_RETURN_IF_ERROR(ParseTuple(true, false, &s->expr));
      if (Peek().kind != Tok::kVarEnd) return Unexpected("end of print statement '}}'");
      Next();
      out->push_back(std::move(s));
    } else if (t.kind == Tok::kBlockBegin) {
      Next();
      const Token& name = Peek();
      if (name.kind != Tok::kName) return Unexpected("a tag name");
      for (const std::string& e : ends) {
        if (name.text == e) {
          Next();
          *end = e;
          return Status::OK();
        }
      }
      Next();
      std::unique_ptr<Stmt> s;
      KVLAB_RETURN_IF_ERROR(ParseStatement(name, &s));
      out->push_back(std::move(s));
    } else {
      return Unexpected("text or a tag");
    }
  }
}

Status Parser::ParseStatement(const Token& tag, std::unique_ptr<Stmt>* out) {
  auto s = std::make_unique<Stmt>();
  s->pos = tag.pos;
  const std::string& n = tag.text;
  Status st;
  if (n == "if") {
    st = ParseIf(s.get());
  } else if (n == "for") {
    st = ParseFor(s.get());
  } else if (n == "set") {
    st = ParseSet(s.get());
  } else if (n == "macro") {
    st = ParseMacro(s.get());
  } else if (n == "break" || n == "continue") {
    if (loop_depth_ == 0) return Error(tag, "'" + n + "' outside a for loop");
    s->kind = n == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    st = ExpectBlockEnd();
  } else if (n == "generation") {
    s->kind = Stmt::Kind::kGeneration;
    std::string end;
    KVLAB_RETURN_IF_ERROR(ExpectBlockEnd());
    KVLAB_RETURN_IF_ERROR(ParseBody({"endgeneration"}, n, tag.pos, &s->body, &end));
    st = ExpectBlockEnd();
  } else if (n == "include" || n == "extends" || n == "import" || n == "from" || n == "block" || n == "call" ||
             n == "filter" || n == "with" || n == "do" || n == "autoescape" || n == "trans") {
    return Error(tag, "the '" + n + "' tag is not supported (kvlab renders a subset of Jinja: core/tokenizer/jinja.h)");
  } else if (n.compare(0, 3, "end") == 0 || n == "elif" || n == "else") {
    return Error(tag, "unexpected '" + n + "': no open tag to close");
  } else {
    return Error(tag, "unknown tag '" + n + "'");
  }
  KVLAB_RETURN_IF_ERROR(st);
  *out = std::move(s);
  return Status::OK();
}

Status Parser::ParseIf(Stmt* s) {
  s->kind = Stmt::Kind::kIf;
  const Pos opener = s->pos;
  for (;;) {
    ExprPtr cond;
    KVLAB_RETURN_IF_ERROR(ParseTuple(true, false, &cond));
    KVLAB_RETURN_IF_ERROR(ExpectBlockEnd());
    Body body;
    std::string end;
    KVLAB_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, "if", opener, &body, &end));
    s->branches.emplace_back(std::move(cond), std::move(body));
    if (end == "elif") continue;
    if (end == "else") {
      KVLAB_RETURN_IF_ERROR(ExpectBlockEnd());
      Body tail;
      KVLAB_RETURN_IF_ERROR(ParseBody({"endif"}, "if", opener, &tail, &end));
      s->branches.emplace_back(nullptr, std::move(tail));
    }
    return ExpectBlockEnd();
  }
}

// Names separated by commas (`for a, b in ...`, `set a, b = ...`).
Status Parser::ParseTargets(std::vector<std::string>* names) {
  do {
    std::string n;
    KVLAB_RETURN_IF_ERROR(ExpectName(&n));
    names->push_back(n);
  } while (SkipOp(","));
  return Status::OK();
}

Status Parser::ParseFor(Stmt* s) {
  s->kind = Stmt::Kind::kFor;
  KVLAB_RETURN_IF_ERROR(ParseTargets(&s->targets));
  if (!SkipName("in")) return Unexpected("'in'");
  KVLAB_RETURN_IF_ERROR(ParseTuple(false, false, &s->expr));
  if (SkipName("if")) KVLAB_RETURN_IF_ERROR(ParseExpression(&s->cond));
  if (IsName("recursive")) return Error(Peek(), "recursive for loops are not supported");
  KVLAB_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  ++loop_depth_;
  Status st = ParseBody({"else", "endfor"}, "for", s->pos, &s->body, &end);
  --loop_depth_;
  KVLAB_RETURN_IF_ERROR(st);
  if (end == "else") {
    KVLAB_RETURN_IF_ERROR(ExpectBlockEnd());
    KVLAB_RETURN_IF_ERROR(ParseBody({"endfor"}, "for", s->pos, &s->else_body, &end));
  }
  return ExpectBlockEnd();
}

Status Parser::ParseSet(Stmt* s) {
  s->kind = Stmt::Kind::kSet;
  KVLAB_RETURN_IF_ERROR(ParseTargets(&s->targets));
  if (s->targets.size() == 1 && SkipOp(".")) KVLAB_RETURN_IF_ERROR(ExpectName(&s->attr));
  if (SkipOp("=")) {
    KVLAB_RETURN_IF_ERROR(ParseTuple(true, false, &s->expr));
    return ExpectBlockEnd();
  }
  if (s->targets.size() != 1 || !s->attr.empty()) return Unexpected("'='");
  s->kind = Stmt::Kind::kSetBlock;
  KVLAB_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  KVLAB_RETURN_IF_ERROR(ParseBody({"endset"}, "set", s->pos, &s->body, &end));
  return ExpectBlockEnd();
}

Status Parser::ParseMacro(Stmt* s) {
  s->kind = Stmt::Kind::kMacro;
  s->targets.emplace_back();
  KVLAB_RETURN_IF_ERROR(ExpectName(&s->targets[0]));
  KVLAB_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (!s->params.empty()) KVLAB_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(")")) break;
    std::string name;
    KVLAB_RETURN_IF_ERROR(ExpectName(&name));
    ExprPtr dflt;
    if (SkipOp("=")) KVLAB_RETURN_IF_ERROR(ParseExpression(&dflt));
    s->params.emplace_back(name, std::move(dflt));
  }
  Next();
  KVLAB_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  const int loops = loop_depth_;
  loop_depth_ = 0;
  Status st = ParseBody({"endmacro"}, "macro", s->pos, &s->body, &end);
  loop_depth_ = loops;
  KVLAB_RETURN_IF_ERROR(st);
  return ExpectBlockEnd();
}

Status ParseTokens(const std::vector<Token>& tokens, const std::string& origin, Body* out) {
  return Parser(tokens, origin).Template(out);
}

}  // namespace jinja
}  // namespace kvlab
