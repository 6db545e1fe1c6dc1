// The compile path from a spec to a kernel: spec -> attn IR -> passes -> tiled form -> CUDA C++
// -> NVRTC (PTX, CUBIN, resource report). `attnc::Compiler` owns the MLIRContext.
#pragma once

#include "attnc/kernel_names.h"
#include "compiler/CodeGen/CUDA/EmitCUDA.h"
#include "compiler/Spec/Spec.h"
#include "compiler/Target/Target.h"
#include "runtime/Nvrtc.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
namespace attn {
class MaskEvaluator;
}
}  // namespace mlir

namespace attnc {

// How far to go: stopping early needs no NVRTC.
enum class Stage { SpecIR, TiledIR, CUDA, Binary };

struct CompileOptions {
  long long blockQ = 0, blockKV = 0;  // tile overrides for experiments; 0 = derive
  // Registers per thread the tile rule reserves beyond its own (attn-select-tiles spill-reserve).
  // compile() sets it itself when a derived forward tile spills (kSpillFallbackStep at a time).
  long long spillReserve = 0;
  // The same for the backward's sm_80-family dK/dV kernel and sm_90a dQ kernel
  // (attn-derive-backward spill-reserve): compile() sets it when one of them spills (the
  // backward spill fallback, backwardFallbackEntries).
  long long backwardSpillReserve = 0;
  long long summaryQLen = 0;          // count tile classes for these lengths (explain)
  long long summaryKVLen = 0;
  bool backward = false;              // also derive and compile the backward kernels
  // The query positions the decode kernel's derivation speaks of (explain; 0: 1). The tiles are
  // the same for every q_len (a launch takes more row tiles for more rows), derived by
  // attn-select-decode-tiles on a copy of the spec's IR (CompiledKernel::decode).
  long long decodeQLen = 0;
  long long decodeNumSMs = 0;         // SMs the decode rule spreads its bytes in flight over
  // ptxas in one thread (NVRTC 13's --split-compile off): slower with several entries, but ptxas
  // then writes its notes into NVRTC's log, among them the one that it serialized an entry's wgmma
  // instructions (ResourceUsage::wgmmaSerialized), which its threads print to stderr instead.
  bool ptxasNotesInLog = false;
  // How NVRTC runs (in a child process by default) and the compile's deadline, which the spill
  // fallback's retries share.
  NvrtcLimits nvrtc;
};

struct TileSummary {
  long long empty = 0, full = 0, partial = 0;
};


struct CompiledKernel {
  std::string name;    // the spec's name
  std::string entry;   // kernel symbol
  Target target;
  std::string specIR;  // attn.attention as built from the spec
  std::string tiledIR; // after the pipeline
  std::string cuda;    // generated translation unit
  std::vector<int> entryGroups;  // KernelSource::entryGroups: its entries' groups, compilable apart
  // The tiled form's decisions.
  std::string forwardKernel;  // "sm80" | "sm90": the forward template (KernelMetadata::forwardKernel)
  long long blockQ = 0, blockKV = 0, warps = 0, stages = 0, smemBytes = 0, threads = 0;
  std::vector<std::string> derivation;
  std::string classification, kvBounds;
  std::optional<TileSummary> summary;
  // The decode kernel's tiles, none for a spec the decode kernel does not take (dropout), or why
  // no decode tile fits (decodeError); its entries (KernelSource) where it has them.
  std::optional<DecodeTiles> decode;
  std::string decodeError;
  std::string decodeEntry, decodeCombineEntry;
  ResourceUsage decodeResources;  // ptxas' report of the decode entry (Stage::Binary)
  std::optional<double> keptFraction;  // of (q, k) elements, at the summary lengths
  // The mask as attn-classify-blocks evaluates it on the host (Stage::TiledIR on): `attnc explain`
  // draws its block map with it, at sample values of declared inputs too.
  std::shared_ptr<const mlir::attn::MaskEvaluator> mask;
  // Warnings only the tiled form shows (compiler/Spec/CompiledWarnings.h: a mask that keeps
  // nothing or everything, or leaves every tile partial; a spec off sm_90a's wgmma kernel); the
  // reader's own come with the spec (parseSpecFile). From Stage::TiledIR on.
  Diagnostics warnings;
  // NVRTC (Stage::Binary).
  std::string ptx;
  std::vector<char> cubin;
  ResourceUsage resources;
  // The backward kernels (CompileOptions::backward): how to launch them, and ptxas' report for
  // each entry (<stem>_preprocess, _kv, _kv_nodq, _convert_dq, _q).
  std::optional<BackwardSource> backward;
  std::vector<std::string> backwardDerivation;  // attn-derive-backward's tile steps
  std::map<std::string, ResourceUsage> backwardResources;
  // The block-summary entry and the input slots it summarizes (KernelSource::summaryEntry).
  std::string summaryEntry;
  std::vector<int> summarySlots;
  std::string tileClassesEntry;  // KernelSource::tileClassesEntry
  bool orderedGrid = false;      // KernelSource::orderedGrid
  bool maskIgnoresHead = false;  // KernelSource::maskIgnoresHead
  std::string nvrtcLog;
  double nvrtcSeconds = 0;
};

// The spill fallback: when the forward kernel of a derived tile (no override) spills to local
// memory, the tile is derived again with kSpillFallbackStep more registers reserved per thread,
// up to kSpillFallbackMax; the first tile that changes is compiled, and so on (docs/pipeline.md).
constexpr long long kSpillFallbackStep = 8;
constexpr long long kSpillFallbackMax = 96;

// The entries the backward spill fallback watches: those the default backward launches whose
// tiles the fallback's reserve can change, the sm_80 family's dK/dV kernel (`_kv`, or `_kv_nodq`
// with a separate dQ) and the sm_90a dQ kernel (`_q`, with a separate dQ). (The deterministic
// mode's own entries are left out: the JIT compiles them on first use, after the fallback.)
std::vector<BackwardEntry> backwardFallbackEntries(const BackwardSource& backward);
// Whether one of them spills, by `entrySpills(entry name)` (a report of ptxas'): what the backward
// spill fallback answers, here over a compiled unit's report, in the JIT over its programs'.
template <class EntrySpills>
bool backwardFallbackSpills(const BackwardSource& backward, const EntrySpills& entrySpills) {
  for (BackwardEntry entry : backwardFallbackEntries(backward))
    if (entrySpills(backward.entryStem + backwardEntrySuffix(entry))) return true;
  return false;
}
bool backwardFallbackSpills(const CompiledKernel& kernel);

class Compiler {
public:
  Compiler();
  ~Compiler();
  Compiler(const Compiler&) = delete;
  Compiler& operator=(const Compiler&) = delete;

  // Runs the pipeline up to `stage`. On failure returns nullopt and appends diagnostics (pass
  // and verifier errors point at the spec's file:line:col where the IR carries it). At
  // Stage::Binary a derived forward tile whose kernel spills takes the spill fallback.
  std::optional<CompiledKernel> compile(const Spec& spec, const Target& target, Stage stage,
                                        const CompileOptions& options, Diagnostics& diags);

  // The spill fallback's next options after `spilled` (compiled with `options`): the first
  // larger reserve, up to kSpillFallbackMax, whose derived tile differs from `spilled`'s; nullopt
  // when there is none (an override, the reserve spent, or no tile fits).
  std::optional<CompileOptions> spillRetry(const Spec& spec, const Target& target,
                                           const CompileOptions& options,
                                           const CompiledKernel& spilled);
  // The backward spill fallback's next options after `spilled`, one of whose watched entries
  // spills: the first larger backwardSpillReserve, up to kSpillFallbackMax, whose sm_80-family
  // dK/dV tile (kept rows, shared memory) or sm_90a dQ kernel's kv tile differs, with the same
  // kernels serving; nullopt when there is none.
  std::optional<CompileOptions> backwardSpillRetry(const Spec& spec, const Target& target,
                                                   const CompileOptions& options,
                                                   const CompiledKernel& spilled);

  // The textual pass pipeline compile() runs for `target` (what `attnc-opt` would be given).
  static std::string passPipeline(const Target& target, const CompileOptions& options);

private:
  std::unique_ptr<mlir::MLIRContext> context;
};

}  // namespace attnc
