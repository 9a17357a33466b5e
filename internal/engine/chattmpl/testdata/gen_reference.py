#!/usr/bin/env python3
"""Regenerates jinja_reference.json: small templates rendered by Python Jinja2
(3.1.x) configured exactly like transformers' apply_chat_template
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson = json.dumps(ensure_ascii=False, ...), raise_exception, strftime_now).

Run from this directory:  python3 gen_reference.py
The Go tests only read the JSON; they never call Python.
"""
import json
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime(2024, 7, 26, 12, 0, 0)


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)

    def _gen(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: NOW.strftime(f)

M = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi \"there\" é 🦙"},
    {"role": "assistant", "content": " Hello! \n"},
]
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather, \"now\"",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Zürich"]},
                                                        "days": {"type": "integer", "minimum": 1, "default": 1.5}},
                       "required": ["city"]}}}
CTX = {"messages": M, "tools": [TOOL], "n": 7, "f": 2.5, "big": 1e20, "small": 1e-5, "s": "  a b\tc  ",
       "t": True, "nothing": None, "d": {"z": 1, "a": [1, 2.0, None, True], "m": {"k": "v"}},
       "lst": [3, 1, 2], "words": "a,b,,c", "uni": "héllo wörld", "q": "it's", "qq": "say \"hi\" it's",
       "ctrl": "a\u0001b\u007f\u00a0c\u2028d",
       "tree": [{"name": "a", "children": [{"name": "b", "children": []}, {"name": "c"}]}, {"name": "d"}]}

CASES = [
    # whitespace control
    ("ws_trim_blocks", "{% if t %}\nyes\n{% endif %}\nend"),
    ("ws_lstrip", "a\n    {% if t %}\n    x\n    {% endif %}\nb"),
    ("ws_lstrip_var_not", "a\n    {{ n }}\n    {% if t %}y{% endif %}  \nb"),
    ("ws_minus", "a  \n  {%- if t -%}  \n  x  \n  {%- endif -%}  \n  b"),
    ("ws_expr_minus", "a \n {{- n -}} \n b"),
    ("ws_plus", "a\n    {%+ if t %}x{% endif +%}\nb"),
    ("ws_comment", "a\n  {# c #}\nb {#- c -#}  c\n{# x #}"),
    ("ws_trailing_newline", "x\n"),
    ("ws_two_trailing_newlines", "x\n\n"),
    ("ws_crlf", "a\r\n{% if t %}\r\nb\r\n{% endif %}\r\nc"),
    ("ws_tag_after_var", "{{ n }}  {% if t %}x{% endif %}"),
    ("ws_raw", "{% raw %}{{ not rendered }}{% endraw %}\nz"),
    # python repr / str
    ("repr_list", "{{ [1, 'a', \"b'c\", none, true, 2.0, [], {}] }}"),
    ("repr_dict", "{{ d }}|{{ d|string }}|{{ tools }}"),
    ("repr_tuple", "{{ (1,) }} {{ (1, 'x') }} {{ () }}"),
    ("repr_floats", "{{ f }} {{ big }} {{ small }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 123456789012345.6 }} {{ 10 / 4 }} {{ 3.0 * 2 }}"),
    ("repr_strings", "{{ [q, qq, ctrl, uni] }}"),
    ("none_true", "{{ nothing }} {{ t }} {{ none }} {{ undefined_var }}|"),
    # tojson
    ("tojson_default", "{{ tools|tojson }}"),
    ("tojson_indent", "{{ tools[0]|tojson(indent=4) }}\n{{ d|tojson(indent=2) }}\n{{ [] |tojson(indent=2) }}{{ {}|tojson(indent=2) }}"),
    ("tojson_opts", "{{ d|tojson(separators=(',', ':')) }} {{ d|tojson(sort_keys=true) }} {{ uni|tojson(ensure_ascii=true) }} {{ '🦙'|tojson(ensure_ascii=true) }} {{ ctrl|tojson(ensure_ascii=true) }} {{ d|tojson(indent=0) }}"),
    ("tojson_str_indent", "{{ d|tojson(indent='\t') }}"),
    ("tojson_escapes", "{{ ctrl|tojson }} {{ '</script>&'|tojson }} {{ [big, small, f, n, t, nothing]|tojson }}"),
    ("tojson_message", "{% for m in messages %}{{ m|tojson }}\n{% endfor %}"),
    # filters
    ("f_trim_len", "[{{ s|trim }}] {{ s|length }} {{ uni|length }} {{ messages|length }} {{ d|length }}"),
    ("f_case", "{{ uni|upper }} {{ 'HeLLo wOrld'|lower }} {{ 'hello wORLD foo-bar'|title }} {{ 'hello World'|capitalize }} {{ q|title }} {{ q.title() }} {{ '1st (x)y-z'|title }} {{ '1st (x)y-z'.title() }} {{ 'straße ﬁx'|upper }} {{ 'STRASSE İ'|lower }} {{ 'ǅemal'|lower }}"),
    ("f_join", "{{ lst|join(', ') }} {{ messages|map(attribute='role')|join('/') }} {{ lst|join }}"),
    ("f_items", "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k, v in d.items() %}{{ k }}:{{ v }};{% endfor %}"),
    ("f_select", "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'system')|map(attribute='content')|list }} {{ lst|select('odd')|list }} {{ lst|reject('equalto', 1)|list }}"),
    ("f_first_last", "{{ lst|first }} {{ lst|last }} {{ messages|last }} {{ 'abc'|first }}"),
    ("f_default", "{{ missing|default('dflt') }} {{ nothing|default('x') }} {{ ''|default('e', true) }} {{ n|default(3) }}"),
    ("f_list_string", "{{ 'abc'|list }} {{ d|list }} {{ n|string + 'x' }} {{ lst|string }}"),
    ("f_int_float", "{{ '42'|int + 1 }} {{ 'x'|int }} {{ 3.9|int }} {{ '2.5'|float }} {{ n|float }}"),
    ("f_indent", "{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(4, first=true) }}|{{ 'a\n\nb'|indent(2, true, true) }}"),
    ("f_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}"),
    ("f_misc", "{{ lst|sort }} {{ lst|sort(reverse=true) }} {{ lst|max }} {{ lst|min }} {{ lst|sum }} {{ [1,1,2]|unique|list }} {{ lst|reverse|list }} {{ -3|abs }} {{ 2.567|round(1) }}"),
    ("f_dictsort", "{{ d|dictsort }}"),
    ("percent_format", "{{ '%s-%d|%5.2f|%r|%%|%-4s|%03d' % ('a', 7, 2.5, 'q', 'x', 5) }} {{ '%s' % lst }} {{ 'n=%d' % n }} {{ '%s and %s'|format('x', 1) }} {{ '%(a)s'|format(a='k') }} {{ '%x %o %e' % (255, 8, 12345.678) }}"),
    ("loop_recursive", "{% for item in tree recursive %}{{ item.name }}{% if item.children %}[{{ loop(item.children) }}]{% endif %}{{ loop.depth }};{% endfor %}"),
    ("loop_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}"),
    ("with_block", "{% with a = 1, b = n %}{{ a + b }}{% endwith %}{{ a is defined }}"),
    ("err_do_tag", "{% do lst %}"),
    ("f_map_filter", "{{ ['a', 'b']|map('upper')|list }}"),
    # tests
    ("tests", "{{ n is defined }} {{ missing is defined }} {{ missing is undefined }} {{ nothing is none }} {{ s is string }} {{ d is mapping }} {{ lst is iterable }} {{ s is iterable }} {{ n is iterable }} {{ lst is sequence }} {{ n is number }} {{ f is float }} {{ n is integer }} {{ t is boolean }} {{ t is true }} {{ t is false }} {{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ n is equalto 7 }} {{ n is eq(7) }} {{ n is ne 7 }} {{ n is gt 3 }} {{ 'a' is in 'abc' }} {{ missing is mapping }} {{ nothing is not none }}"),
    # operators
    ("ops_math", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ -n }} {{ 5.5 // 2 }} {{ 5.5 % 2 }}"),
    ("ops_concat", "{{ 'a' ~ n ~ nothing ~ missing ~ t ~ lst }} {{ 1 ~ 2 }} {{ (1 + 2) ~ 3 }} {{ 'x' ~ 3 if false else 'z' }}"),
    ("err_concat_precedence", "{{ 1 ~ 2 + 3 }}"),
    ("ops_compare", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ n != 7 }} {{ 'b' in 'abc' }} {{ 2 in lst }} {{ 'z' in d }} {{ 'x' not in d }} {{ 'a' in missing }}"),
    ("ops_logic", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ none or none }} {{ not 0 }} {{ not n is defined }} {{ 'a' if t else 'b' }} {{ 'a' if not t }}|{{ 'a' if false else 'b' if true else 'c' }}"),
    ("ops_unary_filter", "{{ -(lst|length) }} {{ not lst|length }} {{ -n|abs }}"),
    ("err_unary_filter", "{{ -lst|length }}"),
    # indexing and slicing
    ("index", "{{ lst[0] }} {{ lst[-1] }} {{ lst[5] is defined }} {{ d['a'][1] }} {{ d.a.1 }} {{ d.m.k }} {{ messages[0].role }} {{ messages[-1]['content'] }} {{ uni[1] }} {{ uni[-1] }}"),
    ("slice", "{{ lst[1:] }} {{ lst[:-1] }} {{ lst[::-1] }} {{ lst[::2] }} {{ uni[1:4] }} {{ uni[::-1] }} {{ lst[5:] }} {{ lst[-10:2] }} {{ messages[1:]|length }}"),
    # string methods
    ("str_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ words.split(',') }}|{{ s.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ uni.startswith('hé') }}|{{ uni.endswith(('x', 'ld')) }}|{{ uni.upper() }}|{{ 'ab'.replace('a', 'c') }}|{{ uni.title() }}|{{ 'a-b'.find('-') }}|{{ ', '.join(['x', 'y']) }}|{{ '{} and {}'.format(1, 'z') }}|{{ 'a\nb\r\nc'.splitlines() }}|{{ 'abc'.count('b') }}|{{ ' x '.isspace() }}|{{ '12'.isdigit() }}"),
    ("dict_methods", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('z') }} {{ d.get('nope') }} {{ d.get('nope', 5) }} {{ messages[0].get('role') }}"),
    # loops
    ("loop_vars", "{% for x in lst %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}"),
    ("loop_filter_else", "{% for x in lst if x > 1 %}{{ x }}{{ loop.last }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}"),
    ("loop_controls", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("loop_scope", "{% set y = 1 %}{% for x in lst %}{{ y }}{% set y = x %}{{ y }},{% endfor %}{{ y }}"),
    ("loop_nested", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}"),
    ("loop_dict", "{% for k in d %}{{ k }}{% endfor %} {% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {% for c in 'héllo' %}{{ c }}.{% endfor %}"),
    ("loop_cycle", "{% for x in lst %}{{ loop.cycle('a', 'b') }}{% endfor %}"),
    ("range", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }}"),
    # namespace, set, macro, call
    ("namespace", "{% set ns = namespace(found=false, count=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% set ns.count = ns.count + 1 %}{% endfor %}{{ ns.found }} {{ ns.count }}"),
    ("set_block", "{% set x %}\n  a {{ n }}\n{% endset %}[{{ x }}]{% set y | upper %}b{% endset %}{{ y }}"),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = (3, 4) %}{{ c }}"),
    ("macro", "{% macro greet(name, greeting='Hi', punct='!') %}{{ greeting }} {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet('X', 'Yo') }}"),
    ("macro_scope", "{% set top = 'T' %}{% macro m() %}{{ top }}{{ n }}{% endmacro %}{{ m() }}"),
    ("macro_recursive", "{% macro r(x) %}{% if x is mapping %}{% for k, v in x.items() %}{{ k }}({{ r(v) }}){% endfor %}{% elif x is string %}{{ x }}{% elif x is iterable %}[{% for i in x %}{{ r(i) }},{% endfor %}]{% else %}{{ x }}{% endif %}{% endmacro %}{{ r(d) }}"),
    ("macro_ws", "{%- macro m(x) -%}\n  <{{ x }}>\n{%- endmacro -%}\n{{ m(1) }}\n{{ m(2) }}"),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inside {{ n }}{% endcall %}{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each(lst) %}[{{ x }}]{% endcall %}"),
    ("filter_block", "{% filter upper %}abc {{ n }}{% endfilter %}"),
    ("dict_literal", "{% set x = {'b': 1, 'a': {'c': [1, 2]}} %}{{ x }} {{ x|tojson }} {{ dict(k=1, j=2) }}"),
    ("generation", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %}"),
    ("strftime", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j %p %I %y %a %%') }}"),
    # errors
    ("err_raise", "{% if t %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"),
    ("err_undefined_attr", "{{ missing.attr }}"),
    ("err_add_str_int", "{{ 'a' + 1 }}"),
    ("err_add_undefined", "{{ 'a' + missing }}"),
    ("err_tojson_undefined", "{{ missing|tojson }}"),
    ("err_syntax", "{% if %}"),
    ("err_unclosed", "{% for x in lst %}"),
    ("err_list_append", "{{ lst.append(1) }}"),
]


def main():
    out = []
    for name, src in CASES:
        case = {"name": name, "template": src}
        try:
            case["output"] = env.from_string(src).render(**CTX)
        except jinja2.exceptions.TemplateSyntaxError as e:
            case["error"] = "syntax"
            case["message"] = str(e)
        except Exception as e:  # noqa: BLE001
            case["error"] = type(e).__name__
            case["message"] = str(e)
        out.append(case)
    with open("jinja_reference.json", "w", encoding="utf-8") as f:
        json.dump({"_note": "generated by gen_reference.py with jinja2 " + jinja2.__version__,
                   "context": CTX, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
