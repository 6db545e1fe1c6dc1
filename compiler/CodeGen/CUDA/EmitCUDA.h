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
  // The unit's entries in groups that compile as separate programs (the JIT compiles them at once,
  // one NVRTC program each, with -DATTNC_ENTRY_GROUP=<group>; undefined, the unit compiles whole):
  // 1 without backward entries, else kEntryGroups.
  int entryGroups = 1;
};

// With backward entries: the forward and the light entries (summaries, tile classes, the
// backward's preprocess and dQ conversion), the dK/dV kernel, and its deterministic twin with the
// dQ kernel. The three heavy parts take about the same time to compile (docs/runtime.md).
constexpr int kEntryGroupForward = 0, kEntryGroupBackwardKV = 1, kEntryGroupBackwardRest = 2;
constexpr int kEntryGroups = 3;

// Fails (with an error on the op) for an op in a region that has no device form. With
// `backward`, the unit also holds the backward kernels (the score_grad hook and their entries).
mlir::FailureOr<KernelSource> emitCUDA(mlir::attn::TiledForwardOp op,
                                       mlir::attn::TiledBackwardOp backward = {});

}  // namespace attnc
