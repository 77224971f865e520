#include "chat/jinja_parser.h"

#include <initializer_list>
#include <utility>
#include <vector>

#include "chat/jinja_expr_parser.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_scopes.h"
#include "core/error.h"

namespace nvllm::jinja {

namespace {

class Parser : public ExprParser {
 public:
  using ExprParser::ExprParser;

  Body parse_all() {
    Body body = parse_body({});
    if (cur().type != Tok::kEof) error("unexpected '" + cur().text + "' tag");
    return body;
  }

 private:
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) error("expected end of statement block, got " + describe(cur()));
    advance();
  }

  // Statements until a `{% name %}` tag whose name is in `ends` (left for the caller) or the end.
  Body parse_body(std::initializer_list<const char*> ends) {
    const Nest nest(*this);
    Body body;
    for (;;) {
      const Token& tok = cur();
      if (tok.type == Tok::kEof) {
        if (ends.size()) error(std::string("unexpected end of template; expected '") + *ends.begin() + "'");
        return body;
      }
      if (tok.type == Tok::kData) {
        auto n = make_node(NodeKind::kOutput, tok.line);
        n->value = Value(tok.text);
        body.push_back(std::move(n));
        advance();
      } else if (tok.type == Tok::kVarBegin) {
        advance();
        auto n = make_node(NodeKind::kPrint, tok.line);
        n->a = parse_tuple(true);
        if (cur().type != Tok::kVarEnd) error("expected end of print statement, got " + describe(cur()));
        advance();
        body.push_back(std::move(n));
      } else if (tok.type == Tok::kBlockBegin) {
        const Token& nm = peek();
        for (const char* e : ends) {
          if (nm.type == Tok::kName && nm.text == e) {
            advance();
            return body;
          }
        }
        advance();
        body.push_back(parse_statement());
      } else {
        error("unexpected " + describe(tok));
      }
    }
  }

  NodePtr parse_statement();
  NodePtr parse_if();
  NodePtr parse_for();
  NodePtr parse_set();
  NodePtr parse_macro();
  NodePtr parse_call_block();
  NodePtr parse_filter_block();
  NodePtr parse_with();
  std::vector<std::pair<std::string, NodePtr>> parse_params();
  NodePtr parse_assign_target(bool allow_ns);
  void end_tag(const char* end) {
    if (!skip_name(end)) error(std::string("expected '") + end + "'");
    expect_block_end();
  }

};

NodePtr Parser::parse_statement() {
  const Token& tok = cur();
  if (tok.type != Tok::kName) error("expected a statement name, got " + describe(tok));
  const std::string& n = tok.text;
  if (n == "if") return parse_if();
  if (n == "for") return parse_for();
  if (n == "set") return parse_set();
  if (n == "macro") return parse_macro();
  if (n == "call") return parse_call_block();
  if (n == "filter") return parse_filter_block();
  if (n == "with") return parse_with();
  if (n == "break" || n == "continue") {
    auto node = make_node(n == "break" ? NodeKind::kBreak : NodeKind::kContinue, tok.line);
    advance();
    expect_block_end();
    return node;
  }
  if (n == "generation") {  // transformers' AssistantTracker: the body renders unchanged
    auto node = make_node(NodeKind::kBlockBody, tok.line);
    advance();
    expect_block_end();
    node->body = parse_body({"endgeneration"});
    end_tag("endgeneration");
    return node;
  }
  for (const char* unsupported : {"extends", "block", "include", "import", "from", "do", "autoescape", "trans"}) {
    if (n == unsupported) error("'" + n + "' tag is not supported");
  }
  error("unknown tag '" + n + "'");
}

NodePtr Parser::parse_if() {
  auto root = make_node(NodeKind::kIf, cur().line);
  advance();
  Node* node = root.get();
  for (;;) {
    node->a = parse_tuple(false);
    expect_block_end();
    node->body = parse_body({"elif", "else", "endif"});
    if (skip_name("elif")) {
      node->else_body.push_back(make_node(NodeKind::kIf, t_[i_ - 1].line));
      node = node->else_body.back().get();
      continue;
    }
    if (skip_name("else")) {
      expect_block_end();
      node->else_body = parse_body({"endif"});
    }
    end_tag("endif");
    return root;
  }
}

NodePtr Parser::parse_assign_target(bool allow_ns) {
  int line = cur().line;
  if (allow_ns && cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == ".") {
    auto n = make_node(NodeKind::kGetAttr, line);
    n->a = make_node(NodeKind::kName, line);
    n->a->name = expect_name();
    advance();
    n->name = expect_name();
    return n;
  }
  bool parens = skip_op("(");
  auto tuple = make_node(NodeKind::kTuple, line);
  for (;;) {
    auto name = make_node(NodeKind::kName, cur().line);
    name->name = expect_name();
    tuple->items.push_back(std::move(name));
    if (!skip_op(",")) break;
    if (cur().type != Tok::kName) break;
  }
  if (parens) expect_op(")");
  if (tuple->items.size() == 1 && !parens) return std::move(tuple->items[0]);
  return tuple;
}

NodePtr Parser::parse_for() {
  auto node = make_node(NodeKind::kFor, cur().line);
  advance();
  node->a = parse_assign_target(false);
  if (!skip_name("in")) error("expected 'in' in for loop");
  node->b = parse_tuple(false, false, "recursive");
  if (skip_name("if")) node->c = parse_expression();
  if (is_name("recursive")) error("recursive for loops are not supported");
  expect_block_end();
  node->body = parse_body({"endfor", "else"});
  if (skip_name("else")) {
    expect_block_end();
    node->else_body = parse_body({"endfor"});
  }
  end_tag("endfor");
  return node;
}

NodePtr Parser::parse_set() {
  int line = cur().line;
  advance();
  NodePtr target = parse_assign_target(true);
  if (skip_op("=")) {
    auto node = make_node(NodeKind::kSet, line);
    node->a = std::move(target);
    node->b = parse_tuple(true);
    expect_block_end();
    return node;
  }
  if (is_op("|")) error("filters on a block set are not supported");
  expect_block_end();
  auto node = make_node(NodeKind::kSetBlock, line);
  node->a = std::move(target);
  node->body = parse_body({"endset"});
  end_tag("endset");
  return node;
}

std::vector<std::pair<std::string, NodePtr>> Parser::parse_params() {
  std::vector<std::pair<std::string, NodePtr>> params;
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    if (is_op(")")) break;
    std::string p = expect_name();
    NodePtr def;
    if (skip_op("=")) def = parse_expression();
    params.emplace_back(std::move(p), std::move(def));
  }
  advance();
  return params;
}

NodePtr Parser::parse_macro() {
  auto node = make_node(NodeKind::kMacro, cur().line);
  advance();
  node->name = expect_name();
  node->kwargs = parse_params();
  expect_block_end();
  node->body = parse_body({"endmacro"});
  end_tag("endmacro");
  return node;
}

NodePtr Parser::parse_call_block() {
  auto node = make_node(NodeKind::kCallBlock, cur().line);
  advance();
  if (is_op("(")) node->kwargs = parse_params();
  node->a = parse_expression();
  if (node->a->kind != NodeKind::kCall) error("expected a call after 'call'", node->line);
  expect_block_end();
  node->body = parse_body({"endcall"});
  end_tag("endcall");
  return node;
}

NodePtr Parser::parse_filter_block() {
  auto node = make_node(NodeKind::kFilterBlock, cur().line);
  advance();
  NodePtr chain = parse_filter(nullptr);
  while (is_op("|")) chain = parse_filter(std::move(chain));
  node->a = std::move(chain);
  expect_block_end();
  node->body = parse_body({"endfilter"});
  end_tag("endfilter");
  return node;
}

NodePtr Parser::parse_with() {
  auto node = make_node(NodeKind::kWith, cur().line);
  advance();
  while (cur().type != Tok::kBlockEnd) {
    if (!node->kwargs.empty()) expect_op(",");
    std::string target = expect_name();
    expect_op("=");
    node->kwargs.emplace_back(std::move(target), parse_expression());
  }
  expect_block_end();
  node->body = parse_body({"endwith"});
  end_tag("endwith");
  return node;
}

// Refuses a tree deeper than kMaxTreeDepth, walking it with a stack of its own: the parser's
// recursion is bounded (ExprParser::Nest), but a chain built by a loop (`x | f | f | ...`,
// `1 + 1 + ...`, `a.b.c...`) grows the tree without it.
void check_tree_depth(Body& root, const std::string& name) {
  std::vector<std::pair<Node*, int>> todo;
  for (auto& n : root) todo.emplace_back(n.get(), 1);
  while (!todo.empty()) {
    Node* const n = todo.back().first;
    const int depth = todo.back().second;  // not a structured binding: clang 14 cannot capture one
    todo.pop_back();
    if (depth > kMaxTreeDepth) {
      fail("chat template ", name, " line ", n->line, ": blocks and expressions nested more than ", kMaxTreeDepth,
           " deep (a chain such as x | f | g is as deep as it is long)");
    }
    for_each_child(*n, [&](NodePtr& child) {
      if (child) todo.emplace_back(child.get(), depth + 1);
    });
  }
}

}  // namespace

Template parse_template(const std::string& source, const std::string& name) {
  Template t;
  t.body = Parser(tokenize(source, name), name).parse_all();
  check_tree_depth(t.body, name);
  t.undefined_names = analyze_scopes(t.body);
  return t;
}

}  // namespace nvllm::jinja
