// Warnings found on a spec's compiled form: what its mask keeps over whole index ranges, and the
// kernel family the target's tile rule chose (CompiledWarnings.h).
#include "compiler/Spec/CompiledWarnings.h"
#include "compiler/Spec/Expr.h"

#include "dialects/Attn/Transforms/MaskEvaluator.h"

#include "llvm/Support/FormatVariadic.h"

namespace attnc {

namespace {

using attnc::expr::IntI;
using attnc::expr::Tri;

// The lengths a mask is tried at: equal, decoding-like (fewer queries than keys) and the reverse,
// then a long sequence, so that a mask whose constants exceed the short lengths (a prefix of
// 4096) is not taken for one that keeps everything. A verdict must hold at every one.
struct Lengths {
  int qLen, kvLen;
};
constexpr Lengths kTriedLengths[] = {{2048, 2048}, {512, 2048}, {2048, 512}, {32768, 32768}};
// The tile the ranges are tried in: small enough that few elements need a look of their own.
constexpr int kTriedTile = 64;
// Elements looked at one by one (where a tile's range is undecided) before giving no verdict:
// bounds the time on a mask the intervals cannot decide anywhere (about 0.1 s).
constexpr int64_t kElementBudget = int64_t(1) << 22;
// The lengths and the tile the all-partial warning counts at (the kernel's own tile).
constexpr int kClassifiedLength = 4096;

// Whether the mask keeps some element and drops some element at the given lengths, for every
// head and a range of batches at once (an undecided answer counts as both). False when the
// element budget ran out first.
bool keptAndDropped(const mlir::attn::MaskEvaluator& mask, Lengths lengths, int heads,
                    int64_t& budget, bool& kept, bool& dropped) {
  const IntI batch{0, 1023}, head{0, std::max(heads, 1) - 1};
  auto note = [&](Tri tri) {
    kept |= tri != Tri::False;
    dropped |= tri != Tri::True;
  };
  for (int q0 = 0; q0 < lengths.qLen; q0 += kTriedTile) {
    const int q1 = std::min(q0 + kTriedTile, lengths.qLen) - 1;
    for (int k0 = 0; k0 < lengths.kvLen; k0 += kTriedTile) {
      const int k1 = std::min(k0 + kTriedTile, lengths.kvLen) - 1;
      if (kept && dropped) return true;
      Tri tile = mask.keep(batch, head, IntI{q0, q1}, IntI{k0, k1}, lengths.qLen, lengths.kvLen);
      if (tile != Tri::Unknown) {
        note(tile);
        continue;
      }
      for (int q = q0; q <= q1; ++q)
        for (int k = k0; k <= k1; ++k) {
          if (--budget < 0) return false;
          note(mask.keep(batch, head, IntI{q, q}, IntI{k, k}, lengths.qLen, lengths.kvLen));
          if (kept && dropped) return true;
        }
    }
  }
  return true;
}

Diagnostic warningAt(const SourceLoc& loc, const Spec& spec, std::string message) {
  Diagnostic diag;
  diag.loc = loc;
  if (diag.loc.file.empty()) diag.specName = spec.name;
  diag.message = std::move(message);
  diag.severity = Severity::Warning;
  return diag;
}

unsigned countInputReads(const expr::Node* node) {
  if (!node) return 0;
  unsigned reads = node->kind == expr::Kind::InputIndex ? 1 : 0;
  for (const ExprPtr& child : node->children) reads += countInputReads(child.get());
  return reads;
}

}  // namespace

void warnAboutMask(const Spec& spec, const mlir::attn::MaskEvaluator& mask, int64_t blockQ,
                   int64_t blockKV, Diagnostics& warnings) {
  if (spec.mask.kind == MaskSpec::None || mask.empty() || mask.readsInputs()) return;
  const std::string tried = llvm::formatv("q_len and kv_len from {0} to {1}", 512, 32768).str();
  int64_t budget = kElementBudget;
  bool keepsSome = false, dropsSome = false;
  for (Lengths lengths : kTriedLengths) {
    bool kept = false, dropped = false;
    if (!keptAndDropped(mask, lengths, int(spec.headsQ), budget, kept, dropped)) return;
    keepsSome |= kept;
    dropsSome |= dropped;
    if (keepsSome && dropsSome) break;
  }
  if (!keepsSome) {
    warnings.push_back(warningAt(
        spec.mask.loc, spec,
        "mask: keeps no element at any of the lengths tried (" + tried +
            "): every query row is masked out entirely"));
    return;
  }
  if (!dropsSome) {
    warnings.push_back(warningAt(
        spec.mask.loc, spec,
        "mask: keeps every element at every length tried (" + tried +
            "), so it masks nothing; write `mask: none` if that is meant"));
    return;
  }
  mlir::attn::TileCounts counts = mlir::attn::countTiles(
      mask, int(blockQ), int(blockKV), kClassifiedLength, kClassifiedLength);
  if (counts.partial > 0 && counts.empty == 0 && counts.full == 0)
    warnings.push_back(warningAt(
        spec.mask.loc, spec,
        llvm::formatv("mask: every {0} x {1} tile is partial at q_len = kv_len = {2}: no tile can "
                      "be skipped or run without the mask, which is evaluated on every element "
                      "(the tiles are classified by the ranges of q and k: comparisons such as "
                      "k <= q decide whole tiles, remainders and products seldom do)",
                      blockQ, blockKV, kClassifiedLength)
            .str()));
}

void warnAboutKernel(const Spec& spec, llvm::StringRef targetName, llvm::StringRef forwardKernel,
                     llvm::StringRef backwardKernel, llvm::ArrayRef<std::string> derivation,
                     llvm::ArrayRef<std::string> backwardDerivation, Diagnostics& warnings) {
  if (targetName != "sm_90a") return;
  // What the sm_90a rules charge registers for beyond the accumulators (TileRule.h,
  // epilogueRegisters and TileProblem::scoreOps).
  std::vector<std::string> features;
  features.push_back("head_dim " + std::to_string(spec.headDim) +
                     (spec.headDimV != spec.headDim
                          ? " / head_dim_v " + std::to_string(spec.headDimV)
                          : std::string()));
  if (spec.dropout > 0) features.push_back("dropout (16 registers of Philox state)");
  if (unsigned reads =
          countInputReads(spec.mask.expr.get()) + countInputReads(spec.score.expr.get()))
    features.push_back(std::to_string(reads) + " read(s) of declared inputs (4 registers each)");
  if (spec.mask.kind == MaskSpec::Expr) features.push_back("a custom mask");
  if (spec.score.kind != ScoreSpec::None) features.push_back("a score hook");
  std::string featureText;
  for (size_t i = 0; i < features.size(); ++i) featureText += (i ? ", " : "") + features[i];
  const std::string cost =
      "; the sm_80-family kernels (mma.sync, no TMA or wgmma) run at about half the wgmma "
      "kernel's throughput on H100 and H200 (FlashAttention 2, also mma.sync, runs at 0.4-0.6x "
      "of it in docs/perf/forward.md)";
  if (forwardKernel == "sm80") {
    std::string why = "the wgmma kernel's registers do not fit";
    if (!derivation.empty() && llvm::StringRef(derivation.front()).starts_with("sm90 kernel: "))
      why = llvm::StringRef(derivation.front()).drop_front(13).split(';').first.str();
    warnings.push_back(warningAt(
        spec.loc, spec,
        "the forward runs on the sm_80-family kernel on sm_90a, not the wgmma kernel: " + why +
            " with " + featureText + cost));
  }
  if (backwardKernel == "sm80") {
    // attn-derive-backward's line: "sm_90a dK/dV kernel: registers ... > 240 per consumer
    // thread and ...: the sm80 dK/dV kernel below serves".
    std::string why = "its registers do not fit";
    for (llvm::StringRef line : backwardDerivation)
      if (line.consume_front("sm_90a dK/dV kernel: registers")) {
        size_t end = line.find(" per consumer thread");
        why = "registers" + line.take_front(end).str() + " per consumer thread";
        break;
      }
    warnings.push_back(warningAt(
        spec.loc, spec,
        "the backward's dK/dV kernel is the sm_80-family one on sm_90a, not the wgmma kernel: " +
            why + " with " + featureText + cost));
  }
}

}  // namespace attnc
