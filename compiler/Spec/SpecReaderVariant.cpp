// The SpecReader's fields that say the attention variant: the mask, the score and the declared
// inputs they read, with the shorthand forms (`mask: causal`, `score: alibi`, an expression
// string).
#include "compiler/Spec/SpecReader.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

#include <map>

namespace attnc::detail {

namespace {

// A value like `!q` parses as an empty scalar tagged "!q"; say so instead of reporting the rest.
bool hasStrayTag(yaml::Node* value) {
  return value && !value->getRawTag().empty() && !value->getRawTag().starts_with("!!");
}

}  // namespace

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
    // A lone word is no mask expression (inputs are i32 or f32, never a boolean): a misspelt
    // builtin such as `causl`.
    static constexpr llvm::StringRef kMaskKeywords[] = {"none", "causal", "window", "prefix",
                                                        "document"};
    if (text != "true" && text != "false" && !text.empty() &&
        llvm::all_of(text, [](char c) { return llvm::isAlnum(c) || c == '_'; })) {
      std::string nearest = nearestName(text, kMaskKeywords);
      if (!nearest.empty()) {
        error(value, "mask: unknown mask '" + text + "'; did you mean '" + nearest + "'?");
        sites.reported.insert("mask");
        return;
      }
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
      if (*text == "top_left" || *text == "bottom_right") {
        mask.topLeft = *text == "top_left";
      } else if (*text == "true" || *text == "false") {
        // `causal: true` is the flag form other libraries use; here the value says which rows
        // align, and the two differ when q_len != kv_len.
        error(entry.value,
              "mask: causal takes an alignment, not " + *text +
                  ": bottom_right (the last query row sees every key, as `mask: causal`, "
                  "FlashAttention 2 and a KV cache want) or top_left (query row i sees keys 0..i, "
                  "as torch's is_causal); the two differ when q_len != kv_len" +
                  (*text == "false" ? "; for no mask write mask: none" : ""));
        ok = false;
      } else {
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

}  // namespace attnc::detail
