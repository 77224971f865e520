#include "chat/jinja_interpreter.h"

#include <stdexcept>

#include "chat/chat_template.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"

namespace nvllm::jinja {

Interpreter::Interpreter(const std::string& template_name)
    : name_(template_name), frames_(8), max_steps_(kMaxRenderSteps), max_string_bytes_(kMaxRenderStringBytes),
      max_list_items_(kMaxRenderListItems), max_walk_bytes_(kMaxRenderWalkBytes) {
  install_globals(*this);
}

void Interpreter::set_global(std::string name, Value v) {
  owned_names_.push_back(std::move(name));
  std::string_view key = owned_names_.back();
  for (auto& [k, val] : frames_[0].vars) {
    if (k == key) {
      val = std::move(v);
      return;
    }
  }
  frames_[0].vars.emplace_back(key, std::move(v));
}

std::string Interpreter::render(const Template& tmpl) {
  struct Release {  // on every way out, exceptions included
    Interpreter& in;
    ~Release() { in.release_mutables(); }
  } release{*this};
  std::string out;
  out.reserve(4096);
  out_ = &out;
  steps_ = 0;
  try {
    RenderBudget budget(max_string_bytes_, max_list_items_, max_walk_bytes_);
    push_frame();
    declare_undefined(tmpl.undefined_names);
    exec_body(tmpl.body);
  } catch (const ChatTemplateError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw located_error(e.what());
  } catch (const std::bad_alloc&) {
    throw located_error("out of memory");
  } catch (const std::logic_error& e) {
    // A library precondition the engine failed to check (out_of_range from a conversion, say):
    // the request fails with this error instead of the process; the fuzz target treats the
    // message as a crash (kEngineBug), so each is still found and fixed.
    throw located_error(str_cat(kEngineBug, " (", e.what(), ")"));
  }
  return out;
}

ChatTemplateError Interpreter::located_error(std::string_view what) const {
  return ChatTemplateError(str_cat("chat template ", name_, " line ", line_, ": ", what), /*names_template=*/true);
}

Value Interpreter::make_namespace(DictItems items) {
  mutables_.push_back(Value::namespace_(std::move(items)));
  return mutables_.back();
}

void Interpreter::count_step() {
  if (++steps_ > max_steps_) {
    throw std::runtime_error("more than " + std::to_string(max_steps_) +
                             " loop iterations and macro calls in one render (nvllm's limit)");
  }
}

void Interpreter::release_mutables() {
  for (const Value& v : mutables_) {
    if (v.kind() == Kind::kNamespace) {
      v.namespace_items().clear();
    } else {
      LoopState& s = v.loop_state();
      s.items.clear();
      s.last_changed.clear();
    }
  }
  mutables_.clear();
}

int Interpreter::push_frame(int parent) {
  if (depth_ == frames_.size()) frames_.resize(frames_.size() * 2);
  if (depth_ > 256) throw std::runtime_error("recursion too deep");
  Frame& f = frames_[depth_];
  f.vars.clear();
  f.parent = parent;
  return static_cast<int>(depth_++);
}

void Interpreter::pop_frame() {
  --depth_;
  frames_[depth_].vars.clear();  // drop references now; keeps the capacity for the next push
}

void Interpreter::declare_undefined(const std::vector<std::string>& names) {
  for (const auto& n : names) top().vars.emplace_back(n, Value::undefined("'" + n + "' is undefined"));
}

std::string Interpreter::capture_scope(const Node& n) {
  push_frame();
  declare_undefined(n.undefined_names);
  std::string text;
  try {
    text = capture(n.body);
  } catch (...) {
    pop_frame();
    throw;
  }
  pop_frame();
  return text;
}

void Interpreter::set_var(std::string_view name, Value v) {
  for (auto& [k, val] : top().vars) {
    if (k == name) {
      val = std::move(v);
      return;
    }
  }
  top().vars.emplace_back(name, std::move(v));
}

bool Interpreter::lookup(std::string_view name, Value* out) const {
  for (int i = static_cast<int>(depth_) - 1; i >= 0;) {
    for (const auto& [k, v] : frames_[i].vars) {
      if (k == name) {
        *out = v;
        return true;
      }
    }
    i = frames_[i].parent >= 0 ? frames_[i].parent : i - 1;
  }
  return false;
}

std::string Interpreter::capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const auto& n : body) {
    Flow f = exec(*n);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Node& n) {
  check_stack_room();
  line_ = n.line;
  switch (n.kind) {
    case NodeKind::kOutput:
      *out_ += n.value.str();
      check_length(*out_);
      return Flow::kNormal;
    case NodeKind::kPrint: append_str(*out_, eval(*n.a)); return Flow::kNormal;
    case NodeKind::kIf: return exec_body(eval(*n.a).truthy() ? n.body : n.else_body);  // elif: an If in else_body
    case NodeKind::kFor: return exec_for(n);
    case NodeKind::kSet: exec_set(n); return Flow::kNormal;
    case NodeKind::kSetBlock: assign(*n.a, Value(capture_scope(n))); return Flow::kNormal;
    case NodeKind::kMacro: exec_macro(n); return Flow::kNormal;
    case NodeKind::kCallBlock: exec_call_block(n); return Flow::kNormal;
    case NodeKind::kFilterBlock: {
      Value saved = filter_input_;
      filter_input_ = Value(capture_scope(n));
      append_str(*out_, eval(*n.a));
      filter_input_ = saved;
      return Flow::kNormal;
    }
    case NodeKind::kWith: {
      std::vector<Value> values;
      for (const auto& [name, expr] : n.kwargs) values.push_back(eval(*expr));
      push_frame();
      for (size_t i = 0; i < values.size(); ++i) set_var(n.kwargs[i].first, values[i]);
      declare_undefined(n.undefined_names);
      Flow f = exec_body(n.body);
      pop_frame();
      return f;
    }
    case NodeKind::kBreak: return Flow::kBreak;
    case NodeKind::kContinue: return Flow::kContinue;
    case NodeKind::kBlockBody: *out_ += capture_scope(n); return Flow::kNormal;
    default: throw std::runtime_error("internal: expression node in statement position");
  }
}

Interpreter::Flow Interpreter::exec_for(const Node& n) {
  List items = iterate(eval(*n.b));
  if (n.c) {  // `for x in xs if cond`: filtered before loop.length and friends are computed
    List kept;
    push_frame();
    for (auto& item : items) {
      assign(*n.a, item);
      if (eval(*n.c).truthy()) kept.push_back(std::move(item));
    }
    pop_frame();
    items = std::move(kept);
  }
  if (items.empty()) {
    push_frame();
    declare_undefined(n.else_undefined_names);
    Flow f = exec_body(n.else_body);
    pop_frame();
    return f;  // a break in the else part belongs to an enclosing loop
  }
  auto state = std::make_shared<LoopState>();
  state->items = std::move(items);
  Value loop = Value::loop(state);
  mutables_.push_back(loop);
  for (size_t i = 0; i < state->items.size(); ++i) {
    count_step();
    state->index0 = i;
    push_frame();
    assign(*n.a, state->items[i]);
    set_var("loop", loop);
    declare_undefined(n.undefined_names);
    Flow f = exec_body(n.body);
    pop_frame();
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Node& target, const Value& v) {
  if (target.kind == NodeKind::kName) {
    set_var(target.name, v);
    return;
  }
  if (target.kind == NodeKind::kGetAttr) {  // {% set ns.attr = v %}
    Value ns;
    if (!lookup(target.a->name, &ns) || ns.kind() != Kind::kNamespace) {
      throw std::runtime_error("can't assign to '" + target.a->name + "." + target.name + "': not a namespace");
    }
    for (auto& [k, val] : ns.namespace_items()) {
      if (k == target.name) {
        val = v;
        return;
      }
    }
    ns.namespace_items().emplace_back(target.name, v);
    return;
  }
  // tuple unpacking
  List parts = iterate(v);
  if (parts.size() != target.items.size()) {
    throw std::runtime_error(parts.size() > target.items.size()
                                 ? "too many values to unpack (expected " + std::to_string(target.items.size()) + ")"
                                 : "not enough values to unpack (expected " + std::to_string(target.items.size()) +
                                       ", got " + std::to_string(parts.size()) + ")");
  }
  for (size_t i = 0; i < parts.size(); ++i) assign(*target.items[i], parts[i]);
}

void Interpreter::exec_set(const Node& n) { assign(*n.a, eval(*n.b)); }

void Interpreter::exec_macro(const Node& n) {
  const Node* macro = &n;
  int scope = static_cast<int>(depth_) - 1;  // a macro reads the variables of the scope it is defined in
  set_var(n.name, Value::callable(n.name, [macro, scope](Interpreter& in, Args& args) {
            return in.call_macro(*macro, args, scope < static_cast<int>(in.depth_) ? scope : 1);
          }));
}

void Interpreter::exec_call_block(const Node& n) {
  const Node* block = &n;
  int site = static_cast<int>(depth_) - 1;  // caller() sees the variables where the call block stands
  Value caller = Value::callable("caller", [block, site](Interpreter& in, Args& args) {
    in.push_frame(site);
    for (size_t i = 0; i < block->kwargs.size(); ++i) {
      const auto& [pname, def] = block->kwargs[i];
      in.set_var(pname, args.get(i, pname, def ? in.eval(*def) : Value::undefined("'" + pname + "' is undefined")));
    }
    in.declare_undefined(block->undefined_names);
    std::string text;
    try {
      text = in.capture(block->body);
    } catch (...) {
      in.pop_frame();
      throw;
    }
    in.pop_frame();
    return Value(std::move(text));
  });
  const Node& call = *n.a;
  Value fn = eval(*call.a);
  Args args = eval_args(call);
  args.kw.emplace_back("caller", caller);
  append_str(*out_, this->call(fn, args));
}

Value Interpreter::call_macro(const Node& macro, Args& args, int scope) {
  count_step();
  push_frame(scope);
  List varargs;
  DictItems kwargs;
  try {
    for (size_t i = 0; i < macro.kwargs.size(); ++i) {
      const auto& [pname, def] = macro.kwargs[i];
      bool given = i < args.pos.size();
      for (const auto& kv : args.kw) given |= kv.first == pname;
      // An argument passed as undefined stays undefined; only a missing one takes the default.
      Value v = given ? args.get(i, pname) : def ? eval(*def) : Value::undefined("'" + pname + "' is undefined");
      set_var(pname, v);
    }
    for (size_t i = macro.kwargs.size(); i < args.pos.size(); ++i) varargs.push_back(args.pos[i]);
    for (const auto& [k, v] : args.kw) {
      bool is_param = k == "caller";
      for (const auto& p : macro.kwargs) is_param |= p.first == k;
      if (!is_param) kwargs.emplace_back(k, v);
      if (k == "caller") set_var("caller", v);
    }
    set_var("varargs", Value::list(std::move(varargs)));
    set_var("kwargs", Value::dict(std::move(kwargs)));
    declare_undefined(macro.undefined_names);
    std::string text = capture(macro.body);
    pop_frame();
    return Value(std::move(text));
  } catch (...) {
    pop_frame();
    throw;
  }
}

}  // namespace nvllm::jinja
