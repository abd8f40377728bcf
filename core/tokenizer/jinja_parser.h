// The parser of core/tokenizer/jinja.h (jinja_parser.cpp: statements,
// jinja_parser_expr.cpp: expressions), declared here for those two files only.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/tokenizer/jinja_internal.h"

namespace kvlab {
namespace jinja {

constexpr int kMaxParseDepth = 100;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& origin) : toks_(tokens), origin_(origin) {}

  Status Template(Body* out) {
    std::string end;
    return ParseBody({}, "", Pos(), out, &end);
  }

 private:
  // ---- token helpers ----
  const Token& Peek(size_t ahead = 0) const {
    const size_t i = next_ + ahead;
    return toks_[i < toks_.size() ? i : toks_.size() - 1];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (next_ < toks_.size() - 1) ++next_;
    return t;
  }
  bool IsOp(const char* op, size_t ahead = 0) const { return Peek(ahead).kind == Tok::kOp && Peek(ahead).text == op; }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).kind == Tok::kName && Peek(ahead).text == name;
  }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Tok::kText: return "template text";
      case Tok::kVarBegin: return "'{{'";
      case Tok::kVarEnd: return "end of print statement '}}'";
      case Tok::kBlockBegin: return "'{%'";
      case Tok::kBlockEnd: return "end of statement block '%}'";
      case Tok::kName: return "'" + t.text + "'";
      case Tok::kString: return "a string";
      case Tok::kInt: case Tok::kFloat: return "a number";
      case Tok::kOp: return "'" + t.text + "'";
      case Tok::kEnd: return "end of template";
    }
    return "?";
  }
  Status Error(const Token& t, const std::string& what) const { return ErrorAt(origin_, t.pos, what); }
  Status Unexpected(const std::string& expected) const {
    return Error(Peek(), "expected " + expected + ", got " + Describe(Peek()));
  }
  Status ExpectOp(const char* op) {
    if (!SkipOp(op)) return Unexpected(std::string("'") + op + "'");
    return Status::OK();
  }
  Status ExpectBlockEnd() {
    if (Peek().kind != Tok::kBlockEnd) return Unexpected("end of statement block '%}'");
    Next();
    return Status::OK();
  }
  Status ExpectName(std::string* name) {
    if (Peek().kind != Tok::kName) return Unexpected("a name");
    *name = Next().text;
    return Status::OK();
  }

  // Counts nesting; an error past kMaxParseDepth (templates come from downloaded files).
  struct Depth {
    Parser* p;
    explicit Depth(Parser* parser) : p(parser) { ++p->depth_; }
    ~Depth() { --p->depth_; }
  };
  Status CheckDepth() const {
    if (depth_ > kMaxParseDepth)
      return Error(Peek(), "the template nests more than " + std::to_string(kMaxParseDepth) + " levels deep");
    return Status::OK();
  }

  static ExprPtr Make(Expr::Kind kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  static ExprPtr Literal(Json j, Pos pos) {
    ExprPtr e = Make(Expr::Kind::kLiteral, pos);
    e->literal = std::make_shared<const Json>(std::move(j));
    return e;
  }

  // ---- statements (jinja_parser.cpp) ----
  Status ParseBody(const std::vector<std::string>& ends, const std::string& opener, Pos opener_pos, Body* out,
                   std::string* end);
  Status ParseStatement(const Token& tag, std::unique_ptr<Stmt>* out);
  Status ParseIf(Stmt* s);
  Status ParseTargets(std::vector<std::string>* names);
  Status ParseFor(Stmt* s);
  Status ParseSet(Stmt* s);
  Status ParseMacro(Stmt* s);

  // ---- expressions (jinja_parser_expr.cpp) ----
  template <typename Fn>
  Status Level(std::initializer_list<const char*> ops, Fn next, ExprPtr* out) {
    KVLAB_RETURN_IF_ERROR((this->*next)(out));
    for (;;) {
      const char* hit = nullptr;
      for (const char* op : ops)
        if (IsOp(op)) hit = op;
      if (hit == nullptr) return Status::OK();
      const Pos pos = Next().pos;
      ExprPtr r;
      KVLAB_RETURN_IF_ERROR((this->*next)(&r));
      KVLAB_RETURN_IF_ERROR(Binary(Expr::Kind::kBinary, hit, pos, std::move(*out), std::move(r), out));
    }
  }
  Status ParseMath1(ExprPtr* out) { return Level({"+", "-"}, &Parser::ParseConcat, out); }
  Status ParseConcat(ExprPtr* out) { return Level({"~"}, &Parser::ParseMath2, out); }
  Status ParseMath2(ExprPtr* out) { return Level({"*", "/", "//", "%"}, &Parser::ParsePow, out); }
  Status ParsePow(ExprPtr* out) { return Level({"**"}, &Parser::ParseUnaryFiltered, out); }
  Status ParseUnaryFiltered(ExprPtr* out) { return ParseUnary(true, out); }

  bool IsTupleEnd() const;
  Status ParseTuple(bool with_condexpr, bool explicit_parens, ExprPtr* out);
  Status ParseExpression(ExprPtr* out);
  Status Binary(Expr::Kind kind, const std::string& op, Pos pos, ExprPtr left, ExprPtr right, ExprPtr* out);
  Status ParseOr(ExprPtr* out);
  Status ParseAnd(ExprPtr* out);
  Status ParseNot(ExprPtr* out);
  Status ParseCompare(ExprPtr* out);
  Status ParseUnary(bool with_filter, ExprPtr* out);
  Status ParsePrimary(ExprPtr* out);
  Status ParseSequence(const char* close, bool dict, Pos pos, ExprPtr* out);
  Status ParsePostfix(ExprPtr* out);
  Status ParseSubscript(ExprPtr* out);
  Status ParseCallArgs(Expr* e);
  Status ParseFilterExpr(ExprPtr* out);

  const std::vector<Token>& toks_;
  const std::string& origin_;
  size_t next_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace jinja
}  // namespace kvlab
