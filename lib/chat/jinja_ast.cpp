#include "chat/jinja_ast.h"

#include <vector>

#include "core/flat_free.h"

namespace nvllm::jinja {

Node::~Node() {
  free_children_flat<NodePtr>([this](std::vector<NodePtr>& to) {
    for_each_child(*this, [&](NodePtr& child) {
      if (child) to.push_back(std::move(child));
    });
  });
}

}  // namespace nvllm::jinja
