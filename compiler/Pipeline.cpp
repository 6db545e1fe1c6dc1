// Drives the attn passes, CodeGen and NVRTC for one spec.
#include "compiler/Pipeline.h"

#include "compiler/CodeGen/CUDA/EmitCUDA.h"
#include "compiler/Spec/BuildIR.h"
#include "compiler/Spec/CompiledWarnings.h"
#include "dialects/Attn/IR/AttnOps.h"
#include "dialects/Attn/Transforms/MaskEvaluator.h"
#include "dialects/Attn/Transforms/Passes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <random>
#include <mutex>
#include "runtime/EmbeddedTemplates.h"

using namespace mlir;

namespace attnc {
namespace {

std::string print(Operation* op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

// Turns MLIR diagnostics into attnc ones for as long as it lives.
class DiagnosticCollector {
public:
  DiagnosticCollector(MLIRContext& context, const Spec& spec, Diagnostics& diags)
      : handler(&context, [this, &spec, &diags](mlir::Diagnostic& diag) {
          attnc::Diagnostic out;
          out.specName = spec.name;
          out.message = diag.str();
          for (const mlir::Diagnostic& note : diag.getNotes()) out.message += "\n  note: " + note.str();
          if (auto loc = dyn_cast<FileLineColLoc>(diag.getLocation())) {
            out.loc = {loc.getFilename().str(), loc.getLine(), loc.getColumn()};
          } else {
            out.loc.file = spec.loc.file;
          }
          if (diag.getSeverity() == DiagnosticSeverity::Error) diags.push_back(std::move(out));
          return success();
        }) {}

private:
  ScopedDiagnosticHandler handler;
};

// The fraction of (q, k) elements the mask keeps, for FLOP counts. Exact by tiles where that is
// cheap: a full tile keeps all its elements and an empty one none (the interval classification),
// so only partial tiles are evaluated element by element. Where the grid has more than
// kKeptFractionTiles tiles or its partial tiles more than kKeptFractionElements elements,
// kKeptFractionSamples random elements estimate it (to about 0.1%). The three bound
// `attnc explain` to well under a second at any length (about 1 us a tile, 40 ns an element).
constexpr long long kKeptFractionTiles = 1LL << 16;
constexpr long long kKeptFractionElements = 1LL << 21;
constexpr long long kKeptFractionSamples = 1LL << 20;
constexpr uint64_t kKeptFractionSeed = 0x5eed;
double keptFraction(const attn::MaskEvaluator& mask, long long qLen, long long kvLen,
                    long long blockQ, long long blockKV) {
  if (mask.empty()) return 1.0;
  const long long tiles = ((qLen + blockQ - 1) / blockQ) * ((kvLen + blockKV - 1) / blockKV);
  if (tiles <= kKeptFractionTiles) {
    long long kept = 0, budget = kKeptFractionElements;
    bool exact = true;
    for (long long qLo = 0; exact && qLo < qLen; qLo += blockQ) {
      const long long qHi = std::min(qLo + blockQ, qLen) - 1;
      for (long long kLo = 0; exact && kLo < kvLen; kLo += blockKV) {
        const long long kHi = std::min(kLo + blockKV, kvLen) - 1;
        const long long area = (qHi - qLo + 1) * (kHi - kLo + 1);
        switch (mask.classify(0, 0, int(qLo), int(qHi), int(kLo), int(kHi), int(qLen),
                              int(kvLen))) {
        case attn::BlockClass::Empty: break;
        case attn::BlockClass::Full: kept += area; break;
        case attn::BlockClass::Partial:
          if ((budget -= area) < 0) {
            exact = false;
            break;
          }
          for (long long q = qLo; q <= qHi; ++q)
            for (long long k = kLo; k <= kHi; ++k)
              kept += mask.keep(0, 0, int(q), int(k), int(qLen), int(kvLen)) ? 1 : 0;
          break;
        }
      }
    }
    if (exact) return double(kept) / double(qLen * kvLen);
  }
  // Uniformly random elements, from a fixed seed (the same estimate every run): a strided grid
  // aliases with masks periodic in q - k (every 4th key: a stride of 4 sees all or none).
  std::mt19937_64 random(kKeptFractionSeed);
  std::uniform_int_distribution<long long> row(0, qLen - 1), column(0, kvLen - 1);
  long long kept = 0;
  for (long long i = 0; i < kKeptFractionSamples; ++i)
    kept += mask.keep(0, 0, int(row(random)), int(column(random)), int(qLen), int(kvLen)) ? 1 : 0;
  return double(kept) / double(kKeptFractionSamples);
}

// The decode tiles (CompileOptions::decodeQLen) on a copy of `module`, after the rewrites the
// forward's tile rule also sees. A spec no decode tile fits is no error for the forward: its
// message goes to kernel.decodeError. False only for an internal error (a bad pipeline).
bool deriveDecodeTilesOnCopy(ModuleOp module, const Target& target, const CompileOptions& options,
                       CompiledKernel& kernel) {
  OwningOpRef<ModuleOp> copy = module.clone();
  std::string pipeline = llvm::formatv(
      "attn-expand-builtins, attn-simplify-score, attn-select-decode-tiles{{arch={0} "
      "smem-per-block={1} smem-per-sm={2} regs-per-thread={3} num-sms={4} q-len={5}}",
      target.name, target.smemPerBlock, target.smemPerSM, target.regsPerThread,
      options.decodeNumSMs > 0 ? options.decodeNumSMs : (long long)target.numSMs,
      std::max(1LL, options.decodeQLen));
  PassManager pm(copy->getContext(), ModuleOp::getOperationName());
  if (failed(parsePassPipeline(pipeline, pm))) return false;
  std::string error;
  {
    ScopedDiagnosticHandler capture(copy->getContext(), [&](mlir::Diagnostic& diag) {
      if (diag.getSeverity() == DiagnosticSeverity::Error && error.empty()) error = diag.str();
      return success();
    });
    if (failed(pm.run(*copy))) {
      kernel.decodeError = error.empty() ? "attn-select-decode-tiles failed" : error;
      return true;
    }
  }
  copy->walk([&](attn::AttentionOp op) {
    DictionaryAttr tiles = op.getDecodeTilesAttr();
    if (!tiles) return;
    auto get = [&](StringRef key) {
      auto value = tiles.getAs<IntegerAttr>(key);
      return value ? value.getInt() : 0;
    };
    DecodeTiles decode;
    decode.rows = get("rows");
    decode.blockKV = get("block_kv");
    decode.warps = get("warps");
    decode.stages = get("stages");
    decode.smemBytes = get("smem_bytes");
    if (auto q = tiles.getAs<BoolAttr>("q_in_registers")) decode.qInRegisters = q.getValue();
    if (auto lines = tiles.getAs<ArrayAttr>("derivation"))
      for (Attribute line : lines) decode.derivation.push_back(cast<StringAttr>(line).str());
    kernel.decode = std::move(decode);
  });
  return true;
}

}  // namespace

Compiler::Compiler() : context(std::make_unique<MLIRContext>()) {
  static std::once_flag registered;
  std::call_once(registered, [] { attn::registerAttnPasses(); });
  context->loadDialect<attn::AttnDialect>();
  context->disableMultithreading();  // one small module per compile; threads cost more than they save
  // Errors name the spec's file, line and column; a dump of the IR op behind them is noise to a
  // spec's author (attnc-opt, for compiler developers, keeps MLIR's default).
  context->printOpOnDiagnostic(false);
}

Compiler::~Compiler() = default;

std::string Compiler::passPipeline(const Target& target, const CompileOptions& options) {
  std::string classify = "attn-classify-blocks";
  if (options.summaryQLen > 0)
    classify += llvm::formatv("{{q-len={0} kv-len={1}}", options.summaryQLen,
                              options.summaryKVLen > 0 ? options.summaryKVLen : options.summaryQLen)
                    .str();
  return llvm::formatv(
      "builtin.module(attn-expand-builtins, attn-simplify-score, attn-select-tiles{{arch={0} "
      "smem-per-block={1} "
      "smem-per-sm={2} regs-per-thread={3} block-q={4} block-kv={5} spill-reserve={8}}, {6}, "
      "attn-tile{{target={0}}{7})",
      target.name, target.smemPerBlock, target.smemPerSM, target.regsPerThread, options.blockQ,
      options.blockKV, classify,
      options.backward
          ? llvm::formatv(", attn-derive-backward{{smem-per-block={0} regs-per-thread={1} "
                          "spill-reserve={2}}",
                          target.smemPerBlock, target.regsPerThread, options.backwardSpillReserve)
                .str()
          : std::string(),
      options.spillReserve);
}

std::optional<CompiledKernel> Compiler::compile(const Spec& spec, const Target& target,
                                                Stage stage, const CompileOptions& options,
                                                Diagnostics& diags) {
  DiagnosticCollector collector(*context, spec, diags);
  OwningOpRef<ModuleOp> module = buildAttentionIR(spec, *context);
  if (failed(verify(*module))) return std::nullopt;

  CompiledKernel kernel;
  kernel.name = spec.name;
  kernel.target = target;
  kernel.specIR = print(*module);
  if (stage == Stage::SpecIR) return kernel;
  if (!deriveDecodeTilesOnCopy(*module, target, options, kernel)) {
    attnc::Diagnostic d;
    d.specName = spec.name;
    d.message = "internal error: bad decode tile pipeline";
    diags.push_back(d);
    return std::nullopt;
  }

  // The pass manager is anchored on the module already: parse what runs inside it.
  std::string pipeline = passPipeline(target, options);
  llvm::StringRef inner = llvm::StringRef(pipeline).drop_front(strlen("builtin.module(")).drop_back();
  PassManager pm(context.get(), ModuleOp::getOperationName());
  if (failed(parsePassPipeline(inner, pm))) {
    attnc::Diagnostic d;
    d.specName = spec.name;
    d.message = "internal error: bad pass pipeline " + passPipeline(target, options);
    diags.push_back(d);
    return std::nullopt;
  }
  if (failed(pm.run(*module))) return std::nullopt;
  kernel.tiledIR = print(*module);

  attn::TiledForwardOp tiled;
  module->walk([&](attn::TiledForwardOp op) { tiled = op; });
  assert(tiled && "attn-tile produces one attn.tiled_forward per attn.attention");
  kernel.forwardKernel = tiled.getKernel().str();
  kernel.blockQ = tiled.getBlockQ();
  kernel.blockKV = tiled.getBlockKv();
  kernel.warps = tiled.getWarps();
  kernel.stages = tiled.getStages();
  kernel.smemBytes = tiled.getSmemBytes();
  kernel.threads = tiled.getWarps() * 32;
  for (Attribute line : tiled.getDerivation()) kernel.derivation.push_back(cast<StringAttr>(line).str());
  kernel.classification = tiled.getClassification().str();
  kernel.kvBounds = tiled.getKvBounds().str();
  if (auto summary = tiled->getAttrOfType<DictionaryAttr>("block_summary"))
    kernel.summary = TileSummary{summary.getAs<IntegerAttr>("empty").getInt(),
                                 summary.getAs<IntegerAttr>("full").getInt(),
                                 summary.getAs<IntegerAttr>("partial").getInt()};
  std::string maskError;  // (attn-classify-blocks has reported a mask it cannot evaluate)
  if (auto mask = attn::MaskEvaluator::create(tiled.getMask(), tiled.getInputs(), maskError);
      succeeded(mask))
    kernel.mask = std::make_shared<const attn::MaskEvaluator>(std::move(*mask));
  if (options.summaryQLen > 0 && kernel.classification != "runtime" && kernel.mask)
    kernel.keptFraction = keptFraction(
        *kernel.mask, options.summaryQLen,
        options.summaryKVLen > 0 ? options.summaryKVLen : options.summaryQLen, kernel.blockQ,
        kernel.blockKV);
  attn::TiledBackwardOp backward;
  module->walk([&](attn::TiledBackwardOp op) { backward = op; });
  StringRef backwardKernel;
  if (backward && backward.getTilesAttr()) {
    if (auto kvKernel = backward.getTilesAttr().getAs<StringAttr>("kv_kernel"))
      backwardKernel = kvKernel.getValue();
    if (auto lines = backward.getTilesAttr().getAs<ArrayAttr>("derivation"))
      for (Attribute line : lines) kernel.backwardDerivation.push_back(cast<StringAttr>(line).str());
  }
  if (kernel.mask)
    warnAboutMask(spec, *kernel.mask, kernel.blockQ, kernel.blockKV, kernel.warnings);
  // Tile overrides choose the kernel themselves (experiments only): nothing to warn about.
  if (options.blockQ == 0 && options.blockKV == 0)
    warnAboutKernel(spec, target.name, kernel.forwardKernel, backwardKernel, kernel.derivation,
                    kernel.backwardDerivation, kernel.warnings);
  if (stage == Stage::TiledIR) return kernel;
  FailureOr<KernelSource> source =
      emitCUDA(tiled, backward, kernel.decode ? &*kernel.decode : nullptr);
  if (failed(source)) return std::nullopt;
  kernel.cuda = source->code;
  kernel.entryGroups = source->entryGroups;
  kernel.entry = source->entry;
  kernel.backward = source->backward;
  kernel.summaryEntry = source->summaryEntry;
  kernel.summarySlots = source->summarySlots;
  kernel.tileClassesEntry = source->tileClassesEntry;
  kernel.orderedGrid = source->orderedGrid;
  kernel.maskIgnoresHead = source->maskIgnoresHead;
  kernel.decodeEntry = source->decodeEntry;
  kernel.decodeCombineEntry = source->decodeCombineEntry;
  if (stage == Stage::CUDA) return kernel;

  std::string error;
  Nvrtc* nvrtc = Nvrtc::get(&error);
  attnc::Diagnostic failure;
  failure.specName = spec.name;
  failure.loc.file = spec.loc.file;
  if (!nvrtc) {
    failure.message = "cannot compile to PTX/CUBIN: " + error;
    diags.push_back(failure);
    return std::nullopt;
  }
  NvrtcResult result = nvrtc->compile(
      kernel.cuda, spec.name + ".cu", embeddedTemplates(), target.name,
      options.ptxasNotesInLog ? std::vector<std::string>{kPtxasOneThread} : std::vector<std::string>{},
      options.nvrtc);
  kernel.nvrtcLog = result.log;
  kernel.nvrtcSeconds = result.compileSeconds;
  if (!result.ok) {
    // ptxas out of registers: the spill fallback's smaller tile, if there is one, may fit.
    // (its failure, if it fails too, is the one reported)
    if (ptxasOutOfRegisters(result))
      if (std::optional<CompileOptions> retry = spillRetry(spec, target, options, kernel)) {
        std::optional<CompiledKernel> again = compile(spec, target, stage, *retry, diags);
        if (again) again->nvrtcSeconds += kernel.nvrtcSeconds;
        return again;
      }
    failure.message =
        describeNvrtcFailure(result, spec.name, target.name, options.nvrtc.timeoutSeconds);
    diags.push_back(failure);
    return std::nullopt;
  }
  kernel.ptx = std::move(result.ptx);
  kernel.cubin = std::move(result.cubin);
  if (auto it = result.resources.find(kernel.entry); it != result.resources.end())
    kernel.resources = it->second;
  if (auto it = result.resources.find(kernel.decodeEntry); it != result.resources.end())
    kernel.decodeResources = it->second;
  if (kernel.backward)
    for (BackwardEntry entry : kAllBackwardEntries)
      if (auto it = result.resources.find(kernel.backward->entryStem + backwardEntrySuffix(entry));
          it != result.resources.end())
        kernel.backwardResources[it->first] = it->second;
  // The spill fallback on the forward entry, then the backward's on the entries it watches.
  for (bool backward : {false, true}) {
    std::optional<CompileOptions> retry;
    if (!backward && spills(kernel.resources))
      retry = spillRetry(spec, target, options, kernel);
    else if (backward && backwardFallbackSpills(kernel))
      retry = backwardSpillRetry(spec, target, options, kernel);
    Diagnostics ignored;  // (a retry that fails keeps the kernel that spills)
    if (retry)
      if (std::optional<CompiledKernel> again = compile(spec, target, stage, *retry, ignored)) {
        again->nvrtcSeconds += kernel.nvrtcSeconds;
        return again;
      }
  }
  return kernel;
}

std::vector<BackwardEntry> backwardFallbackEntries(const BackwardSource& backward) {
  std::vector<BackwardEntry> entries;
  if (backward.kvKernel == "sm80")
    entries.push_back(backward.separateDq ? BackwardEntry::KvNoDq : BackwardEntry::Kv);
  if (backward.separateDq && backward.qKernel == "sm90") entries.push_back(BackwardEntry::Q);
  return entries;
}

bool backwardFallbackSpills(const CompiledKernel& kernel) {
  return kernel.backward &&
         backwardFallbackSpills(*kernel.backward, [&](const std::string& entry) {
           auto it = kernel.backwardResources.find(entry);
           return it != kernel.backwardResources.end() && spills(it->second);
         });
}

std::optional<CompileOptions> Compiler::backwardSpillRetry(const Spec& spec, const Target& target,
                                                           const CompileOptions& options,
                                                           const CompiledKernel& spilled) {
  if (!spilled.backward) return std::nullopt;
  CompileOptions retry = options;
  while ((retry.backwardSpillReserve += kSpillFallbackStep) <= kSpillFallbackMax) {
    Diagnostics ignored;
    // (Stage::CUDA: the backward's launch facts come with the generated code, milliseconds)
    std::optional<CompiledKernel> tiles = compile(spec, target, Stage::CUDA, retry, ignored);
    if (!tiles || !tiles->backward) return std::nullopt;
    // (the sm_80 family's dK/dV kernel: its kept rows, or its streamed rows through its shared
    // memory; the sm_90a dQ kernel: its kv tile. A reserve that changed which kernels serve would
    // trade a spill for a slower kernel: none is taken.)
    if (tiles->backward->kvKernel != spilled.backward->kvKernel ||
        tiles->backward->qKernel != spilled.backward->qKernel)
      return std::nullopt;
    if (tiles->backward->kvBlockKV != spilled.backward->kvBlockKV ||
        tiles->backward->kvSmemBytes != spilled.backward->kvSmemBytes ||
        tiles->backward->qBlockKV != spilled.backward->qBlockKV)
      return retry;
  }
  return std::nullopt;
}

std::optional<CompileOptions> Compiler::spillRetry(const Spec& spec, const Target& target,
                                                   const CompileOptions& options,
                                                   const CompiledKernel& spilled) {
  if (options.blockQ != 0 || options.blockKV != 0) return std::nullopt;
  CompileOptions retry = options;
  while ((retry.spillReserve += kSpillFallbackStep) <= kSpillFallbackMax) {
    Diagnostics ignored;
    std::optional<CompiledKernel> tiles = compile(spec, target, Stage::TiledIR, retry, ignored);
    if (!tiles) return std::nullopt;
    // (the warps count: at the same B_r and B_c the sm_80 family's rule goes from 32 rows a warp
    // to 16, which keeps fewer accumulators a thread)
    if (tiles->blockQ != spilled.blockQ || tiles->blockKV != spilled.blockKV ||
        tiles->warps != spilled.warps || tiles->stages != spilled.stages)
      return retry;
  }
  return std::nullopt;
}

}  // namespace attnc
