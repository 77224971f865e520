#include "chat/jinja_expr_parser.h"

#include <cstdlib>

#include "chat/jinja_builtins.h"
#include "core/error.h"
#include "core/stack_room.h"

namespace nvllm::jinja {

void ExprParser::error(const std::string& what, int line) const {
  fail("chat template ", name_, " line ", line ? line : cur().line, ": ", what);
}

ExprParser::Nest::Nest(ExprParser& p) : p_(p) {
  if (++p_.nesting_ > kMaxTreeDepth || stack_nearly_full()) {
    --p_.nesting_;
    p_.error("expressions or blocks nested too deeply: more than " + std::to_string(kMaxTreeDepth) +
             " levels of the parser (a parenthesis or bracket takes 4)");
  }
}

std::string ExprParser::describe(const Token& t) const {
  switch (t.type) {
    case Tok::kEof: return "end of template";
    case Tok::kBlockEnd: return "end of statement block";
    case Tok::kVarEnd: return "end of print statement";
    case Tok::kString: return "string literal";
    default: return "'" + t.text + "'";
  }
}

void ExprParser::expect_op(const char* op) {
  if (!skip_op(op)) error(std::string("expected '") + op + "', got " + describe(cur()));
}

std::string ExprParser::expect_name() {
  if (cur().type != Tok::kName) error("expected a name, got " + describe(cur()));
  std::string n = cur().text;
  advance();
  return n;
}

NodePtr ExprParser::parse_tuple(bool with_condexpr, bool explicit_parens, const char* extra_end) {
  int line = cur().line;
  std::vector<NodePtr> args;
  bool is_tuple = false;
  for (;;) {
    if (!args.empty()) expect_op(",");
    Tok ty = cur().type;
    if (ty == Tok::kVarEnd || ty == Tok::kBlockEnd || is_op(")") || (extra_end && is_name(extra_end))) break;
    args.push_back(parse_expression(with_condexpr));
    if (is_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) error("expected an expression, got " + describe(cur()));
  }
  auto n = make_node(NodeKind::kTuple, line);
  n->items = std::move(args);
  return n;
}

NodePtr ExprParser::parse_condexpr() {
  const Nest nest(*this);
  NodePtr expr = parse_or();
  while (is_name("if")) {
    int line = cur().line;
    advance();
    auto n = make_node(NodeKind::kCondExpr, line);
    n->a = parse_or();
    n->b = std::move(expr);
    if (skip_name("else")) n->c = parse_condexpr();
    expr = std::move(n);
  }
  return expr;
}

NodePtr ExprParser::binary(NodePtr left, const std::string& op, NodePtr right, int line) {
  NodeKind kind = op == "and" ? NodeKind::kAnd : op == "or" ? NodeKind::kOr : NodeKind::kBinary;
  auto n = make_node(kind, line);
  n->name = op;
  n->a = std::move(left);
  n->b = std::move(right);
  return n;
}

NodePtr ExprParser::parse_or() {
  const Nest nest(*this);
  NodePtr left = parse_and();
  while (is_name("or")) {
    int line = cur().line;
    advance();
    left = binary(std::move(left), "or", parse_and(), line);
  }
  return left;
}

NodePtr ExprParser::parse_and() {
  NodePtr left = parse_not();
  while (is_name("and")) {
    int line = cur().line;
    advance();
    left = binary(std::move(left), "and", parse_not(), line);
  }
  return left;
}

NodePtr ExprParser::parse_not() {
  const Nest nest(*this);
  if (is_name("not")) {
    auto n = make_node(NodeKind::kNot, cur().line);
    advance();
    n->a = parse_not();
    return n;
  }
  return parse_compare();
}

NodePtr ExprParser::parse_compare() {
  int line = cur().line;
  NodePtr expr = parse_math1();
  NodePtr cmp;
  for (;;) {
    std::string op;
    if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                   cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      op = cur().text;
      advance();
    } else if (is_name("in")) {
      op = "in";
      advance();
    } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
      op = "notin";
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) {
      cmp = make_node(NodeKind::kCompare, line);
      cmp->items.push_back(std::move(expr));
    }
    cmp->ops.push_back(op);
    cmp->items.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(expr);
}

NodePtr ExprParser::parse_math1() {
  NodePtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = cur().text;
    int line = cur().line;
    advance();
    left = binary(std::move(left), op, parse_concat(), line);
  }
  return left;
}

NodePtr ExprParser::parse_concat() {
  NodePtr left = parse_math2();
  while (is_op("~")) {
    int line = cur().line;
    advance();
    left = binary(std::move(left), "~", parse_math2(), line);
  }
  return left;
}

NodePtr ExprParser::parse_math2() {
  NodePtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = cur().text;
    int line = cur().line;
    advance();
    left = binary(std::move(left), op, parse_pow(), line);
  }
  return left;
}

NodePtr ExprParser::parse_pow() {
  NodePtr left = parse_unary(true);
  while (is_op("**")) {
    int line = cur().line;
    advance();
    left = binary(std::move(left), "**", parse_unary(true), line);
  }
  return left;
}

NodePtr ExprParser::parse_unary(bool with_filter) {
  const Nest nest(*this);
  NodePtr node;
  if (is_op("-") || is_op("+")) {
    node = make_node(is_op("-") ? NodeKind::kNeg : NodeKind::kPos, cur().line);
    advance();
    node->a = parse_unary(false);
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

NodePtr ExprParser::parse_primary() {
  const Token& tok = cur();
  int line = tok.line;
  auto konst = [&](Value v) {
    auto n = make_node(NodeKind::kConst, line);
    n->value = std::move(v);
    advance();
    return n;
  };
  switch (tok.type) {
    case Tok::kName: {
      const std::string& s = tok.text;
      if (s == "true" || s == "True") return konst(Value(true));
      if (s == "false" || s == "False") return konst(Value(false));
      if (s == "none" || s == "None") return konst(Value::none());
      auto n = make_node(NodeKind::kName, line);
      n->name = s;
      advance();
      return n;
    }
    case Tok::kString: {
      std::string s;
      while (cur().type == Tok::kString) {  // adjacent literals concatenate, as in Python
        s += cur().text;
        advance();
      }
      auto n = make_node(NodeKind::kConst, line);
      n->value = Value(std::move(s));
      return n;
    }
    case Tok::kInt: {
      errno = 0;
      long long v = std::strtoll(tok.text.c_str(), nullptr, 10);
      if (errno == ERANGE) error("integer literal " + tok.text + " is too large");
      return konst(Value(static_cast<int64_t>(v)));
    }
    case Tok::kFloat: return konst(Value(std::strtod(tok.text.c_str(), nullptr)));
    case Tok::kOp:
      if (tok.text == "(") {
        advance();
        NodePtr n = parse_tuple(true, true);
        expect_op(")");
        return n;
      }
      if (tok.text == "[" || tok.text == "{") return parse_collection();
      break;
    default: break;
  }
  error("unexpected " + describe(tok));
}

NodePtr ExprParser::parse_collection() {
  bool is_list = is_op("[");
  auto n = make_node(is_list ? NodeKind::kList : NodeKind::kDict, cur().line);
  advance();
  const char* close = is_list ? "]" : "}";
  while (!is_op(close)) {
    if (!n->items.empty()) expect_op(",");
    if (is_op(close)) break;
    n->items.push_back(parse_expression());
    if (!is_list) {
      expect_op(":");
      n->items.push_back(parse_expression());
    }
  }
  advance();
  return n;
}

NodePtr ExprParser::parse_postfix(NodePtr node) {
  for (;;) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      auto call = make_node(NodeKind::kCall, cur().line);
      call->a = std::move(node);
      parse_call_args(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

NodePtr ExprParser::parse_filter_expr(NodePtr node) {
  for (;;) {
    if (is_op("|")) {
      node = parse_filter(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      auto call = make_node(NodeKind::kCall, cur().line);
      call->a = std::move(node);
      parse_call_args(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

NodePtr ExprParser::parse_subscript(NodePtr node) {
  int line = cur().line;
  if (skip_op(".")) {
    if (cur().type == Tok::kInt) {
      auto n = make_node(NodeKind::kGetItem, line);
      n->a = std::move(node);
      n->b = make_node(NodeKind::kConst, line);
      n->b->value = Value(static_cast<int64_t>(std::strtoll(cur().text.c_str(), nullptr, 10)));
      advance();
      return n;
    }
    auto n = make_node(NodeKind::kGetAttr, line);
    n->a = std::move(node);
    n->name = expect_name();
    return n;
  }
  expect_op("[");
  std::vector<NodePtr> args;
  while (!is_op("]")) {
    if (!args.empty()) {
      expect_op(",");
      if (is_op("]")) break;
    }
    args.push_back(parse_subscribed());
  }
  advance();
  auto n = make_node(NodeKind::kGetItem, line);
  n->a = std::move(node);
  if (args.size() == 1) {
    n->b = std::move(args[0]);
  } else {
    n->b = make_node(NodeKind::kTuple, line);
    n->b->items = std::move(args);
  }
  return n;
}

NodePtr ExprParser::parse_subscribed() {
  auto slice = make_node(NodeKind::kSlice, cur().line);
  if (!is_op(":")) {
    NodePtr first = parse_expression();
    if (!is_op(":")) return first;
    slice->a = std::move(first);
  }
  advance();  // the first ':'
  if (!is_op("]") && !is_op(",") && !is_op(":")) slice->b = parse_expression();
  if (skip_op(":")) {
    if (!is_op("]") && !is_op(",")) slice->c = parse_expression();
  }
  return slice;
}

void ExprParser::parse_call_args(Node& call) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) {
      expect_op(",");
      if (is_op(")")) break;
    }
    first = false;
    if (is_op("*") || is_op("**")) error("*args and **kwargs in calls are not supported");
    if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
      std::string key = cur().text;
      advance();
      advance();
      call.kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      if (!call.kwargs.empty()) error("positional argument after keyword argument");
      call.items.push_back(parse_expression());
    }
  }
  advance();
}

NodePtr ExprParser::parse_filter(NodePtr operand) {
  skip_op("|");
  int line = cur().line;
  std::string name = expect_name();
  while (is_op(".")) {
    advance();
    name.append(".").append(expect_name());
  }
  if (!has_filter(name)) error("filter '" + name + "' is not supported", line);
  auto n = make_node(NodeKind::kFilter, line);
  n->name = std::move(name);
  n->a = std::move(operand);
  if (is_op("(")) parse_call_args(*n);
  return n;
}

NodePtr ExprParser::parse_test(NodePtr operand) {
  int line = cur().line;
  advance();  // 'is'
  bool negated = skip_name("not");
  std::string name = expect_name();
  if (!has_test(name)) error("test '" + name + "' is not supported", line);
  auto n = make_node(NodeKind::kTest, line);
  n->name = std::move(name);
  n->a = std::move(operand);
  Tok ty = cur().type;
  if (is_op("(")) {
    parse_call_args(*n);
  } else if ((ty == Tok::kName || ty == Tok::kString || ty == Tok::kInt || ty == Tok::kFloat || is_op("[") ||
              is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) error("you cannot chain multiple tests with is");
    n->items.push_back(parse_postfix(parse_primary()));
  }
  if (!negated) return n;
  auto notn = make_node(NodeKind::kNot, line);
  notn->a = std::move(n);
  return notn;
}

}  // namespace nvllm::jinja
