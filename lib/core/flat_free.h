// Freeing a tree whose nodes own their children without recursion. Freed the plain way, a chain
// a million deep (a chat template's `{% set ns.x = [ns.x] %}` in a loop, a chain of 30,000
// filters) frees each level from inside the level above: a stack frame a level, and a crash.
#pragma once

#include <utility>
#include <vector>

namespace nvllm {

// Called by the destructor (or deleter) of a node that owns children of type Item: `take` moves
// the node's children into the vector it is given. The outermost such free drains that vector,
// dropping one child at a time; a node freed meanwhile hands its children to the same vector
// instead of freeing them itself, so no free runs inside another and the stack stays flat.
template <typename Item, typename Take>
void free_children_flat(Take&& take) {
  thread_local std::vector<Item>* pending = nullptr;  // one per Item type and thread
  if (pending != nullptr) {
    take(*pending);
    return;
  }
  std::vector<Item> list;
  pending = &list;
  take(list);
  while (!list.empty()) {
    Item next = std::move(list.back());
    list.pop_back();
  }  // `next` is dropped here; if it held a node's last reference, its children join the list
  pending = nullptr;
}

}  // namespace nvllm
