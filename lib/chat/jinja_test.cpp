// The interpreter on its own, one case per language feature, against jinja2 3.1.6 set up as
// transformers sets it up: the expected strings in testdata/chat/jinja_cases.json come from
// testdata/chat/jinja_reference.py.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>

#include "chat/chat_template.h"
#include "chat/jinja_interpreter.h"
#include "chat/jinja_parser.h"

namespace nvllm::jinja {
namespace {

ChatJson load_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return ChatJson::parse(in);
}

std::string render_with(const std::string& source, const ChatJson& vars) {
  Template tmpl = parse_template(source, "t.jinja");
  Interpreter in("t.jinja");
  for (auto it = vars.begin(); it != vars.end(); ++it) in.set_global(it.key(), Value::borrow(it.value()));
  return in.render(tmpl);
}

std::string render(const std::string& source) { return render_with(source, ChatJson::object()); }

// Renders with a small render limit set: run() renders twice (the second render must have the
// whole limit again and give the same text); fails() says whether it stops with `message`.
struct Limited {
  std::function<void(Interpreter&)> set;
  std::string message;
  Limited(std::function<void(Interpreter&)> s, std::string m) : set(std::move(s)), message(std::move(m)) {}
  std::string run(const std::string& source) const {
    Template tmpl = parse_template(source, "t.jinja");
    Interpreter in("t.jinja");
    set(in);
    std::string first = in.render(tmpl);
    CHECK(in.render(tmpl) == first);
    return first;
  }
  bool fails(const std::string& source) const {
    try {
      run(source);
    } catch (const ChatTemplateError& e) {
      return std::string(e.what()).find(message) != std::string::npos;
    }
    return false;
  }
};

TEST_CASE("jinja: every feature case renders as jinja2 renders it") {
  ChatJson data = load_json(std::string(NVLLM_TESTDATA) + "/chat/jinja_cases.json");
  const ChatJson& vars = data["vars"];
  REQUIRE(data["cases"].size() > 100);
  for (const auto& c : data["cases"]) {
    std::string name = c["name"].get<std::string>(), source = c["template"].get<std::string>();
    CAPTURE(name);
    CAPTURE(source);
    if (c.contains("expected")) {
      std::string got;
      CHECK_NOTHROW(got = render_with(source, vars));
      CHECK(got == c["expected"].get<std::string>());
    } else if (c["type"] == "TemplateError") {  // raise_exception: the template's own message, nothing added
      try {
        render_with(source, vars);
        FAIL("expected raise_exception to throw");
      } catch (const ChatTemplateError& e) {
        CHECK(std::string(e.what()) == c["message"].get<std::string>());
      }
    } else {
      // Other runtime errors name the template and line, then Python's message.
      try {
        render_with(source, vars);
        FAIL("expected a ChatTemplateError");
      } catch (const ChatTemplateError& e) {
        CHECK(std::string(e.what()) == "chat template t.jinja line 1: " + c["message"].get<std::string>());
      }
    }
  }
}

TEST_CASE("jinja: random templates render as jinja2 renders them (differential cases)") {
  // testdata/chat/jinja_fuzz.py: random whitespace, -/+ modifiers, blocks, filters, tests, methods.
  ChatJson data = load_json(std::string(NVLLM_TESTDATA) + "/chat/jinja_fuzz_cases.json");
  REQUIRE(data["cases"].size() == 400);
  for (const auto& c : data["cases"]) {
    std::string source = c["template"].get<std::string>();
    CAPTURE(source);
    if (c.contains("expected")) {
      std::string got;
      CHECK_NOTHROW(got = render_with(source, data["vars"]));
      CHECK(got == c["expected"].get<std::string>());
    } else {
      CAPTURE(c["error"].get<std::string>());
      CHECK_THROWS_AS(render_with(source, data["vars"]), Error);  // syntax (parse) or runtime error
    }
  }
}

TEST_CASE("jinja: unsupported constructs are refused at parse time, naming the line") {
  auto message_of = [](const std::string& src) {
    try {
      parse_template(src, "qwen3.jinja");
    } catch (const ChatTemplateError&) {
      return std::string("wrong type");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message_of("a\n{{ x | xyz }}") == "chat template qwen3.jinja line 2: filter 'xyz' is not supported");
  CHECK(message_of("\n\n{% if x is weird %}{% endif %}") == "chat template qwen3.jinja line 3: test 'weird' is not supported");
  CHECK(message_of("{% extends 'base.html' %}") == "chat template qwen3.jinja line 1: 'extends' tag is not supported");
  CHECK(message_of("{% include 'x' %}") == "chat template qwen3.jinja line 1: 'include' tag is not supported");
  CHECK(message_of("x\n{% frobnicate %}") == "chat template qwen3.jinja line 2: unknown tag 'frobnicate'");
  CHECK(message_of("{% for x in y recursive %}{% endfor %}") ==
        "chat template qwen3.jinja line 1: recursive for loops are not supported");
  CHECK(message_of("{% if x %}") == "chat template qwen3.jinja line 1: unexpected end of template; expected 'elif'");
  CHECK(message_of("{{ f(*args) }}") == "chat template qwen3.jinja line 1: *args and **kwargs in calls are not supported");
  CHECK(message_of("a\nb\n{{ 'open }}") == "chat template qwen3.jinja line 3: string literal is not closed");
  CHECK(message_of("{{ 1 +* 2 }}") == "chat template qwen3.jinja line 1: unexpected '*'");
}

TEST_CASE("jinja: runtime errors name the line of the failing expression") {
  try {
    render("line one\n{% set x = 1 %}\n{{ missing.attr }}");
    FAIL("expected an error");
  } catch (const ChatTemplateError& e) {
    CHECK(std::string(e.what()) == "chat template t.jinja line 3: 'missing' is undefined");
  }
  // raise_exception from inside a macro and a loop: still only the template's words.
  try {
    render("{% macro fail(m) %}{{ raise_exception(m ~ '!') }}{% endmacro %}{% for i in [1] %}{{ fail('bad') }}{% endfor %}");
    FAIL("expected an error");
  } catch (const ChatTemplateError& e) {
    CHECK(std::string(e.what()) == "bad!");
  }
}

TEST_CASE("jinja: methods with no Python counterpart here fail loudly, not silently") {
  CHECK_THROWS_AS(render("{{ 'a'.zfill(3) }}"), ChatTemplateError);  // not a known str method: undefined call
  CHECK_THROWS_AS(render("{{ '{:>5}'.format(1) }}"), ChatTemplateError);
  // Python's integers are unbounded: 2 ** 64 prints 18446744073709551616 there. Ours stop at 64 bits.
  CHECK(render("{{ 2 ** 62 }} {{ 9223372036854775806 + 1 }}") == "4611686018427387904 9223372036854775807");
  CHECK_THROWS_AS(render("{{ 2 ** 63 }}"), ChatTemplateError);
  CHECK_THROWS_AS(render("{{ 9223372036854775807 + 1 }}"), ChatTemplateError);
  CHECK_THROWS_AS(render("{{ 'x' * 1000000000 }}"), ChatTemplateError);
  // The int filter likewise, at the edge: the largest int64 and the first past it, from digits
  // and from a float (2^63 = 9223372036854775808.0 has no int64; the double below it has).
  CHECK(render("{{ '9223372036854775807' | int }} {{ '-9223372036854775808' | int }}") ==
        "9223372036854775807 -9223372036854775808");
  CHECK_THROWS_WITH_AS(render("{{ '9223372036854775808' | int }}"), doctest::Contains("64 bits"), ChatTemplateError);
  CHECK(render("{{ 9223372036854774784.0 | int }} {{ -9223372036854775808.0 | int }}") ==
        "9223372036854774784 -9223372036854775808");
  CHECK_THROWS_WITH_AS(render("{{ 9223372036854775808.0 | int }}"), doctest::Contains("64 bits"), ChatTemplateError);
  CHECK_THROWS_WITH_AS(render("{{ '1e19' | int }}"), doctest::Contains("64 bits"), ChatTemplateError);
  // A float infinity: Python's int() message (jinja2 itself folds this constant at compile time and
  // fails there with a NameError; an infinity reaching the filter at render time raises this).
  CHECK_THROWS_WITH_AS(render("{{ (1e308 * 10) | int }}"),
                       doctest::Contains("cannot convert float infinity to integer"), ChatTemplateError);
}

// Found by chat_template_fuzz in CI's smoke runs: selectattr('3333...') parsed the digits with
// std::stoll, whose out_of_range escaped the renderer and ended the process. An attribute of
// digits past int64 names no item (as in jinja2: testdata/chat/jinja_cases.json has the case
// filter.attribute_index_past_int64).
TEST_CASE("jinja: an attribute of digits past int64 is an undefined item, not a crash") {
  CHECK(render("{{ [[1, 2]] | selectattr('33333333333333333333333333333') | list | length }}") == "0");
  CHECK_THROWS_AS(render("{{ [missing] | map(attribute='99999999999999999999') | list }}"), ChatTemplateError);
  // str.format's field of digits past size_t (stoul threw there too), and one that only starts
  // with a digit: a keyword, as in Python.
  CHECK_THROWS_WITH_AS(render("{{ '{99999999999999999999}'.format(1) }}"), doctest::Contains("Too many decimal digits"),
                       ChatTemplateError);
  CHECK_THROWS_WITH_AS(render("{{ '{0abc}'.format(1) }}"), doctest::Contains("KeyError: '0abc'"), ChatTemplateError);
  // A repetition whose size x count wraps past 2^64 (to 2 here), and indent past the string cap.
  CHECK_THROWS_WITH_AS(render("{{ 'abc' * 6148914691236517206 }}"), doctest::Contains("too large"), ChatTemplateError);
  // unique keeps a hash set (it compared each item with every kept one: minutes here); numbers
  // equal across kinds and -0.0 are one key, as in jinja2, whose output these are.
  CHECK(render("{{ ((range(100000) | list) * 20) | unique | list | length }}") == "100000");
  CHECK(render("{{ [1, 1.0, true, '1', 0, -0.0, false, none, none, 'A', 'a', 'b', 2.5, 5 / 2] | unique | list }}|"
               "{{ ['A', 'a', 'b'] | unique(case_sensitive=true) | list }}") ==
        "[1, '1', 0, None, 'A', 'b', 2.5]|['A', 'a', 'b']");
  // An empty string or list repeated 2^63 - 1 times is empty at once, as in Python (the fuzzer
  // found a loop of that many empty appends); safe text stays safe (jinja2 prints '<b><b>&lt;|&lt;').
  CHECK(render("{{ '' * 9223372036854775807 }}|{{ ([] * 9223372036854775807) | length }}|{{ (() * 9223372036854775807) "
               "| length }}") == "|0|0");
  CHECK(render("{{ ('<b>' | safe) * 2 + '<' }}|{{ ('<b>' | safe) * 0 + '<' }}") == "<b><b>&lt;|&lt;");
  CHECK_THROWS_WITH_AS(render("{{ 'a\nb' | indent(16777217) }}"), doctest::Contains("width too big"),
                       ChatTemplateError);
  // batch filling its last row past the cap (jinja2 would build 10^12 fill values).
  CHECK_THROWS_WITH_AS(render("{{ [1] | batch(1000000000000, 0) | list }}"), doctest::Contains("too big"),
                       ChatTemplateError);
  CHECK(render("{{ [1] | batch(1000000000000) | list }}") == "[[1]]");
  // %d of a float infinity or past int64 (the cast was undefined): Python's message, the 64-bit error.
  CHECK_THROWS_WITH_AS(render("{{ '%d' % (1e308 * 10) }}"), doctest::Contains("cannot convert float infinity"),
                       ChatTemplateError);
  CHECK_THROWS_WITH_AS(render("{{ '%d' % 1e300 }}"), doctest::Contains("64 bits"), ChatTemplateError);
  CHECK(render("{{ '%d' % 9223372036854774784.0 }}") == "9223372036854774784");
  // INT64_MIN // -1 (a hardware trap in C; Python gives 9223372036854775808).
  CHECK_THROWS_WITH_AS(render("{{ (-9223372036854775807 - 1) // -1 }}"), doctest::Contains("64 bits"),
                       ChatTemplateError);
  // Negating the smallest int64 (Python gives 9223372036854775808).
  CHECK_THROWS_WITH_AS(render("{{ -(-9223372036854775807 - 1) }}"), doctest::Contains("64 bits"), ChatTemplateError);
  CHECK(render("{{ -(-9223372036854775807) }}") == "9223372036854775807");
  // abs of the smallest int64 is past int64 (Python gives 9223372036854775808).
  CHECK_THROWS_WITH_AS(render("{{ (-9223372036854775807 - 1) | abs }}"), doctest::Contains("64 bits"),
                       ChatTemplateError);
}

TEST_CASE("jinja: the whitespace matrix (trim_blocks + lstrip_blocks with - and +)") {
  // Expected strings from jinja2 3.1.6 with trim_blocks=True, lstrip_blocks=True.
  CHECK(render("  {% if true %}\n  x\n  {% endif %}\n") == "  x\n");
  CHECK(render("  {%- if true %}\n  x\n  {%- endif %}\n") == "  x");
  CHECK(render("  {%+ if true %}\nx{% endif %}") == "  x");
  CHECK(render("{% if true -%}\n\n  x{% endif %}") == "x");
  CHECK(render("{% if true +%}\n  x{% endif %}") == "\n  x");
  CHECK(render("a  {{- 'b' }}  c") == "ab  c");
  CHECK(render("a  {{ 'b' -}}  c") == "a  bc");
  CHECK(render("x {% if true %}y{% endif %}\nz") == "x yz");  // mid-line: no lstrip, but trim_blocks still eats the newline
  CHECK(render("\n  {# comment #}\n  a") == "\n  a");
  CHECK(render("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n") == "  1\n  2\n");
  CHECK(render("{{ 'a' }}\n{{ 'b' }}\n") == "a\nb");  // variables never trim the newline after them
  CHECK(render("{% raw -%}  \n {{ x }} {%- endraw %}\n.") == "{{ x }}.");
}

// A namespace or loop that holds itself, directly or through a list, dict, loop or method, is a
// reference cycle of shared_ptrs: the render must still free it (ASan's leak check fails the
// sanitizer run of this test otherwise). `keep` hands the namespace out of the render, so the
// normal build sees the cycle broken too: the interpreter empties it when the render ends.
TEST_CASE("jinja: namespaces and loops that hold themselves are freed when the render ends") {
  const std::pair<const char*, const char*> cases[] = {
      {"{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns.me.me.a }}{{ keep(ns) }}", "1"},
      {"{% set ns = namespace(a=2) %}{% set ns.l = [1, ns] %}{{ ns.l[1].l[1].a }}{{ keep(ns) }}", "2"},
      {"{% set ns = namespace(a=3) %}{% set ns.d = {'x': [ns]} %}{{ ns.d.x[0].a }}{{ keep(ns) }}", "3"},
      {"{% set ns = namespace(a=4) %}{% set ns.get = {'n': ns}.get %}{{ ns.get('n').a }}{{ keep(ns) }}", "4"},
      {"{% set ns = namespace() %}{% for x in [ns] %}{% set ns.l = loop %}{% endfor %}{{ ns.l.length }}{{ keep(ns) }}",
       "1"},
      {"{% set ns = namespace() %}{% for x in [1] %}{{ loop.changed(loop) }}{% set ns.l = loop %}{% endfor %}"
       "{{ keep(ns) }}",
       "True"},
      {"{% set ns = namespace(a=5) %}{% set ns.me = ns %}{{ keep(ns) }}{{ raise_exception('stop') }}", nullptr},
  };
  for (const auto& [source_text, expected] : cases) {
    const std::string source = source_text;
    CAPTURE(source);
    Template tmpl = parse_template(source, "t.jinja");
    Value kept;
    {
      Interpreter in("t.jinja");
      in.set_global("keep", Value::callable("keep", [&kept](Interpreter&, Args& a) {
        kept = a.pos.at(0);
        return Value(std::string());
      }));
      if (expected) {
        CHECK(in.render(tmpl) == expected);
      } else {
        CHECK_THROWS_AS(in.render(tmpl), ChatTemplateError);  // an error ends the render too
      }
    }
    REQUIRE(kept.kind() == Kind::kNamespace);
    CHECK(kept.size() == 0);
  }
  // The same cycles inside an ordinary render, where nothing outside keeps a reference.
  CHECK(render("{% set ns = namespace() %}{% set ns.me = ns %}{% set ns.l = [ns] %}{{ ns.me.l[0].me is sameas ns }}") ==
        "True");
  CHECK(render("{% for x in [1, 1, 2] %}{{ loop.changed(loop, x) }}{% endfor %}") == "TrueFalseTrue");
}

// Loop iterations and macro calls count against the render's limit (kMaxRenderSteps, 1,000,000;
// here 1,000 to check the boundary cheaply): exactly the limit runs, one more is an error, and
// the count starts again with every render.
TEST_CASE("jinja: a render stops at its limit of loop iterations and macro calls, exactly") {
  const Limited limited([](Interpreter& in) { in.set_max_steps(1000); },
                        "more than 1000 loop iterations and macro calls");
  const auto run = [&](const std::string& source) { return limited.run(source); };
  const auto fails = [&](const std::string& source) { return limited.fails(source); };
  CHECK(run("{% for i in range(1000) %}{% endfor %}ok") == "ok");
  CHECK(fails("{% for i in range(1001) %}{% endfor %}"));
  CHECK(run("{% for i in range(10) %}{% for j in range(99) %}{% endfor %}{% endfor %}ok") == "ok");  // 10 + 990
  CHECK(fails("{% for i in range(10) %}{% for j in range(100) %}{% endfor %}{% endfor %}"));        // 10 + 1000
  CHECK(run("{% macro f() %}{% endmacro %}{% for i in range(500) %}{{ f() }}{% endfor %}ok") == "ok");  // 500 + 500
  CHECK(fails("{% macro f() %}{% endmacro %}{% for i in range(500) %}{{ f() }}{% endfor %}{{ f() }}"));
  CHECK(fails("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}"));
}

// Strings made during a render count against its byte budget (kMaxRenderStringBytes, 1 GiB; here
// 1,000 bytes): exactly the budget passes, one byte more fails, summed over the render and
// started again with the next; the template's own literals and the output buffer are not strings
// made (the output has its own 16 MiB limit).
TEST_CASE("jinja: a render stops at its budget of string bytes, exactly") {
  const Limited limited([](Interpreter& in) { in.set_max_string_bytes(1000); },
                        "more than 1000 bytes of strings made in one render");
  const auto run = [&](const std::string& source) { return limited.run(source); };
  const auto fails = [&](const std::string& source) { return limited.fails(source); };
  CHECK(run("{% set a = 'x' * 1000 %}{{ a | length }}") == "1000");
  CHECK(fails("{% set a = 'x' * 1001 %}"));
  CHECK(run("{% for i in range(4) %}{% set a = 'xy' * 125 %}{% endfor %}ok") == "ok");  // 4 x 250
  CHECK(fails("{% for i in range(4) %}{% set a = 'xy' * 126 %}{% endfor %}"));         // 4 x 252
  CHECK(run("{% for i in range(5) %}{{ ('%200d' % i) | length }}{% endfor %}x") == "200200200200200x");
  CHECK(fails("{% for i in range(5) %}{{ ('%200d' % i) | length }}{% endfor %}x{{ 'y' * 1 }}"));
}

// List and tuple items made or walked during a render count against its item budget
// (kMaxRenderListItems, 16 M; here 1,000). A literal's items are made, so `[0] * 999` makes 1 +
// 999 and passes, one more fails; iteration, `in` and `==` walk a list's items (`for` over
// range(4) makes 4 and walks 4; each turn then makes 1 + k). The request's messages are borrowed,
// not made, but walked. With the real budget a quadratic sum of lists, or `in` a big list in a
// loop, stops in a few dozen turns.
TEST_CASE("jinja: a render stops at its budget of list items made or walked, exactly") {
  const Limited limited([](Interpreter& in) { in.set_max_list_items(1000); },
                        "more than 1000 list items made or walked in one render");
  const auto run = [&](const std::string& source) { return limited.run(source); };
  const auto fails = [&](const std::string& source) { return limited.fails(source); };
  CHECK(run("{% set a = [0] * 999 %}{{ a | length }}") == "999");
  REQUIRE(fails("{% set a = [0] * 1000 %}"));  // else the quadratic sum below runs for minutes
  CHECK(run("{% for i in range(4) %}{% set a = [i] * 247 %}{% endfor %}ok") == "ok");  // 4 + 4 + 4 x (1 + 247)
  CHECK(fails("{% for i in range(4) %}{% set a = (i,) * 248 %}{% endfor %}"));        // 4 + 4 + 4 x (1 + 248)
  CHECK(run("{% set a = [0] * 499 %}{{ 1 in a }}") == "False");  // 500 made, 499 walked
  REQUIRE(fails("{% set a = [0] * 500 %}{{ 1 in a }}"));  // else the loop of `in` below runs for hours
  CHECK(run("{% set a = [0] * 499 %}{{ a == a }}") == "True");  // 500 made, 499 walked
  CHECK(fails("{% set a = [0] * 500 %}{{ a == a }}"));
  CHECK_THROWS_WITH_AS(render("{{ ([[0] * 4096] * 4096) | sum(start=[]) | length }}"),
                       doctest::Contains("more than 16777216 list items made or walked in one render"),
                       ChatTemplateError);
  CHECK_THROWS_WITH_AS(render("{% set b = [0] * 10000000 %}{% for i in range(100000) %}{{ 1 in b }}{% endfor %}"),
                       doctest::Contains("list items made or walked"), ChatTemplateError);
}

// Bytes of strings walked without making anything count against the render's walk budget
// (kMaxRenderWalkBytes, 8 GiB; here 1,000): `in` walks the string searched, `==` two strings of
// one length (of different lengths: nothing), `<` the shorter, `length` the string. Exactly the
// budget passes, one byte more fails. With the real budget, `in` a 16 MiB string in a loop stops
// in a few hundred turns instead of running for minutes.
TEST_CASE("jinja: a render stops at its budget of string bytes walked, exactly") {
  const Limited limited([](Interpreter& in) { in.set_max_walk_bytes(1000); },
                        "more than 1000 bytes of strings walked (in, ==, <, length) in one render");
  const auto run = [&](const std::string& source) { return limited.run(source); };
  const auto fails = [&](const std::string& source) { return limited.fails(source); };
  CHECK(run("{% set a = 'x' * 500 %}{{ 'y' in a }}{{ 'x' in a }}") == "FalseTrue");
  CHECK(fails("{% set a = 'x' * 501 %}{{ 'y' in a }}{{ 'x' in a }}"));
  CHECK(run("{% set a = 'x' * 500 %}{% set b = 'x' * 500 %}{{ a == b }}{{ a != b }}") == "TrueFalse");
  CHECK(fails("{% set a = 'x' * 501 %}{% set b = 'x' * 501 %}{{ a == b }}{{ a != b }}"));
  CHECK(run("{% set a = 'x' * 999 %}{% for i in range(100) %}{% if a == 'y' %}!{% endif %}{% endfor %}"
            "{{ a | length }}") == "999");
  CHECK(fails("{% set a = 'x' * 1001 %}{{ a | length }}"));
  CHECK(run("{% set a = 'x' * 1000 %}{{ a < a ~ 'y' }}") == "True");
  CHECK(fails("{% set a = 'x' * 1001 %}{{ a < a ~ 'y' }}"));
  CHECK_THROWS_WITH_AS(render("{% set s = 'a' * 16000000 %}{% for i in range(100000) %}{{ 'b' in s }}{% endfor %}"),
                       doctest::Contains("more than 8192 MiB of strings walked"), ChatTemplateError);
}

// Nesting past what the stack holds is refused with an error, never a crash (each of these
// overflowed the stack before). The tree is at most kMaxTreeDepth (500) deep: a print of `1`
// under k filters is k + 2 deep, so 498 filters pass and 499 fail, even 30,000 of them (the
// chain is built by a loop, and freed without recursion). The parser's own recursion stops at
// 500 levels (123 parentheses pass). Values nested a million deep are freed without recursion
// and refused where they are walked, as are macros recursing through deep expressions.
std::string many(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST_CASE("jinja: nesting is refused before the stack runs out") {
  CHECK(render("{{ 1" + many(" | abs", 498) + " }}") == "1");
  for (int k : {499, 30000}) {
    CHECK_THROWS_WITH_AS(render("{{ 1" + many(" | abs", k) + " }}"), doctest::Contains("nested more than 500 deep"),
                         Error);
  }
  CHECK_THROWS_WITH_AS(render("{{ 1" + many(" + 1", 30000) + " }}"), doctest::Contains("nested more than 500"), Error);
  CHECK(render("{{ " + many("(", 123) + "7" + many(")", 123) + " }}") == "7");
  for (const std::string& deep : {"{{ " + many("(", 124) + "7" + many(")", 124) + " }}",
                                  "{{ " + many("(", 30000) + "7" + many(")", 30000) + " }}",
                                  "{{ " + many("[", 30000) + many("]", 30000) + " }}",
                                  "{{ " + many("-", 30000) + "1 }}", "{{ " + many("not ", 30000) + "1 }}",
                                  many("{% if 1 %}", 30000) + many("{% endif %}", 30000)}) {
    CHECK_THROWS_WITH_AS(render(deep), doctest::Contains("nested too deeply"), Error);
  }
  const std::string nest_list =
      "{% set ns = namespace(x=none) %}{% for i in range(1000) %}{% for j in range(998) %}"
      "{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}";
  CHECK(render(nest_list + "{{ ns.x | length }}") == "1");  // 998,000 lists deep, freed flat
  for (const char* walk : {"{{ ns.x | tojson }}", "{{ ns.x == ns.x }}", "{{ ns.x }}", "{{ [ns.x, ns.x] | sort }}"}) {
    CHECK_THROWS_WITH_AS(render(nest_list + walk), doctest::Contains("nested too deeply"), ChatTemplateError);
  }
  CHECK_THROWS_WITH_AS(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1)" + many(" | string", 450) +
                              " }}{% endif %}{% endmacro %}{{ f(250) }}"),
                       doctest::Contains("nested too deeply"), ChatTemplateError);
}

TEST_CASE("jinja: tojson writes keys in request order and Python's float forms") {
  ChatJson vars = ChatJson::parse(R"({"v": {"zeta": 1, "alpha": [1.0, 1e20, 0.1, 1e-7, 100.0, 1.5e16, 1234567890123456789]}})");
  CHECK(render_with("{{ v | tojson }}", vars) ==
        R"({"zeta": 1, "alpha": [1.0, 1e+20, 0.1, 1e-07, 100.0, 1.5e+16, 1234567890123456789]})");
  CHECK(render_with("{{ v.alpha[4] }} {{ v.alpha[5] }} {{ 1e16 }} {{ 9999999999999998.0 }} {{ 0.0001 }}", vars) ==
        "100.0 1.5e+16 1e+16 9999999999999998.0 0.0001");
}

}  // namespace
}  // namespace nvllm::jinja
