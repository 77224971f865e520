// Expression parsing over the token stream, with jinja2's precedence (lowest first):
// conditional, or, and, not, comparisons/in, + -, ~, * / // %, **, unary - +, then postfix
// (.attr [item] (call)) and filters/tests. The statement parser builds on it.
#pragma once

#include <string>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace nvllm::jinja {

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, const std::string& name) : t_(std::move(tokens)), name_(name) {}

  // An expression, or a tuple of them without parentheses (`a, b`). `extra_end` names a word that
  // also ends the tuple (for-loops: "recursive").
  NodePtr parse_tuple(bool with_condexpr, bool explicit_parens = false, const char* extra_end = nullptr);
  NodePtr parse_expression(bool with_condexpr = true) { return with_condexpr ? parse_condexpr() : parse_or(); }
  // `| name(args)` applied to `operand` (null inside a filter block); stands on the '|' or the name.
  NodePtr parse_filter(NodePtr operand);

 protected:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  bool skip_op(const char* op) { return is_op(op) ? (advance(), true) : false; }
  bool skip_name(const char* n) { return is_name(n) ? (advance(), true) : false; }
  [[noreturn]] void error(const std::string& what, int line = 0) const;
  std::string describe(const Token& t) const;
  void expect_op(const char* op);
  std::string expect_name();

  // One level of the parser's recursion (a nested expression, prefix operator or block): past
  // kMaxTreeDepth levels, or with the thread's stack nearly full, the template is refused
  // before the parser overflows its stack (`((((...` or `- - - ...` 30,000 deep).
  class Nest {
   public:
    explicit Nest(ExprParser& p);
    ~Nest() { --p_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    ExprParser& p_;
  };

  std::vector<Token> t_;
  size_t i_ = 0;
  const std::string& name_;
  int nesting_ = 0;

 private:
  NodePtr parse_condexpr();
  NodePtr parse_or();
  NodePtr parse_and();
  NodePtr parse_not();
  NodePtr parse_compare();
  NodePtr parse_math1();
  NodePtr parse_concat();
  NodePtr parse_math2();
  NodePtr parse_pow();
  NodePtr parse_unary(bool with_filter);
  NodePtr parse_primary();
  NodePtr parse_collection();  // [a, b] or {k: v}
  NodePtr parse_postfix(NodePtr node);
  NodePtr parse_filter_expr(NodePtr node);
  NodePtr parse_subscript(NodePtr node);
  NodePtr parse_subscribed();
  void parse_call_args(Node& call);
  NodePtr parse_test(NodePtr operand);
  NodePtr binary(NodePtr left, const std::string& op, NodePtr right, int line);
};

}  // namespace nvllm::jinja
