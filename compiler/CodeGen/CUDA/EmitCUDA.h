// CodeGen: attn.tiled_forward -> one CUDA C++ translation unit that instantiates the sm80 forward
// template with a generated Variant (the mask and score regions as device functions).
#pragma once

#include "dialects/Attn/IR/AttnOps.h"

#include <optional>
#include <string>
#include <vector>

namespace attnc {

// The backward kernels of a translation unit and how to launch them (docs/templates.md):
//   <stem>_bwd_preprocess, _bwd_convert_dq: grid (ceil(q_len / preprocessRows), heads_q, batch)
//   <stem>_bwd_kv, _bwd_kv_nodq:  grid (ceil(kv_len / kvBlockKV), heads_kv, batch), kvSmemBytes
//   <stem>_bwd_q:                 grid (ceil(q_len / qBlockQ), heads_q, batch), qSmemBytes
struct BackwardSource {
  std::string entryStem;  // <name>_bwd
  int kvThreads = 0, qThreads = 0;
  int kvBlockKV = 0, qBlockQ = 0, preprocessRows = 64;
  long long kvSmemBytes = 0, qSmemBytes = 0;
  std::string kvKernel = "sm80";  // "sm90": the dK/dV entries take attnc::BwdParamsTma
  int preprocessThreads = 0;
  bool kvOrderedGrid = false;  // BackwardMetadata::kvOrderedGrid; the Variant's kKvOrderedGrid
  std::string qKernel = "sm80";  // "sm90": _q is the sm_90a dQ kernel (BwdParamsTma)
  int qBlockKV = 0;              // its kv tile (the K and V tensor maps' box rows)
  bool separateDq = false;       // BackwardMetadata::separateDq
};

// The decode kernel's tiles (attn-select-decode-tiles' `decode_tiles`, TileRule.h
// DecodeTileChoice).
struct DecodeTiles {
  long long rows = 0, blockKV = 0, warps = 0, stages = 0, smemBytes = 0;
  bool qInRegisters = false;
  std::vector<std::string> derivation;
};

struct KernelSource {
  std::string code;       // the translation unit (includes "attnc/sm80/forward.h")
  std::string entry;      // extern "C" kernel symbol: <name>_fwd
  int threads = 0;        // block size
  long long smemBytes = 0;  // dynamic shared memory per block
  std::optional<BackwardSource> backward;  // when a tiled_backward op was given
  // The block-summary entry (<name>_summary, docs/templates.md), when the mask reads declared
  // inputs along positions; empty otherwise. Grid summaryBlocks(...), kSummaryThreads threads,
  // attnc::SummaryParams; it summarizes the inputs in `summarySlots` (ascending).
  std::string summaryEntry;
  std::vector<int> summarySlots;
  // With a summary entry: the entry that classifies every (q tile, kv tile) pair of the forward
  // (<name>_tile_classes, tile_classes.h), launched between the summaries and the forward. Grid
  // tileClassBlocks(rows), kTileClassThreads threads, attnc::FwdParams.
  std::string tileClassesEntry;
  // The forward takes block_order.h's grid (orderedGrid(q tiles, heads_q x batch)) rather than
  // (q tiles, heads_q, batch): the sm_90a forward of a masked spec, whose blocks differ in length.
  // The Variant's kOrderedGrid says the same to the kernel.
  bool orderedGrid = false;
  // With tile classes: the mask region leaves its head argument unused (the Variant's
  // kMaskIgnoresHead), so the classes have rows of one head (KernelMetadata::maskIgnoresHead).
  bool maskIgnoresHead = false;
  // The groups of entries the unit fences apart (EntryGroup values, in the unit's order), which
  // the JIT compiles as separate NVRTC programs at once (-DATTNC_ENTRY_GROUPS=<bit mask of
  // groups>; undefined, the unit compiles whole). Empty for a unit of the forward alone.
  std::vector<int> entryGroups;
  // With decode tiles: the decode kernel (<name>_decode, templates/attnc/sm80/decode.h,
  // attnc::DecodeParams) and its combine (<name>_decode_combine, attnc::CombineParams).
  std::string decodeEntry, decodeCombineEntry;
};

// The groups of a unit's entries (docs/runtime.md), by what they take to compile
// (docs/design/cuda-emitter.md). The backward's preprocess and dQ conversion compile in
// milliseconds and go with the forward.
enum class EntryGroup : int {
  Forward = 0,      // <name>_fwd, and with backward _bwd_preprocess and _bwd_convert_dq
  // <name>_summary, _tile_classes, _bwd_tile_classes, _bwd_q_tile_classes (masks that read inputs)
  TileClasses = 1,
  BackwardKV = 2,   // _bwd_kv
  BackwardKVNoDQ = 3,  // _bwd_kv_nodq (deterministic mode)
  BackwardQ = 4,    // _bwd_q (deterministic mode)
  Decode = 5,       // _decode, _decode_combine
};
constexpr int kEntryGroups = 6;
// Their relative compile costs, for packing groups into fewer programs than groups.
constexpr int kEntryGroupCost[kEntryGroups] = {3, 1, 2, 2, 2, 2};

// A unit's entry groups (KernelSource::entryGroups) packed into at most `programs` bit masks of
// groups (the JIT's -DATTNC_ENTRY_GROUPS), the costliest groups first, each onto the lightest mask
// so far; the mask with the forward's group comes first. Every group is in exactly one mask.
std::vector<unsigned> packEntryGroups(const std::vector<int>& groups, unsigned programs);

// Fails (with an error on the op) for an op in a region that has no device form. With
// `backward`, the unit also holds the backward kernels (the score_grad hook and their entries).
// With `decode`, the unit also holds the decode kernel and its combine.
mlir::FailureOr<KernelSource> emitCUDA(mlir::attn::TiledForwardOp op,
                                       mlir::attn::TiledBackwardOp backward = {},
                                       const DecodeTiles* decode = nullptr);

}  // namespace attnc
