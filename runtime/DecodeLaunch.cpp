// Kernel::forward's decode path: the decode kernel over GQA-packed rows and kv splits, then the
// combine of the splits (templates/attnc/sm80/decode.h); and the plan a launch takes
// (Kernel::decodePlan, forwardWorkspaceBytes). The launch ABI is attnc::DecodeParams: grid
// (splits, row tiles x heads_kv, batch), DecodeMetadata's threads and shared memory; the combine's
// attnc::CombineParams, grid ceil(heads_q x rows / kCombineRowsPerBlock).
#include "runtime/DecodeLaunch.h"
#include "runtime/PerSequenceLaunch.h"

#include "attnc/common/split_kv.h"
#include "attnc/sm80/decode_config.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/InputWork.h"
#include "runtime/LaunchParams.h"
#include "runtime/LaunchValidation.h"
#include "runtime/ModuleLoader.h"
#include "runtime/PreparedInputs.h"

#include <algorithm>
#include <vector>

namespace attnc {

namespace {

constexpr size_t kPartialAlign = 256;  // the partials' O and LSE arrays each start 256-aligned

size_t alignUp(size_t x) { return (x + kPartialAlign - 1) / kPartialAlign * kPartialAlign; }

bool packedQ(const ForwardArgs& args) { return args.varlen && args.varlen->cu_seqlens_q; }

// Rows of each query head the partials hold: batch x q_len, or the packed rows.
int64_t partialRows(const ForwardArgs& args) {
  return packedQ(args) ? args.varlen->total_q : args.batch * args.q_len;
}

// The page size's log2 (validate() checked it is a power of two in [1, 256]).
int pageShift(int64_t pageSize) {
  int shift = 0;
  while ((int64_t(1) << shift) < pageSize) ++shift;
  return shift;
}

}  // namespace

bool takesDecode(const KernelMetadata& m, const ForwardArgs& args) {
  switch (args.decode) {
  case DecodeChoice::Off: return false;
  case DecodeChoice::On: return true;
  case DecodeChoice::Auto: break;
  }
  if (args.varlen || args.paged) return true;
  if (!m.decode) return false;
  return int64_t(m.headsQ / m.headsKV) * args.q_len <= kDecodeAutoRows;
}

namespace {

// Each sequence's kv tiles of blockKV keys from the host copies of its length (paged:
// host_seq_lens_kv; varlen: host_cu_seqlens_kv), lengths clamped to [0, kv_len]; false where the
// host has none.
bool hostKvTiles(const ForwardArgs& args, int blockKV, std::vector<int>& tiles) {
  const int32_t* lens = args.paged ? args.paged->host_seq_lens_kv : nullptr;
  const int32_t* cu = !args.paged && args.varlen ? args.varlen->host_cu_seqlens_kv : nullptr;
  if ((!lens && !cu) || args.batch < 1) return false;
  tiles.resize(size_t(args.batch));
  for (int64_t b = 0; b < args.batch; ++b) {
    const int64_t length = lens ? lens[b] : int64_t(cu[b + 1]) - cu[b];
    tiles[size_t(b)] = int((std::clamp<int64_t>(length, 0, args.kv_len) + blockKV - 1) / blockKV);
  }
  return true;
}

}  // namespace

DecodePlan decodePlanFor(const KernelMetadata& m, const ForwardArgs& args, int numSMs,
                         int blocksPerSM) {
  DecodePlan plan;
  if (!m.decode || !takesDecode(m, args)) return plan;
  const DecodeMetadata& d = *m.decode;
  const int group = m.headsQ / m.headsKV;
  const int64_t elementBytes = 2;  // bf16 and fp16
  const int64_t packed = int64_t(group) * args.q_len;
  plan.decode = true;
  plan.rows = d.rows;
  plan.blockKV = d.blockKV;
  plan.rowTiles = int((packed + d.rows - 1) / d.rows);
  const int kvTiles = int((args.kv_len + d.blockKV - 1) / d.blockKV);
  SplitProblem problem{int(std::min<int64_t>(INT32_MAX, args.batch * m.headsKV * plan.rowTiles)),
                       kvTiles, numSMs * blocksPerSM,
                       int64_t(d.blockKV) * (m.headDim + m.headDimV) * elementBytes,
                       std::min<int64_t>(packed, d.rows) * m.headDimV * 4};
  thread_local std::vector<int> tiles;  // (kept: a decode step plans once a token)
  SplitPlan split;
  if (args.num_splits > 0) {
    split = splitPlanFor(args.num_splits, kvTiles);
  } else if (problem.units < problem.slots && hostKvTiles(args, d.blockKV, tiles)) {
    // Lengths the host knows: split by the batch's work, not by its longest sequence.
    split = splitCountMixed(problem, tiles.data(), int(tiles.size()));
  } else {
    split = splitCount(problem);
  }
  plan.splits = split.splits;
  plan.splitTiles = split.splitTiles;
  if (plan.splits > 1) {
    const size_t rows = size_t(plan.splits) * size_t(m.headsQ) * size_t(partialRows(args));
    plan.workspaceBytes = alignUp(rows * size_t(m.headDimV) * 4) + alignUp(rows * 4);
  }
  return plan;
}

SeqLayout seqLayoutOf(const ForwardArgs& args) {
  SeqLayout seq{};
  if (const VarlenArg* v = args.varlen) {
    seq.cu_seqlens_q = v->cu_seqlens_q;
    seq.cu_seqlens_kv = v->cu_seqlens_kv;
    seq.total_q = v->total_q;
    seq.total_kv = v->total_kv;
  }
  if (const PagedKVArg* paged = args.paged) {
    seq.block_table = paged->block_table;
    seq.seq_lens_kv = paged->seq_lens_kv;
    seq.block_table_stride = paged->block_table_stride;
    seq.max_pages = int(paged->max_pages);
    seq.page_shift = pageShift(paged->page_size);
    seq.num_pages = int(paged->num_pages);
    seq.k_stride_page = paged->k_stride_page;
    seq.v_stride_page = paged->v_stride_page;
  }
  return seq;
}

bool Kernel::hasDecode() const { return impl_ && metadata().decode.has_value(); }

namespace {

// Kernel::decodePlan without its validation (for arguments validate() accepts, or at least whose
// lengths are in range): the plan on a device of numSMs SMs, 0 the current device's (without a
// device, the target's reference part at the 2 blocks an SM the tile rule aims for).
Status planOf(Kernel::Impl& impl, const KernelMetadata& m, const ForwardArgs& args, int numSMs,
              DecodePlan* out) {
  if (takesPerSequence(m, args)) {  // the forward kernels, a launch a sequence
    *out = DecodePlan{};
    return Status::success();
  }
  int blocksPerSM = 0;
  const KernelMetadata* image = &m;
  if (numSMs == 0 && takesDecode(m, args) && m.decode) {
    InContext at;
    if (Status status = loadedInContext(impl, "Kernel::decodePlan", &at); !status) {
      std::optional<Target> target = Target::byName(m.target, nullptr);
      if (!target || target->numSMs < 1) return status;
      numSMs = target->numSMs;
    } else {
      std::string error;
      const Kernel::Impl::Loaded* loaded = impl.decodeFunctions(*at.driver, at.context, &error);
      if (!loaded) return Status::error(error);
      numSMs = loaded->numSMs;
      blocksPerSM = loaded->decodeBlocksPerSM;
      image = &loaded->image->metadata;
    }
  }
  if (blocksPerSM == 0) blocksPerSM = 2;
  *out = decodePlanFor(*image, args, std::max(numSMs, 1), std::max(blocksPerSM, 1));
  return Status::success();
}

}  // namespace

Status Kernel::decodePlan(const ForwardArgs& args, int numSMs, DecodePlan* out) const {
  if (!impl_) return Status::error("Kernel::decodePlan: the kernel is empty");
  if (!out) return Status::error("Kernel::decodePlan: out is null");
  if (Status status = validate(args); !status) return status;
  if (numSMs < 0)
    return Status::error("Kernel::decodePlan: numSMs = " + std::to_string(numSMs) +
                         ": 0 (the current device's) or more");
  return planOf(*impl_, metadata(), args, numSMs, out);
}

size_t Kernel::forwardWorkspaceBytes(const ForwardArgs& args) const {
  // Sized without the workspace args may hold (one sized for shorter lengths would fail
  // validation, and a caller growing it step by step would be told 0), and without validating
  // args again: validate() asks for it once its other checks passed. Lengths out of range: 0.
  if (!impl_ || args.batch < 1 || args.batch > kMaxGridYZ || args.q_len < 1 ||
      args.q_len > kMaxLength || args.kv_len < 1 || args.kv_len > kMaxLength)
    return 0;
  ForwardArgs sizing = args;
  sizing.workspace = nullptr;
  sizing.workspace_bytes = 0;
  DecodePlan plan;
  if (!takesDecode(metadata(), sizing) || !planOf(*impl_, metadata(), sizing, 0, &plan)) return 0;
  return plan.workspaceBytes;
}

Status launchDecode(Kernel::Impl& impl, const KernelMetadata& m, const ForwardArgs& args,
                    const PreparedInputs::Impl* prepared, void* stream) {
  InContext at;
  if (Status status = loadedInContext(impl, "Kernel::forward", &at); !status) return status;
  const DriverApi& driver = *at.driver;
  std::string error;
  const Kernel::Impl::Loaded* loaded = impl.decodeFunctions(driver, at.context, &error);
  if (!loaded) return Status::error(error);
  const KernelMetadata& image = loaded->image->metadata;
  const DecodeMetadata& d = *image.decode;
  const DecodePlan plan = decodePlanFor(image, args, loaded->numSMs, loaded->decodeBlocksPerSM);
  const int64_t gridY = int64_t(plan.rowTiles) * m.headsKV;
  if (gridY > kMaxGridYZ)
    return Status::error("kernel '" + m.name + "' (decode): heads_kv x row tiles = " +
                         std::to_string(gridY) + " (" + std::to_string(plan.rowTiles) +
                         " row tiles of " + std::to_string(plan.rows) +
                         " packed rows); the grid takes at most 65535");
  const cu::Stream cuStream = static_cast<cu::Stream>(stream);

  DecodeParams dp{};
  setSharedFields(dp.base, m, args);
  dp.seq = seqLayoutOf(args);
  dp.splits = plan.splits;
  dp.split_tiles = plan.splitTiles;
  dp.partial_rows = partialRows(args);

  std::unique_lock<std::mutex> summaryLock;
  if (prepared) {
    if (Status status =
            usePrepared(*prepared, prepared->forward, at.context, "ForwardArgs.prepared: ",
                        dp.base);
        !status)
      return status;
  } else if (!image.summaryEntry.empty()) {
    if (Status status = launchDecodeInputWork(impl, driver, at.context, *loaded, dp.base, cuStream,
                                              &summaryLock);
        !status)
      return status;
  }

  // The partials: the caller's workspace, or this kernel's for (context, stream).
  std::unique_lock<std::mutex> workspaceLock;
  char* workspace = static_cast<char*>(args.workspace);
  if (plan.splits > 1 && !workspace) {
    workspaceLock = std::unique_lock<std::mutex>(impl.workspaceMutex);
    DeviceBuffer& buffer = impl.decodeWorkspaces[{at.context, cuStream}];
    if (Status grown = growKernelBuffer(driver, cuStream, buffer, plan.workspaceBytes,
                                        "Kernel::forward", "decode workspace",
                                        "ForwardArgs::workspace");
        !grown)
      return grown;
    workspace = static_cast<char*>(buffer.data());
  }
  if (plan.splits > 1) {
    const size_t rows = size_t(plan.splits) * size_t(m.headsQ) * size_t(dp.partial_rows);
    dp.o_part = reinterpret_cast<float*>(workspace);
    dp.lse_part = reinterpret_cast<float*>(workspace + alignUp(rows * size_t(m.headDimV) * 4));
  }

  void* params[] = {&dp};
  if (!driver.check(driver.cuLaunchKernel(loaded->decode, unsigned(plan.splits), unsigned(gridY),
                                          unsigned(args.batch), unsigned(d.threads), 1, 1,
                                          unsigned(d.smemBytes), cuStream, params, nullptr),
                    "cuLaunchKernel(decode)", &error))
    return Status::error("kernel '" + m.name + "': " + error);
  if (plan.splits == 1) return Status::success();

  CombineParams cp{};
  cp.o = args.o.data;
  cp.lse = args.lse;
  cp.o_stride_b = packedQ(args) ? 0 : args.o.stride_b;
  cp.o_stride_h = args.o.stride_h;
  cp.o_stride_s = args.o.stride_s;
  cp.o_part = dp.o_part;
  cp.lse_part = dp.lse_part;
  cp.rows = dp.partial_rows;
  cp.q_len = packedQ(args) ? int(args.varlen->total_q) : int(args.q_len);
  cp.heads_q = m.headsQ;
  cp.splits = plan.splits;
  const int64_t rowsTotal = int64_t(m.headsQ) * dp.partial_rows;
  const int64_t blocks = (rowsTotal + sm80::kCombineRowsPerBlock - 1) / sm80::kCombineRowsPerBlock;
  void* combineParams[] = {&cp};
  if (loaded->decodeCombineOverlaps) {
    // The combine's launch and prologue overlap the decode grid's last blocks; it waits for the
    // grid (griddepcontrol.wait) before it reads a partial.
    cu::LaunchAttribute overlap{};
    overlap.id = cu::kLaunchAttributeProgrammaticStreamSerialization;
    overlap.value.programmaticStreamSerializationAllowed = 1;
    cu::LaunchConfig config{unsigned(blocks), 1, 1, unsigned(sm80::kCombineThreads), 1, 1, 0,
                            cuStream, &overlap, 1};
    if (driver.check(driver.cuLaunchKernelEx(&config, loaded->decodeCombine, combineParams,
                                             nullptr),
                     "cuLaunchKernelEx(decode combine)", &error))
      return Status::success();
    // A driver or capture that refuses the attribute: the plain launch below.
  }
  if (!driver.check(driver.cuLaunchKernel(loaded->decodeCombine, unsigned(blocks), 1, 1,
                                          unsigned(sm80::kCombineThreads), 1, 1, 0, cuStream,
                                          combineParams, nullptr),
                    "cuLaunchKernel(decode combine)", &error))
    return Status::error("kernel '" + m.name + "': " + error);
  return Status::success();
}

}  // namespace attnc
