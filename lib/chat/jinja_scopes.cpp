#include "chat/jinja_scopes.h"

#include <unordered_set>

namespace nvllm::jinja {

namespace {

struct Scope {
  const Scope* parent = nullptr;
  std::unordered_set<std::string> refs;  // names mentioned at this scope's own level
  std::vector<std::string> undefined;    // first mentioned by an unconditional set

  bool ancestor_has(const std::string& name) const {
    for (const Scope* s = parent; s; s = s->parent) {
      if (s->refs.count(name)) return true;
    }
    return false;
  }
};

// A nested scope found while walking its parent: the body, where its names go, and its parameters.
struct Nested {
  const Body* body;
  std::vector<std::string>* out;
  std::vector<std::string> params;
};

class Analyzer {
 public:
  void run(const Body& body, Scope& scope) {
    std::vector<Nested> nested;
    visit_body(body, scope, false, nested);
    for (auto& n : nested) {  // children after the parent is complete, as jinja2 compiles them
      Scope child;
      child.parent = &scope;
      child.refs.insert(n.params.begin(), n.params.end());
      run(*n.body, child);
      *n.out = std::move(child.undefined);
    }
  }

 private:
  void load(const std::string& name, Scope& s) { s.refs.insert(name); }

  void store(const std::string& name, Scope& s, bool in_branch) {
    if (s.refs.count(name)) return;
    // A set inside an if-branch makes jinja2 resolve the name from outside at scope start instead.
    if (!in_branch && !s.ancestor_has(name)) s.undefined.push_back(name);
    s.refs.insert(name);
  }

  void loads(const Node* e, Scope& s) {
    if (!e) return;
    if (e->kind == NodeKind::kName) load(e->name, s);
    loads(e->a.get(), s);
    loads(e->b.get(), s);
    loads(e->c.get(), s);
    for (const auto& i : e->items) loads(i.get(), s);
    for (const auto& [k, v] : e->kwargs) loads(v.get(), s);
  }

  void store_target(const Node& t, Scope& s, bool in_branch) {
    if (t.kind == NodeKind::kName) store(t.name, s, in_branch);
    else if (t.kind == NodeKind::kGetAttr) load(t.a->name, s);  // ns.attr reads ns
    else for (const auto& i : t.items) store_target(*i, s, in_branch);
  }

  static std::vector<std::string> names_of(const Node& target) {
    if (target.kind == NodeKind::kName) return {target.name};
    std::vector<std::string> out;
    for (const auto& i : target.items) {
      auto sub = names_of(*i);
      out.insert(out.end(), sub.begin(), sub.end());
    }
    return out;
  }

  static std::vector<std::string> param_names(const Node& n) {
    std::vector<std::string> out;
    for (const auto& [k, v] : n.kwargs) out.push_back(k);
    return out;
  }

  void visit_body(const Body& body, Scope& s, bool in_branch, std::vector<Nested>& nested) {
    for (const auto& np : body) {
      Node& n = *np;
      switch (n.kind) {
        case NodeKind::kPrint: loads(n.a.get(), s); break;
        case NodeKind::kIf:
          loads(n.a.get(), s);
          visit_body(n.body, s, true, nested);
          visit_body(n.else_body, s, true, nested);
          break;
        case NodeKind::kSet:
          loads(n.b.get(), s);
          store_target(*n.a, s, in_branch);
          break;
        case NodeKind::kFor: {
          loads(n.b.get(), s);
          auto params = names_of(*n.a);
          params.push_back("loop");
          nested.push_back({&n.body, &n.undefined_names, params});
          nested.push_back({&n.else_body, &n.else_undefined_names, {}});
          break;
        }
        case NodeKind::kSetBlock:
          store_target(*n.a, s, in_branch);
          nested.push_back({&n.body, &n.undefined_names, {}});
          break;
        case NodeKind::kMacro: {
          store(n.name, s, in_branch);
          auto params = param_names(n);
          params.insert(params.end(), {"varargs", "kwargs", "caller"});
          nested.push_back({&n.body, &n.undefined_names, params});
          break;
        }
        case NodeKind::kCallBlock:
          loads(n.a.get(), s);
          nested.push_back({&n.body, &n.undefined_names, param_names(n)});
          break;
        case NodeKind::kFilterBlock:
          loads(n.a.get(), s);
          nested.push_back({&n.body, &n.undefined_names, {}});
          break;
        case NodeKind::kWith:
          for (const auto& [k, v] : n.kwargs) loads(v.get(), s);
          nested.push_back({&n.body, &n.undefined_names, param_names(n)});
          break;
        case NodeKind::kBlockBody:  // {% generation %} is a call block in transformers: its own scope
          nested.push_back({&n.body, &n.undefined_names, {}});
          break;
        default: break;
      }
    }
  }
};

}  // namespace

std::vector<std::string> analyze_scopes(Body& root) {
  Scope scope;
  Analyzer().run(root, scope);
  return std::move(scope.undefined);
}

}  // namespace nvllm::jinja
