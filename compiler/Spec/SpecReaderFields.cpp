// The SpecReader's field parsers: where a node is in the file, scalars as strings, integers,
// numbers and booleans with a type error naming the field, and the walk over a mapping's fields.
#include "compiler/Spec/SpecReader.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <cmath>

namespace attnc::detail {

SourceText::SourceText(llvm::StringRef text, llvm::StringRef fileName)
    : text(text), fileName(fileName) {
  lineStarts.push_back(0);
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') lineStarts.push_back(i + 1);
}

Place SourceText::place(const char* ptr) const {
  if (!contains(ptr)) ptr = text.begin();
  size_t offset = ptr - text.begin();
  size_t line = std::upper_bound(lineStarts.begin(), lineStarts.end(), offset) - lineStarts.begin();
  size_t start = lineStarts[line - 1];
  size_t end = text.find('\n', start);
  llvm::StringRef lineText = text.slice(start, end == llvm::StringRef::npos ? text.size() : end);
  lineText.consume_back("\r");
  return Place{SourceLoc{fileName.str(), unsigned(line), unsigned(offset - start + 1)},
               lineText.str()};
}

std::string describeNode(yaml::Node* node) {
  if (!node) return "nothing";
  switch (node->getType()) {
  case yaml::Node::NK_Null: return "nothing";
  case yaml::Node::NK_Mapping: return "a mapping";
  case yaml::Node::NK_Sequence: return "a list";
  case yaml::Node::NK_Alias: return "an alias";
  default: return "a value";
  }
}

Place SpecReader::placeOf(yaml::Node* node, yaml::Node* fallback) const {
  // A missing value's position is wherever the parser stopped, and an alias's is past it: its
  // key says more.
  bool vague =
      llvm::isa_and_nonnull<yaml::NullNode>(node) || llvm::isa_and_nonnull<yaml::AliasNode>(node);
  const char* ptr = node && !(fallback && vague) ? start(node) : nullptr;
  if (!source.contains(ptr) && fallback) ptr = start(fallback);
  return source.place(ptr);
}

void SpecReader::error(const Place& place, std::string message) {
  diags.push_back(Diagnostic{place.loc, std::move(message), place.sourceLine, ""});
}

void SpecReader::error(yaml::Node* node, std::string message, yaml::Node* fallback) {
  error(placeOf(node, fallback), std::move(message));
}

void SpecReader::noteSite(const std::string& field, yaml::Node* value, yaml::Node* key) {
  sites.fields[field].place = placeOf(value, key);
}

void SpecReader::typeError(const std::string& field, yaml::Node* value, yaml::Node* key,
                           const std::string& expected, const std::string& got) {
  std::string message = field + ": expected " + expected + ", got " + got;
  if (llvm::isa_and_nonnull<yaml::NullNode>(value) && key &&
      llvm::StringRef(placeOf(key).sourceLine).contains(": !"))
    message += " (a value starting with '!' is a YAML tag: quote it)";
  error(value, message, key);
  sites.reported.insert(field);
}

std::optional<std::string> SpecReader::scalar(const std::string& field, yaml::Node* value,
                                              yaml::Node* key, const std::string& expected) {
  if (auto* scalarNode = llvm::dyn_cast_or_null<yaml::ScalarNode>(value)) {
    llvm::SmallString<64> storage;
    return scalarNode->getValue(storage).str();
  }
  if (auto* block = llvm::dyn_cast_or_null<yaml::BlockScalarNode>(value))
    return block->getValue().str();
  typeError(field, value, key, expected, describeNode(value));
  return std::nullopt;
}

std::optional<int64_t> SpecReader::integer(const std::string& field, yaml::Node* value,
                                           yaml::Node* key) {
  std::optional<std::string> text = scalar(field, value, key, "an integer");
  if (!text) return std::nullopt;
  int64_t result = 0;
  if (llvm::StringRef(*text).getAsInteger(10, result)) {
    typeError(field, value, key, "an integer", "'" + *text + "'");
    return std::nullopt;
  }
  return result;
}

std::optional<double> SpecReader::number(const std::string& field, yaml::Node* value,
                                         yaml::Node* key, const std::string& expected) {
  std::optional<std::string> text = scalar(field, value, key, expected);
  if (!text) return std::nullopt;
  // Decimal notation only: strtod would also take "inf", "nan" and hex floats.
  llvm::StringRef digits(*text);
  bool plain =
      !digits.empty() && digits.find_first_not_of("0123456789.eE+-") == llvm::StringRef::npos;
  double result = 0;
  if (!plain || digits.getAsDouble(result) || !std::isfinite(result)) {
    typeError(field, value, key, expected, "'" + *text + "'");
    return std::nullopt;
  }
  return result;
}

std::optional<bool> SpecReader::boolean(const std::string& field, yaml::Node* value,
                                        yaml::Node* key) {
  std::optional<std::string> text = scalar(field, value, key, "true or false");
  if (!text) return std::nullopt;
  if (*text == "true" || *text == "false") return *text == "true";
  typeError(field, value, key, "true or false", "'" + *text + "'");
  return std::nullopt;
}

void SpecReader::forEachField(yaml::MappingNode* mapping, const std::string& prefix,
                              llvm::ArrayRef<llvm::StringRef> known, FieldHandler handle) {
  llvm::StringMap<Place> seen;
  for (yaml::KeyValueNode& entry : *mapping) {
    yaml::Node* keyNode = entry.getKey();
    yaml::Node* valueNode = entry.getValue();
    auto* keyScalar = llvm::dyn_cast_or_null<yaml::ScalarNode>(keyNode);
    if (!keyScalar) {
      error(keyNode ? keyNode : valueNode,
            prefix + "expected a field name, got " + describeNode(keyNode), mapping);
      continue;
    }
    llvm::SmallString<32> storage;
    std::string key = keyScalar->getValue(storage).str();
    if (!llvm::is_contained(known, llvm::StringRef(key))) {
      std::string message = "unknown field '" + prefix + key + "'";
      std::string nearest = detail::nearestName(key, known);
      if (!nearest.empty()) {
        message += "; did you mean '" + prefix + nearest + "'?";
        suggested.insert(prefix + nearest);
      } else {
        message += "; expected one of ";
        for (size_t i = 0; i < known.size(); ++i) message += (i ? ", " : "") + known[i].str();
      }
      error(keyNode, message);
      continue;
    }
    Place keyPlace = placeOf(keyNode);
    auto [it, inserted] = seen.try_emplace(key, keyPlace);
    if (!inserted) {
      error(keyPlace, "duplicate field '" + prefix + key + "' (first given at line " +
                          std::to_string(it->second.loc.line) + ")");
      continue;
    }
    if (llvm::isa_and_nonnull<yaml::AliasNode>(valueNode)) {
      error(valueNode, prefix + key + ": aliases (*name) are not supported in specs", keyNode);
      sites.reported.insert(prefix + key);
      continue;
    }
    handle(key, keyNode, valueNode);
  }
}

// Where each byte of an (unescaped, unfolded) scalar string sits in the file: matches the string's
// characters in order against the raw source, letting folded line breaks stand for spaces and
// skipping quotes, escapes and indentation. If the match fails (exotic escapes), every offset maps
// to the scalar's start, which is still the right line.
FieldSite SpecReader::expressionSite(yaml::Node* value, const std::string& cooked) {
  FieldSite site;
  site.place = placeOf(value);
  const char* begin = start(value);
  const char* end = value->getSourceRange().End.getPointer();
  if (!source.contains(begin) || !source.contains(end) || end < begin) return site;
  std::vector<size_t> offsets;  // source offset of each cooked byte, plus one past the last
  const char* cursor = begin;
  bool matched = true;
  for (char c : cooked) {
    while (cursor < end && !(*cursor == c || (c == ' ' && (*cursor == '\n' || *cursor == '\r'))))
      ++cursor;
    if (cursor >= end) {
      matched = false;
      break;
    }
    offsets.push_back(cursor - source.text.begin());
    ++cursor;
  }
  if (!matched) return site;
  offsets.push_back(cursor - source.text.begin());
  const SourceText* text = &source;
  Place fallback = site.place;
  site.offsetPlace = [text, offsets, fallback](size_t offset) {
    if (offset >= offsets.size()) return fallback;
    return text->place(text->text.begin() + offsets[offset]);
  };
  return site;
}

}  // namespace attnc::detail
