// Internal to compiler/Spec: the YAML spec reader. It walks llvm::yaml::Stream nodes directly (not
// YAML I/O mapping) so every value keeps its exact position, for errors that point at the
// offending text; then hands the value checks to checkSpec, which the C++ builder shares. Its
// field parsers are in SpecReaderFields.cpp, the top-level walk in SpecReader.cpp, the mask, score
// and inputs in SpecReaderVariant.cpp; parseSpecText (SpecParser.cpp) runs it on checked YAML.
#pragma once

#include "compiler/Spec/Spec.h"
#include "compiler/Spec/SpecCheck.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/YAMLParser.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace attnc::detail {

namespace yaml = llvm::yaml;

// The text being read and how to turn a pointer into it into file:line:col plus the line's text.
class SourceText {
public:
  SourceText(llvm::StringRef text, llvm::StringRef fileName);

  bool contains(const char* ptr) const { return ptr && ptr >= text.begin() && ptr <= text.end(); }
  Place place(const char* ptr) const;

  llvm::StringRef text;
  llvm::StringRef fileName;

private:
  std::vector<size_t> lineStarts;
};

// "nothing", "a mapping", "a list", "an alias" or "a value": what a type error says it got.
std::string describeNode(yaml::Node* node);

class SpecReader {
public:
  SpecReader(const SourceText& source, Diagnostics& diags) : source(source), diags(diags) {}

  // Reads the document's fields and checks them (checkSpec); nullopt after any error (warnings
  // alone still give the spec).
  std::optional<Spec> read(yaml::Stream& stream);

private:
  // Called with (field name, key node, value node).
  using FieldHandler =
      llvm::function_ref<void(const std::string& field, yaml::Node* key, yaml::Node* value)>;

  const char* start(yaml::Node* node) const { return node->getSourceRange().Start.getPointer(); }
  Place placeOf(yaml::Node* node, yaml::Node* fallback = nullptr) const;
  void error(const Place& place, std::string message);
  void error(yaml::Node* node, std::string message, yaml::Node* fallback = nullptr);
  void noteSite(const std::string& field, yaml::Node* value, yaml::Node* key);
  void typeError(const std::string& field, yaml::Node* value, yaml::Node* key,
                 const std::string& expected, const std::string& got);
  // The scalar text of `value`, or a diagnostic saying it should have been `expected`.
  std::optional<std::string> scalar(const std::string& field, yaml::Node* value, yaml::Node* key,
                                    const std::string& expected);
  std::optional<int64_t> integer(const std::string& field, yaml::Node* value, yaml::Node* key);
  std::optional<double> number(const std::string& field, yaml::Node* value, yaml::Node* key,
                               const std::string& expected = "a number");
  std::optional<bool> boolean(const std::string& field, yaml::Node* value, yaml::Node* key);
  // Walks a mapping's entries, reporting non-scalar keys, unknown fields (with the nearest known
  // one) and duplicates; calls `handle(key, keyNode, valueNode)` for each known, first-seen field.
  void forEachField(yaml::MappingNode* mapping, const std::string& prefix,
                    llvm::ArrayRef<llvm::StringRef> known, FieldHandler handle);
  FieldSite expressionSite(yaml::Node* value, const std::string& cooked);

  void readTop(yaml::MappingNode* top);
  void readHeads(yaml::Node* key, yaml::Node* value);
  void readDropout(yaml::Node* key, yaml::Node* value);
  void readMask(yaml::Node* key, yaml::Node* value);
  void readScore(yaml::Node* key, yaml::Node* value);
  void readInputs(yaml::Node* key, yaml::Node* value);
  void readInput(const std::string& name, yaml::Node* key, yaml::Node* value);

  const SourceText& source;
  Diagnostics& diags;
  Spec spec;
  SpecSites sites;
  bool sawHeadDimV = false, sawHeadsKV = false;
  // Fields offered as "did you mean"; their absence is that same mistake, not a second one.
  std::set<std::string> suggested;
};

}  // namespace attnc::detail
