// The parsed template: one Node type for expressions and statements (a tagged struct keeps the
// tree-walking interpreter a switch over kinds).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace nvllm::jinja {

enum class NodeKind {
  // expressions
  kConst,      // value
  kName,       // name
  kGetAttr,    // a.name
  kGetItem,    // a[b]
  kSlice,      // a:b:c (each may be null)
  kCall,       // a(items..., kwargs...)
  kFilter,     // a | name(items..., kwargs...); a is null inside a filter block
  kTest,       // a is name(items...)
  kNot,        // not a
  kNeg,        // -a
  kPos,        // +a
  kBinary,     // a <name> b for + - * / // % ** ~
  kAnd,        // a and b
  kOr,         // a or b
  kCompare,    // items[0] ops[0] items[1] ops[1] items[2] ... (==, !=, <, <=, >, >=, in, notin)
  kCondExpr,   // b if a else c (c may be null)
  kList,       // [items]
  kTuple,      // (items)
  kDict,       // {items[0]: items[1], ...}
  // statements
  kOutput,     // literal text (value)
  kPrint,      // {{ a }}
  kIf,         // if a: body else else_body (elif nests an If in else_body)
  kFor,        // for a in b [if c]: body else else_body
  kSet,        // set a = b
  kSetBlock,   // set a: body
  kMacro,      // macro name(params): body
  kCallBlock,  // call(params) a: body
  kFilterBlock,  // filter a: body
  kWith,       // with params: body
  kBreak,
  kContinue,
  kBlockBody,  // a generation block (rendered unchanged) or other plain container: body
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  // Frees the children without recursion (jinja_ast.cpp): a chain of 30,000 filters is 30,000
  // nested nodes.
  ~Node();

  NodeKind kind;
  int line = 0;
  std::string name;
  Value value;
  NodePtr a, b, c;
  std::vector<NodePtr> items;
  std::vector<std::pair<std::string, NodePtr>> kwargs;  // call kwargs; macro/call/with parameters
  std::vector<std::string> ops;
  Body body, else_body;
  // Names that jinja2 binds as undefined when this node's scope (the for/macro/call/filter/with/
  // block-set body; else_undefined: the for-else) starts: assigned there before any use, so a
  // read before the assignment runs sees undefined, not an outer value (see jinja_scopes.h).
  std::vector<std::string> undefined_names, else_undefined_names;
};

// Calls f(NodePtr&) on each direct child slot of n (a, b, c, items, kwargs, body, else_body);
// a slot may be null.
template <typename F>
void for_each_child(Node& n, F&& f) {
  f(n.a), f(n.b), f(n.c);
  for (auto& x : n.items) f(x);
  for (auto& kv : n.kwargs) f(kv.second);
  for (auto& x : n.body) f(x);
  for (auto& x : n.else_body) f(x);
}

// The most blocks and expressions nested in a template (a root-to-leaf path of its tree; a
// chain `x | f | g` is as deep as it is long). The parser refuses deeper templates, so the
// walks over the tree (scopes, content format, rendering) recurse at most this far.
inline constexpr int kMaxTreeDepth = 500;

inline NodePtr make_node(NodeKind kind, int line) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->line = line;
  return n;
}

}  // namespace nvllm::jinja
