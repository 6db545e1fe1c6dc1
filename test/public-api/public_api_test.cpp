// What an app that has only attnc's public headers can do in C++: build a spec with SpecBuilder,
// get a bad one back as an error naming the spec and the field, and JIT-compile the good one for
// sm_80 (NVRTC only, no GPU). Compiled with include/ as its only include directory
// (CMakeLists.txt here), so a public header that reached into the source tree fails to build.
#include <attnc/attnc.h>

#if __has_include("compiler/Spec/Spec.h") || __has_include("runtime/Nvrtc.h")
#error "the public API test must be compiled with include/ as its only project include directory"
#endif

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  ++failures;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

int main() {
  attnc::Diagnostics diags;
  std::optional<attnc::Spec> spec =
      attnc::SpecBuilder("public_api_alibi")
          .headDim(64)
          .heads(8, 2)
          .dtype(attnc::DType::FP16)
          .causal()
          .score("score - slopes[h] * abs(q - k)")
          .input("slopes", attnc::ScalarType::F32, {attnc::InputDim::H})
          .build(diags);
  expect(spec.has_value(), "SpecBuilder::build: " + attnc::renderAll(diags));
  if (!spec) return 1;
  expect(spec->headDimV == 64, "head_dim_v defaults to head_dim");
  const attnc::InputDecl* slopes = spec->findInput("slopes");
  expect(slopes && slopes->type == attnc::ScalarType::F32, "the declared input is found, f32");
  expect(spec->mask.expr && spec->score.expr, "build() type-checks the mask and the score");

  attnc::Diagnostics errors;
  std::optional<attnc::Spec> bad =
      attnc::SpecBuilder("public_api_bad").headDim(64).heads(8).mask("q >= kk").build(errors);
  const std::string rendered = attnc::renderAll(errors);
  expect(!bad && errors.size() == 1, "a mask with an unknown name is one error: " + rendered);
  expect(contains(rendered, "spec 'public_api_bad': error: mask: unknown identifier 'kk'"),
         "the error names the spec, the field and the name: " + rendered);

  std::string error;
  std::optional<attnc::Target> target = attnc::Target::byName("sm_80", &error);
  expect(target.has_value(), "Target::byName(sm_80): " + error);
  if (!target) return 1;
  attnc::JitCompiler jit;
  attnc::Status status;
  attnc::Kernel kernel = jit.compile(*spec, *target, &status);
  expect(status.ok && kernel.valid(), "JitCompiler::compile: " + status.message);
  if (kernel) {
    expect(kernel.name() == "public_api_alibi", "kernel name: " + kernel.name());
    expect(kernel.target() == "sm_80", "kernel target: " + kernel.target());
    expect(kernel.headDim() == 64 && kernel.headsQ() == 8 && kernel.headsKV() == 2,
           "kernel shape follows the spec");
    expect(kernel.dtype() == "fp16", "kernel dtype: " + kernel.dtype());
    expect(kernel.inputNames() == std::vector<std::string>{"slopes"}, "kernel inputs");
    expect(!kernel.cubin().empty(), "the kernel has a cubin");
  }
  if (failures == 0) std::printf("public API: spec built, bad spec reported, kernel compiled\n");
  return failures == 0 ? 0 : 1;
}
