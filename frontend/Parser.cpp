// ANTLR glue: runs the generated parser and converts its tree into the project's AST.
#include "frontend/Parser.h"
#include "base/Utf8.h"

#include "DnnLexer.h"
#include "DnnParser.h"
#include "antlr4-runtime.h"
#include "frontend/Stack.h"
#include "base/Limits.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace dnnc {
namespace {

using P = antlr::DnnParser;

// A string literal's text: the quotes dropped, and \" and \\ read as the quote and the
// backslash (the grammar's only escapes; a backslash before anything else stays as written).
std::string unquote(const std::string &raw) {
  std::string out;
  for (size_t i = 1; i + 1 < raw.size(); ++i) {
    if (raw[i] == '\\' && i + 2 < raw.size() && (raw[i + 1] == '"' || raw[i + 1] == '\\'))
      ++i;
    out += raw[i];
  }
  return out;
}

class CollectingErrorListener : public antlr4::BaseErrorListener {
public:
  CollectingErrorListener(int file, DiagnosticEngine &diags) : file_(file), diags_(diags) {}
  void syntaxError(antlr4::Recognizer *, antlr4::Token *bad, size_t line, size_t col, const std::string &msg,
                   std::exception_ptr) override {
    if (++count_ > kMaxErrors)
      return;
    SourceLoc at{file_, static_cast<int>(line), static_cast<int>(col) + 1};
    SourceLoc end = at;
    if (bad && bad->getType() != antlr4::Token::EOF)
      end.col += std::max<int>(1, static_cast<int>(bad->getText().size()));
    else
      end.col += 1;
    std::string text = msg;
    if (bad && bad->getType() == antlr::DnnLexer::ERROR_CHAR)
      text = bad->getText() == "\"" ? "this string is never closed: a string ends with '\"' on its own line"
                                     : "unexpected character '" + bad->getText() + "'";
    diags_.report({DiagKind::Parse, {at, end, at}, text, {}});
  }
  int count() const { return count_; }

private:
  static constexpr int kMaxErrors = 20;
  int file_;
  DiagnosticEngine &diags_;
  int count_ = 0;
};

class AstBuilder {
public:
  explicit AstBuilder(int file) : file_(file) {}

  SourceLoc loc(antlr4::Token *t) const {
    return {file_, static_cast<int>(t->getLine()), static_cast<int>(t->getCharPositionInLine()) + 1};
  }
  SourceLoc endLoc(antlr4::Token *t) const {
    SourceLoc l = loc(t);
    l.col += static_cast<int>(t->getText().size());
    return l;
  }
  SourceRange range(antlr4::ParserRuleContext *c, antlr4::Token *caret = nullptr) const {
    SourceRange r{loc(c->start), endLoc(c->stop ? c->stop : c->start), {}};
    r.caret = caret ? loc(caret) : r.begin;
    return r;
  }
  SourceRange range(antlr4::tree::TerminalNode *n) const {
    SourceLoc b = loc(n->getSymbol());
    return {b, endLoc(n->getSymbol()), b};
  }

  std::unique_ptr<ast::Module> module(P::ProgramContext *p) {
    auto m = std::make_unique<ast::Module>();
    m->file = file_;
    for (auto *d : p->topDecl())
      m->decls.push_back(decl(d));
    return m;
  }

  std::unique_ptr<ast::Decl> decl(P::TopDeclContext *c) {
    auto d = std::make_unique<ast::Decl>();
    d->range = range(c);
    auto named = [&](ast::Decl::Kind k, antlr4::tree::TerminalNode *id) {
      d->kind = k;
      d->name = id->getText();
      d->nameRange = range(id);
    };
    if (auto *x = dynamic_cast<P::ImportDeclContext *>(c)) {
      named(ast::Decl::Kind::Import, x->ID());
    } else if (auto *x = dynamic_cast<P::ConstDeclContext *>(c)) {
      named(ast::Decl::Kind::Const, x->ID());
      d->value = expr(x->expr());
    } else if (auto *x = dynamic_cast<P::DimDeclContext *>(c)) {
      named(ast::Decl::Kind::Dim, x->ID());
      if (x->lo) {
        d->value = expr(x->lo);
        d->hi = expr(x->hi);
      }
    } else if (auto *x = dynamic_cast<P::ParamDeclContext *>(c)) {
      named(ast::Decl::Kind::Param, x->ID(0));
      d->frozen = x->frozen != nullptr;
      d->type = type(x->type());
      if (x->fromKw) {
        if (x->fromKw->getText() != "from")
          fail(DiagKind::Parse, {loc(x->fromKw), endLoc(x->fromKw), loc(x->fromKw)}, fmt::format("expected 'from', '=' or ';' after the type of param '{}', not '{}'",
                                                              d->name, x->fromKw->getText()));
        d->from = unquote(x->STRING()->getText());
        d->fromRange = range(x->STRING());
      }
      if (x->expr())
        d->value = expr(x->expr());
    } else if (auto *x = dynamic_cast<P::FuncDeclContext *>(c)) {
      named(x->kw->getText() == "fn" ? ast::Decl::Kind::Fn : ast::Decl::Kind::Model, x->ID());
      for (auto *p : x->param())
        d->params.push_back(param(p));
      result(x->result(), *d);
      d->body = block(x->block());
    } else {
      throw InternalError("unknown declaration form");
    }
    return d;
  }

  // A plain result type, or named outputs: their types become the tuple type (one named
  // output: its own type) and their names go to outputNames.
  void result(P::ResultContext *c, ast::Decl &d) {
    if (auto *x = dynamic_cast<P::PlainResultContext *>(c)) {
      d.type = type(x->type());
      return;
    }
    auto *x = dynamic_cast<P::NamedResultContext *>(c);
    auto tuple = std::make_unique<ast::Type>();
    tuple->kind = ast::Type::Kind::Tuple;
    tuple->range = range(c);
    for (auto *o : x->output()) {
      d.outputNames.push_back(o->ID() ? o->ID()->getText() : "");
      d.outputNameRanges.push_back(o->ID() ? range(o->ID()) : range(o));
      tuple->elements.push_back(type(o->type()));
    }
    if (tuple->elements.size() == 1) {
      d.type = std::move(tuple->elements[0]);
      d.type->range = tuple->range;
    } else {
      d.type = std::move(tuple);
    }
  }

  ast::Param param(P::ParamContext *c) {
    ast::Param p;
    p.name = c->ID()->getText();
    p.type = type(c->type());
    if (c->expr())
      p.defaultValue = expr(c->expr());
    p.range = range(c);
    return p;
  }

  ast::TypePtr type(P::TypeContext *c) {
    auto t = std::make_unique<ast::Type>();
    t->range = range(c);
    if (auto *x = dynamic_cast<P::TensorTypeContext *>(c)) {
      t->dtype = x->DTYPE()->getText();
      t->hasDims = x->children.size() > 1;
      for (auto *d : x->dimItem()) {
        ast::DimItem item;
        item.range = range(d);
        if (d->expr())
          item.expr = expr(d->expr());
        else
          item.ellipsis = true;
        t->dims.push_back(std::move(item));
      }
    } else if (auto *x = dynamic_cast<P::TupleTypeContext *>(c)) {
      t->kind = ast::Type::Kind::Tuple;
      for (auto *e : x->type())
        t->elements.push_back(type(e));
    }
    return t;
  }

  ast::Block block(P::BlockContext *c) {
    ast::Block b;
    for (auto *s : c->stmt())
      b.push_back(stmt(s));
    return b;
  }

  ast::StmtPtr stmt(P::StmtContext *c) {
    checkStack(range(c));
    if (++statements_ > limit(Limit::Statements))
      fail(DiagKind::Limit, range(c),
           fmt::format("more than {} statements in one file (limit statements)", limit(Limit::Statements)));
    auto s = std::make_unique<ast::Stmt>();
    s->range = range(c);
    auto name = [&](antlr4::tree::TerminalNode *id) {
      s->names.push_back(id->getText());
      s->nameRanges.push_back(range(id));
    };
    if (auto *x = dynamic_cast<P::LetStmtContext *>(c)) {
      s->kind = ast::Stmt::Kind::Let;
      for (auto *id : x->pattern()->ID())
        name(id);
      if (x->type())
        s->annotation = type(x->type());
      s->value = expr(x->expr());
    } else if (auto *x = dynamic_cast<P::VarStmtContext *>(c)) {
      s->kind = ast::Stmt::Kind::Var;
      name(x->ID());
      if (x->type())
        s->annotation = type(x->type());
      s->value = expr(x->expr());
    } else if (auto *x = dynamic_cast<P::AssignStmtContext *>(c)) {
      s->kind = ast::Stmt::Kind::Assign;
      name(x->ID());
      s->value = expr(x->expr());
    } else if (auto *x = dynamic_cast<P::ReturnStmtContext *>(c)) {
      s->kind = ast::Stmt::Kind::Return;
      s->value = expr(x->expr());
    } else if (auto *x = dynamic_cast<P::IfStatementContext *>(c)) {
      return ifStmt(x->ifStmt());
    } else if (auto *x = dynamic_cast<P::ForStmtContext *>(c)) {
      s->kind = ast::Stmt::Kind::For;
      name(x->ID());
      s->value = expr(x->lo);
      s->hi = expr(x->hi);
      s->body = block(x->block());
    } else if (auto *x = dynamic_cast<P::WhileStmtContext *>(c)) {
      s->kind = ast::Stmt::Kind::While;
      s->value = expr(x->expr());
      s->body = block(x->block());
    } else if (auto *x = dynamic_cast<P::AssertStmtContext *>(c)) {
      s->kind = ast::Stmt::Kind::Assert;
      s->value = expr(x->expr());
    } else if (auto *x = dynamic_cast<P::ExprStmtContext *>(c)) {
      s->kind = ast::Stmt::Kind::Expr;
      s->value = expr(x->expr());
    }
    return s;
  }

  ast::StmtPtr ifStmt(P::IfStmtContext *c) {
    auto s = std::make_unique<ast::Stmt>();
    s->kind = ast::Stmt::Kind::If;
    s->range = range(c);
    s->value = expr(c->expr());
    s->body = block(c->block(0));
    if (c->block().size() > 1)
      s->orelse = block(c->block(1));
    else if (c->ifStmt())
      s->orelse.push_back(ifStmt(c->ifStmt()));
    return s;
  }

  ast::ExprPtr make(ast::Expr::Kind k, SourceRange r) {
    auto e = std::make_unique<ast::Expr>();
    e->kind = k;
    e->range = r;
    return e;
  }

  // The operator a binary token spells (the grammar's spellings, so another is a bug).
  static ast::BinaryOp binaryOperator(const std::string &spelling) {
    using O = ast::BinaryOp;
    static const std::map<std::string, O> ops = {
        {"+", O::Add}, {"-", O::Sub}, {"*", O::Mul},   {"/", O::Div},   {"%", O::Mod},  {"**", O::Pow}, {"@", O::Matmul}, {"==", O::Eq},
        {"!=", O::Ne}, {"<", O::Lt},  {"<=", O::Le},   {">", O::Gt},    {">=", O::Ge},  {"and", O::And}, {"or", O::Or}};
    auto it = ops.find(spelling);
    if (it == ops.end())
      throw InternalError("unknown binary operator '" + spelling + "'");
    return it->second;
  }

  // The operator token and the two operands of a binary expression, or false.
  static bool binaryParts(P::ExprContext *c, antlr4::Token *&op, std::vector<P::ExprContext *> &operands) {
    op = nullptr;
    if (auto *x = dynamic_cast<P::PowExprContext *>(c))
      operands = x->expr();
    else if (auto *x = dynamic_cast<P::MulExprContext *>(c))
      op = x->op, operands = x->expr();
    else if (auto *x = dynamic_cast<P::AddExprContext *>(c))
      op = x->op, operands = x->expr();
    else if (auto *x = dynamic_cast<P::CmpExprContext *>(c))
      op = x->op, operands = x->expr();
    else if (auto *x = dynamic_cast<P::AndExprContext *>(c))
      operands = x->expr();
    else if (auto *x = dynamic_cast<P::OrExprContext *>(c))
      operands = x->expr();
    else
      return false;
    if (operands.size() != 2)
      throw InternalError("unknown expression form");
    // The operator token sits between the operands (for '**', 'and', 'or' it has no label).
    if (!op)
      op = dynamic_cast<antlr4::tree::TerminalNode *>(c->children.at(1))->getSymbol();
    return true;
  }

  ast::ExprPtr expr(P::ExprContext *c) {
    checkStack(range(c));
    if (auto *x = dynamic_cast<P::PostfixExprContext *>(c))
      return postfix(x->postfix());
    if (auto *x = dynamic_cast<P::UnaryExprContext *>(c)) {
      auto e = make(ast::Expr::Kind::Unary, range(c, x->op));
      e->text = x->op->getText();
      e->unaryOp = e->text == "-" ? ast::UnaryOp::Minus : ast::UnaryOp::Plus; // the grammar allows only these two
      e->items.push_back(expr(x->expr()));
      return e;
    }
    if (auto *x = dynamic_cast<P::NotExprContext *>(c)) {
      auto e = make(ast::Expr::Kind::Unary, range(c));
      e->text = "not";
      e->unaryOp = ast::UnaryOp::Not;
      e->items.push_back(expr(x->expr()));
      return e;
    }
    // A left-deep chain of binary operators (a + b + c + ..., ten thousand terms long if
    // need be) is walked along its left spine without recursion.
    struct Link {
      P::ExprContext *node, *right;
      antlr4::Token *op;
    };
    std::vector<Link> spine;
    antlr4::Token *op = nullptr;
    std::vector<P::ExprContext *> operands;
    P::ExprContext *left = c;
    while (binaryParts(left, op, operands)) {
      spine.push_back({left, operands[1], op});
      left = operands[0];
    }
    if (spine.empty())
      throw InternalError("unknown expression form");
    ast::ExprPtr acc = expr(left);
    for (auto it = spine.rbegin(); it != spine.rend(); ++it) {
      auto e = make(ast::Expr::Kind::Binary, range(it->node, it->op));
      e->text = it->op->getText();
      e->binaryOp = binaryOperator(e->text);
      e->items.push_back(std::move(acc));
      e->items.push_back(expr(it->right));
      acc = std::move(e);
    }
    return acc;
  }

  ast::ExprPtr postfix(P::PostfixContext *c) {
    checkStack(range(c));
    if (auto *x = dynamic_cast<P::PrimaryPostfixContext *>(c))
      return primary(x->primary());
    if (auto *x = dynamic_cast<P::CallPostfixContext *>(c)) {
      auto e = make(ast::Expr::Kind::Call, range(c));
      e->callee = postfix(x->postfix());
      e->range.caret = e->callee->range.begin;
      for (auto *a : x->arg()) {
        ast::Arg arg;
        if (a->ID())
          arg.keyword = a->ID()->getText();
        arg.value = expr(a->expr());
        arg.range = range(a);
        e->args.push_back(std::move(arg));
      }
      return e;
    }
    if (auto *x = dynamic_cast<P::IndexPostfixContext *>(c)) {
      auto e = make(ast::Expr::Kind::Index, range(c));
      e->callee = postfix(x->postfix());
      for (auto *s : x->subscript()) {
        ast::Subscript sub;
        sub.range = range(s);
        if (dynamic_cast<P::EllipsisSubContext *>(s)) {
          sub.kind = ast::Subscript::Kind::Ellipsis;
        } else if (auto *sl = dynamic_cast<P::SliceSubContext *>(s)) {
          sub.kind = ast::Subscript::Kind::Slice;
          if (sl->from)
            sub.start = expr(sl->from);
          if (sl->to)
            sub.stop = expr(sl->to);
          if (sl->by)
            sub.step = expr(sl->by);
        } else {
          sub.kind = ast::Subscript::Kind::Point;
          sub.start = expr(dynamic_cast<P::PointSubContext *>(s)->expr());
        }
        e->subs.push_back(std::move(sub));
      }
      return e;
    }
    auto *x = dynamic_cast<P::MemberPostfixContext *>(c);
    auto e = make(ast::Expr::Kind::Member, range(c));
    e->items.push_back(postfix(x->postfix()));
    e->text = x->ID()->getText();
    return e;
  }

  ast::ExprPtr primary(P::PrimaryContext *c) {
    SourceRange r = range(c);
    if (auto *x = dynamic_cast<P::IntLitContext *>(c)) {
      auto e = make(ast::Expr::Kind::Int, r);
      try {
        e->intValue = std::stoll(x->INT()->getText());
      } catch (const std::out_of_range &) {
        fail(DiagKind::Parse, r, "integer literal '" + x->INT()->getText() + "' does not fit in 64 bits");
      }
      return e;
    }
    if (auto *x = dynamic_cast<P::FloatLitContext *>(c)) {
      auto e = make(ast::Expr::Kind::Float, r);
      e->floatValue = std::strtod(x->FLOAT()->getText().c_str(), nullptr);
      return e;
    }
    if (dynamic_cast<P::BoolLitContext *>(c)) {
      auto e = make(ast::Expr::Kind::Bool, r);
      e->intValue = c->getText() == "true";
      return e;
    }
    if (auto *x = dynamic_cast<P::StringLitContext *>(c)) {
      auto e = make(ast::Expr::Kind::String, r);
      e->text = unquote(x->STRING()->getText());
      return e;
    }
    if (auto *x = dynamic_cast<P::NameRefContext *>(c)) {
      auto e = make(ast::Expr::Kind::Name, r);
      e->text = x->ID()->getText();
      return e;
    }
    if (auto *x = dynamic_cast<P::DtypeRefContext *>(c)) {
      auto e = make(ast::Expr::Kind::DType, r);
      e->text = x->DTYPE()->getText();
      return e;
    }
    if (auto *x = dynamic_cast<P::ParenExprContext *>(c)) {
      auto inner = expr(x->expr());
      return inner;
    }
    if (auto *x = dynamic_cast<P::TupleExprContext *>(c)) {
      auto e = make(ast::Expr::Kind::Tuple, r);
      for (auto *i : x->expr())
        e->items.push_back(expr(i));
      return e;
    }
    auto *x = dynamic_cast<P::ListExprContext *>(c);
    auto e = make(ast::Expr::Kind::List, r);
    for (auto *i : x->expr())
      e->items.push_back(expr(i));
    return e;
  }

private:
  int file_;
  int64_t statements_ = 0;
};

} // namespace

namespace {
// The first byte that is not well-formed UTF-8 (or a NUL), as a located diagnostic:
// ANTLR's input stream would throw on it instead (an internal error).
std::optional<Diagnostic> invalidByte(const std::string &text, int file) {
  int line = 1, col = 1;
  for (size_t i = 0; i < text.size();) {
    size_t len = utf8SequenceLength(text, i);
    if (len == 0) {
      unsigned char c = static_cast<unsigned char>(text[i]);
      SourceLoc at{file, line, col};
      return Diagnostic{DiagKind::Parse, {at, {file, line, col + 1}, at},
                        c == 0 ? std::string("invalid NUL byte: source files must be UTF-8 text")
                               : fmt::format("invalid UTF-8 byte 0x{:02x}: source files must be UTF-8 text", c),
                        {}};
    }
    if (text[i] == '\n')
      ++line, col = 1;
    else
      ++col;
    i += len;
  }
  return std::nullopt;
}

// The generated parser recurses at least once per level of nesting, and so does every
// walk after it. A scan of the tokens rejects input nested deeper than the nesting-depth
// limit before ANTLR sees it, at the first token too deep. A level is an open bracket or
// brace, a prefix operator ('-', '+', 'not'), a '**', a '.', a call or index applied to
// a call or index (`f(x)(y)`, `x[0][1]`) and an `else if`; chains of these count until
// a token ends the chain (',', ';', an infix operator, ...), and a chain's count stays
// with the brackets opened inside it. Left-deep chains of one binary operator
// (`a + b + c`) do not nest: they are built and checked without recursion.
std::optional<Diagnostic> tooDeep(antlr4::CommonTokenStream &tokens, int file) {
  const int64_t maxDepth = limit(Limit::NestingDepth);
  const std::vector<antlr4::Token *> &all = tokens.getTokens();
  // Per level: `chain` counts prefix operators, '**', '.' and postfix chains (operators
  // end it), `elseIfs` the else-ifs of the current if statement (its end ends them).
  std::vector<std::pair<int64_t, int64_t>> saved; // each open bracket's enclosing counts
  int64_t chain = 0, elseIfs = 0, savedSum = 0;
  bool operandEnd = false; // the previous token ends an operand
  auto isEnd = [](antlr4::Token *t) {
    size_t ty = t->getType();
    if (ty == antlr::DnnLexer::ID || ty == antlr::DnnLexer::INT || ty == antlr::DnnLexer::FLOAT ||
        ty == antlr::DnnLexer::STRING || ty == antlr::DnnLexer::DTYPE)
      return true;
    std::string s = t->getText();
    return s == ")" || s == "]" || s == "true" || s == "false";
  };
  static const std::set<std::string> resets = {";", ",", ":", "=", "..", "->", "*", "/", "%", "@", "==", "!=", "<",
                                               "<=", ">", ">=", "and", "or", "let", "var", "return", "assert",
                                               "for", "while", "in", "import", "const", "dim", "param", "fn", "model"};
  for (size_t i = 0; i < all.size(); ++i) {
    antlr4::Token *t = all[i];
    if (t->getType() == antlr4::Token::EOF)
      break;
    std::string s = t->getText();
    bool deeper = false;
    if (s == "(" || s == "[" || s == "{") {
      std::string prev = i > 0 ? all[i - 1]->getText() : "";
      if (s != "{" && (prev == ")" || prev == "]"))
        ++chain; // a postfix chain: f(x)(y), x[0][1]
      saved.push_back({chain, elseIfs});
      savedSum += chain + elseIfs;
      chain = elseIfs = 0;
      deeper = true;
    } else if (s == ")" || s == "]" || s == "}") {
      if (!saved.empty()) {
        std::tie(chain, elseIfs) = saved.back();
        savedSum -= chain + elseIfs;
        saved.pop_back();
      }
      if (s == "}" && !(i + 1 < all.size() && all[i + 1]->getText() == "else"))
        chain = elseIfs = 0; // a statement ends here
    } else if (s == "**" || s == "not" || s == "." || ((s == "-" || s == "+") && !operandEnd)) {
      ++chain;
      deeper = true;
    } else if (s == "-" || s == "+") {
      chain = 0; // infix
    } else if (s == "else" && i + 1 < all.size() && all[i + 1]->getText() == "if") {
      ++elseIfs;
      deeper = true;
    } else if (resets.count(s)) {
      chain = 0;
    }
    operandEnd = isEnd(t);
    int64_t depth = static_cast<int64_t>(saved.size()) + savedSum + chain + elseIfs;
    if (deeper && depth > maxDepth) {
      SourceLoc at{file, static_cast<int>(t->getLine()), static_cast<int>(t->getCharPositionInLine()) + 1};
      SourceLoc end = at;
      end.col += std::max<int>(1, static_cast<int>(s.size()));
      return Diagnostic{DiagKind::Limit, {at, end, at},
                        fmt::format("nesting deeper than {} levels (limit nesting-depth: brackets, blocks, "
                                    "prefix operators, '**', '.' and else-if chains each nest one level)",
                                    maxDepth),
                        {}};
    }
  }
  return std::nullopt;
}

// Runs `entry` of the generated parser over the file and converts its tree with `build`.
template <class Entry, class Build>
auto parseWith(const SourceManager &sm, int file, DiagnosticEngine &diags, Entry entry, Build build)
    -> decltype(build(std::declval<AstBuilder &>(), entry(std::declval<antlr::DnnParser &>()))) {
  if (auto bad = invalidByte(sm.text(file), file)) {
    diags.report(*bad);
    return nullptr;
  }
  antlr4::ANTLRInputStream input(sm.text(file));
  antlr::DnnLexer lexer(&input);
  antlr4::CommonTokenStream tokens(&lexer);
  antlr::DnnParser parser(&tokens);
  CollectingErrorListener listener(file, diags);
  lexer.removeErrorListeners();
  parser.removeErrorListeners();
  parser.addErrorListener(&listener);
  tokens.fill();
  if (auto deep = tooDeep(tokens, file)) {
    diags.report(*deep);
    return nullptr;
  }
  auto *tree = entry(parser);
  if (listener.count() > 0)
    return nullptr; // the tree is partial; building an AST from it would invent structure
  try {
    AstBuilder builder(file);
    return build(builder, tree);
  } catch (const CompileError &e) {
    diags.report(e.diag);
    return nullptr;
  }
}
} // namespace

std::unique_ptr<ast::Module> parseModule(const SourceManager &sm, int file, DiagnosticEngine &diags) {
  return parseWith(
      sm, file, diags, [](antlr::DnnParser &p) { return p.program(); },
      [](AstBuilder &b, P::ProgramContext *t) { return b.module(t); });
}

ast::ExprPtr parseExpression(const SourceManager &sm, int file, DiagnosticEngine &diags) {
  return parseWith(
      sm, file, diags, [](antlr::DnnParser &p) { return p.replInput(); },
      [](AstBuilder &b, P::ReplInputContext *t) { return b.expr(t->expr()); });
}

} // namespace dnnc
