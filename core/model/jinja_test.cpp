// The Jinja subset (core/model/jinja.h): constructs, whitespace control and
// Python semantics against outputs jinja2 gives (checked by hand with
// python3-jinja2, trim_blocks and lstrip_blocks on), and the errors.
#include "core/model/jinja.h"

#include <gtest/gtest.h>

#include <string>

namespace kvlab {
namespace jinja {
namespace {

std::string Render(const std::string& src, const Json& vars = Json::object(), Status* status = nullptr) {
  std::unique_ptr<Template> t;
  Status s = Template::Parse(src, "t.jinja", &t);
  std::string out;
  if (s.ok()) {
    Environment env;
    env.strftime_now = [](const std::string& f) { return "[" + f + "]"; };
    s = t->Render(vars, env, &out);
  }
  if (status) *status = s;
  else EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(Jinja, Basics) {
  EXPECT_EQ(Render("a{{ 1 + 2 }}b"), "a3b");
  EXPECT_EQ(Render("{{ x }}", {{"x", "hi"}}), "hi");
}

}  // namespace
}  // namespace jinja
}  // namespace kvlab
