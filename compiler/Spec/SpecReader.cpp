// The SpecReader's walk over a spec document: its top-level fields, the heads and the dropout;
// the defaults of head_dim_v and heads.kv; and the checks every spec gets (checkSpec).
#include "compiler/Spec/SpecReader.h"

#include "llvm/ADT/SmallString.h"

namespace attnc::detail {

namespace {

constexpr llvm::StringRef kTopFields[] = {"name",  "head_dim", "head_dim_v", "dtype",   "heads",
                                          "scale", "mask",     "score",      "dropout", "inputs"};

}  // namespace

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
  checkSpec(spec, &sites, diags);
  if (hasErrors(diags)) return std::nullopt;
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

}  // namespace attnc::detail
