// `attnc explain`: prints the tile derivation, the block classification and its map (at sample
// values of declared inputs too), the kernel's resources unless --no-compile, and the IO model.
#include "Explain.h"

#include "BlockMap.h"
#include "SampleInputs.h"
#include "Warnings.h"

#include "attnc/common/philox.h"
#include "attnc/common/split_kv.h"
#include "attnc/sm90/config.h"
#include "dialects/Attn/Transforms/TileRule.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

namespace attnc {

namespace {

int failWith(const std::string& message) {
  llvm::errs() << "attnc: error: " << message << "\n";
  return 1;
}

std::string bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  return llvm::formatv("{0:f2} {1}", b, units[u]);
}

struct MapResult {
  std::optional<BlockMap> map;
  std::string at;  // the sample values it was drawn from, for masks that read inputs
};

// The block map where explain can draw one: for masks of positions always, for masks that read
// declared inputs from the sample values given (the classes the launch would derive for batch 0,
// head 0). Prints why there is none otherwise.

MapResult blockMap(llvm::raw_ostream& os, const Spec& spec, const CompiledKernel& kernel,
                   const std::vector<SampleInput>& samples, long long seqLen, long long kvSeqLen) {
  MapResult result;
  if (!kernel.mask) return result;
  const mlir::attn::MaskEvaluator& mask = *kernel.mask;
  if (!mask.readsInputs()) {
    result.map = mapBlocks(mask, int(kernel.blockQ), int(kernel.blockKV), int(seqLen),
                           int(kvSeqLen));
    return result;
  }
  std::vector<InputRef> refs(spec.inputs.size(), InputRef{nullptr, 0, 0, 0, nullptr});
  std::vector<bool> given(spec.inputs.size(), false);
  int batch = 1, heads = 1;
  for (const SampleInput& sample : samples) {
    refs[size_t(sample.slot)] = sample.ref();
    given[size_t(sample.slot)] = true;
    batch = std::max<int>(batch, int(sample.extent(InputDim::B)));
    heads = std::max<int>(heads, int(sample.extent(InputDim::H)));
  }
  std::vector<std::string> missing, used;
  for (auto [slot, input] : llvm::enumerate(spec.inputs))
    if (mask.readsInput(int(slot)))
      (given[slot] ? used : missing).push_back(input.name);
  if (!missing.empty()) {
    os << "  the mask reads declared inputs: tiles are classified at launch from their values; "
          "give sample values (--input "
       << missing.front() << "=FILE.npy or --input " << missing.front()
       << "=0,0,1,...) to see the classes and the block map\n";
    return result;
  }
  for (const SampleInput& sample : samples)
    if (mask.readsInput(sample.slot))
      result.at += (result.at.empty() ? "" : ", ") + sample.name + " from " + sample.source;
  mlir::attn::MaskInputs inputs{refs, batch, heads};
  result.map = mapBlocks(mask, int(kernel.blockQ), int(kernel.blockKV), int(seqLen),
                         int(kvSeqLen), inputs);
  return result;
}

// Whether a launch at q_len takes the decode path: no dropout (the decode kernel holds no Philox
// state) and at most kDecodeMaxPackedRows packed rows (G x q_len).
bool decodeApplies(const Spec& spec, long long qLen) {
  const long long group = spec.headsQ / std::max<int64_t>(spec.headsKV, 1);
  return spec.dropout == 0 && group * qLen <= mlir::attn::kDecodeMaxPackedRows;
}

// The decode plan: the decode rule's tiles (CompiledKernel::decode), the grid they make at these
// lengths, and the split count split_kv.h gives for it, as the runtime will derive them.
void printDecodePlan(llvm::raw_ostream& os, const Spec& spec, const Target& target,
                     const CompiledKernel& kernel, long long batch, long long qLen,
                     long long kvLen, long long numSMs) {
  const long long group = spec.headsQ / std::max<int64_t>(spec.headsKV, 1);
  os << llvm::formatv("\nDecode (q_len <= {0}: G {1} x q_len within {2} packed rows, no "
                      "dropout)\n",
                      mlir::attn::kDecodeMaxPackedRows / group, group,
                      mlir::attn::kDecodeMaxPackedRows);
  if (!kernel.decode) {
    os << "  no decode tiles: " << kernel.decodeError << "\n";
    return;
  }
  const DecodeTiles& tiles = *kernel.decode;
  os << "  launches at these lengths run the decode kernel " << spec.name << kDecodeEntrySuffix
     << " (ForwardArgs::decode = Auto), not the forward kernel above\n";
  for (auto [i, line] : llvm::enumerate(tiles.derivation))
    os << "  " << i + 1 << ". " << line << "\n";

  const long long packed = group * qLen;
  const long long rowTiles = (packed + tiles.rows - 1) / tiles.rows;
  const long long units = batch * spec.headsKV * rowTiles;
  os << llvm::formatv("  packed rows: G {0} x q_len {1} = {2} in row tiles of {3}: {4} row "
                      "tile(s) per kv head\n",
                      group, qLen, packed, tiles.rows, rowTiles);
  os << llvm::formatv("  units: batch {0} x heads_kv {1} x row tiles {2} = {3} blocks without "
                      "splitting\n",
                      batch, spec.headsKV, rowTiles, units);

  // Registers: the rule keeps the live set within 3/4 of what a thread may use and models no
  // smaller total, so the slots count blocks at the full regsPerThread until ptxas reports the
  // kernel's own.
  const SmLimits limits{target.regsPerSM, target.smemPerSM, target.maxThreadsPerSM,
                        target.maxBlocksPerSM};
  const int threads = int(32 * tiles.warps);
  const bool measured = kernel.decodeResources.registers > 0;
  const int registers = measured ? int(kernel.decodeResources.registers) : target.regsPerThread;
  const int perSM = blocksPerSM(threads, registers, tiles.smemBytes, limits);
  const long long sms = numSMs > 0 ? numSMs : target.numSMs;
  const long long slots = sms * perSM;
  os << llvm::formatv("  slots: {0} SMs ({1}) x {2} blocks/SM = {3}: {4} threads (32 x {5} "
                      "warps), {6} B shared + {7} B reserved, {8} registers/thread ({9}), at "
                      "most {10} blocks/SM\n",
                      sms, numSMs > 0 ? std::string("--sms") : target.description, perSM,
                      slots, threads, tiles.warps, tiles.smemBytes, kSmemReservedPerBlock,
                      registers,
                      measured ? "ptxas"
                               : "a model: the most a thread may use, the live set within 3/4 of "
                                 "it; ptxas gives the kernel's own figure when it compiles",
                      target.maxBlocksPerSM);

  const int kvTiles = int(std::min<long long>((kvLen + tiles.blockKV - 1) / tiles.blockKV,
                                              std::numeric_limits<int>::max()));
  const long long elementBytes = 2;  // bf16 and fp16 alike
  const long long rowsPerBlock = std::min(packed, tiles.rows);
  const SplitProblem problem{
      int(std::min<long long>(units, std::numeric_limits<int>::max())), kvTiles,
      int(std::min<long long>(slots, std::numeric_limits<int>::max())),
      tiles.blockKV * (spec.headDim + spec.headDimV) * elementBytes,
      rowsPerBlock * spec.headDimV * 4};
  const SplitPlan plan = splitCount(problem);
  os << llvm::formatv("  splits: {0} of {1} kv tile(s) each ({2} tiles of {3} keys at kv_len "
                      "{4}): {5} blocks, {6:f1}% of the slots busy{7}\n",
                      plan.splits, plan.splitTiles, kvTiles, tiles.blockKV, kvLen,
                      units * plan.splits,
                      100.0 * slotEfficiency(problem.units, plan.splits, problem.slots),
                      units >= slots ? " (the units fill the slots: no split)" : "");
  if (plan.splits == 1) {
    os << "  partials: none (one split writes O and LSE itself)\n";
    return;
  }
  // o_part[split][b][h][q][dv] and lse_part[split][b][h][q], fp32, merged by the combine entry.
  const double partials =
      double(plan.splits) * double(batch) * double(spec.headsQ) * double(qLen) *
      double(spec.headDimV + 1) * 4.0;
  const double kvBytes = double(batch) * double(spec.headsKV) * double(kvLen) *
                         double(spec.headDim + spec.headDimV) * double(elementBytes);
  os << llvm::formatv("  partials: fp32 O and LSE of {0} splits x batch {1} x {2} query heads x "
                      "q_len {3} x (d_v {4} + 1) x 4 B = {5} ({6:f2}% of the {7} of K/V the "
                      "launch reads), merged by a combine launch\n",
                      plan.splits, batch, spec.headsQ, qLen, spec.headDimV, bytes(partials),
                      100.0 * partials / kvBytes, bytes(kvBytes));
}

}  // namespace

int explainSpec(const Spec& spec, const Target& target, const ExplainOptions& explain,
                CompileOptions options) {
  long long seqLen = explain.seqLen, kvSeqLen = explain.kvSeqLen;
  const long long batch = explain.batch;
  std::vector<SampleInput> samples;
  for (const std::string& argument : explain.inputs) {
    std::string error;
    std::optional<SampleInput> sample = parseSampleInput(argument, spec, error);
    if (!sample) return failWith(error);
    samples.push_back(std::move(*sample));
  }
  // Without --seqlen, sample values along positions give the lengths (q_len = kv_len).
  long long samplePositions = 0;
  for (const SampleInput& sample : samples)
    if (long long n = sample.extent(InputDim::Pos); n > 1) {
      if (samplePositions && n != samplePositions)
        return failWith(llvm::formatv("--input: {0} has {1} positions, an earlier input {2}",
                                      sample.name, n, samplePositions));
      samplePositions = n;
    }
  if (samplePositions && !explain.seqLenGiven) seqLen = samplePositions;
  if (seqLen < 1 || kvSeqLen < 0 || batch < 1)
    return failWith("--seqlen and --batch must be at least 1");
  if (kvSeqLen == 0) kvSeqLen = seqLen;
  // The kernel reads positions [0, max(q_len, kv_len)) of an input (expr_inputs.h InputExtents).
  for (const SampleInput& sample : samples)
    if (long long n = sample.extent(InputDim::Pos);
        n > 1 && n != std::max(seqLen, kvSeqLen))
      return failWith(llvm::formatv("--input {0} ({1}): {2} positions, but q_len {3} and kv_len "
                                    "{4} need max(q_len, kv_len) = {5}",
                                    sample.name, sample.source, n, seqLen, kvSeqLen,
                                    std::max(seqLen, kvSeqLen)));

  options.summaryQLen = seqLen;
  options.summaryKVLen = kvSeqLen;
  if (decodeApplies(spec, seqLen)) {
    options.decodeQLen = seqLen;
    options.decodeNumSMs = explain.numSMs;
  }
  Diagnostics diags;
  Compiler compiler;
  std::optional<CompiledKernel> kernel = compiler.compile(
      spec, target, explain.noCompile ? Stage::CUDA : Stage::Binary, options, diags);
  if (!kernel) {
    llvm::errs() << renderAll(diags);
    return 1;
  }
  if (reportWarnings(kernel->warnings)) return 1;

  auto& os = llvm::outs();
  os << "attnc explain: " << spec.name << " for " << target.name << " (" << target.description
     << ")\n\n";
  os << "Tile derivation\n";
  for (auto [i, line] : llvm::enumerate(kernel->derivation))
    os << "  " << i + 1 << ". " << line << "\n";

  long long qTiles = (seqLen + kernel->blockQ - 1) / kernel->blockQ;
  long long kvTiles = (kvSeqLen + kernel->blockKV - 1) / kernel->blockKV;
  os << "\nBlock classification (q_len " << seqLen << ", kv_len " << kvSeqLen << ": " << qTiles
     << " x " << kvTiles << " tiles of " << kernel->blockQ << " x " << kernel->blockKV << ")\n";
  os << "  mode: " << kernel->classification << ", kv loop bounds: " << kernel->kvBounds << "\n";
  MapResult drawn = blockMap(os, spec, *kernel, samples, seqLen, kvSeqLen);
  double tileFraction = 1.0;
  std::optional<TileSummary> summary = kernel->summary;
  if (!summary && drawn.map) {
    mlir::attn::TileCounts counts = drawn.map->counts();
    summary = TileSummary{counts.empty, counts.full, counts.partial};
    os << "  the mask reads declared inputs: tiles are classified at launch from their values; "
          "at the sample values ("
       << drawn.at << "; batch 0, head 0):\n";
  }
  if (summary) {
    const TileSummary& s = *summary;
    long long total = s.empty + s.full + s.partial;
    tileFraction = total ? double(s.full + s.partial) / double(total) : 1.0;
    os << llvm::formatv("  empty {0} (skipped), full {1} (no mask evaluated), partial {2} (mask "
                        "per element): {3:f1}% of tiles computed\n",
                        s.empty, s.full, s.partial, 100.0 * tileFraction);
  }
  double kept = kernel->keptFraction.value_or(1.0);
  if (kernel->keptFraction)
    os << llvm::formatv("  elements kept by the mask: {0:f2}%\n", 100.0 * kept);
  if (drawn.map) printBlockMap(os, *drawn.map, terminalColumns());
  if (!explain.pngPath.empty()) {
    if (!drawn.map)
      return failWith("--png: no block map to draw (the mask reads declared inputs: give sample "
                      "values with --input)");
    std::string error;
    std::string png = encodeBlockMapPng(*drawn.map, error);
    if (png.empty()) return failWith(error);
    if (llvm::Error e = llvm::writeToOutput(explain.pngPath, [&](llvm::raw_ostream& out) {
          out << png;
          return llvm::Error::success();
        }))
      return failWith("--png: cannot write '" + explain.pngPath + "': " +
                      llvm::toString(std::move(e)));
    os << "  block map image: " << explain.pngPath << "\n";
  }

  const ResourceUsage& r = kernel->resources;
  if (explain.noCompile) {
    os << "\nKernel (not compiled: --no-compile; registers, spills and occupancy come from "
          "NVRTC)\n";
    os << "  entry " << kernel->entry << ": " << kernel->threads << " threads, "
       << kernel->smemBytes << " B dynamic shared memory\n";
  } else {
    os << "\nCompiled kernel (NVRTC " << llvm::formatv("{0:f2}", kernel->nvrtcSeconds)
       << " s)\n";
    os << "  entry " << kernel->entry << ": " << kernel->threads << " threads, " << r.registers
       << " registers/thread, " << kernel->smemBytes << " B dynamic + " << r.staticSharedBytes
       << " B static shared memory\n";
  }
  if (kernel->forwardKernel == "sm90") {
    os << "  warp roles: 1 producer warpgroup (TMA; setmaxnreg down to "
       << attnc::sm90::producerRegisters() << " registers) and "
       << kernel->blockQ / 64 << " consumer warpgroups of 64 rows (wgmma; setmaxnreg up to "
       << attnc::sm90::consumerRegisters(int(kernel->blockQ / 64)) << ")\n";
    // Warpgroups that skip what is not theirs (sm90/config.h idleWarpgroups, warpgroupLastTile).
    const int consumers = int(kernel->blockQ / 64);
    const bool positionMask = spec.mask.kind != MaskSpec::None && kernel->tileClassesEntry.empty();
    if (attnc::sm90::idleWarpgroups(consumers))
      os << "  idle warpgroups: one whose 64 rows are all outside the sequence computes nothing"
         << (attnc::sm90::warpgroupLastTile(consumers, positionMask)
                 ? "; each stops after its own last live kv tile and idles through the block's rest"
                 : "")
         << "\n";
    os << "  block order: "
       << (kernel->orderedGrid
               ? "grid (pairs per group, q tiles, groups): the longest q tiles first across groups "
                 "of (head, batch) pairs of about 256 blocks; q tiles end-aligned, a partial tile "
                 "first (block_order.h)"
               : "grid (q tiles, heads_q, batch): each head's q tiles in turn (all the same "
                 "length)")
       << "\n"
       << "  row maxima: "
       << (attnc::sm90::lazyRowMaxima(int(spec.headDimV))
               ? "lazy: O is rescaled only when a row's maximum grows past 2^8 (head_dim_v >= 128)"
               : "eager: O is rescaled every tile (head_dim_v < 128)")
       << "\n"
       << "  Q: "
       << (attnc::sm90::qInRegisters(int(kernel->blockQ / 64), int(spec.headDim),
                                     int(spec.headDimV), int(kernel->blockKV))
               ? "register A fragments (S = Q K^T reads only K from shared memory)"
               : "shared memory (S = Q K^T reads Q and K from it)")
       << "\n"
       << "  softmax: "
       << (attnc::sm90::softmaxOverlapsPV(spec.dropout > 0)
               ? "overlaps the previous tile's O += P V (its wait held below the softmax)"
               : "after the previous tile's O += P V (dropout: the wait comes first)")
       << "\n";
    if (spec.mask.kind != MaskSpec::None)
      os << "  partial tiles: the mask per element without branches"
         << (kernel->tileClassesEntry.empty()
                 ? ", after S = Q K^T\n"
                 : ", decided while S = Q K^T runs (the mask reads declared inputs)\n");
  }
  if (spec.dropout > 0) {
    // What the kernels make of p (templates/attnc/common/philox.h): 8 random bits per element.
    const float p = float(spec.dropout);
    const unsigned threshold = attnc::dropoutThreshold(p);
    const int groupTiles = attnc::dropoutGroupTiles(int(kernel->blockKV / 8));
    os << llvm::formatv("  dropout: p = {0} resolves to {1} / 256 = {2:f4} (8 random bits per "
                        "element), kept probabilities scaled by 256 / {3} = {4:f4}; one "
                        "Philox4x32-{7} call per {5} elements of the forward{6}\n",
                        formatNumber(spec.dropout), threshold, threshold / 256.0, 256 - threshold,
                        attnc::dropoutScale(p), 4 * groupTiles,
                        groupTiles == 4
                            ? std::string()
                            : llvm::formatv(" (B_c = {0} is not a multiple of 32{1})",
                                            kernel->blockKV,
                                            kernel->forwardKernel == "sm90"
                                                ? "; the keep tests applied to P once packed"
                                                : "")
                                  .str(),
                        spec.dropoutRounds);
  }
  if (!explain.noCompile) {
    os << "  spills: " << r.spillStoreBytes << " B stores, " << r.spillLoadBytes
       << " B loads; stack " << r.stackBytes << " B" << (spills(r) ? "  <-- SPILLS" : "") << "\n";
    long long blocksByRegs =
        r.registers > 0 ? target.regsPerSM / (r.registers * kernel->threads) : 0;
    long long blocksBySmem = target.smemPerSM / std::max<long long>(kernel->smemBytes, 1);
    os << "  occupancy: " << std::min(blocksByRegs, blocksBySmem)
       << " block(s) per SM (registers allow " << blocksByRegs << ", shared memory "
       << blocksBySmem << ")\n";
  }
  if (kernel->backward) {
    os << "\nBackward kernels (dQ, dK, dV)\n";
    for (auto [i, line] : llvm::enumerate(kernel->backwardDerivation))
      os << "  " << i + 1 << ". " << line << "\n";
    for (const auto& [entry, usage] : kernel->backwardResources)
      os << "  " << entry << ": " << usage.registers << " registers/thread, spills "
         << usage.spillStoreBytes << " B stores, " << usage.spillLoadBytes << " B loads\n";
  }

  if (decodeApplies(spec, seqLen))
    printDecodePlan(os, spec, target, *kernel, batch, seqLen, kvSeqLen, explain.numSMs);

  // FlashAttention's IO analysis: standard attention materialises S and P in HBM
  // (Theta(N d + N^2) accesses); the tiled kernel reads each K/V tile once per Q tile it is not
  // empty for (Theta(N^2 d^2 / M)) and never writes an N x N matrix.
  double e = 2.0;  // bf16/fp16 bytes
  double heads = double(spec.headsQ), bh = double(batch) * heads;
  double d = double(spec.headDim), dv = double(spec.headDimV);
  double n = double(seqLen), nk = double(kvSeqLen);
  double standard = bh * e * (n * d + nk * d + 4.0 * n * nk + nk * dv + n * dv);
  double kvHeadsRatio = double(spec.headsKV) / heads;
  double flash = bh * (e * (n * d + n * dv) + 4.0 * n) +
                 double(batch) * double(spec.headsQ) * e * qTiles * (nk * (d + dv)) * tileFraction *
                     (kvHeadsRatio > 0 ? 1.0 : 1.0);
  double flops = 4.0 * double(batch) * heads * n * nk * std::max(d, dv) * kept;
  os << "\nHBM traffic and FLOPs (batch " << batch << ", " << spec.headsQ << " query heads)\n";
  os << "  standard attention (S and P in HBM): " << bytes(standard) << "\n";
  os << "  attnc tiled kernel (K/V re-read per Q tile): " << bytes(flash) << "  ("
     << llvm::formatv("{0:f1}", standard / flash) << "x less)\n";
  os << "  FLOPs (4 B H N_q N_kv d x kept fraction): " << llvm::formatv("{0:e3}", flops) << "\n";
  return 0;
}


}  // namespace attnc
