// CodeGen's entry: the tiled ops -> one CUDA C++ translation unit that includes the embedded
// templates, defines the Variant (EmitVariant.cpp), the tile configurations the kernels
// static_assert against the derived shared memory, and the extern "C" entries, fenced into groups
// the JIT compiles as programs of their own.
#include "compiler/CodeGen/CUDA/EmitCUDA.h"

#include "compiler/CodeGen/CUDA/EmitVariant.h"

#include "attnc/kernel_names.h"
#include "attnc/sm90/bwd_config.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;

namespace attnc {
namespace {

// What the parts of a unit share: its ops and the kernel templates that serve them.
struct Unit {
  attn::TiledForwardOp op;
  attn::TiledBackwardOp backward;  // null: a unit of the forward alone
  bool hopper = false;             // the sm_90a forward (attnc/sm90/forward.h)
  bool hopperBackward = false;     // the sm_90a dK/dV kernel (attnc/sm90/backward.h)
  std::string element;             // the C++ element type
  const DecodeTiles* decode;       // null: no decode kernel
};

// The tile configurations (Config, and with the backward BwdKVConfig, BwdQConfig and the sm_90a
// ones), each static_asserted against the shared memory the tile rules derived; and the
// backward's launch facts (KernelSource::backward).
void emitConfigs(llvm::raw_ostream& os, const Unit& unit, bool kvOrderedGrid,
                 KernelSource& result) {
  attn::TiledForwardOp op = unit.op;
  attn::TiledBackwardOp backward = unit.backward;
  const bool hopper = unit.hopper, hopperBackward = unit.hopperBackward;
  const std::string& element = unit.element;
  if (hopper)
    os << llvm::formatv("using Config = attnc::sm90::FwdConfig<{0}, {1}, {2}, {3}, {4}, {5}>;\n",
                        element, op.getHeadDim(), op.getHeadDimV(), op.getBlockQ() / 64,
                        op.getBlockKv(), op.getStages());
  else
    os << llvm::formatv("using Config = attnc::sm80::FwdConfig<{0}, {1}, {2}, {3}, {4}, {5}, "
                        "{6}>;\n",
                        element, op.getHeadDim(), op.getHeadDimV(), op.getBlockQ(),
                        op.getBlockKv(), op.getWarps(), op.getStages());
  os << "static_assert(Config::kSmemBytes == " << op.getSmemBytes()
     << ", \"attn-select-tiles and the kernel template disagree on shared memory\");\n";
  if (backward) {
    DictionaryAttr tiles = backward.getTilesAttr();
    auto tile = [&](StringRef name) { return tiles.getAs<IntegerAttr>(name).getInt(); };
    os << llvm::formatv("using BwdKVConfig = attnc::sm80::BwdConfig<{0}, {1}, {2}, {3}, {4}, {5}, "
                        "{6}>;\n",
                        element, op.getHeadDim(), op.getHeadDimV(), tile("kv_block_q"),
                        tile("kv_block_kv"), tile("kv_warps"), tile("kv_stages"));
    os << llvm::formatv("using BwdQConfig = attnc::sm80::BwdConfig<{0}, {1}, {2}, {3}, {4}, {5}, "
                        "{6}>;\n",
                        element, op.getHeadDim(), op.getHeadDimV(), tile("q_block_q"),
                        tile("q_block_kv"), tile("q_warps"), tile("q_stages"));
    os << "static_assert(BwdKVConfig::kSmemBytes == " << tile("kv_smem_bytes")
       << " && BwdQConfig::kSmemBytesQ == " << tile("q_smem_bytes")
       << ", \"attn-derive-backward and the backward template disagree on shared memory\");\n";
    BackwardSource info;
    info.entryStem = (op.getSymName() + "_bwd").str();
    info.kvThreads = int(tile("kv_warps") * 32);
    info.qThreads = int(tile("q_warps") * 32);
    info.kvBlockKV = int(tile("kv_block_kv"));
    info.qBlockQ = int(tile("q_block_q"));
    info.kvSmemBytes = tile("kv_smem_bytes");
    info.qSmemBytes = tile("q_smem_bytes");
    info.preprocessThreads = info.kvThreads;
    if (hopperBackward) {
      // hopper_split: optional in the tiled IR (absent: no head-dim split).
      auto splitAttr = tiles.getAs<IntegerAttr>("hopper_split");
      const bool split = splitAttr && splitAttr.getInt() != 0;
      // Without the split, a separate dQ is also the dK/dV kernel's layout (bwd_config.h
      // SeparateDq).
      auto separateAttr = tiles.getAs<IntegerAttr>("hopper_separate_dq");
      const bool plainSeparateDq = !split && separateAttr && separateAttr.getInt() != 0;
      os << llvm::formatv("using BwdHopperConfig = attnc::sm90::BwdConfig<{0}, {1}, {2}, {3}, "
                          "{4}{5}>;\n",
                          element, op.getHeadDim(), op.getHeadDimV(), attnc::sm90::kBwdConsumers,
                          tile("hopper_stages"),
                          split ? ", true" : plainSeparateDq ? ", false, true" : "");
      os << "static_assert(BwdHopperConfig::kSmemBytes == " << tile("hopper_smem_bytes")
         << ", \"attn-derive-backward and the sm_90a backward template disagree on shared "
            "memory\");\n";
      info.kvKernel = "sm90";
      info.kvOrderedGrid = kvOrderedGrid;
      info.kvThreads = 128 * (attnc::sm90::kBwdConsumers + 1);
      info.kvBlockKV = attnc::sm90::bwdKvRows(attnc::sm90::kBwdConsumers, split);
      info.kvSmemBytes = tile("hopper_smem_bytes");
      // hopper_q_smem_bytes: optional in the tiled IR (absent or 0: the sm80 dQ kernel).
      auto qSmem = tiles.getAs<IntegerAttr>("hopper_q_smem_bytes");
      if (qSmem && qSmem.getInt() > 0) {
        os << llvm::formatv("using DqHopperConfig = attnc::sm90::DqConfig<{0}, {1}, {2}, {3}, "
                            "{4}>;\n",
                            element, op.getHeadDim(), op.getHeadDimV(), tile("hopper_q_block_kv"),
                            tile("hopper_q_stages"));
        os << "static_assert(DqHopperConfig::kSmemBytes == " << qSmem.getInt()
           << ", \"attn-derive-backward and the sm_90a dQ template disagree on shared memory\");\n";
        info.qKernel = "sm90";
        info.qThreads = 128 * 3;
        info.qBlockQ = 128;
        info.qBlockKV = int(tile("hopper_q_block_kv"));
        info.qSmemBytes = qSmem.getInt();
        info.separateDq = tile("hopper_separate_dq") != 0;
      }
    }
    result.backward = info;
  }
  if (const DecodeTiles* decode = unit.decode) {
    os << llvm::formatv("using DecodeConfig = attnc::sm80::DecodeConfig<{0}, {1}, {2}, {3}, {4}, "
                        "{5}, {6}>;\n",
                        element, op.getHeadDim(), op.getHeadDimV(),
                        op.getHeadsQ() / op.getHeadsKv(), decode->rows / 16, decode->stages,
                        decode->qInRegisters ? "true" : "false");
    os << "static_assert(DecodeConfig::kSmemBytes == " << decode->smemBytes
       << " && DecodeConfig::kBlockKV == " << decode->blockKV
       << ", \"attn-select-decode-tiles and the decode template disagree\");\n";
  }
}

// The extern "C" entries, in entry groups.
void emitEntries(llvm::raw_ostream& os, const Unit& unit,
                 const std::vector<std::pair<int, bool>>& summarized, KernelSource& result) {
  attn::TiledForwardOp op = unit.op;
  attn::TiledBackwardOp backward = unit.backward;
  const bool hopper = unit.hopper, hopperBackward = unit.hopperBackward;
  os << "\n";
  // The entries fall into groups (EntryGroup, EmitCUDA.h), each fenced by `#if` on the bit mask
  // ATTNC_ENTRY_GROUPS, so that the JIT can compile them as separate NVRTC programs at once.
  // Undefined, the macro keeps every entry (the unit compiles whole). A unit of the forward alone
  // has no fences.
  const bool grouped = bool(backward) || !summarized.empty() || unit.decode;
  int openGroup = -1;
  auto group = [&](EntryGroup g) {
    if (!grouped || int(g) == openGroup) return;
    if (openGroup >= 0) os << "#endif  // entry group " << openGroup << "\n";
    os << "\n#if !defined(ATTNC_ENTRY_GROUPS) || (ATTNC_ENTRY_GROUPS >> " << int(g) << " & 1)\n";
    openGroup = int(g);
    if (!llvm::is_contained(result.entryGroups, int(g))) result.entryGroups.push_back(int(g));
  };
  group(EntryGroup::Forward);
  // The sm_80 entries name their dynamic shared memory smem128: a unit can hold both kinds of
  // entry, and one extern array redeclared in a namespace with another alignment is an error to
  // nvcc.
  if (hopper)  // minBlocks = 1 caps the registers at entry, which setmaxnreg needs
    os << "extern \"C\" __global__ void __launch_bounds__(Config::kThreads, 1) " << result.entry
       << "(const __grid_constant__ attnc::FwdParamsTma p) {\n"
       << "  extern __shared__ __align__(1024) unsigned char smem[];\n"
       << "  attnc::sm90::forward<Config, Variant>(p, smem);\n}\n";
  else
    os << "extern \"C\" __global__ void __launch_bounds__(Config::kThreads) " << result.entry
       << "(const attnc::FwdParams p) {\n"
       << "  extern __shared__ __align__(128) unsigned char smem128[];\n"
       << "  attnc::sm80::forward<Config, Variant>(p, smem128);\n}\n";
  if (result.backward) {
    // minBlocks = 1: without it ptxas may cap registers for occupancy and spill.
    const std::string& stem = result.backward->entryStem;
    auto entry = [&](StringRef suffix, StringRef config, StringRef call, bool usesSmem) {
      os << "\nextern \"C\" __global__ void __launch_bounds__(" << config << "::kThreads, 1) "
         << stem << suffix << "(const attnc::BwdParams p) {\n";
      if (usesSmem) os << "  extern __shared__ __align__(128) unsigned char smem128[];\n";
      os << "  attnc::sm80::" << call << "(p, " << (usesSmem ? "smem128" : "nullptr") << ");\n}\n";
    };
    // The sm_90a dK/dV kernel keeps dq_accum in its own layout, which zeroing and conversion
    // follow.
    const char* layout = hopperBackward ? ", attnc::sm90::TiledDqLayout<BwdHopperConfig>" : "";
    entry(backwardEntrySuffix(BackwardEntry::Preprocess), "BwdKVConfig",
          (llvm::Twine("backwardPreprocess<BwdKVConfig, Variant") + layout + ">").str(), false);
    entry(backwardEntrySuffix(BackwardEntry::ConvertDq), "BwdKVConfig",
          (llvm::Twine("backwardConvertDQ<BwdKVConfig, Variant") + layout + ">").str(), false);
    using E = BackwardEntry;
    for (auto [kv, writeDQ] : {std::pair{E::Kv, true}, std::pair{E::KvNoDq, false}}) {
      const char* suffix = backwardEntrySuffix(kv);
      // With a separate dQ (BackwardSource::separateDq) no launch takes the dK/dV kernel's own dQ.
      if (writeDQ && result.backward->separateDq) continue;
      group(writeDQ ? EntryGroup::BackwardKV : EntryGroup::BackwardKVNoDQ);
      if (hopperBackward)
        os << "\nextern \"C\" __global__ void __launch_bounds__(BwdHopperConfig::kThreads, 1) "
           << stem << suffix << "(const __grid_constant__ attnc::BwdParamsTma p) {\n"
           << "  extern __shared__ __align__(1024) unsigned char smem[];\n"
           << "  attnc::sm90::backwardKV<BwdHopperConfig, Variant, " << (writeDQ ? "true" : "false")
           << ">(p, smem);\n}\n";
      else
        entry(suffix, "BwdKVConfig",
              (llvm::Twine("backwardKV<BwdKVConfig, Variant, ") + (writeDQ ? "true" : "false") +
               ">")
                  .str(),
              true);
    }
    group(EntryGroup::BackwardQ);
    if (result.backward->qKernel == "sm90")
      os << "\nextern \"C\" __global__ void __launch_bounds__(DqHopperConfig::kThreads, 1) " << stem
         << backwardEntrySuffix(BackwardEntry::Q)
         << "(const __grid_constant__ attnc::BwdParamsTma p) {\n"
         << "  extern __shared__ __align__(1024) unsigned char smem[];\n"
         << "  attnc::sm90::backwardQ<DqHopperConfig, Variant>(p, smem);\n}\n";
    else
      entry(backwardEntrySuffix(BackwardEntry::Q), "BwdQConfig", "backwardQ<BwdQConfig, Variant>",
            true);
  }
  if (!summarized.empty()) {
    group(EntryGroup::TileClasses);
    result.summaryEntry = (op.getSymName() + "_summary").str();
    os << "\n// Block summaries of the inputs the mask reads along positions, launched before the "
          "kernels\n// above in the same stream (docs/templates.md).\n";
    os << "extern \"C\" __global__ void __launch_bounds__(attnc::kSummaryThreads) "
       << result.summaryEntry << "(const attnc::SummaryParams p) {\n";
    for (auto [slot, isF32] : summarized) {
      os << "  attnc::summarizeInput<" << (isF32 ? "float" : "int") << ">(p, " << slot << ");\n";
      result.summarySlots.push_back(slot);
    }
    os << "}\n";
    result.tileClassesEntry = (op.getSymName() + "_tile_classes").str();
    // minBlocks = 1 here too: without it ptxas capped the entry at 48 registers and kept a
    // variable on the stack (document).
    os << "\n// The class of every (q tile, kv tile) pair of the forward, launched after the "
          "summaries and\n// before the forward (docs/templates.md).\n";
    os << "extern \"C\" __global__ void __launch_bounds__(attnc::kTileClassThreads, 1) "
       << result.tileClassesEntry << "(const attnc::FwdParams p) {\n"
       << "  attnc::writeTileClasses<Variant, Config::kBlockQ, Config::kBlockKV>(p);\n}\n";
    // The q tiles longest kv range first, launched after the classes (found by its name).
    os << "extern \"C\" __global__ void __launch_bounds__(attnc::kTileClassThreads) "
       << result.tileClassesEntry << "_order(const attnc::FwdParams p) {\n"
       << "  attnc::writeTileOrder<Variant, Config::kBlockQ>(p);\n}\n";
    if (result.backward) {
      // The same for the dK/dV kernel's walk (q tiles per kv tile), launched by the backward.
      const char* kvConfig = hopperBackward ? "BwdHopperConfig" : "BwdKVConfig";
      os << "extern \"C\" __global__ void __launch_bounds__(attnc::kTileClassThreads, 1) "
         << result.backward->entryStem << "_tile_classes(const attnc::BwdParams p) {\n"
         << "  attnc::writeTileClasses<Variant, " << kvConfig << "::kBlockQ, " << kvConfig
         << "::kBlockKV>(p);\n}\n";
      // And for the sm_90a dQ kernel's (kv tiles per q tile), launched by a backward that runs it.
      if (result.backward->qKernel == "sm90")
        os << "extern \"C\" __global__ void __launch_bounds__(attnc::kTileClassThreads, 1) "
           << result.backward->entryStem
           << "_q_tile_classes(const attnc::BwdParams p) {\n"
              "  attnc::writeTileClasses<Variant, DqHopperConfig::kBlockQ, "
              "DqHopperConfig::kBlockKV, attnc::BwdParams, true>(p);\n}\n";
    }
  }
  if (unit.decode) {
    group(EntryGroup::Decode);
    result.decodeEntry = (op.getSymName() + kDecodeEntrySuffix).str();
    result.decodeCombineEntry = (op.getSymName() + kDecodeCombineEntrySuffix).str();
    // __grid_constant__: the kernel keeps references into its parameters (the sequence's view),
    // which would otherwise copy them to the stack.
    os << "\n// The decode kernel (GQA-packed rows, split-KV; contiguous, varlen and paged K/V) "
          "and the\n// combine of its splits (docs/design/decode.md).\n";
    os << "extern \"C\" __global__ void __launch_bounds__(DecodeConfig::kThreads) "
       << result.decodeEntry << "(const __grid_constant__ attnc::DecodeParams p) {\n"
       << "  extern __shared__ __align__(128) unsigned char smem128[];\n"
       << "  attnc::sm80::decode<DecodeConfig, Variant>(p, smem128);\n}\n";
    os << "extern \"C\" __global__ void __launch_bounds__(attnc::sm80::kCombineThreads) "
       << result.decodeCombineEntry << "(const attnc::CombineParams p) {\n"
       << "  attnc::sm80::decodeCombine<" << unit.element << ", DecodeConfig::kHeadDimV>(p);\n}\n";
  }
  if (openGroup >= 0) os << "#endif  // entry group " << openGroup << "\n";
}

}  // namespace

FailureOr<KernelSource> emitCUDA(attn::TiledForwardOp op, attn::TiledBackwardOp backward,
                                 const DecodeTiles* decode) {
  KernelSource result;
  result.entry = (op.getSymName() + "_fwd").str();
  result.threads = int(op.getWarps() * 32);
  result.smemBytes = op.getSmemBytes();

  std::string code;
  llvm::raw_string_ostream os(code);
  std::string element = op.getElementType().isF16() ? "attnc::half" : "attnc::bf16";
  os << "// Generated by attnc from spec '" << op.getSymName() << "' for " << op.getTarget()
     << ": B_r = " << op.getBlockQ() << ", B_c = " << op.getBlockKv() << ", " << op.getWarps()
     << " warps, " << op.getStages() << " K/V buffers, " << op.getSmemBytes()
     << " B shared memory,\n// blocks classified '" << op.getClassification() << "', kv bounds '"
     << op.getKvBounds() << "'.\n";
  const bool hopper = op.getKernel() == "sm90";
  os << (hopper ? "#include \"attnc/sm90/forward.h\"\n" : "#include \"attnc/sm80/forward.h\"\n");
  StringAttr kvKernel = backward ? backward.getTilesAttr().getAs<StringAttr>("kv_kernel") : nullptr;
  const bool hopperBackward = kvKernel && kvKernel.getValue() == "sm90";
  // The sm_90a backward launches the sm80 preprocess and convert kernels too, and the sm80 dQ
  // kernel where its own does not fit.
  if (backward) os << "#include \"attnc/sm80/backward.h\"\n";
  if (hopperBackward) os << "#include \"attnc/sm90/backward.h\"\n";
  if (decode) os << "#include \"attnc/sm80/decode.h\"\n";
  const std::vector<std::pair<int, bool>> summarized = summarizedInputs(op);
  if (!summarized.empty())
    os << "#include \"attnc/common/summary.h\"\n#include \"attnc/common/tile_classes.h\"\n";
  // Everything the unit defines lives in a namespace named after the spec (the entries too:
  // extern "C" keeps their names), so that units of several specs can share a program or a
  // translation unit, and nvcc does not flag the Variant's members that a unit leaves unused as
  // it does in an unnamed namespace.
  const std::string specNamespace = ("attnc_spec_" + op.getSymName()).str();
  os << "\nnamespace " << specNamespace << " {\nnamespace ex = attnc::expr;\n\n";
  FailureOr<VariantChoices> choices =
      emitVariant(os, op, backward, hopper, hopperBackward, !summarized.empty());
  if (failed(choices)) return failure();
  result.maskIgnoresHead = choices->maskIgnoresHead;
  result.orderedGrid = choices->orderedGrid;
  const Unit unit{op, backward, hopper, hopperBackward, element, decode};
  emitConfigs(os, unit, choices->kvOrderedGrid, result);
  emitEntries(os, unit, summarized, result);
  os << "\n}  // namespace " << specNamespace << "\n";
  result.code = std::move(code);
  return result;
}

std::vector<unsigned> packEntryGroups(const std::vector<int>& groups, unsigned programs) {
  std::vector<int> order = groups;
  std::stable_sort(order.begin(), order.end(),
                   [](int a, int b) { return kEntryGroupCost[a] > kEntryGroupCost[b]; });
  std::vector<unsigned> masks(
      std::max(1u, std::min<unsigned>(programs, unsigned(groups.size()))), 0u);
  std::vector<int> load(masks.size(), 0);
  for (int g : order) {
    size_t lightest = std::min_element(load.begin(), load.end()) - load.begin();
    masks[lightest] |= 1u << g;
    load[lightest] += kEntryGroupCost[g];
  }
  std::stable_partition(masks.begin(), masks.end(), [](unsigned m) {
    return (m >> int(EntryGroup::Forward) & 1u) != 0;
  });
  return masks;
}

}  // namespace attnc
