// Reads a YAML spec into a Spec. Walks llvm::yaml::Stream nodes directly (not YAML I/O mapping)
// so every value keeps its exact position, for errors that point at the offending text; then hands
// the value checks to detail::checkSpec, which the C++ builder shares.
#include "compiler/Spec/Expr.h"
#include "compiler/Spec/Limits.h"
#include "compiler/Spec/Spec.h"
#include "compiler/Spec/SpecCheck.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace attnc {

namespace yaml = llvm::yaml;
using detail::FieldSite;
using detail::Place;

namespace {

constexpr llvm::StringRef kTopFields[] = {"name",  "head_dim", "head_dim_v", "dtype",   "heads",
                                          "scale", "mask",     "score",      "dropout", "inputs"};

// The text being read and how to turn a pointer into it into file:line:col plus the line's text.
class SourceText {
public:
  SourceText(llvm::StringRef text, llvm::StringRef fileName) : text(text), fileName(fileName) {
    lineStarts.push_back(0);
    for (size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n') lineStarts.push_back(i + 1);
  }

  bool contains(const char* ptr) const { return ptr && ptr >= text.begin() && ptr <= text.end(); }

  Place place(const char* ptr) const {
    if (!contains(ptr)) ptr = text.begin();
    size_t offset = ptr - text.begin();
    size_t line =
        std::upper_bound(lineStarts.begin(), lineStarts.end(), offset) - lineStarts.begin();
    size_t start = lineStarts[line - 1];
    size_t end = text.find('\n', start);
    llvm::StringRef lineText = text.slice(start, end == llvm::StringRef::npos ? text.size() : end);
    lineText.consume_back("\r");
    return Place{SourceLoc{fileName.str(), unsigned(line), unsigned(offset - start + 1)},
                 lineText.str()};
  }

  llvm::StringRef text;
  llvm::StringRef fileName;

private:
  std::vector<size_t> lineStarts;
};

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

class SpecReader {
public:
  SpecReader(const SourceText& source, Diagnostics& diags) : source(source), diags(diags) {}

  std::optional<Spec> read(yaml::Stream& stream);

private:
  const char* start(yaml::Node* node) const { return node->getSourceRange().Start.getPointer(); }

  Place placeOf(yaml::Node* node, yaml::Node* fallback = nullptr) const {
    // A missing value's position is wherever the parser stopped, and an alias's is past it: its
    // key says more.
    bool vague =
        llvm::isa_and_nonnull<yaml::NullNode>(node) || llvm::isa_and_nonnull<yaml::AliasNode>(node);
    const char* ptr = node && !(fallback && vague) ? start(node) : nullptr;
    if (!source.contains(ptr) && fallback) ptr = start(fallback);
    return source.place(ptr);
  }

  void error(const Place& place, std::string message) {
    diags.push_back(Diagnostic{place.loc, std::move(message), place.sourceLine, ""});
  }

  void error(yaml::Node* node, std::string message, yaml::Node* fallback = nullptr) {
    error(placeOf(node, fallback), std::move(message));
  }

  void noteSite(const std::string& field, yaml::Node* value, yaml::Node* key) {
    sites.fields[field].place = placeOf(value, key);
  }

  void typeError(const std::string& field, yaml::Node* value, yaml::Node* key,
                 const std::string& expected, const std::string& got) {
    std::string message = field + ": expected " + expected + ", got " + got;
    if (llvm::isa_and_nonnull<yaml::NullNode>(value) && key &&
        llvm::StringRef(placeOf(key).sourceLine).contains(": !"))
      message += " (a value starting with '!' is a YAML tag: quote it)";
    error(value, message, key);
    sites.reported.insert(field);
  }

  // The scalar text of `value`, or a diagnostic saying it should have been `expected`.
  std::optional<std::string> scalar(const std::string& field, yaml::Node* value, yaml::Node* key,
                                    const std::string& expected) {
    if (auto* scalarNode = llvm::dyn_cast_or_null<yaml::ScalarNode>(value)) {
      llvm::SmallString<64> storage;
      return scalarNode->getValue(storage).str();
    }
    if (auto* block = llvm::dyn_cast_or_null<yaml::BlockScalarNode>(value))
      return block->getValue().str();
    typeError(field, value, key, expected, describeNode(value));
    return std::nullopt;
  }

  std::optional<int64_t> integer(const std::string& field, yaml::Node* value, yaml::Node* key) {
    std::optional<std::string> text = scalar(field, value, key, "an integer");
    if (!text) return std::nullopt;
    int64_t result = 0;
    if (llvm::StringRef(*text).getAsInteger(10, result)) {
      typeError(field, value, key, "an integer", "'" + *text + "'");
      return std::nullopt;
    }
    return result;
  }

  std::optional<double> number(const std::string& field, yaml::Node* value, yaml::Node* key,
                               const std::string& expected = "a number") {
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

  std::optional<bool> boolean(const std::string& field, yaml::Node* value, yaml::Node* key) {
    std::optional<std::string> text = scalar(field, value, key, "true or false");
    if (!text) return std::nullopt;
    if (*text == "true" || *text == "false") return *text == "true";
    typeError(field, value, key, "true or false", "'" + *text + "'");
    return std::nullopt;
  }

  // Walks a mapping's entries, reporting non-scalar keys, unknown fields (with the nearest known
  // one) and duplicates; calls `handle(key, keyNode, valueNode)` for each known, first-seen field.
  template <typename Handle>
  void forEachField(yaml::MappingNode* mapping, const std::string& prefix,
                    llvm::ArrayRef<llvm::StringRef> known, Handle handle) {
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

  void readTop(yaml::MappingNode* top);
  void readHeads(yaml::Node* key, yaml::Node* value);
  void readDropout(yaml::Node* key, yaml::Node* value);
  void readMask(yaml::Node* key, yaml::Node* value);
  void readScore(yaml::Node* key, yaml::Node* value);
  void readInputs(yaml::Node* key, yaml::Node* value);
  void readInput(const std::string& name, yaml::Node* key, yaml::Node* value);
  FieldSite expressionSite(yaml::Node* value, const std::string& cooked);

  const SourceText& source;
  Diagnostics& diags;
  Spec spec;
  detail::SpecSites sites;
  bool sawHeadDimV = false, sawHeadsKV = false;
  // Fields offered as "did you mean"; their absence is that same mistake, not a second one.
  std::set<std::string> suggested;
};

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

std::optional<Spec> SpecReader::read(yaml::Stream& stream) {
  spec.loc = SourceLoc{source.fileName.str(), 0, 0};
  auto document = stream.begin();
  yaml::Node* root = document == stream.end() ? nullptr : document->getRoot();
  if (!root || llvm::isa<yaml::NullNode>(root)) {
    diags.push_back(Diagnostic{
        SourceLoc{source.fileName.str(), 1, 1},
        "empty spec: expected a mapping of fields (name, head_dim, heads, ...)", "", ""});
    return std::nullopt;
  }
  auto* top = llvm::dyn_cast<yaml::MappingNode>(root);
  if (!top) {
    error(root, "a spec must be a mapping of fields (name, head_dim, heads, ...), got " +
                    describeNode(root));
    return std::nullopt;
  }
  sites.top = placeOf(top);
  spec.loc = sites.top.loc;
  readTop(top);
  if (++document != stream.end())
    if (yaml::Node* extra = document->getRoot(); extra && !llvm::isa<yaml::NullNode>(extra))
      error(extra, "a spec file holds one YAML document; found another");

  if (!sawHeadDimV) spec.headDimV = spec.headDim;
  if (!sawHeadsKV) spec.headsKV = spec.headsQ;
  detail::checkSpec(spec, &sites, diags);
  if (!diags.empty()) return std::nullopt;
  return spec;
}

void SpecReader::readTop(yaml::MappingNode* top) {
  bool sawName = false, sawHeadDim = false, sawHeads = false;
  forEachField(top, "", kTopFields,
               [&](const std::string& field, yaml::Node* key, yaml::Node* value) {
    noteSite(field, value, key);
    if (field == "name") {
      sawName = true;
      if (auto text = scalar(field, value, key, "an identifier")) spec.name = *text;
    } else if (field == "head_dim" || field == "head_dim_v") {
      if (field == "head_dim")
        sawHeadDim = true;
      else
        sawHeadDimV = true;
      if (auto dim = integer(field, value, key))
        (field == "head_dim" ? spec.headDim : spec.headDimV) = *dim;
    } else if (field == "dtype") {
      if (auto text = scalar(field, value, key, "bf16 or fp16")) {
        if (*text == "bf16" || *text == "fp16")
          spec.dtype = *text == "bf16" ? DType::BF16 : DType::FP16;
        else
          typeError(field, value, key, "bf16 or fp16", "'" + *text + "'");
      }
    } else if (field == "heads") {
      sawHeads = true;
      readHeads(key, value);
    } else if (field == "scale") {
      if (auto* scalarNode = llvm::dyn_cast_or_null<yaml::ScalarNode>(value)) {
        llvm::SmallString<16> storage;
        if (scalarNode->getValue(storage) == "auto") return;
      }
      if (auto number = this->number(field, value, key, "'auto' or a positive number"))
        spec.scale = *number;
    } else if (field == "dropout") {
      readDropout(key, value);
    } else if (field == "mask") {
      readMask(key, value);
    } else if (field == "score") {
      readScore(key, value);
    } else if (field == "inputs") {
      readInputs(key, value);
    }
  });
  for (auto [seen, field] : {std::pair{sawName, "name"}, std::pair{sawHeadDim, "head_dim"},
                             std::pair{sawHeads, "heads"}}) {
    if (seen) continue;
    sites.reported.insert(field);
    if (suggested.count(field)) continue;
    error(sites.top, std::string("missing required field '") + field + "'");
  }
}

void SpecReader::readHeads(yaml::Node* key, yaml::Node* value) {
  // `heads: 8` is shorthand for {q: 8, kv: 8}.
  if (llvm::isa_and_nonnull<yaml::ScalarNode>(value)) {
    sites.fields["heads.q"] = sites.fields["heads"];
    if (auto count = integer("heads.q", value, key)) spec.headsQ = *count;
    return;
  }
  auto* mapping = llvm::dyn_cast_or_null<yaml::MappingNode>(value);
  if (!mapping)
    return typeError("heads", value, key, "a mapping {q: N, kv: M}", describeNode(value));
  bool sawQ = false;
  forEachField(mapping, "heads.", {"q", "kv"},
               [&](const std::string& field, yaml::Node* fieldKey, yaml::Node* fieldValue) {
    std::string path = "heads." + field;
    noteSite(path, fieldValue, fieldKey);
    if (field == "q")
      sawQ = true;
    else
      sawHeadsKV = true;
    if (auto count = integer(path, fieldValue, fieldKey))
      (field == "q" ? spec.headsQ : spec.headsKV) = *count;
  });
  if (!sawQ) {
    sites.reported.insert("heads.q");
    if (!suggested.count("heads.q")) error(value, "heads: missing required field 'q'", key);
  }
}

void SpecReader::readDropout(yaml::Node* key, yaml::Node* value) {
  // `dropout: 0.1` is shorthand for {p: 0.1} (Philox's default rounds).
  if (!llvm::isa_and_nonnull<yaml::MappingNode>(value)) {
    if (auto number = this->number("dropout", value, key, "a probability in [0, 1)"))
      spec.dropout = *number;
    return;
  }
  auto* mapping = llvm::cast<yaml::MappingNode>(value);
  bool sawP = false;
  forEachField(mapping, "dropout.", {"p", "rounds"},
               [&](const std::string& field, yaml::Node* fieldKey, yaml::Node* fieldValue) {
    // p's problems are reported as the shorthand's ("dropout"), at p's value.
    const std::string path = field == "p" ? "dropout" : "dropout.rounds";
    noteSite(path, fieldValue, fieldKey);
    if (field == "p") {
      sawP = true;
      if (auto number = this->number(path, fieldValue, fieldKey, "a probability in [0, 1)"))
        spec.dropout = *number;
    } else if (auto rounds = integer(path, fieldValue, fieldKey)) {
      spec.dropoutRounds = *rounds;
    }
  });
  if (!sawP) {
    sites.reported.insert("dropout");
    error(value, "dropout: missing required field 'p' (the probability of dropping)", key);
  }
}

// A value like `!q` parses as an empty scalar tagged "!q"; say so instead of reporting the rest.
static bool hasStrayTag(yaml::Node* value) {
  return value && !value->getRawTag().empty() && !value->getRawTag().starts_with("!!");
}

void SpecReader::readMask(yaml::Node* key, yaml::Node* value) {
  MaskSpec& mask = spec.mask;
  if (hasStrayTag(value)) {
    error(value,
          "mask: a value starting with '!' is a YAML tag: quote the expression, e.g. "
          "\"!(k > q)\"",
          key);
    sites.reported.insert("mask");
    return;
  }
  mask.loc = placeOf(value, key).loc;
  if (llvm::isa_and_nonnull<yaml::ScalarNode>(value) ||
      llvm::isa_and_nonnull<yaml::BlockScalarNode>(value)) {
    std::string text = *scalar("mask", value, key, "");
    if (text == "none") return;
    if (text == "causal") {
      mask.kind = MaskSpec::Causal;
      return;
    }
    if (text == "window" || text == "prefix" || text == "document") {
      static const char* examples[] = {"{window: 256}", "{prefix: 64}", "{document: doc_ids}"};
      const char* example = examples[text == "window" ? 0 : text == "prefix" ? 1 : 2];
      error(value, "mask: '" + text + "' needs a value, e.g. mask: " + example);
      sites.reported.insert("mask");
      return;
    }
    mask.kind = MaskSpec::Expr;
    mask.exprText = text;
    sites.fields["mask"] = expressionSite(value, text);
    return;
  }
  auto* mapping = llvm::dyn_cast_or_null<yaml::MappingNode>(value);
  if (!mapping)
    return typeError("mask", value, key,
                     "none, causal, {causal: ...}, {window: W}, {prefix: P}, {document: INPUT} or "
                     "an expression string",
                     describeNode(value));

  // Collect first, then decide: `causal` means an alignment alone but a flag beside `document`.
  struct Entry {
    yaml::Node *key, *value;
  };
  std::map<std::string, Entry> entries;
  size_t before = diags.size();
  forEachField(mapping, "mask.", {"causal", "window", "prefix", "document"},
               [&](const std::string& field, yaml::Node* fieldKey, yaml::Node* fieldValue) {
    entries[field] = Entry{fieldKey, fieldValue};
  });
  if (diags.size() != before) {
    sites.reported.insert("mask");
    return;
  }
  auto has = [&](const char* field) { return entries.count(field) != 0; };
  int kinds = has("window") + has("prefix") + has("document") + (has("causal") && !has("document"));
  if (kinds != 1) {
    sites.reported.insert("mask");
    std::string what = kinds == 0 ? "got an empty mapping" : "got more than one";
    return error(value,
                 "mask: expected exactly one of causal, window, prefix, document "
                 "(document may add 'causal: true'); " +
                     what,
                 key);
  }
  bool ok = true;
  if (has("document")) {
    Entry entry = entries["document"];
    noteSite("mask", entry.value, entry.key);
    mask.kind = MaskSpec::Document;
    if (auto input = scalar("mask", entry.value, entry.key, "the name of an i32 input"))
      mask.documentInput = *input;
    else
      ok = false;
    if (has("causal")) {
      Entry causal = entries["causal"];
      if (auto flag = boolean("mask", causal.value, causal.key))
        mask.documentCausal = *flag;
      else
        ok = false;
    }
  } else if (has("causal")) {
    Entry entry = entries["causal"];
    noteSite("mask", entry.value, entry.key);
    mask.kind = MaskSpec::Causal;
    if (auto text = scalar("mask", entry.value, entry.key, "top_left or bottom_right")) {
      if (*text == "top_left" || *text == "bottom_right")
        mask.topLeft = *text == "top_left";
      else {
        typeError("mask", entry.value, entry.key, "top_left or bottom_right", "'" + *text + "'");
        ok = false;
      }
    } else {
      ok = false;
    }
  } else {
    bool isWindow = has("window");
    Entry entry = entries[isWindow ? "window" : "prefix"];
    noteSite("mask", entry.value, entry.key);
    mask.kind = isWindow ? MaskSpec::Window : MaskSpec::Prefix;
    if (auto count = integer(isWindow ? "mask.window" : "mask.prefix", entry.value, entry.key))
      (isWindow ? mask.window : mask.prefix) = *count;
    else
      ok = false;
  }
  if (!ok) sites.reported.insert("mask");
}

void SpecReader::readScore(yaml::Node* key, yaml::Node* value) {
  ScoreSpec& score = spec.score;
  if (hasStrayTag(value)) {
    error(value, "score: a value starting with '!' is a YAML tag: quote the expression", key);
    sites.reported.insert("score");
    return;
  }
  score.loc = placeOf(value, key).loc;
  if (llvm::isa_and_nonnull<yaml::ScalarNode>(value) ||
      llvm::isa_and_nonnull<yaml::BlockScalarNode>(value)) {
    std::string text = *scalar("score", value, key, "");
    if (text == "none") return;
    if (text == "alibi") {
      score.kind = ScoreSpec::Alibi;
      return;
    }
    if (text == "softcap") {
      error(value, "score: 'softcap' needs a value, e.g. score: {softcap: 30.0}");
      sites.reported.insert("score");
      return;
    }
    score.kind = ScoreSpec::Expr;
    score.exprText = text;
    sites.fields["score"] = expressionSite(value, text);
    return;
  }
  auto* mapping = llvm::dyn_cast_or_null<yaml::MappingNode>(value);
  if (!mapping)
    return typeError("score", value, key,
                     "none, alibi, {softcap: C}, {alibi: INPUT} or an expression string",
                     describeNode(value));
  int kinds = 0;
  size_t before = diags.size();
  forEachField(mapping, "score.", {"softcap", "alibi"},
               [&](const std::string& field, yaml::Node* fieldKey, yaml::Node* fieldValue) {
    ++kinds;
    noteSite("score", fieldValue, fieldKey);
    if (field == "softcap") {
      score.kind = ScoreSpec::Softcap;
      if (auto cap = number("score", fieldValue, fieldKey, "a positive number"))
        score.softcap = *cap;
    } else {
      score.kind = ScoreSpec::Alibi;
      if (auto input = scalar("score", fieldValue, fieldKey, "the name of an f32 input"))
        score.alibiSlopes = *input;
    }
  });
  if (diags.size() != before) {
    sites.reported.insert("score");
    return;
  }
  if (kinds != 1) {
    sites.reported.insert("score");
    error(value,
          std::string("score: expected exactly one of softcap, alibi; ") +
              (kinds == 0 ? "got an empty mapping" : "got both"),
          key);
  }
}

void SpecReader::readInputs(yaml::Node* key, yaml::Node* value) {
  auto* mapping = llvm::dyn_cast_or_null<yaml::MappingNode>(value);
  if (!mapping)
    return typeError("inputs", value, key, "a mapping {NAME: {dtype: i32|f32, dims: [...]}}",
                     describeNode(value));
  llvm::StringMap<Place> seen;
  for (yaml::KeyValueNode& entry : *mapping) {
    yaml::Node* nameNode = entry.getKey();
    yaml::Node* declNode = entry.getValue();
    auto* nameScalar = llvm::dyn_cast_or_null<yaml::ScalarNode>(nameNode);
    if (!nameScalar) {
      error(nameNode ? nameNode : declNode,
            "inputs: expected an input name, got " + describeNode(nameNode), mapping);
      continue;
    }
    llvm::SmallString<32> storage;
    std::string name = nameScalar->getValue(storage).str();
    Place place = placeOf(nameNode);
    auto [it, inserted] = seen.try_emplace(name, place);
    if (!inserted) {
      error(place, "duplicate field 'inputs." + name + "' (first given at line " +
                       std::to_string(it->second.loc.line) + ")");
      continue;
    }
    readInput(name, nameNode, declNode);
  }
}

void SpecReader::readInput(const std::string& name, yaml::Node* key, yaml::Node* value) {
  std::string field = "inputs." + name;
  noteSite(field, key, key);  // name problems point at the name
  InputDecl input;
  input.name = name;
  input.loc = placeOf(key).loc;
  auto* mapping = llvm::dyn_cast_or_null<yaml::MappingNode>(value);
  if (!mapping) {
    typeError(field, value, key, "a mapping {dtype: i32|f32, dims: [...]}", describeNode(value));
    spec.inputs.push_back(input);
    return;
  }
  bool sawDtype = false, sawDims = false;
  forEachField(mapping, field + ".", {"dtype", "dims"},
               [&](const std::string& sub, yaml::Node* subKey, yaml::Node* subValue) {
    std::string path = field + "." + sub;
    noteSite(path, subValue, subKey);
    if (sub == "dtype") {
      sawDtype = true;
      if (auto text = scalar(path, subValue, subKey, "i32 or f32")) {
        if (*text == "i32" || *text == "f32")
          input.type = *text == "i32" ? ScalarType::I32 : ScalarType::F32;
        else
          typeError(path, subValue, subKey, "i32 or f32", "'" + *text + "'");
      }
      return;
    }
    sawDims = true;
    auto* dims = llvm::dyn_cast_or_null<yaml::SequenceNode>(subValue);
    if (!dims)
      return typeError(path, subValue, subKey, "a list of b, h, pos",
                       llvm::isa_and_nonnull<yaml::ScalarNode>(subValue)
                           ? "'" + scalar(path, subValue, subKey, "").value_or("") + "'"
                           : describeNode(subValue));
    for (yaml::Node& dimNode : *dims) {
      std::optional<std::string> dim = scalar(path, &dimNode, subKey, "b, h or pos");
      if (!dim) continue;
      if (*dim == "b" || *dim == "h" || *dim == "pos")
        input.dims.push_back(*dim == "b" ? InputDim::B : *dim == "h" ? InputDim::H : InputDim::Pos);
      else
        typeError(path, &dimNode, subKey, "b, h or pos", "'" + *dim + "'");
    }
  });
  for (auto [seen, sub] : {std::pair{sawDtype, "dtype"}, std::pair{sawDims, "dims"}}) {
    if (seen) continue;
    sites.reported.insert(field + "." + sub);
    if (!suggested.count(field + "." + sub))
      error(mapping, field + ": missing required field '" + sub + "'", key);
  }
  spec.inputs.push_back(input);
}

// LLVM's YAML scanner reports syntax errors through the SourceMgr; this collects them as ours
// instead of letting them reach stderr.
struct YamlErrorSink {
  const SourceText* source;
  Diagnostics diags;

  static void handle(const llvm::SMDiagnostic& smDiag, void* context) {
    auto* sink = static_cast<YamlErrorSink*>(context);
    const char* ptr = smDiag.getLoc().getPointer();
    Place place;
    if (sink->source->contains(ptr)) {
      place = sink->source->place(ptr);
    } else {
      place.loc = SourceLoc{sink->source->fileName.str(), unsigned(std::max(smDiag.getLineNo(), 1)),
                            unsigned(smDiag.getColumnNo() + 1)};
      place.sourceLine = smDiag.getLineContents().str();
    }
    std::string message = "invalid YAML: " + smDiag.getMessage().str();
    // `mask: !(k > q)` is the likeliest way to hit this: YAML reads the '!' as a tag.
    llvm::StringRef line(place.sourceLine);
    size_t bang = line.find(": !");
    if (bang != llvm::StringRef::npos && !line.substr(bang + 3).starts_with("!"))
      message +=
          " (a value starting with '!' is a YAML tag: quote the expression, e.g. \"!(k > q)\")";
    sink->diags.push_back(Diagnostic{place.loc, message, place.sourceLine, ""});
  }
};

// A conservative bound on the nesting of YAML text, found without parsing it: on each line, the
// indentation levels open above it plus the block indicators (`- `, `? `, `: `) that open a
// collection on the line itself, plus the flow brackets open at each '[' or '{' (counted inside
// quotes too: that only makes the bound stricter). Returns where the bound first exceeds
// kMaxYamlNesting, or null.
const char* findDeepNesting(llvm::StringRef text) {
  std::vector<size_t> indents;  // columns of the open indentation levels
  unsigned flow = 0;
  size_t lineStart = 0;
  while (lineStart < text.size()) {
    size_t lineEnd = text.find('\n', lineStart);
    if (lineEnd == llvm::StringRef::npos) lineEnd = text.size();
    llvm::StringRef line = text.slice(lineStart, lineEnd);
    size_t indent = line.find_first_not_of(' ');
    bool blank = indent == llvm::StringRef::npos || line.substr(indent).ltrim(" \t\r").empty() ||
                 line[indent] == '#';
    unsigned depth = unsigned(indents.size());
    if (!blank && flow == 0) {
      while (!indents.empty() && indents.back() > indent) indents.pop_back();
      if (indents.empty() || indents.back() < indent) indents.push_back(indent);
      depth = unsigned(indents.size());
      // `- - - x` and `? ? ? x` open one collection per indicator.
      size_t pos = indent;
      while (pos < line.size() && llvm::StringRef("-?:").contains(line[pos]) &&
             (pos + 1 == line.size() || llvm::StringRef(" \t\r").contains(line[pos + 1]))) {
        if (++depth > limits::kMaxYamlNesting) return line.data() + pos;
        pos = line.find_first_not_of(" \t\r", pos + 1);
        if (pos == llvm::StringRef::npos) break;
      }
      // `key: ? ? ? x`: a complex key opens a mapping wherever it stands (and `?` has no other
      // use in a spec: expressions write conditionals with where()).
      for (; pos < line.size(); ++pos)
        if (line[pos] == '?' && pos > 0 && llvm::StringRef(" \t").contains(line[pos - 1]) &&
            (pos + 1 == line.size() || llvm::StringRef(" \t\r").contains(line[pos + 1])) &&
            ++depth > limits::kMaxYamlNesting)
          return line.data() + pos;
    }
    if (depth > limits::kMaxYamlNesting) return line.data() + (blank ? 0 : indent);
    for (const char& c : line) {
      if (c == '[' || c == '{') {
        if (depth + ++flow > limits::kMaxYamlNesting) return &c;
      } else if ((c == ']' || c == '}') && flow > 0) {
        --flow;
      }
    }
    lineStart = lineEnd + 1;
  }
  return nullptr;
}

// Parses the whole of `node` (llvm::yaml parses lazily, as nodes are visited), descending no
// deeper than kMaxYamlNesting: returns false with `deep` set to the first node past it. Aliases
// are not followed, so an alias bomb costs its text's length.
bool walkBounded(yaml::Node* node, unsigned depth, yaml::Node*& deep) {
  if (!node) return true;
  if (depth > limits::kMaxYamlNesting) {
    deep = node;
    return false;
  }
  if (auto* mapping = llvm::dyn_cast<yaml::MappingNode>(node)) {
    for (yaml::KeyValueNode& entry : *mapping)
      if (!walkBounded(entry.getKey(), depth + 1, deep) ||
          !walkBounded(entry.getValue(), depth + 1, deep))
        return false;
  } else if (auto* sequence = llvm::dyn_cast<yaml::SequenceNode>(node)) {
    for (yaml::Node& item : *sequence)
      if (!walkBounded(&item, depth + 1, deep)) return false;
  }
  return true;
}

}  // namespace

std::optional<Spec> parseSpecText(llvm::StringRef text, llvm::StringRef fileName,
                                  Diagnostics& diags) {
  SourceText source(text, fileName);
  if (text.size() > limits::kMaxSpecBytes) {
    // Reported where the text crosses the limit.
    Place place = source.place(text.data() + limits::kMaxSpecBytes);
    diags.push_back(Diagnostic{place.loc,
                               "spec is larger than " + std::to_string(limits::kMaxSpecBytes) +
                                   " bytes; this is not a spec file",
                               place.sourceLine, ""});
    return std::nullopt;
  }
  auto tooDeep = [&](const char* at) {
    Place place = source.place(at);
    diags.push_back(Diagnostic{place.loc,
                               "invalid YAML: nested more than " +
                                   std::to_string(limits::kMaxYamlNesting) + " levels deep",
                               place.sourceLine, ""});
    return std::nullopt;
  };
  // LLVM's YAML parser recurses once per nesting level, so absurd nesting would overflow the stack
  // instead of failing: reject it before the parser sees it.
  if (const char* at = findDeepNesting(text)) return tooDeep(at);
  // First pass: syntax and nesting only. The node walk below runs on a document known to be
  // well-formed and shallow, so it never sees the partial nodes LLVM builds after a syntax error.
  {
    YamlErrorSink sink{&source, {}};
    llvm::SourceMgr sourceMgr;
    sourceMgr.setDiagHandler(&YamlErrorSink::handle, &sink);
    yaml::Stream stream(text, sourceMgr, /*ShowColors=*/false);
    for (auto document = stream.begin(); document != stream.end(); ++document) {
      yaml::Node* deep = nullptr;
      if (!walkBounded(document->getRoot(), 1, deep) && deep && sink.diags.empty())
        return tooDeep(deep->getSourceRange().Start.getPointer());
      if (deep || !sink.diags.empty()) break;
    }
    if (!sink.diags.empty() || stream.failed()) {
      if (sink.diags.empty())
        sink.diags.push_back(Diagnostic{SourceLoc{fileName.str(), 1, 1}, "invalid YAML", "", ""});
      // One syntax error usually causes the rest; the first is the one to fix.
      diags.push_back(sink.diags.front());
      return std::nullopt;
    }
  }

  llvm::SourceMgr sourceMgr;
  YamlErrorSink sink{&source, {}};
  sourceMgr.setDiagHandler(&YamlErrorSink::handle, &sink);
  yaml::Stream stream(text, sourceMgr, /*ShowColors=*/false);
  Diagnostics found;
  SpecReader reader(source, found);
  std::optional<Spec> spec = reader.read(stream);
  found.insert(found.end(), sink.diags.begin(), sink.diags.end());
  if (!found.empty()) {
    sortByPosition(found);
    diags.insert(diags.end(), found.begin(), found.end());
    return std::nullopt;
  }
  return spec;
}

std::optional<Spec> parseSpecFile(llvm::StringRef path, Diagnostics& diags) {
  auto fail = [&](const std::string& message) {
    diags.push_back(Diagnostic{SourceLoc{path.str(), 0, 0}, message, "", ""});
    return std::nullopt;
  };
  // Non-blocking, so that opening a FIFO nobody writes to returns at once instead of hanging.
  int fd = ::open(path.str().c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail("cannot read spec file: " + std::string(std::strerror(errno)));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat info;
  if (::fstat(fd, &info) != 0)
    return fail("cannot read spec file: " + std::string(std::strerror(errno)));
  if (S_ISDIR(info.st_mode)) return fail("cannot read spec file: it is a directory");
  // A pipe (`<(...)`, a FIFO) is read to its end; devices such as /dev/zero never end.
  if (!S_ISREG(info.st_mode) && !S_ISFIFO(info.st_mode))
    return fail("cannot read spec file: not a regular file or a pipe");
  if (S_ISFIFO(info.st_mode)) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  // At most one byte past the limit: enough to tell a file that is larger (or a pipe that never
  // ends) without reading it whole; parseSpecText reports such a text where it crosses the limit.
  std::string text(S_ISREG(info.st_mode)
                       ? std::min<size_t>(uint64_t(info.st_size), limits::kMaxSpecBytes) + 1
                       : size_t(4096),
                   '\0');
  size_t size = 0;
  while (true) {
    if (size == text.size()) {
      if (size > limits::kMaxSpecBytes) break;
      text.resize(std::min(2 * size, limits::kMaxSpecBytes + 1));
    }
    ssize_t got = ::read(fd, &text[size], text.size() - size);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return fail("cannot read spec file: " + std::string(std::strerror(errno)));
    if (got == 0) break;
    size += size_t(got);
  }
  text.resize(size);
  return parseSpecText(text, path, diags);
}

}  // namespace attnc
