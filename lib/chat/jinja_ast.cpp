#include "chat/jinja_ast.h"

#include <vector>

namespace nvllm::jinja {

// The outermost node being freed collects its children in a list and frees them one at a time;
// a node freed from that loop hands its own children to the same list instead of freeing them
// itself, so no destructor runs inside another's and the stack stays flat however deep the tree.
Node::~Node() {
  thread_local std::vector<NodePtr>* pending = nullptr;
  const auto take = [](Node& n, std::vector<NodePtr>& to) {
    for_each_child(n, [&](NodePtr& child) {
      if (child) to.push_back(std::move(child));
    });
  };
  if (pending != nullptr) {
    take(*this, *pending);
    return;
  }
  std::vector<NodePtr> list;
  pending = &list;
  take(*this, list);
  while (!list.empty()) {
    NodePtr next = std::move(list.back());
    list.pop_back();
  }  // `next` is freed here, adding its children to the list
  pending = nullptr;
}

}  // namespace nvllm::jinja
