// The Jinja subset (core/tokenizer/jinja.h): constructs, whitespace control and
// Python semantics against the outputs jinja2 3.1 gives for the same
// templates (configured as transformers does: trim_blocks, lstrip_blocks,
// loopcontrols, json.dumps as tojson), and the errors and bounds: each error
// names the template, the line and column, and the construct.
#include "core/tokenizer/jinja.h"

#include <gtest/gtest.h>

#include <string>

namespace kvlab {
namespace jinja {
namespace {

Status RenderStatus(const std::string& src, const Json& vars, std::string* out, const Environment& env = {}) {
  std::unique_ptr<Template> t;
  KVLAB_RETURN_IF_ERROR(Template::Parse(src, "t.jinja", &t));
  return t->Render(vars, env, out);
}

std::string Render(const std::string& src, const Json& vars = Json::object()) {
  std::string out;
  const Status s = RenderStatus(src, vars, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

// The error message of a template that must fail.
std::string Error(const std::string& src, const Json& vars = Json::object(), const Environment& env = {}) {
  std::string out;
  const Status s = RenderStatus(src, vars, &out, env);
  EXPECT_FALSE(s.ok()) << "rendered: " << out;
  return s.message();
}

struct Case {
  const char* src;
  const char* vars;
  const char* want;
};

// Outputs of jinja2 3.1.2 (Debian 12's python3-jinja2) for each template.
const Case kCases[] = {
  {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 1.5 + 1 }} {{ 10 / 4 * 2 }}", R"({})", "7 9 64 3.5 3 -4 -2 2.5 5.0"},
  {"{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ 3.0 }} {{ -2.5e-7 }} {{ 123456789.125 }}", R"({})", "0.30000000000000004 1e+20 1e+16 1000000000000000.0 1e-05 0.0001 3.0 -2.5e-07 123456789.125"},
  {"{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 'x' in 'xyz' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}", R"({})", "a1NoneTrue ababab [1, 2, 3] True True True True"},
  {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ none == none }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} != {'a': 1} }}", R"({})", "True False True True True True True False"},
  {"{{ x or 'dflt' }} {{ '' or 0 or [] or 'last' }} {{ 'a' and 'b' }} {{ 0 and 1 }} {{ not none }} {{ 'y' if x else 'n' }} [{{ 'y' if x }}]", R"({"x": 0})", "dflt last b 0 True n []"},
  {"{{ s[1:4] }} {{ s[::-1] }} {{ s[-2:] }} {{ s[:-2] }} {{ s[::2] }} {{ l[1:] }} {{ l[::-1] }} {{ l[-1] }} {{ l[5] }} {{ s[0] }}", R"({"s": "h\u00e9llo w\u00f6rld", "l": [1, 2, 3]})", "éll dlröw olléh ld héllo wör hlowrd [2, 3] [3, 2, 1] 3  h"},
  {"{{ ' a b '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}", R"({})", "a b|a|a|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']"},
  {"{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'MiXed'.upper() }} {{ 'MiXed'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abcabc'.find('c') }}", R"({})", "True True bba MIXED mixed Hello World Hello 2"},
  {"{{ d.get('a') }} {{ d.get('z', 'none!') }} {{ d.keys() | list }} {{ d.values() | list }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d | length }} {{ d.a }} {{ d['b'] }}", R"({"d": {"a": 1, "b": [2]}})", "1 none! ['a', 'b'] [1, [2]] a=1;b=[2]; 2 1 [2]"},
  {"{{ '  x  ' | trim }}|{{ 'x' | upper }}|{{ [3, 1, 3] | unique | list }}|{{ [1, 2] | join('-') }}|{{ 'abc' | list }}|{{ 'abc' | reverse }}|{{ [1, 2] | reverse | list }}|{{ 'a\nb' | indent(2, first=true) }}|{{ 'x' | replace('x', 'yy') }}", R"({})", "x|X|[3, 1]|1-2|['a', 'b', 'c']|cba|[2, 1]|  a\n  b|yy"},
  {"{{ v | tojson }} {{ v | tojson(indent=2) }} {{ v | tojson(separators=(',', ':')) }} {{ v | tojson(sort_keys=true) }} {{ '\u00e9\"\\n' | tojson }}", R"({"v": {"b": 1, "a": [1.5, null, true, "x"], "c": {}}})", "{\"b\": 1, \"a\": [1.5, null, true, \"x\"], \"c\": {}} {\n  \"b\": 1,\n  \"a\": [\n    1.5,\n    null,\n    true,\n    \"x\"\n  ],\n  \"c\": {}\n} {\"b\":1,\"a\":[1.5,null,true,\"x\"],\"c\":{}} {\"a\": [1.5, null, true, \"x\"], \"b\": 1, \"c\": {}} \"é\\\"\\n\""},
  {"{{ m | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }} {{ m | rejectattr('role', 'eq', 'user') | list | length }} {{ [0, 1, 2] | select | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ m | map(attribute='x', default='?') | list }}", R"({"m": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}, {"role": "user", "content": "c"}]})", "a,c 1 [1, 2] [1, 3] ['?', '?', '?']"},
  {"{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 's' is string }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ [] is iterable }} {{ {} is mapping }} {{ 'x' is sequence }} {{ true is true }} {{ 0 is false }} {{ 4 is divisibleby 2 }} {{ 3 is odd }} {{ 'ab' is lower }} {{ x is not none }}", R"({"x": 1})", "True True True True True True True True True True True False True True True True"},
  {"{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}", R"({})", "1032TrueFalse3 2121FalseFalse3 3210FalseTrue3 "},
  {"{% for x in range(10) if x % 3 == 0 %}{{ x }}:{{ loop.length }} {% endfor %}|{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", R"({})", "0:4 3:4 6:4 9:4 |empty|13"},
  {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}|{% set ns = namespace(t=0) %}{% for i in [1, 2] %}{% set ns.t = ns.t + i %}{% endfor %}{{ ns.t }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}", R"({})", "231|3|5"},
  {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", R"({})", "Hi A! Hi B? Hi C."},
  {"  {% if true %}\n    kept\n  {% endif %}\nline\n{%- if true -%}\n  trimmed  \n{%- endif %}\n{# comment #}\n  {{ 'var' }}  \n{%+ if true %}plus{% endif %}\n", R"({})", "    kept\nlinetrimmed  var  \nplus"},
  {"a\n{% raw %}  {{ x }}{% if %}\n{% endraw %}\nb {{ '{{' }} {{ \"it's\" }} {{ 'a\\tb\\u00e9\\x41' }}", R"({})", "a\n  {{ x }}{% if %}\nb {{ it's a\tbéA"},
  {"{{ [1, 'a', none, true, 2.5, {'k': [1]}] }} {{ {'q': \"it's\"} }} {{ (1, 2) | list }} {{ none }} {{ true }} {{ undefinedvar }}|", R"({})", "[1, 'a', None, True, 2.5, {'k': [1]}] {'q': \"it's\"} [1, 2] None True |"},
  {"{% set header %}A{{ 1 + 1 }}B{% endset %}{{ header }} {{ header | length }} {{ ('x' | string) ~ 3 }} {{ 5 | string | length }} {{ '42' | int + 1 }} {{ '2.5' | float }} {{ -3 | abs }} {{ dict(a=1, b='x') | tojson }}", R"({})", "A2B 3 x3 1 43 2.5 3 {\"a\": 1, \"b\": \"x\"}"},
  {"{{ messages[0]['content'] if messages[0] is defined else 'none' }} {{ (messages | first).role }} {{ (messages | last).role }} {{ messages | length }} {{ messages[-1].content | trim }}", R"({"messages": [{"role": "system", "content": " sys "}, {"role": "user", "content": " hi "}]})", " sys  system user 2 hi"},
};

TEST(Jinja, MatchesJinja2OnConstructs) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.src);
    EXPECT_EQ(Render(c.src, Json::parse(c.vars)), c.want);
  }
}

TEST(Jinja, TransformersGenerationTagRendersItsBody) {
  EXPECT_EQ(Render("a{% generation %}{{ 1 + 1 }}{% endgeneration %}b"), "a2b");
  EXPECT_EQ(Render("{% for i in [1, 2] %}{% generation %}{% if i == 2 %}{% break %}{% endif %}{{ i }}"
                   "{% endgeneration %}{% endfor %}"),
            "1");
}

TEST(Jinja, StrftimeNowIsInjectable) {
  Environment env;
  env.strftime_now = [](const std::string& f) { return "<" + f + ">"; };
  std::string out;
  ASSERT_TRUE(RenderStatus("{{ strftime_now('%d %b %Y') }}", Json::object(), &out, env).ok());
  EXPECT_EQ(out, "<%d %b %Y>");
  ASSERT_TRUE(RenderStatus("{{ strftime_now('%Y') | length }}", Json::object(), &out).ok());
  EXPECT_EQ(out, "4");  // the real clock by default
}

TEST(Jinja, ParseErrorsNameTheConstructAndPlace) {
  EXPECT_EQ(Error("ab\n  {{ x | nosuch }}"), "t.jinja: line 2, column 10: unknown filter 'nosuch'");
  EXPECT_EQ(Error("{% if x is nosuch %}{% endif %}"), "t.jinja: line 1, column 12: unknown test 'nosuch'");
  EXPECT_EQ(Error("{% frobnicate %}"), "t.jinja: line 1, column 4: unknown tag 'frobnicate'");
  EXPECT_NE(Error("{% include 'x.html' %}").find("line 1, column 4: the 'include' tag is not supported"), std::string::npos);
  EXPECT_EQ(Error("x\n{% if a %}\nno end"), "t.jinja: line 2, column 4: this 'if' is never closed: the template ends before {% endif %}");
  EXPECT_EQ(Error("{% for a in b %}{% endif %}"), "t.jinja: line 1, column 20: unexpected 'endif': no open tag to close");
  EXPECT_EQ(Error("a {{ x "), "t.jinja: line 1, column 3: unexpected end of template: this tag has no '}}'");
  EXPECT_EQ(Error("a {# never closed"), "t.jinja: line 1, column 3: missing end of comment tag '#}'");
  EXPECT_EQ(Error("{% raw %}x"), "t.jinja: line 1, column 1: missing {% endraw %} for this {% raw %}");
  EXPECT_EQ(Error("{{ 'abc }}"), "t.jinja: line 1, column 4: unterminated string");
  EXPECT_EQ(Error("{{ (1 + 2 }}"), "t.jinja: line 1, column 11: unexpected '}', expected ')'");
  EXPECT_EQ(Error("{{ 1 + }}"), "t.jinja: line 1, column 8: expected an expression, got end of print statement '}}'");
  EXPECT_EQ(Error("{{ a $ b }}"), "t.jinja: line 1, column 6: unexpected character '$' in a tag");
  EXPECT_EQ(Error("{% break %}"), "t.jinja: line 1, column 4: 'break' outside a for loop");
  EXPECT_NE(Error("{% for x in y recursive %}{% endfor %}").find("recursive for loops are not supported"), std::string::npos);
}

TEST(Jinja, RenderErrorsNameThePlace) {
  EXPECT_EQ(Error("{{ raise_exception('Roles must alternate') }}"),
            "t.jinja: line 1, column 4: raise_exception: Roles must alternate");
  EXPECT_EQ(Error("{{ x.y }}"), "t.jinja: line 1, column 6: 'x' is undefined");
  EXPECT_EQ(Error("{{ m.a.b }}", {{"m", Json::object()}}), "t.jinja: line 1, column 8: 'dict object' has no attribute 'a'");
  EXPECT_EQ(Error("{{ nofunc(1) }}"), "t.jinja: line 1, column 4: 'nofunc' is undefined");
  EXPECT_EQ(Error("{{ 'a' + 1 }}"), "t.jinja: line 1, column 8: unsupported operand types for +: 'str' and 'int'");
  EXPECT_EQ(Error("{{ 'a' < 1 }}"), "t.jinja: line 1, column 4: '<' not supported between instances of 'str' and 'int'");
  EXPECT_EQ(Error("{{ 1 // 0 }}"), "t.jinja: line 1, column 6: integer division or modulo by zero");
  EXPECT_EQ(Error("{% for x in 5 %}{% endfor %}"), "t.jinja: line 1, column 13: 'int' object is not iterable");
  EXPECT_EQ(Error("{% set n = 1 %}{% set n.a = 2 %}"),
            "t.jinja: line 1, column 19: cannot set attribute 'a' of 'n', which is a int, not a namespace()");
  EXPECT_EQ(Error("{{ 5 | length }}"), "t.jinja: line 1, column 8: filter 'length': object of type 'int' has no len()");
  EXPECT_EQ(Error("{{ undefined_x | tojson }}"),
            "t.jinja: line 1, column 18: filter 'tojson': Object of type Undefined is not JSON serializable ('undefined_x' is undefined)");
  EXPECT_EQ(Error("{{ 2 ** 64 }}"), "t.jinja: line 1, column 6: integer overflow in 2 ** 64");
  EXPECT_EQ(Error("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}"), "t.jinja: line 1, column 34: macro 'f' takes 1 arguments, not 2");
  EXPECT_EQ(Error("{{ 'x'[1:2:0] }}"), "t.jinja: line 1, column 7: slice step cannot be zero");
  Status s = Status::OK();
  std::string out;
  s = RenderStatus("{{ 1 }}", Json::array(), &out);
  EXPECT_EQ(s.message(), "t.jinja: the template's variables are not an object");
}

TEST(Jinja, BoundsAreErrorsNotCrashes) {
  // Parse depth: a downloaded template cannot overflow the stack.
  const std::string deep = "{{ " + std::string(2000, '(') + "1" + std::string(2000, ')') + " }}";
  EXPECT_NE(Error(deep).find("nests more than 100 levels deep"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 150; ++i) ifs += "{% if true %}";
  EXPECT_NE(Error(ifs).find("nests more than 100 levels deep"), std::string::npos);
  // Macro recursion.
  EXPECT_NE(Error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("macro calls nest more than 64 deep"),
            std::string::npos);
  // Output and string sizes, and steps.
  Environment env;
  env.limits.max_output_bytes = 1000;
  EXPECT_NE(Error("{% for i in range(200) %}0123456789{% endfor %}", Json::object(), env)
                .find("the output would be a string of 1010 bytes, more than RenderLimits::max_output_bytes (1000)"),
            std::string::npos);
  EXPECT_NE(Error("{% set s = 'ab' * 600 %}", Json::object(), env).find("a string of 1200 bytes"), std::string::npos);
  std::string out;
  EXPECT_TRUE(RenderStatus("{{ 'a' ~ ('b' * 999) }}", Json::object(), &out, env).ok());  // exactly the limit
  EXPECT_EQ(out.size(), 1000u);
  env.limits.max_output_bytes = uint64_t{1} << 30;
  env.limits.max_steps = 10000;
  EXPECT_NE(Error("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", Json::object(), env)
                .find("more than 10000 steps"),
            std::string::npos);
  EXPECT_NE(Error("{{ range(1000000) | length }}").find("more than 100000 items"), std::string::npos);
  EXPECT_EQ(Render("{{ 1 ** 1000000000000 }} {{ (-1) ** 1000000000001 }}"), "1 -1");  // by squaring, not a loop
}

// Runaway templates stop at the budget, steps or time, whichever they reach
// first (with the default limits, in about a second): nested loops of 10^10
// iterations, a string grown in a loop, macros that call themselves twice, a
// quadratic filter, work that no step counts. Nothing here is timed; each case
// asserts the error only.
TEST(Jinja, RunawayTemplatesStopAtTheBudget) {
  for (const char* src : {
           "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}",
           "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ ('x' * 10000) %}"
           "{% endfor %}{{ ns.s | length }}",
           "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
           "{{ range(100000) | unique | length }}",
           // 300,000 steps, each `in` comparing 100,000 items: the time budget stops it.
           "{% set big = range(100000) %}{% for i in range(100000) %}{% if -1 in big %}{% endif %}{% endfor %}",
       }) {
    SCOPED_TRACE(src);
    const std::string e = Error(src);
    EXPECT_NE(e.find("t.jinja: line 1, column "), std::string::npos) << e;
    EXPECT_TRUE(e.find("the template exceeded its step budget: more than 1000000 steps (RenderLimits::max_steps") !=
                    std::string::npos ||
                e.find("the template exceeded its time budget: rendering took more than 1000 ms "
                       "(RenderLimits::max_render_ms)") != std::string::npos)
        << e;
  }
  const std::string nested = "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}";
  // Each budget alone: steps with all the time in the world, time with no step limit.
  Environment env;
  env.limits.max_render_ms = int64_t{1} << 40;
  env.limits.max_steps = 5000;
  EXPECT_NE(Error(nested, Json::object(), env).find("the template exceeded its step budget: more than 5000 steps"),
            std::string::npos);
  env.limits.max_steps = INT64_MAX;
  env.limits.max_render_ms = 1;
  EXPECT_NE(Error(nested, Json::object(), env)
                .find("the template exceeded its time budget: rendering took more than 1 ms "
                      "(RenderLimits::max_render_ms)"),
            std::string::npos);
  // A repetition whose size overflows 64 bits is over the bounds, not a wrapped small size.
  EXPECT_NE(Error("{{ 'abcd' * 4611686018427387904 }}").find("more than RenderLimits::max_output_bytes"),
            std::string::npos);
  EXPECT_NE(Error("{{ [1, 2] * 4611686018427387904 }}").find("the template exceeded its step budget"),
            std::string::npos);
  // Text counts a step per KiB: 64 KiB of output is 64 steps besides its statement's.
  env.limits.max_render_ms = int64_t{1} << 40;
  env.limits.max_steps = 64;
  EXPECT_NE(Error("{{ 'x' * 65536 }}", Json::object(), env).find("more than 64 steps"), std::string::npos);
  env.limits.max_steps = 1 + 64 + 64;  // the statement, the string built, its output
  std::string out;
  EXPECT_TRUE(RenderStatus("{{ 'x' * 65536 }}", Json::object(), &out, env).ok());
}

}  // namespace
}  // namespace jinja
}  // namespace kvlab
