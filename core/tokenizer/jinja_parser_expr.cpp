// Expressions of core/tokenizer/jinja.h's parser (jinja_parser.h), with jinja2's
// precedence: `a if c else b`, or, and, not, comparisons, + -, ~, * / // %, **,
// unary - +, then filters, tests and calls, then attribute, item and slice access.
#include <string>
#include <vector>

#include "core/tokenizer/jinja_parser.h"

namespace kvlab {
namespace jinja {

// ---- expressions ----
bool Parser::IsTupleEnd() const {
  const Tok k = Peek().kind;
  return k == Tok::kVarEnd || k == Tok::kBlockEnd || IsOp(")") || IsName("recursive");
}

Status Parser::ParseTuple(bool with_condexpr, bool explicit_parens, ExprPtr* out) {
  const Pos pos = Peek().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  for (;;) {
    if (!items.empty()) KVLAB_RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd()) break;
    ExprPtr e;
    KVLAB_RETURN_IF_ERROR(with_condexpr ? ParseExpression(&e) : ParseOr(&e));
    items.push_back(std::move(e));
    if (!IsOp(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) {
      *out = std::move(items[0]);
      return Status::OK();
    }
    if (!explicit_parens) return Unexpected("an expression");
  }
  *out = Make(Expr::Kind::kTuple, pos);
  (*out)->args = std::move(items);
  return Status::OK();
}

Status Parser::ParseExpression(ExprPtr* out) {
  Depth d(this);
  KVLAB_RETURN_IF_ERROR(CheckDepth());
  KVLAB_RETURN_IF_ERROR(ParseOr(out));
  while (IsName("if")) {
    const Pos pos = Next().pos;
    ExprPtr cond, otherwise;
    KVLAB_RETURN_IF_ERROR(ParseOr(&cond));
    if (SkipName("else")) KVLAB_RETURN_IF_ERROR(ParseExpression(&otherwise));
    ExprPtr e = Make(Expr::Kind::kCond, pos);
    e->args.push_back(std::move(*out));
    e->args.push_back(std::move(cond));
    e->args.push_back(std::move(otherwise));
    *out = std::move(e);
  }
  return Status::OK();
}

Status Parser::Binary(Expr::Kind kind, const std::string& op, Pos pos, ExprPtr left, ExprPtr right, ExprPtr* out) {
  ExprPtr e = Make(kind, pos);
  e->name = op;
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  *out = std::move(e);
  return Status::OK();
}

Status Parser::ParseOr(ExprPtr* out) {
  KVLAB_RETURN_IF_ERROR(ParseAnd(out));
  while (IsName("or")) {
    const Pos pos = Next().pos;
    ExprPtr r;
    KVLAB_RETURN_IF_ERROR(ParseAnd(&r));
    KVLAB_RETURN_IF_ERROR(Binary(Expr::Kind::kOr, "or", pos, std::move(*out), std::move(r), out));
  }
  return Status::OK();
}

Status Parser::ParseAnd(ExprPtr* out) {
  KVLAB_RETURN_IF_ERROR(ParseNot(out));
  while (IsName("and")) {
    const Pos pos = Next().pos;
    ExprPtr r;
    KVLAB_RETURN_IF_ERROR(ParseNot(&r));
    KVLAB_RETURN_IF_ERROR(Binary(Expr::Kind::kAnd, "and", pos, std::move(*out), std::move(r), out));
  }
  return Status::OK();
}

Status Parser::ParseNot(ExprPtr* out) {
  if (!IsName("not")) return ParseCompare(out);
  const Pos pos = Next().pos;
  Depth d(this);
  KVLAB_RETURN_IF_ERROR(CheckDepth());
  ExprPtr e = Make(Expr::Kind::kNot, pos);
  e->args.emplace_back();
  KVLAB_RETURN_IF_ERROR(ParseNot(&e->args[0]));
  *out = std::move(e);
  return Status::OK();
}

Status Parser::ParseCompare(ExprPtr* out) {
  const Pos pos = Peek().pos;
  ExprPtr first;
  KVLAB_RETURN_IF_ERROR(ParseMath1(&first));
  ExprPtr e = Make(Expr::Kind::kCompare, pos);
  e->args.push_back(std::move(first));
  for (;;) {
    std::string op;
    const Token& t = Peek();
    if (t.kind == Tok::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" ||
                               t.text == "<=" || t.text == ">=")) {
      op = t.text;
      Next();
    } else if (IsName("in")) {
      op = "in";
      Next();
    } else if (IsName("not") && IsName("in", 1)) {
      op = "not in";
      Next();
      Next();
    } else {
      break;
    }
    ExprPtr r;
    KVLAB_RETURN_IF_ERROR(ParseMath1(&r));
    e->ops.push_back(op);
    e->args.push_back(std::move(r));
  }
  *out = e->ops.empty() ? std::move(e->args[0]) : std::move(e);
  return Status::OK();
}

// One precedence level of left-associative operators `ops`, over `next`.
Status Parser::ParseUnary(bool with_filter, ExprPtr* out) {
  Depth d(this);
  KVLAB_RETURN_IF_ERROR(CheckDepth());
  if (IsOp("-") || IsOp("+")) {
    const Token& t = Next();
    ExprPtr e = Make(t.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, t.pos);
    e->args.emplace_back();
    KVLAB_RETURN_IF_ERROR(ParseUnary(false, &e->args[0]));
    *out = std::move(e);
  } else {
    KVLAB_RETURN_IF_ERROR(ParsePrimary(out));
  }
  KVLAB_RETURN_IF_ERROR(ParsePostfix(out));
  if (with_filter) KVLAB_RETURN_IF_ERROR(ParseFilterExpr(out));
  return Status::OK();
}

Status Parser::ParsePrimary(ExprPtr* out) {
  const Token& t = Peek();
  if (t.kind == Tok::kName) {
    Next();
    if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
      *out = Literal(Json(t.text == "true" || t.text == "True"), t.pos);
    } else if (t.text == "none" || t.text == "None") {
      *out = Literal(Json(nullptr), t.pos);
    } else {
      *out = Make(Expr::Kind::kName, t.pos);
      (*out)->name = t.text;
    }
  } else if (t.kind == Tok::kString) {
    std::string s;
    while (Peek().kind == Tok::kString) s += Next().text;  // adjacent literals concatenate
    *out = Literal(Json(s), t.pos);
  } else if (t.kind == Tok::kInt) {
    *out = Literal(Json(Next().int_value), t.pos);
  } else if (t.kind == Tok::kFloat) {
    *out = Literal(Json(Next().float_value), t.pos);
  } else if (IsOp("(")) {
    Next();
    KVLAB_RETURN_IF_ERROR(ParseTuple(true, true, out));
    return ExpectOp(")");
  } else if (IsOp("[")) {
    Next();
    return ParseSequence("]", false, t.pos, out);
  } else if (IsOp("{")) {
    Next();
    return ParseSequence("}", true, t.pos, out);
  } else {
    return Unexpected("an expression");
  }
  return Status::OK();
}

// [a, b, ...] or {k: v, ...}; a trailing comma is allowed.
Status Parser::ParseSequence(const char* close, bool dict, Pos pos, ExprPtr* out) {
  ExprPtr e = Make(dict ? Expr::Kind::kDict : Expr::Kind::kList, pos);
  while (!IsOp(close)) {
    if (!e->args.empty()) KVLAB_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(close)) break;
    ExprPtr item;
    KVLAB_RETURN_IF_ERROR(ParseExpression(&item));
    e->args.push_back(std::move(item));
    if (dict) {
      KVLAB_RETURN_IF_ERROR(ExpectOp(":"));
      KVLAB_RETURN_IF_ERROR(ParseExpression(&item));
      e->args.push_back(std::move(item));
    }
  }
  Next();
  *out = std::move(e);
  return Status::OK();
}

Status Parser::ParsePostfix(ExprPtr* out) {
  for (;;) {
    if (IsOp(".") || IsOp("[")) {
      KVLAB_RETURN_IF_ERROR(ParseSubscript(out));
    } else if (IsOp("(")) {
      ExprPtr e = Make(Expr::Kind::kCall, Peek().pos);
      e->args.push_back(std::move(*out));
      KVLAB_RETURN_IF_ERROR(ParseCallArgs(e.get()));
      *out = std::move(e);
    } else {
      return Status::OK();
    }
  }
}

Status Parser::ParseSubscript(ExprPtr* out) {
  const Token& t = Next();
  if (t.text == ".") {
    const Token& a = Next();
    if (a.kind == Tok::kName) {
      ExprPtr e = Make(Expr::Kind::kAttr, a.pos);
      e->name = a.text;
      e->args.push_back(std::move(*out));
      *out = std::move(e);
      return Status::OK();
    }
    if (a.kind != Tok::kInt) return Error(a, "expected a name or a number after '.', got " + Describe(a));
    ExprPtr e = Make(Expr::Kind::kItem, a.pos);
    e->args.push_back(std::move(*out));
    e->args.push_back(Literal(Json(a.int_value), a.pos));
    *out = std::move(e);
    return Status::OK();
  }
  // `[` key `]` or `[` start? `:` stop? (`:` step?)? `]`
  ExprPtr parts[3];
  bool slice = false;
  for (int i = 0; i < 3; ++i) {
    if (!IsOp(":") && !IsOp("]")) KVLAB_RETURN_IF_ERROR(ParseExpression(&parts[i]));
    if (i == 2 || !SkipOp(":")) break;
    slice = true;
  }
  if (IsOp(",")) return Error(Peek(), "subscripts with several keys (a[x, y]) are not supported");
  KVLAB_RETURN_IF_ERROR(ExpectOp("]"));
  if (!slice && !parts[0]) return Error(t, "empty subscript '[]'");
  ExprPtr e = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, t.pos);
  e->args.push_back(std::move(*out));
  for (int i = 0; i < (slice ? 3 : 1); ++i) e->args.push_back(std::move(parts[i]));
  *out = std::move(e);
  return Status::OK();
}

// `(` positional..., name=value... `)`: appended to e->args and e->kwargs.
Status Parser::ParseCallArgs(Expr* e) {
  KVLAB_RETURN_IF_ERROR(ExpectOp("("));
  bool first = true;
  while (!IsOp(")")) {
    if (!first) {
      KVLAB_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    first = false;
    if (IsOp("*") || IsOp("**")) return Error(Peek(), "*args and **kwargs in calls are not supported");
    if (Peek().kind == Tok::kName && IsOp("=", 1)) {
      const std::string key = Next().text;
      Next();
      ExprPtr v;
      KVLAB_RETURN_IF_ERROR(ParseExpression(&v));
      e->kwargs.emplace_back(key, std::move(v));
    } else {
      if (!e->kwargs.empty()) return Error(Peek(), "a positional argument after a keyword argument");
      ExprPtr v;
      KVLAB_RETURN_IF_ERROR(ParseExpression(&v));
      e->args.push_back(std::move(v));
    }
  }
  Next();
  return Status::OK();
}

Status Parser::ParseFilterExpr(ExprPtr* out) {
  for (;;) {
    if (IsOp("|")) {
      Next();
      const Token& name = Peek();
      std::string n;
      KVLAB_RETURN_IF_ERROR(ExpectName(&n));
      if (!IsFilter(n)) return Error(name, "unknown filter '" + n + "'");
      ExprPtr e = Make(Expr::Kind::kFilter, name.pos);
      e->name = n;
      e->args.push_back(std::move(*out));
      if (IsOp("(")) KVLAB_RETURN_IF_ERROR(ParseCallArgs(e.get()));
      *out = std::move(e);
    } else if (IsName("is")) {
      Next();
      const bool negated = SkipName("not");
      const Token& name = Peek();
      std::string n;
      KVLAB_RETURN_IF_ERROR(ExpectName(&n));
      if (!IsTest(n)) return Error(name, "unknown test '" + n + "'");
      ExprPtr e = Make(Expr::Kind::kTest, name.pos);
      e->name = n;
      e->negated = negated;
      e->args.push_back(std::move(*out));
      const Token& t = Peek();
      if (IsOp("(")) {
        KVLAB_RETURN_IF_ERROR(ParseCallArgs(e.get()));
      } else if ((t.kind == Tok::kName || t.kind == Tok::kString || t.kind == Tok::kInt || t.kind == Tok::kFloat ||
                  IsOp("[") || IsOp("{")) &&
                 !IsName("else") && !IsName("or") && !IsName("and")) {
        if (IsName("is")) return Error(t, "tests cannot be chained with 'is'");
        ExprPtr arg;
        KVLAB_RETURN_IF_ERROR(ParsePrimary(&arg));
        KVLAB_RETURN_IF_ERROR(ParsePostfix(&arg));
        e->args.push_back(std::move(arg));
      }
      *out = std::move(e);
    } else if (IsOp("(")) {
      ExprPtr e = Make(Expr::Kind::kCall, Peek().pos);
      e->args.push_back(std::move(*out));
      KVLAB_RETURN_IF_ERROR(ParseCallArgs(e.get()));
      *out = std::move(e);
    } else {
      return Status::OK();
    }
  }
}

}  // namespace jinja
}  // namespace kvlab
