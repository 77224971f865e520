// The tree-walking interpreter: renders a parsed Body with Jinja's scoping (a for-loop iteration
// and a macro call open a scope; if-blocks do not; namespace() carries values out of loops).
// Runtime errors (type errors, attribute of undefined, raise_exception) throw ChatTemplateError.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_value.h"

namespace nvllm::jinja {

class Interpreter {
 public:
  explicit Interpreter(const std::string& template_name);

  // A variable every scope sees (messages, bos_token, raise_exception, ...).
  void set_global(std::string name, Value v);
  // Renders the template and returns the text. Throws ChatTemplateError.
  std::string render(const Template& tmpl);
  // The most loop iterations and macro calls a render may run, the most bytes of strings and list
  // items it may make, and the most bytes of strings it may walk (defaults kMaxRenderSteps,
  // kMaxRenderStringBytes, kMaxRenderListItems, kMaxRenderWalkBytes; tests set small ones to
  // check the boundaries cheaply).
  void set_max_steps(int64_t n) { max_steps_ = n; }
  void set_max_string_bytes(int64_t n) { max_string_bytes_ = n; }
  void set_max_list_items(int64_t n) { max_list_items_ = n; }
  void set_max_walk_bytes(int64_t n) { max_walk_bytes_ = n; }

  // For filters, tests, methods and globals.
  Value call(const Value& fn, Args& args);
  Value getattr(const Value& obj, std::string_view name);
  Value getitem(const Value& obj, const Value& key);
  // Renders `body` into a string (macro bodies, caller(), block set).
  std::string capture(const Body& body);
  const std::string& template_name() const { return name_; }
  // A new namespace, emptied when the render ends (see mutables_).
  Value make_namespace(DictItems items);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Frame {
    std::vector<std::pair<std::string_view, Value>> vars;
    int parent = -1;  // the frame lookups continue in; -1: the one below
  };

  Flow exec_body(const Body& body);
  Flow exec(const Node& n);
  Flow exec_for(const Node& n);
  void exec_set(const Node& n);
  void exec_macro(const Node& n);
  void exec_call_block(const Node& n);
  Value call_macro(const Node& macro, Args& args, int scope);
  Value eval(const Node& n);
  Value eval_call(const Node& n);
  Value eval_compare(const Node& n);
  Value eval_unary(const Node& n);
  Value eval_literal(const Node& n);  // [..], (..), {..}
  Value eval_binary(const Node& n);
  Value eval_filter(const Node& n);
  Value eval_slice(const Value& obj, const Node& slice);
  Value loop_attr(const Value& loop, std::string_view name);
  Args eval_args(const Node& n);
  void assign(const Node& target, const Value& v);

  int push_frame(int parent = -1);
  void pop_frame();
  // Binds the names a scope owns as undefined until their set runs (jinja_scopes.h).
  void declare_undefined(const std::vector<std::string>& names);
  std::string capture_scope(const Node& n);  // a block-set/filter/generation body in its own scope
  Frame& top() { return frames_[depth_ - 1]; }
  void set_var(std::string_view name, Value v);
  bool lookup(std::string_view name, Value* out) const;
  // Empties every namespace and loop of mutables_ and forgets them.
  void release_mutables();
  // One more loop iteration or macro call; throws past max_steps_ (set_max_steps).
  void count_step();
  // An error of this render naming the template and the line being evaluated.
  ChatTemplateError located_error(std::string_view what) const;

  std::string name_;
  std::deque<std::string> owned_names_;
  // Reused across pushes: frames_[0] holds the globals, frames_[1] the template's top-level scope.
  std::vector<Frame> frames_;
  size_t depth_ = 1;
  std::string* out_ = nullptr;
  Value filter_input_;  // the body text a {% filter %} block applies its chain to
  int line_ = 0;        // the line of the node being evaluated, for error messages
  int64_t steps_ = 0;   // loop iterations and macro calls of this render
  int64_t max_steps_;
  int64_t max_string_bytes_;
  int64_t max_list_items_;
  int64_t max_walk_bytes_;
  // Every namespace and loop this render made. They are the only values that change after they
  // are made (lists and dicts are immutable in the sandbox; a callable's captures are fixed), so
  // any other value refers only to values older than itself, and every reference cycle
  // (`{% set ns.me = ns %}`, `ns.l = [ns]`, `loop.changed(loop)`) passes through one of them.
  // Emptying them all when the render ends breaks every cycle, so the shared_ptrs free it all.
  std::vector<Value> mutables_;
};

}  // namespace nvllm::jinja
