// vLLM's "auto" content-format detection on our AST: a template wants OpenAI-style content
// parts when it loops over a message's content (`for part in message['content']`), where
// `message` is a loop variable over `messages` (or over a variable assigned from it).
#include "chat/content_format.h"

#include <deque>
#include <functional>

namespace nvllm::jinja {

namespace {

// Thrown where vLLM's detector fails an assertion (a matching loop or set with a non-name target);
// vLLM then falls back to its default, "string".
struct DetectFailed {};

bool is_var(const Node& n, const std::string& var) { return n.kind == NodeKind::kName && n.name == var; }

bool is_attr(const Node& n, const std::string& var, const std::string& key) {
  if (n.kind == NodeKind::kGetItem) {
    return is_var(*n.a, var) && n.b->kind == NodeKind::kConst && n.b->value.is_string() && n.b->value.str() == key;
  }
  if (n.kind == NodeKind::kGetAttr) return is_var(*n.a, var) && n.name == key;
  return false;
}

bool is_var_or_elems(const Node& n, const std::string& var, const std::string* key) {
  if (n.kind == NodeKind::kFilter) return n.a && is_var_or_elems(*n.a, var, key);
  if (n.kind == NodeKind::kTest) return is_var_or_elems(*n.a, var, key);
  if (n.kind == NodeKind::kGetItem && n.b->kind == NodeKind::kSlice) return is_var_or_elems(*n.a, var, key);
  return key ? is_attr(n, var, *key) : is_var(n, var);
}

void collect(const Body& body, NodeKind kind, std::vector<const Node*>& out) {
  for (const auto& n : body) {
    if (n->kind == kind) out.push_back(n.get());
    collect(n->body, kind, out);
    collect(n->else_body, kind, out);
  }
}

std::vector<std::string> messages_aliases(const Body& root) {
  std::vector<const Node*> sets;
  collect(root, NodeKind::kSet, sets);
  std::vector<std::string> names = {"messages"};
  std::deque<std::string> queue = {"messages"};
  while (!queue.empty()) {
    std::string var = queue.front();
    queue.pop_front();
    for (const Node* s : sets) {
      if (!is_var_or_elems(*s->b, var, nullptr)) continue;
      if (s->a->kind != NodeKind::kName) throw DetectFailed{};
      names.push_back(s->a->name);
      if (s->a->name != var) queue.push_back(s->a->name);
    }
  }
  return names;
}

ContentFormat detect(const Body& root) {
  std::vector<std::string> lists = messages_aliases(root);
  std::vector<const Node*> loops;
  collect(root, NodeKind::kFor, loops);
  std::vector<std::string> message_vars;
  for (const Node* loop : loops) {
    for (const auto& var : lists) {
      if (!is_var_or_elems(*loop->b, var, nullptr)) continue;
      if (loop->a->kind != NodeKind::kName) throw DetectFailed{};
      message_vars.push_back(loop->a->name);
      break;
    }
  }
  static const std::string kContent = "content";
  for (const Node* loop : loops) {
    for (const auto& var : message_vars) {
      if (!is_var_or_elems(*loop->b, var, &kContent)) continue;
      if (loop->a->kind != NodeKind::kName) throw DetectFailed{};
      return ContentFormat::kOpenai;
    }
  }
  return ContentFormat::kString;
}

}  // namespace

ContentFormat detect_content_format(const Body& root) {
  try {
    return detect(root);
  } catch (const DetectFailed&) {
    return ContentFormat::kString;
  }
}

}  // namespace nvllm::jinja
