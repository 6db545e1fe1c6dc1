// Spec warnings beyond the CLI (test/spec-warnings covers each warning's text through attnc): a
// builder-made spec's warnings, the severity helpers, and the JIT's log path for warnings.
#include "attnc/attnc.h"
#include "compiler/Spec/Spec.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

using namespace attnc;

namespace {

TEST(SpecWarnings, BuilderSpecBuildsAndWarnsWithCaret) {
  Diagnostics diags;
  std::optional<Spec> spec = SpecBuilder("w").headDim(64).heads(4).mask("k <= q").build(diags);
  ASSERT_TRUE(spec) << renderAll(diags);
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_FALSE(hasErrors(diags));
  EXPECT_EQ(countWarnings(diags), 1u);
  const std::string rendered = diags[0].render();
  EXPECT_EQ(rendered.rfind("spec 'w': warning: mask: raw 'q' aligns", 0), 0u) << rendered;
  EXPECT_NE(rendered.find("\nk <= q\n     ^\n"), std::string::npos) << rendered;
}

TEST(SpecWarnings, WerrorMakesWarningsErrors) {
  Diagnostics diags;
  ASSERT_TRUE(
      parseSpecText("name: t\nhead_dim: 64\nheads: 4\nmask: \"k <= q\"\n", "t.yaml", diags));
  ASSERT_EQ(countWarnings(diags), 1u);
  promoteWarnings(diags);
  EXPECT_TRUE(hasErrors(diags));
  EXPECT_EQ(countWarnings(diags), 0u);
  EXPECT_EQ(diags[0].render().rfind("t.yaml:4:13: error: mask: raw 'q'", 0), 0u)
      << diags[0].render();
  EXPECT_NE(diags[0].message.find("[-Werror]"), std::string::npos);
}

// The reader's warning and the compiled form's reach JitOptions::log, each once per compiler
// however often the spec is compiled. NVRTC's deadline is too short to build anything: the
// warnings come before it.
TEST(SpecWarnings, JitSaysWarningsOnceThroughItsLog) {
  auto messages = std::make_shared<std::vector<std::string>>();
  JitOptions options;
  options.useCache = false;
  options.compileTimeoutSeconds = 1e-6;
  options.log = [messages](const std::string& message) { messages->push_back(message); };
  JitCompiler jit(options);
  const std::string text = "name: t\nhead_dim: 64\nheads: 4\nmask: \"k <= q || k >= 0\"\n";
  std::optional<Target> target = Target::byName("sm_80", nullptr);
  ASSERT_TRUE(target);
  for (int i = 0; i < 2; ++i) {
    Status status;
    jit.compileText(text, *target, &status);
  }
  ASSERT_EQ(messages->size(), 2u);
  EXPECT_EQ((*messages)[0].rfind("<spec text>:4:13: warning: mask: raw 'q'", 0), 0u)
      << (*messages)[0];
  EXPECT_EQ((*messages)[1].rfind("<spec text>:4:7: warning: mask: keeps every element", 0), 0u)
      << (*messages)[1];
}

}  // namespace
