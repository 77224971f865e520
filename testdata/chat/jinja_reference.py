#!/usr/bin/env python3
"""Reference renders for nvllm's Jinja engine, made with Python jinja2 set up as transformers sets
it up for apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, the {% generation %} block, and transformers' tojson / raise_exception /
strftime_now). Tested with jinja2 3.1.6.

    python3 testdata/chat/jinja_reference.py     # rewrites jinja_cases.json and template_cases.jsonl

jinja_cases.json: one case per language feature ({name, template, vars, expected | error}).
template_cases.jsonl: every template under templates/ rendered for a set of conversations the
way apply_chat_template renders them (content converted as vLLM does first).
"""
import json
import os
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


class AssistantTracker(Extension):
    """transformers' {% generation %} block: renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()

MSGS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi 'there' \"you\""},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Thé ☕ 𝄞"},
]
VARS = {
    "messages": MSGS,
    "d": {"b": 1, "a": [1, 2.5, None, True, "x"], "items": 5},
    "l": [3, 1, 2],
    "s": "  Hello World  ",
    "n": 7,
    "f": 2.5,
    "t": True,
    "nothing": None,
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather in \"C\"",
                                                  "parameters": {"type": "object", "properties": {
                                                      "city": {"type": "string"}}, "required": ["city"]}}}],
}

# (feature, template). Every template renders with VARS.
FEATURES = [
    ("text.plain", "Hello"),
    ("text.trailing_newline_dropped", "Hello\n"),
    ("text.two_trailing_newlines", "Hello\n\n"),
    ("text.crlf", "a\r\nb\rc"),
    ("comment", "a{# note #}b"),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %}"),
    ("print.none_bool", "{{ nothing }} {{ t }} {{ false }}"),
    ("print.numbers", "{{ n }} {{ f }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 }} {{ 1e-5 }} {{ 3 / 2 }} {{ 4 / 2 }} {{ -0.0 }}"),
    ("print.list_dict_repr", "{{ l }} {{ d }} {{ [\"it's\", 'a\"b', 'a\\nb', 'é'] }} {{ (1,) }} {{ (1, 2) }}"),
    ("print.undefined", "[{{ missing }}]"),
    ("string.escapes", "{{ 'a\\tb\\\\c\\'d\\x41\\u00e9\\U0001F600\\q' }}"),
    ("string.adjacent", "{{ 'a' \"b\" 'c' }}"),
    ("ws.trim_blocks", "{% if true %}\nyes\n{% endif %}\nend"),
    ("ws.lstrip_blocks", "line\n    {% if true %}\n    x\n    {% endif %}\ndone"),
    ("ws.minus", "a   {%- if true -%}   b   {%- endif -%}   c"),
    ("ws.minus_var", "a \n {{- 'b' -}} \n c"),
    ("ws.plus_lstrip", "a\n    {%+ if true %}b{% endif %}"),
    ("ws.plus_trim", "{% if true +%}\nb{% endif %}"),
    ("ws.var_no_lstrip", "{{ 1 }}  {% if true %}b{% endif %}"),
    ("ws.comment_lstrip_trim", "  {# c #}\nx"),
    ("ws.comment_minus", "a  {#- c -#}  b"),
    ("ws.raw_minus", "{%- raw -%}  x  {%- endraw -%}  y"),
    ("ws.raw_newline", "{% raw %}\n  x{% endraw %}\ny"),
    ("ws.block_mid_line", "a {% if true %}b{% endif %} c"),
    ("ws.indented_var", "    {{ 'x' }}\n"),
    ("ws.tabs", "\t{% if true %}\n\tx\n\t{% endif %}\n"),
    ("if.elif_else", "{% for i in [1, 2, 3] %}{% if i == 1 %}one{% elif i == 2 %}two{% else %}many{% endif %},{% endfor %}"),
    ("for.loop_vars", "{% for x in l %}{{ loop.index0 }}{{ loop.index }}{{ loop.revindex }}{{ loop.revindex0 }}"
                      "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
    ("for.prev_next", "{% for x in l %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}"),
    ("for.cycle", "{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}"),
    ("for.else", "{% for x in [] %}x{% else %}empty{% endfor %}"),
    ("for.filter_cond", "{% for x in l if x > 1 %}{{ x }}:{{ loop.length }} {% endfor %}"),
    ("for.filter_on_iterable", "{% for x in l | sort %}{{ x }}{% endfor %}"),
    ("for.unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"),
    ("for.unpack_items_filter", "{% for k, v in d | items %}{{ k }};{% endfor %}"),
    ("for.dict_keys", "{% for k in d %}{{ k }}{% endfor %}"),
    ("for.string", "{% for c in 'abc' %}{{ c }}-{% endfor %}"),
    ("for.break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("for.scope", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }},{% endfor %}{{ x }}"),
    ("for.nested_loop", "{% for a in [1, 2] %}{% for b in [1, 2] %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}"),
    ("for.reverse_slice", "{% for m in messages[::-1] %}{{ m.role }},{% endfor %}"),
    ("set.simple", "{% set a = 'x' %}{% set b, c = 1, 2 %}{{ a }}{{ b }}{{ c }}"),
    ("set.namespace", "{% set ns = namespace(found=false, n=0) %}{% for x in l %}{% set ns.n = ns.n + x %}"
                      "{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}"),
    ("set.block", "{% set body %}Hi {{ n }}{% endset %}[{{ body }}]"),
    ("macro.call", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Bob') }} {{ greet('Al', punct='?') }}"),
    ("macro.caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                     "{% call wrap('b') %}bold {{ n }}{% endcall %}"),
    ("macro.caller_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                          "{% call(item) each(l) %}[{{ item }}]{% endcall %}"),
    ("macro.sees_globals", "{% set x = 1 %}{% macro m() %}{{ x }}{{ n }}{% endmacro %}{% set x = 2 %}{{ m() }}"),
    ("filter_block", "{% filter upper %}hello {{ n }}{% endfilter %}"),
    ("with", "{% with a = 1, b = n %}{{ a + b }}{% endwith %}[{{ a }}]"),
    ("generation", "{% generation %}gen {{ n }}{% endgeneration %}"),
    ("expr.arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} "
                   "{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -n }} {{ +f }} {{ true + 1 }}"),
    ("expr.concat", "{{ 'a' ~ 1 ~ none ~ missing ~ [1] }}"),
    ("expr.string_ops", "{{ 'ab' * 3 }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ [0] * 2 }}"),
    ("expr.compare", "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 'a' != 'a' }} "
                     "{{ none == none }} {{ 1 >= 2 }} {{ 2 <= 2 }}"),
    ("expr.in", "{{ 'ell' in 'hello' }} {{ 2 in l }} {{ 'b' in d }} {{ 'z' not in d }} {{ 5 not in l }}"),
    ("expr.logic", "{{ true and 'x' }} {{ false or 'y' }} {{ not n }} {{ none or 0 or '' }} {{ 0 and 1 }}"),
    ("expr.condexpr", "{{ 'yes' if n > 5 else 'no' }} [{{ 'only' if false }}] {{ 1 if false else 2 if true else 3 }}"),
    ("expr.slices", "{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[-2:] }} {{ l[1:] }} {{ l[:-1] }} "
                    "{{ l[::2] }} {{ 'héllo'[1] }} {{ l[-1] }} {{ messages[1:3] | length }}"),
    ("expr.attr_item", "{{ messages[0].role }} {{ messages[0]['content'] }} {{ d['items'] }} "
                       "{{ messages.0.role }}"),
    ("expr.literals", "{{ [1, 'a', none] }} {{ {'k': 'v', 'n': [1]} }} {{ ('a', 'b') }} {{ () }} {{ [] }} {{ {} }}"),
    ("expr.filter_precedence", "{{ messages | length - 1 }} {{ -3 | abs }} {{ 'a' ~ 'b' | upper }}"),
    ("expr.missing_attr", "[{{ d.nope }}] [{{ nothing.nope }}] [{{ l[10] }}]"),
    ("tests.types", "{{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ n is iterable }} "
                    "{{ missing is iterable }} {{ l is sequence }} {{ d is sequence }} {{ n is number }} {{ t is number }} "
                    "{{ n is integer }} {{ t is integer }} {{ f is float }} {{ t is boolean }} {{ n is boolean }} "
                    "{{ raise_exception is callable }} {{ s is callable }}"),
    ("tests.defined", "{{ n is defined }} {{ missing is defined }} {{ missing is undefined }} {{ nothing is none }} "
                      "{{ n is not none }} {{ d.nope is defined }}"),
    ("tests.true_false", "{{ t is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}"),
    ("tests.compare", "{{ n is equalto 7 }} {{ n is eq(7) }} {{ n is ne 7 }} {{ 'x' is in 'xyz' }} {{ n is gt 3 }} "
                      "{{ n is lt 3 }} {{ n is ge 7 }} {{ n is le 6 }} {{ n is sameas 7 }}"),
    ("tests.numbers", "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ 10 is divisibleby(3) }}"),
    ("tests.case", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ '123' is upper }}"),
    ("filter.trim", "[{{ s | trim }}] [{{ 'xxhixx' | trim('x') }}] [{{ missing | trim }}]"),
    ("filter.tojson", "{{ tools | tojson }}"),
    ("filter.tojson_indent", "{{ tools | tojson(indent=2) }}"),
    ("filter.tojson_options", "{{ d | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }} "
                              "{{ 'é☕𝄞' | tojson }} {{ 'é☕𝄞' | tojson(ensure_ascii=true) }} {{ [] | tojson(indent=2) }}"),
    ("filter.tojson_positional", "{{ 'é' | tojson(1) }} {{ d | tojson(false, 1) }} {{ {'b': [1]} | tojson(false, none, (',', '=')) }} "
                                 "{{ {'b': 1, 'a': 2} | tojson(false, none, none, true) }} {{ [1] | tojson(indent=0) }}"),
    ("filter.tojson_values", "{{ [1.0, 1e20, 0.1, 1e-7, 123456789.125, -2, true, none, 'q\"\\\\\\n\\t\\u0001'] | tojson }}"),
    ("filter.tojson_indent_str", "{{ {'a': {'b': []}, 'c': {}} | tojson(indent='\\t') }}"),
    ("filter.length", "{{ l | length }} {{ s | length }} {{ d | count }} {{ 'héllo' | length }} {{ missing | length }}"),
    ("filter.default", "{{ missing | default('dflt') }} {{ n | d('x') }} {{ '' | default('empty', true) }} "
                       "{{ '' | default('kept') }} {{ nothing | default('n') }}"),
    ("filter.case", "{{ 'hello wORLD-foo (bar)' | title }} {{ 'hELLO' | capitalize }} {{ s | upper }} {{ s | lower }}"),
    ("filter.items_list", "{{ d | items | list }} {{ d | list }} {{ 'ab' | list }} {{ missing | items | list }}"),
    ("filter.join", "{{ l | join(', ') }} {{ messages | join('|', attribute='role') }} {{ ['a', 1] | join }}"),
    ("filter.replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }}"),
    ("filter.selectattr", "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} "
                          "{{ messages | rejectattr('role', 'eq', 'user') | list | length }} "
                          "{{ messages | selectattr('role') | list | length }}"),
    ("filter.select", "{{ range(6) | select('odd') | list }} {{ range(6) | reject('even') | list }} "
                      "{{ [0, 1, '', 'a'] | select | list }}"),
    ("filter.map", "{{ l | map('string') | list }} {{ messages | map(attribute='role') | unique | list }} "
                   "{{ [{'x': 1}, {}] | map(attribute='x', default=0) | list }}"),
    ("filter.attribute_index_past_int64",
     "{{ messages | selectattr('33333333333333333333333') | list | length }} "
     "{{ [[1, 2]] | map(attribute='99999999999999999999') | list | length }} "
     "{{ [[1, 2]] | map(attribute='99999999999999999999', default='d') | list }} {{ [[1, 2]] | map(attribute='1') | list }} "
     "{{ [{'99999999999999999999': 5}] | map(attribute='99999999999999999999', default='no') | list }}"),
    ("filter.int_edges", "{{ '1e400' | int }} {{ '-1e400' | int(4) }} {{ 'inf' | int(4) }} {{ 'nan' | int(7) }} "
                         "{{ '1e-400' | int }} {{ ' 12 ' | int }} {{ 9.2e18 | int }} {{ -9.2e18 | int }} {{ '42.7' | int }} "
                         "{{ '-0.5' | int }}"),
    ("filter.float_edges", "{{ '1e400' | float }} {{ '-1e400' | float }} {{ '1e-400' | float }} {{ 'nan' | float }} "
                           "{{ ' 2.5 ' | float }} {{ 'x' | float(1.5) }} {{ '' | float }}"),
    ("filter.indent_negative", "[{{ 'a\nb' | indent(-3) }}] [{{ 'a\nb' | indent(-3, true) }}]"),
    ("filter.abs_int64", "{{ (-9223372036854775807) | abs }} {{ 9223372036854775807 | abs }}"),
    ("filter.first_last", "{{ l | first }} {{ l | last }} {{ 'abc' | first }} [{{ [] | first }}]"),
    ("filter.numbers", "{{ '42' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} "
                       "{{ 'x' | float }} {{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} "
                       "{{ 2.567 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 1 | round }} {{ l | sum }} {{ [0.5, 1] | sum }}"),
    ("filter.string_safe_escape", "{{ 5 | string }} {{ '<a href=\"x\">&\\'</a>' | e }} {{ '<b>' | safe }} {{ '<i>' | escape }}"),
    ("filter.unique_sort", "{{ ['b', 'A', 'a', 'b'] | unique | list }} {{ ['b', 'A', 'a'] | sort }} "
                           "{{ l | sort(reverse=true) }} {{ messages | sort(attribute='role') | map(attribute='role') | list }} "
                           "{{ ['b', 'A'] | sort(case_sensitive=true) }}"),
    ("filter.reverse", "{{ 'abc' | reverse }} {{ l | reverse | list }}"),
    ("filter.indent", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}"),
    ("filter.misc", "{{ 'a b  c' | wordcount }} {{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ l | min }} {{ l | max }} "
                    "{{ {'b': 1, 'a': 2} | dictsort }}"),
    ("method.strip", "[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ 'xxhix'.strip('x') }}] "
                     "[{{ '\\n\\nhi\\n'.lstrip('\\n') }}] [{{ 'ab\\n'.rstrip('\\n') }}]"),
    ("method.split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} "
                     "{{ 'a,b,c'.rsplit(',', 1) }} {{ 'x</think>y'.split('</think>')[-1] }} {{ ''.split(',') }} {{ ''.split() }}"),
    ("method.affix", "{{ s.strip().startswith('Hell') }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith(('x', 'a')) }} "
                     "{{ 'abc'.endswith(('x', 'y')) }}"),
    ("method.case", "{{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'Ab'.upper() }} {{ 'Ab'.lower() }} "
                    "{{ 'ß'.upper() }} {{ 'ÉCOLE'.lower() }}"),
    ("method.replace_format", "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} "
                              "{{ '{} and {}'.format(1, 'x') }} {{ '{0}{1}{0}'.format('a', 'b') }} "
                              "{{ 'Hi {name}!'.format(name='Bo') }} {{ '{{}}'.format() }}"),
    ("method.search", "{{ 'banana'.count('a') }} {{ 'banana'.find('na') }} {{ 'banana'.rfind('na') }} "
                      "{{ 'banana'.find('x') }} {{ '-'.join(['a', 'b']) }} {{ '12'.isdigit() }} {{ 'a1'.isalpha() }}"),
    ("method.dict", "{{ d.get('b') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys() | list }} "
                    "{{ d.values() | list | length }} {{ d.items() | list | first }}"),
    ("global.range", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}"),
    ("global.dict", "{{ dict(a=1, b='x') }}"),
    ("global.namespace_print", "{% set ns = namespace(a=1) %}{{ ns.a }} {{ ns.missing }}"),
    ("scope.set_later_hides_context", "{% for i in [1] %}[{{ n }}]{% endfor %}{% set n = 'new' %}[{{ n }}]"),
    ("scope.read_first_keeps_context", "[{{ n }}]{% for i in [1] %}[{{ n }}]{% endfor %}{% set n = 'new' %}"),
    ("scope.set_in_branch_keeps_context", "{% for i in [1] %}[{{ n }}]{% endfor %}{% if false %}{% set n = 'x' %}{% endif %}"),
    ("scope.macro_before_set", "{% macro m() %}[{{ n }}]{% endmacro %}{{ m() }}{% set n = 'new' %}{{ m() }}"),
    ("scope.loop_body_owns_name", "{% for i in [1, 2] %}{% for j in [1] %}[{{ n }}]{% endfor %}{% set n = i %}{% endfor %}"),
    ("scope.loop_read_then_set", "{% for i in [1, 2] %}[{{ n }}]{% set n = i %}[{{ n }}]{% endfor %}[{{ n }}]"),
    ("scope.for_else_own_scope", "{% for i in [] %}{% else %}{% set n = 1 %}[{{ n }}]{% endfor %}[{{ n }}]"),
    ("scope.block_set_own_scope", "{% set b %}{% set n = 1 %}{{ n }}{% endset %}[{{ b }}][{{ n }}]"),
    ("filter.falsy_select_map", "{{ 0 | select | list }} {{ nothing | reject | list }} {{ nothing | map('upper') | list }}"),
    ("tests.float_parity", "{{ f is odd }} {{ f is even }} {{ 4.0 is even }} {{ 7.5 is divisibleby 2.5 }}"),
    ("tests.undefined_quirks", "{{ missing is sequence }} {{ missing is callable }} {{ d is lower }} {{ 'AB1' is upper }}"),
    ("macro.undefined_argument", "{% macro m(a, b='dflt') %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1, b=missing) }}{{ m(1) }}"),
    ("macro.closure_scope", "{% for i in [1, 2] %}{% set v = i * 10 %}{% macro m() %}{{ v }}{% endmacro %}{{ m() }},{% endfor %}"),
    ("filter.wordcount_word_chars", "{{ f | wordcount }} {{ 'it\\'s a-b_c' | wordcount }} {{ 'héllo wörld' | wordcount }}"),
    ("printf", "{{ '%s|%r|%d|%i|%5.2f|%x|%%|%-4s|%04d|%e|%g' % ('a', 'b', 3.9, true, 3.14159, 255, 'z', 7, 12345.678, 0.0001) }} "
               "{{ '%(a)s-%(b)d' % {'a': 'x', 'b': 2} }} {{ '%s' % [1, 2] }} {{ '%s %s' % (none, 1.0) }} {{ 'abc' % [1] }} "
               "{{ '%s and %s' | format(1, 'two') }} {{ '%(x)s' | format(x='kw') }} {{ 'a%sb' % missing }}"),
    ("markup", "{{ 'a<' | safe + '<b>' }} {{ '<x>' + ('<y>' | e) }} {{ ['x' | safe, '<' | e] }} {{ ('<' | e) | e }} "
               "{{ '<' | forceescape | forceescape }} {{ 'a<' | safe ~ '<' }}"),
    ("expr.pow_edges", "{{ (-1) ** 3 }} {{ 0 ** 0 }} {{ 0 ** 5 }} {{ (-2) ** 3 }} {{ 1 ** 100 }} {{ 2 ** 62 }} {{ 2 ** 0.5 }}"),
    ("global.range_int64_edges", "{{ range(-9223372036854775807, 9223372036854775807, 4611686018427387904) | list }} "
                                 "{{ range(9223372036854775806, 9223372036854775807, 10) | list }} "
                                 "{{ range(9223372036854775807, -9223372036854775807, -9223372036854775807) | list }}"),
    ("printf.int_forms", "{{ '%x|%#x|%05x|%-6x|%+x|% x|%.4x' % (-255, -255, -255, -255, 255, 255, -255) }} "
                         "{{ '%#o|%#06o|%#X|%.3d|%+05d|%-+5d|%05.3d' % (8, 8, 255, 5, 5, 5, 5) }} "
                         "{{ '%d|%x|%d|%d|%x|%#08.4x|%- 6d|%0-5d|' % (9007199254740993, -9223372036854775807 - 1, 2.9, -2.9, "
                         "true, -255, 5, 5) }} {{ '%c%c' % (65, 128512) }} {{ '%i %u' % (-3, 7) }}"),
    ("expr.floordiv_mod_int64_edges", "{{ (-9223372036854775807 - 1) % -1 }} {{ 9223372036854775807 % -2 }} "
                                      "{{ 9223372036854775807 // -1 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ -7 // 2 }} {{ 7 // -2 }} "
                                      "{{ (-9223372036854775807 - 1) // 2 }} {{ (-9223372036854775807 - 1) % 3 }}"),
    ("expr.slice_huge_step", "{{ 'abc'[2::9223372036854775807] }} {{ [1, 2, 3][0::9223372036854775807] }} "
                             "{{ 'abc'[::-9223372036854775807] }} {{ 'abc'[-9223372036854775807:9223372036854775807] }}"),
    ("global.range_limit", "{{ range(0, 200000, 2) | length }} {{ range(10, 0, -3) | list }} {{ range(5, 1) | list }}"),
    ("messages.qwen_like", "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
                           "'<|im_end|>\\n' }}{%- endfor %}"),
    # errors (runtime)
    ("error.raise_exception", "{{ raise_exception('Roles must alternate!') }}"),
    ("error.attr_of_undefined", "{{ missing.attr }}"),
    ("error.attr_of_missing_attr", "{{ d.nope.deeper }}"),
    ("error.add_str_int", "{{ 'a' + 1 }}"),
    ("error.add_undefined", "{{ missing + 1 }}"),
    ("error.iterate_none", "{% for x in nothing %}{% endfor %}"),
    ("error.unsafe_append", "{{ l.append(4) }}"),
    ("error.tojson_undefined", "{{ missing | tojson }}"),
    ("error.compare_types", "{{ 1 < 'a' }}"),
    ("error.unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}"),
    ("error.div_zero", "{{ 1 / 0 }}"),
    ("error.in_none", "{{ 'a' in nothing }}"),
    ("error.int_of_undefined", "{{ missing | int }}"),
    ("error.unique_unhashable", "{{ messages | unique | list }}"),
    ("error.indent_not_string", "{{ n | indent }}"),
    ("error.unhashable_in_dict", "{{ [1] in d }}"),
    ("error.range_too_big", "{{ range(0, 200001, 2) | length }}"),
    ("error.printf_too_many", "{{ '%s' % (1, 2) }}"),
    ("error.printf_too_few", "{{ '%s %s' % 'a' }}"),
    ("error.printf_number", "{{ '%d' % 'a' }}"),
    ("error.printf_char_range", "{{ '%c' % 1114112 }}"),
    ("error.printf_char_negative", "{{ '%c' % -1 }}"),
    ("error.printf_hex_float", "{{ '%x' % 2.5 }}"),
    ("error.format_index_digits", "{{ '{99999999999999999999}'.format(1) }}"),
]


def render_case(template, variables):
    try:
        compiled = ENV.from_string(template)
    except jinja2.exceptions.TemplateError as e:
        return {"error": "parse", "message": str(e)}
    try:
        return {"expected": compiled.render(**variables)}
    except Exception as e:  # noqa: BLE001 - any render failure is an expected error
        return {"error": "render", "type": type(e).__name__, "message": str(e)}


# ---- templates rendered as apply_chat_template renders them ----

TEMPLATES = {
    # file: (bos_token, eos_token, content format vLLM detects for it)
    "qwen3.jinja": (None, "<|im_end|>", "string"),
    "llama3.jinja": ("<|begin_of_text|>", "<|end_of_text|>", "string"),
    "deepseek_v3.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "string"),
    "llama2.jinja": ("<s>", "</s>", "string"),
    "mistral_instruct.jinja": ("<s>", "</s>", "string"),
}

WEATHER_TOOL = VARS["tools"][0]


def conv(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


CONVERSATIONS = [
    ("single_user", {"messages": conv(("user", "Hello!"))}),
    ("system_user", {"messages": conv(("system", "You are terse."), ("user", "What is 2+2?"))}),
    ("four_turns", {"messages": conv(("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "Tell me a joke."),
                                     ("assistant", "Why did the GPU cross the road?"))}),
    ("no_generation_prompt", {"messages": conv(("user", "Hi"), ("assistant", "Hey")), "add_generation_prompt": False}),
    ("unicode_quotes", {"messages": conv(("user", "Ünïcödé ☕ 𝄞 \"double\" 'single' \\ back\nslash"))}),
    ("whitespace_content", {"messages": conv(("user", "  padded  \n"), ("assistant", "\n\nspaced out  "),
                                             ("user", "again"))}),
    ("list_of_parts", {"messages": [{"role": "user", "content": [{"type": "text", "text": "part one"},
                                                                  {"type": "text", "text": "part two"}]}]}),
    ("thinking_history", {"messages": conv(("user", "Q1"), ("assistant", "<think>\nreasoning here\n</think>\n\nA1"),
                                           ("user", "Q2"))}),
    ("thinking_last", {"messages": conv(("user", "Q1"), ("assistant", "<think>\nr\n</think>\n\nA1")),
                       "add_generation_prompt": False}),
    ("enable_thinking_false", {"messages": conv(("user", "Hi")), "kwargs": {"enable_thinking": False}}),
    ("enable_thinking_true", {"messages": conv(("user", "Hi")), "kwargs": {"enable_thinking": True}}),
    ("tools", {"messages": conv(("system", "Use tools."), ("user", "Weather in Paris?")), "tools": [WEATHER_TOOL]}),
    ("tool_calls", {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "sunny"},
    ], "tools": [WEATHER_TOOL]}),
    ("alternation_broken", {"messages": conv(("user", "a"), ("user", "b"))}),
    ("system_only_roles", {"messages": conv(("system", "S"), ("user", "U"), ("assistant", "A"), ("user", "U2"))}),
    ("continue_final", {"messages": conv(("user", "Write a poem"), ("assistant", "Roses are red,  ")),
                        "add_generation_prompt": False, "continue_final_message": True}),
]


def convert(messages, fmt):
    out = []
    for m in messages:
        m = dict(m)
        c = m.get("content")
        if fmt == "string" and isinstance(c, list):
            m["content"] = "\n".join(p["text"] for p in c)
        elif fmt == "openai" and isinstance(c, str):
            m["content"] = [{"type": "text", "text": c}]
        out.append(m)
    return out


def apply_chat_template(source, bos, eos, messages, tools=None, documents=None, add_generation_prompt=True,
                        continue_final_message=False, kwargs=None):
    """transformers' render_jinja_template, continue_final_message included."""
    compiled = ENV.from_string(source)
    tag = "CONTINUE_FINAL_MESSAGE_TAG "
    chat = json.loads(json.dumps(messages))
    if continue_final_message:
        final_message = chat[-1]["content"]
        chat[-1]["content"] = final_message + tag
    special = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}
    rendered = compiled.render(messages=chat, tools=tools, documents=documents,
                               add_generation_prompt=add_generation_prompt, **special, **(kwargs or {}))
    if continue_final_message:
        if final_message.strip() not in rendered or tag.strip() not in rendered:
            raise ValueError("final message not in rendered chat")
        loc = rendered.rindex(tag.strip())
        rendered = rendered[:loc] if rendered[loc:loc + len(tag)] == tag else rendered[:loc].rstrip()
    return rendered


def template_cases():
    for file, (bos, eos, fmt) in TEMPLATES.items():
        with open(os.path.join(HERE, "templates", file), encoding="utf-8") as fh:
            source = fh.read()
        for name, c in CONVERSATIONS:
            case = {"template": file, "name": name, "messages": c["messages"], "format": fmt,
                    "add_generation_prompt": c.get("add_generation_prompt", True),
                    "continue_final_message": c.get("continue_final_message", False),
                    "kwargs": c.get("kwargs", {})}
            if "tools" in c:
                case["tools"] = c["tools"]
            try:
                case["expected"] = apply_chat_template(
                    source, bos, eos, convert(c["messages"], fmt), tools=c.get("tools"),
                    add_generation_prompt=case["add_generation_prompt"],
                    continue_final_message=case["continue_final_message"], kwargs=case["kwargs"])
            except Exception as e:  # noqa: BLE001
                case["error"] = str(e)
            yield case


def main():
    cases = []
    for name, template in FEATURES:
        case = {"name": name, "template": template}
        case.update(render_case(template, VARS))
        cases.append(case)
    with open(os.path.join(HERE, "jinja_cases.json"), "w", encoding="utf-8") as fh:
        json.dump({"vars": VARS, "cases": cases}, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    with open(os.path.join(HERE, "template_cases.jsonl"), "w", encoding="utf-8") as fh:
        for case in template_cases():
            fh.write(json.dumps(case, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
