#!/usr/bin/env python3
"""Random templates for differential testing of nvllm's Jinja engine against jinja2 3.1.6 (set up
as transformers sets it up, see jinja_reference.py): text with random whitespace and tags with
random -/+ modifiers, if/for/set/macro/call/filter/raw/with blocks, filters, tests, methods.

    python3 testdata/chat/jinja_fuzz.py     # rewrites jinja_fuzz_cases.json (fixed seed)

lib/chat/jinja_test.cpp renders every case and compares (text, or that both raise).
The one known divergence is left out: jinja2 folds `-2` into a constant and then emits
`-2 ** x` unparenthesised, so Python computes -(2 ** x).
"""
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jinja_reference import ENV  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
R = random.Random(20261125)
VARS = {"s": "Hello World", "e": "", "n": 3, "z": 0, "f": 1.5, "t": True, "no": None,
        "l": [1, 2, 3], "ls": ["b", "A", "c"], "d": {"k": "v", "x": 1}, "m": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        "u": "é☕ x", "ws": "  a b \n"}
WS = [" ", "\u00a0", "\u3000 ", "\r\n", "\n", "\t", " \n ", "\n\n", "", "", "x", "ab", " y\n", "\n  "]
def ws(): return "".join(R.choice(WS) for _ in range(R.randint(0, 3)))
def lit():
    return R.choice(["1", "0", "-2", "2.5", "1e3", "'a'", '"b c"', "'\\n'", "none", "true", "false", "[1, 2]", "{'a': 1}", "()", "'x y z'", "''"])
VARNAMES = list(VARS) + ["missing"]
FILTERS = ["length", "trim", "upper", "lower", "title", "capitalize", "list", "first", "last", "string", "int", "float",
           "abs", "unique|list", "sort", "reverse|list", "tojson", "join(',')", "default('D')", "d('E', true)", "items|list",
           "replace('a','b')", "map('string')|list", "select|list", "reject|list", "sum", "count", "round", "indent(2)", "wordcount", "e"]
TESTS = ["defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "float",
         "boolean", "true", "false", "odd", "even", "divisibleby 2", "eq 1", "in [1, 2]", "lower", "upper", "callable"]
METHODS = ["strip()", "lstrip()", "rstrip()", "split()", "split(' ')", "upper()", "lower()", "title()", "startswith('H')",
           "endswith('d')", "replace('l', 'L')", "count('l')", "find('o')", "capitalize()", "strip('H')", "split('o', 1)"]
def expr(depth=0):
    r = R.random()
    if depth > 2 or r < 0.3:
        return R.choice([lit(), R.choice(VARNAMES), R.choice(VARNAMES)])
    r = R.random()
    if r < 0.12: return f"{expr(depth+1)} {R.choice(['+', '-', '*', '/', '//', '%', '~', '**'])} {expr(depth+1)}"
    if r < 0.22: return f"{expr(depth+1)} {R.choice(['==', '!=', '<', '>=', 'in', 'not in'])} {expr(depth+1)}"
    if r < 0.30: return f"{expr(depth+1)} {R.choice(['and', 'or'])} {expr(depth+1)}"
    if r < 0.34: return f"not {expr(depth+1)}"
    if r < 0.42: return f"({expr(depth+1)} if {expr(depth+1)} else {expr(depth+1)})"
    if r < 0.58: return f"{R.choice(VARNAMES)} | {R.choice(FILTERS)}"
    if r < 0.68: return f"{R.choice(VARNAMES)} is {R.choice(['', 'not '])}{R.choice(TESTS)}"
    if r < 0.78: return f"{R.choice(['s', 'u', 'ws', 'e'])}.{R.choice(METHODS)}"
    if r < 0.86: return f"{R.choice(['s', 'l', 'u', 'ls'])}[{R.choice(['0', '-1', '1:', ':-1', '::-1', '::2', '5', '1:2'])}]"
    if r < 0.93: return R.choice(['d', 'm[0]', 'm[-1]', 'no', 'missing']) + R.choice(['.k', '.role', '["x"]', '.get("k")', '.items()|list', '.keys()|list'])
    return f"[{expr(depth+1)}, {expr(depth+1)}]"
def mod(): return R.choice(["", "", "-", "+"]) 
def tagopen(): return "{%" + mod() + " "
def tagclose(): return " " + R.choice(["", "", "-", "+"]) + "%}"
def stmt(depth=0):
    r = R.random()
    if depth > 2 or r < 0.35: return ws()
    if r < 0.5: return ws() + "{{" + R.choice(["", "-"]) + " " + expr() + " " + R.choice(["", "-"]) + "}}" + ws()
    if r < 0.65:
        return (ws() + tagopen() + f"if {expr()}" + tagclose() + body(depth) +
                (tagopen() + f"elif {expr()}" + tagclose() + body(depth) if R.random() < 0.3 else "") +
                (tagopen() + "else" + tagclose() + body(depth) if R.random() < 0.5 else "") + tagopen() + "endif" + tagclose() + ws())
    if r < 0.8:
        it = R.choice(["l", "ls", "m", "s", "d", "d.items()", "[]", "range(3)", "l if t", "missing", "no"])
        tgt = "k, v" if "items" in it else "x"
        inner = R.choice(["{{ loop.index }}", "{{ x }}", "{{ loop.first }}{{ loop.last }}", "{{ loop.revindex }}", "{% if loop.last %}L{% endif %}", "{{ k }}"])
        return (ws() + tagopen() + f"for {tgt} in {it}" + tagclose() + ws() + inner + body(depth) +
                (tagopen() + "else" + tagclose() + body(depth) if R.random() < 0.3 else "") + tagopen() + "endfor" + tagclose() + ws())
    if r < 0.86: return ws() + tagopen() + f"set {R.choice(['s', 'n', 'q'])} = {expr()}" + tagclose() + ws()
    r2 = R.random()
    if r2 < 0.12: return ws() + "{% set ns = namespace(v=" + expr() + ") %}" + body(depth) + "{% set ns.v = " + expr() + " %}{{ ns.v }}" + ws()
    if r2 < 0.24: return ws() + tagopen() + "macro mm(a, b=" + lit() + ")" + tagclose() + body(depth) + "{{ a }}{{ b }}{{ n }}" + tagopen() + "endmacro" + tagclose() + ws() + "{{ mm(" + expr() + ") }}" + body(depth) + "{{ mm(1, b=" + expr() + ") }}"
    if r2 < 0.34: return ws() + "{% macro w() %}<{{ caller(" + lit() + ") }}>{% endmacro %}" + tagopen() + "call(p) w()" + tagclose() + body(depth) + "{{ p }}" + tagopen() + "endcall" + tagclose() + ws()
    if r2 < 0.44: return ws() + tagopen() + "raw" + tagclose() + ws() + "{{ x }}{% if %}" + ws() + tagopen() + "endraw" + tagclose() + ws()
    if r2 < 0.54: return ws() + tagopen() + "filter " + R.choice(["upper", "trim", "title", "replace('a', 'b')", "lower | capitalize"]) + tagclose() + body(depth) + tagopen() + "endfilter" + tagclose() + ws()
    if r2 < 0.64: return ws() + tagopen() + "set " + R.choice(["s", "bb", "n"]) + tagclose() + body(depth) + tagopen() + "endset" + tagclose() + "{{ bb }}{{ s }}" + ws()
    if r2 < 0.72: return ws() + tagopen() + "with a = " + expr() + tagclose() + body(depth) + "{{ a }}" + tagopen() + "endwith" + tagclose() + ws()
    if r2 < 0.84: return ws() + "{% for i in range(5) %}" + body(depth) + R.choice(["{% if i == 2 %}{% break %}{% endif %}", "{% if i is odd %}{% continue %}{% endif %}", "{{ loop.cycle('a', 'b', 'c') }}", "{% set s = i %}{{ s }}", "{{ loop.previtem }}|{{ loop.nextitem }}"]) + "{{ i }}" + body(depth) + "{% endfor %}" + ws()
    if r2 < 0.92: return ws() + "{% for i in [1, 2] %}{% for j in [1] %}[{{ " + R.choice(["s", "n", "q"]) + " }}]{% endfor %}" + R.choice(["", "{% set s = i %}", "{% if t %}{% set n = i %}{% endif %}"]) + "{% endfor %}" + ws()
    return ws() + "{#" + R.choice(["", "-"]) + " c " + R.choice(["", "-"]) + "#}" + ws()
def body(depth): return "".join(stmt(depth + 1) for _ in range(R.randint(0, 3)))

def main(count=400):
    cases = []
    while len(cases) < count:
        t = body(-1) + R.choice(["", "\n", "\n\n"])
        if re.search(r"-\s*[\d.e]+\s*\*\*", t):
            continue
        case = {"template": t}
        try:
            case["expected"] = ENV.from_string(t).render(**VARS)
        except Exception as e:  # noqa: BLE001 - both engines must raise
            case["error"] = type(e).__name__ + ": " + str(e)
        cases.append(case)
    with open(os.path.join(HERE, "jinja_fuzz_cases.json"), "w", encoding="utf-8") as fh:
        json.dump({"vars": VARS, "cases": cases}, fh, ensure_ascii=False, indent=0)
        fh.write("\n")


if __name__ == "__main__":
    main()
