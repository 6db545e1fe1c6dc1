// The public C++ API of attnc: kernels (from build-time cubins or the JIT), their launch arguments
// and validation, and the JIT compiler with its on-disk cache. Everything but JitCompiler and the
// spec builder (attnc/spec.h) lives in the LLVM-free attncRuntime library; those are in attncJit
// (the compiler, LLVM/MLIR static). Errors are Status values; no call here aborts or throws.
#pragma once

#include "attnc/kernel_names.h"
#include "attnc/spec.h"
#include "attnc/status.h"
#include "attnc/target.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnc {

// "0.1.0": the attnc that built this library (part of every JIT cache key).
const char* version();

// Q, K or V: a base pointer and element strides of the batch, head and sequence dimensions; the
// head dimension is contiguous. BHSD and BSHD layouts are both just strides.
struct TensorArg {
  const void* data = nullptr;
  int64_t stride_b = 0, stride_h = 0, stride_s = 0;
};

// O: as TensorArg, written by the kernel.
struct OutputArg {
  void* data = nullptr;
  int64_t stride_b = 0, stride_h = 0, stride_s = 0;
};

// A declared input (`doc`, `slopes`, ...): the element stride of each dimension the spec gives it
// (b, h, pos); strides of dimensions it does not have are ignored.
struct InputArg {
  const void* data = nullptr;
  int64_t stride_b = 0, stride_h = 0, stride_pos = 0;
};

// Strides of a contiguous [batch, heads, seq, dim] (BHSD) or [batch, seq, heads, dim] (BSHD)
// tensor.
struct Strides {
  int64_t b, h, s;
};
inline Strides bhsdStrides(int64_t heads, int64_t seq, int64_t dim) {
  return {heads * seq * dim, seq * dim, dim};
}
inline Strides bshdStrides(int64_t heads, int64_t seq, int64_t dim) {
  return {seq * heads * dim, dim, heads * dim};
}
inline TensorArg tensorArg(const void* data, Strides s) { return {data, s.b, s.h, s.s}; }
inline OutputArg outputArg(void* data, Strides s) { return {data, s.b, s.h, s.s}; }

// One forward launch. Heads and head dims come from the kernel's spec:
//   q [batch, heads_q, q_len, head_dim], k [batch, heads_kv, kv_len, head_dim],
//   v [batch, heads_kv, kv_len, head_dim_v], o [batch, heads_q, q_len, head_dim_v] (by strides),
//   lse [batch, heads_q, q_len] float32 contiguous, or null to skip it.
// Requirements (checked before launch; docs/runtime.md, "Launch arguments"): device pointers
// 16-byte aligned, strides multiples of 8 elements (non-negative; O's positive), one InputArg per
// declared input in the spec's order; batch in [1, 65535], q_len and kv_len in [1, 2^30]; every
// tensor's last byte within INT64_MAX bytes of its start. What the launch writes (O, the LSE) must
// not share a byte with any other tensor, and O's rows none with each other (its strides, ordered,
// each at least the span of the rows below); tensors that are only read may overlap (Q == K).
class PreparedInputs;

// Sequences of different lengths packed along one row axis (ForwardArgs::varlen; FlashAttention's
// varlen layout): sequence b's queries are Q/O rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and its
// keys K/V rows [cu_seqlens_kv[b], cu_seqlens_kv[b + 1]) of tensors [total, heads, dim] (by
// strides; stride_b is ignored). Positions in masks and scores are positions within the sequence,
// and bottom-right causal aligns each sequence on its own. A null cu_seqlens_q keeps Q/O
// [batch, heads_q, q_len] by strides; a null cu_seqlens_kv keeps K/V contiguous (or paged). The LSE
// of packed Q is [heads_q, total_q].
struct VarlenArg {
  const int32_t* cu_seqlens_q = nullptr;   // device [batch + 1], or null
  const int32_t* cu_seqlens_kv = nullptr;  // device [batch + 1], or null
  int64_t total_q = 0, total_kv = 0;       // rows of packed Q/O and K/V
  // Optional host copies of the arrays above: checked element by element before launch (increasing,
  // within total, no sequence longer than q_len / kv_len). Without them the kernels clamp what they
  // read: a wrong array gives wrong numbers, never an access outside the tensors.
  const int32_t* host_cu_seqlens_q = nullptr;
  const int32_t* host_cu_seqlens_kv = nullptr;
};

// A paged K/V cache (ForwardArgs::paged; vLLM's and FlashInfer's block tables): K and V are pools
// of num_pages pages of page_size rows (a power of two in [1, 256]); sequence b's key j is row
// j % page_size of page block_table[b * block_table_stride + j / page_size] (of k + page *
// k_stride_page + head * k.stride_h + row * k.stride_s; k.stride_b is ignored), and it has
// seq_lens_kv[b] keys.
struct PagedKVArg {
  const int32_t* block_table = nullptr;  // device [batch, block_table_stride] page ids
  const int32_t* seq_lens_kv = nullptr;  // device [batch] kv lengths
  int64_t block_table_stride = 0;        // entries between two sequences' rows
  int64_t max_pages = 0;                 // entries of a row that hold pages (<= the stride)
  int64_t page_size = 0;                 // rows of a page
  int64_t num_pages = 0;                 // pages in each pool
  int64_t k_stride_page = 0, v_stride_page = 0;  // elements between two pages of K, of V
  // Optional host copies: checked before launch (ids within [0, num_pages), lengths within
  // [0, min(kv_len, max_pages * page_size)]); without them the kernels clamp ids and lengths.
  const int32_t* host_block_table = nullptr;
  const int32_t* host_seq_lens_kv = nullptr;
};

// Which kernel a forward takes (ForwardArgs::decode). Auto: the decode kernel (GQA-packed rows,
// split-KV) where the packed rows are few (heads_q / heads_kv x q_len <= 64) or the layout is
// varlen or paged, else the forward kernel. Off: the forward kernel (contiguous layouts only).
// On: the decode kernel, or an error where the kernel has none (dropout).
enum class DecodeChoice : int { Auto = 0, Off = 1, On = 2 };

struct ForwardArgs {
  TensorArg q, k, v;
  OutputArg o;
  float* lse = nullptr;
  int64_t batch = 0, q_len = 0, kv_len = 0;
  std::vector<InputArg> inputs;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  // Optional: what Kernel::prepareInputs made for these inputs and lengths. forward() then skips
  // the launches that summarize the declared inputs and classify the tiles (see PreparedInputs).
  const PreparedInputs* prepared = nullptr;
  // Optional: sequences of different lengths, a paged K/V cache (either, both or neither). With
  // either, batch is the number of sequences and q_len, kv_len the longest sequence's (what the
  // grid and the inputs' extents are sized by).
  const VarlenArg* varlen = nullptr;
  const PagedKVArg* paged = nullptr;
  DecodeChoice decode = DecodeChoice::Auto;
  // Decode kernel: kv splits (0: derived from the device's SMs, the lengths and the occupancy,
  // docs/design/decode.md; 1: no split; at most 128).
  int num_splits = 0;
  // Device memory for the split partials (at least forwardWorkspaceBytes(args)), 16-byte aligned,
  // used while the launches run. Null: the Kernel's own (as BackwardArgs::workspace).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// What the decode kernel does for a launch's lengths (Kernel::decodePlan).
struct DecodePlan {
  bool decode = false;  // the decode kernel runs (else the forward kernel)
  int rows = 0;         // packed rows a block (heads_q / heads_kv query heads x queries)
  int rowTiles = 0;     // blocks per (sequence, kv head) along the packed rows
  int splits = 1;       // kv splits (a combine kernel merges them when more than 1)
  int splitTiles = 0;   // kv tiles of blockKV keys a split
  int blockKV = 0;
  size_t workspaceBytes = 0;  // the partials' bytes (0 with 1 split)
};

// One backward launch (the kernel must have been compiled with backward, see JitCompiler). Shapes
// and requirements as ForwardArgs: o is the forward's output, d_o the gradient of the loss with
// respect to it (o's shape); dq, dk, dv (q's, k's, v's shapes) are written entirely; lse is the
// forward's [batch, heads_q, q_len] float32 contiguous LSE (required). Inputs and dropout seed and
// offset must be the forward's. deterministic: dQ by a separate kernel instead of fp32 atomics
// (bit-identical results run to run, somewhat slower; a JIT kernel compiles that mode's kernels on
// the first such call, or at compileDeferred()). dq, dk, dv and the workspace are written: as O in
// the forward, none may share a byte with another tensor or the workspace (packed dq, dk, dv in
// one [b, s, 3, h, d] buffer are fine), nor its rows with each other.
// workspace: device memory of at least backwardWorkspaceBytes(batch, q_len, deterministic) bytes,
// 16-byte aligned, used only while the launches run (stream-ordered). Null: the Kernel uses one it
// allocates (cuMemAlloc, grow-only, one per CUDA context, kept until the Kernel and its copies are
// gone). That buffer is shared by every backward() on the Kernel and its copies, so callers who
// launch backward on several streams concurrently must pass their own workspace per stream.
struct BackwardArgs {
  TensorArg q, k, v, o, d_o;
  OutputArg dq, dk, dv;
  const float* lse = nullptr;
  int64_t batch = 0, q_len = 0, kv_len = 0;
  std::vector<InputArg> inputs;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  bool deterministic = false;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Optional: what Kernel::prepareInputs made for these inputs and lengths (a kernel compiled
  // with backward kernels prepares theirs too); backward() then skips the launches that summarize
  // the declared inputs and classify the dK/dV kernel's tiles.
  const PreparedInputs* prepared = nullptr;
  // Optional: a packed batch (VarlenArg, as the forward's; its host copies of cu_seqlens are
  // required here). dq and d_o are packed like q and o, dk and dv like k and v; lse is the
  // forward's ([heads_q, total_q] for packed Q). batch, q_len and kv_len as in the forward. The
  // sequences run one after another, each as a contiguous backward (prepared must be null).
  const VarlenArg* varlen = nullptr;
};

// How to launch the backward kernels (entries <entryStem><backwardEntrySuffix(BackwardEntry)>:
// _preprocess, _kv, _kv_nodq, _convert_dq, _q; all take attnc::BwdParams, except _kv and _kv_nodq
// when kvKernel is Sm90: those take attnc::BwdParamsTma, templates/attnc/sm90/backward.h).
struct BackwardMetadata {
  std::string entryStem;  // <name>_bwd
  int kvThreads = 0, qThreads = 0;
  int kvBlockKV = 0, qBlockQ = 0, preprocessRows = 0;
  long long kvSmemBytes = 0, qSmemBytes = 0;  // dynamic shared memory of _kv/_kv_nodq and _q
  KernelFamily kvKernel = KernelFamily::Sm80;  // the dK/dV kernel's template and launch ABI
  int preprocessThreads = 0;      // block size of _preprocess and _convert_dq
  // _kv and _kv_nodq take block_order.h's orderedGrid over the kv tiles and (kv head, batch)
  // pairs, the tile rank in blockIdx.y, so that in each group of pairs the kv tiles start longest
  // first (the sm_90a dK/dV kernel of a masked spec); otherwise (kv tiles, heads_kv, batch).
  bool kvOrderedGrid = false;
  // _q's template and launch ABI: Sm80 (BwdParams, qThreads, qBlockQ rows a block) or Sm90
  // (the sm_90a dQ kernel: BwdParamsTma, whose K and V tensor maps have boxes of qBlockKV rows).
  KernelFamily qKernel = KernelFamily::Sm80;
  int qBlockKV = 0;
  // The default (not deterministic) backward also runs _preprocess, _kv_nodq and _q, without
  // dq_accum, as the deterministic one does (the sm_90a head-dim split, bwd_config.h).
  bool separateDq = false;
};

// A declared input as the kernel sees it.
struct InputInfo {
  std::string name;
  std::string type;  // "i32" | "f32"
  std::string dims;  // what indexes it, comma-separated: "pos", "b,pos", "h"
  // The launch writes its block summaries (KernelMetadata::summaryEntry) before the kernels run.
  bool summarized = false;
};

// How to launch the decode kernel (templates/attnc/sm80/decode.h, docs/design/decode.md): `entry`
// takes attnc::DecodeParams, grid (splits, rowTiles x heads_kv, batch), `threads` threads,
// `smemBytes` of dynamic shared memory; with more than one split, `combineEntry` then takes
// attnc::CombineParams, grid (ceil(rows x heads_q / kCombineRowsPerBlock)), kCombineThreads.
struct DecodeMetadata {
  std::string entry;         // <name>_decode
  std::string combineEntry;  // <name>_decode_combine
  int threads = 0;
  int rows = 0;     // packed rows a block
  int blockKV = 0;  // keys a kv tile
  int stages = 0;
  long long smemBytes = 0;
};

// What a launcher needs to know about a compiled kernel besides its binary. Build-time headers
// spell it out; the JIT cache stores it next to the cubin (serialize()/parse()).
struct KernelMetadata {
  std::string name;    // the spec's name
  std::string entry;   // the kernel symbol
  std::string target;  // "sm_80", "sm_90a", ...
  int computeMajor = 0, computeMinor = 0;
  // The forward kernel's template and launch ABI: Sm80 takes FwdParams; Sm90 (sm_90a) takes
  // FwdParamsTma, FwdParams plus TMA tensor maps of Q, K and V that the launch encodes.
  KernelFamily forwardKernel = KernelFamily::Sm80;
  int threads = 0;
  long long smemBytes = 0;  // dynamic shared memory per block
  int blockQ = 0, blockKV = 0;
  int headDim = 0, headDimV = 0, headsQ = 0, headsKV = 0;
  std::string dtype;  // "bf16" | "fp16"
  float scale = 0;    // softmax scale (spec's, or 1/sqrt(head_dim))
  float dropout = 0;  // probability of dropping
  int dropoutRounds = 0;  // Philox4x32's rounds for the decisions (7-10) where dropout > 0, else 0
  std::vector<InputInfo> inputs;  // in slot order
  std::string attncVersion;
  std::optional<BackwardMetadata> backward;  // set when compiled with the backward kernels
  bool hasBackward() const { return backward.has_value(); }
  // The entry that writes the block summaries of the `summarized` inputs (attnc::SummaryParams),
  // launched first by forward() and backward(); empty when no input is summarized.
  std::string summaryEntry;
  // The entry that classifies every (q tile, kv tile) pair of the forward's tiling
  // (FwdParams::kv_tile_bounds/_classes), launched by forward() after the summaries; empty when
  // the kernel has none (it then searches and classifies its tiles itself).
  std::string tileClassesEntry;
  // With a tile-classes entry: the mask never reads the query head, so the tile classes (forward
  // and backward) have rows of one head that every head reads (templates/attnc/common/
  // kv_tiles.h tileClassHeads).
  bool maskIgnoresHead = false;
  // The forward's grid is orderedGrid(q tiles, heads_q x batch) (templates/attnc/common/
  // block_order.h: longest tiles first across groups of heads) instead of (q tiles, heads_q,
  // batch): the sm_90a forward of a masked spec.
  bool orderedGrid = false;
  // The decode kernel, for every spec without dropout (DecodeMetadata).
  std::optional<DecodeMetadata> decode;

  // A line-based "key value" text; parse() rejects anything it does not fully understand.
  std::string serialize() const;
  static std::optional<KernelMetadata> parse(const std::string& text, std::string* error);
};

// One compiled form of a kernel: metadata plus a cubin for metadata.target and, optionally, the
// PTX (NUL-terminated), which lets the driver run it on a newer architecture than the cubin's.
struct KernelImage {
  KernelMetadata metadata;
  const void* cubin = nullptr;
  size_t cubinSize = 0;
  const char* ptx = nullptr;
  // Further modules of this form, loaded beside the first one: the JIT compiles a kernel's entry
  // groups (the forward, its tile classes, the backward's kernels) as NVRTC programs of their own,
  // at the same time (docs/runtime.md), so one form may span several cubins. Each entry point is
  // looked up in the module whose cubin (or PTX) defines it. Each takes a cubin and optionally its
  // PTX; a form that runs from PTX needs the PTX of every module.
  struct Module {
    const void* cubin = nullptr;
    size_t cubinSize = 0;
    const char* ptx = nullptr;
  };
  std::vector<Module> moreModules = {};
};

// The work a launch does for a mask that reads declared inputs before the attention kernel runs:
// the inputs' block summaries, the class of every (q tile, kv tile) pair and the q tiles' order
// (docs/runtime.md), and for a kernel with backward kernels the same for the dK/dV kernel's tiles
// (BackwardArgs::prepared). It depends only on the kernel, the inputs' contents and the lengths, so
// a model that calls one kernel many times with the same inputs (every layer of a batch with the
// same document ids) makes it once with Kernel::prepareInputs and passes it in each
// ForwardArgs::prepared, as FlexAttention's block mask is made once per batch. It is device
// memory written on the stream prepareInputs was given: launches on that stream may use it at
// once, launches on other streams after synchronizing with it. The inputs' contents must not
// change while it is used (the kernels still read them for partial tiles); forward() checks that
// the kernel, context, lengths and the inputs' addresses and strides are the ones it was made
// for. Cheap to copy (copies share the memory, freed with the last one).
class PreparedInputs {
public:
  PreparedInputs();
  ~PreparedInputs();
  PreparedInputs(const PreparedInputs&);
  PreparedInputs& operator=(const PreparedInputs&);
  bool valid() const { return impl_ != nullptr; }
  // Device bytes it holds (0 for a kernel whose mask reads no declared input).
  size_t bytes() const;

  struct Impl;

private:
  std::shared_ptr<const Impl> impl_;
  friend class Kernel;
};

// A launchable kernel. Cheap to copy and move (copies share the loaded modules). The modules are
// loaded on the first launch in each CUDA context (thread-safe); without a current context the
// primary context of device 0 is made current, as the CUDA runtime does.
class Kernel {
public:
  Kernel();
  ~Kernel();
  Kernel(const Kernel&);
  Kernel& operator=(const Kernel&);
  Kernel(Kernel&&) noexcept;
  Kernel& operator=(Kernel&&) noexcept;

  // The bytes are copied. A cubin runs on devices of the same major compute capability and a
  // minor at least the target's (sm_90a: exactly 9.0).
  static Kernel fromCubin(const KernelMetadata& metadata, const void* cubin, size_t size,
                          Status* status);
  // Several forms of one kernel (say sm_80 and sm_90a); the launch picks the best for the device:
  // an exact architecture, else a cubin of the same major, else PTX the driver can compile.
  static Kernel fromImages(const std::vector<KernelImage>& images, Status* status);

  bool valid() const { return impl_ != nullptr; }
  explicit operator bool() const { return valid(); }

  // Validates `args` (validate() plus the current device) and launches on `stream` (a CUstream;
  // null = the legacy default stream). Asynchronous: errors inside the kernel surface later.
  Status forward(const ForwardArgs& args, void* stream) const;
  // Every check of forward() that needs no GPU: pointers, alignment, lengths, strides, inputs.
  Status validate(const ForwardArgs& args) const;
  // What forward(args) would launch on a device of `numSMs` SMs (0: the current device's): the
  // decode kernel or not, its rows, splits and workspace. An error for arguments forward() refuses.
  Status decodePlan(const ForwardArgs& args, int numSMs, DecodePlan* out) const;
  // Bytes of ForwardArgs::workspace forward(args) needs on the current device (0: none), whatever
  // args.workspace holds (a workspace too small for args included), for arguments validate()
  // accepts: it does not validate them again (lengths out of range give 0).
  size_t forwardWorkspaceBytes(const ForwardArgs& args) const;
  // Whether the kernel has a decode kernel (every spec without dropout).
  bool hasDecode() const;
  // Validates `args` as forward() does (args.prepared must be null) and launches on `stream` the
  // work forward() would do for its declared inputs, and with backward kernels the work
  // backward() would do, into memory of *out's own (PreparedInputs). A backward that uses it
  // must have the forward's lengths and inputs, as it must anyway.
  Status prepareInputs(const ForwardArgs& args, void* stream, PreparedInputs* out) const;

  // Validates `args` (validateBackward() plus the current device) and launches the backward
  // kernels on `stream`: preprocess, then kv and convert_dq (or, deterministic, kv_nodq and q).
  Status backward(const BackwardArgs& args, void* stream) const;
  // Every check of backward() that needs no GPU, including that the kernel has backward kernels
  // and that a given workspace is large enough.
  Status validateBackward(const BackwardArgs& args) const;
  // Bytes of BackwardArgs::workspace: the fp32 dQ accumulator (not in deterministic mode) and the
  // fp32 delta rows, each 256-byte aligned inside one buffer. Exact, or 0 without backward kernels,
  // for batch outside [1, 65535] or q_len outside [1, 2^30], or past INT64_MAX bytes.
  size_t backwardWorkspaceBytes(int64_t batch, int64_t q_len, bool deterministic) const;
  bool hasBackward() const { return metadata().hasBackward(); }

  // Of the first image (the one fromCubin was given).
  const KernelMetadata& metadata() const;
  const std::string& name() const { return metadata().name; }
  const std::string& entry() const { return metadata().entry; }
  const std::string& target() const { return metadata().target; }
  std::vector<std::string> targets() const;  // of every image
  int threads() const { return metadata().threads; }
  long long smemBytes() const { return metadata().smemBytes; }
  int headDim() const { return metadata().headDim; }
  int headDimV() const { return metadata().headDimV; }
  int headsQ() const { return metadata().headsQ; }
  int headsKV() const { return metadata().headsKV; }
  const std::string& dtype() const { return metadata().dtype; }
  // The spec's dropout p. The kernels drop with probability round(256 p) / 256 and scale kept
  // probabilities by 256 / (256 - round(256 p)) (templates/attnc/common/philox.h).
  float dropout() const { return metadata().dropout; }
  // Philox4x32's rounds for the dropout decisions (the spec's dropout.rounds, 7 by default); 0
  // without dropout. A host copy of the mask needs them.
  int dropoutRounds() const { return metadata().dropoutRounds; }
  std::vector<std::string> inputNames() const;
  // The cubin and PTX of the first image's first module (what the JIT cache stores first).
  const std::vector<char>& cubin() const;
  const std::string& ptx() const;
  // The first image's modules: 1 + KernelImage::moreModules.size(); cubin(i) and ptx(i) are module
  // i's (cubin(0) == cubin(), ptx(0) == ptx()); out of range, empty.
  size_t moduleCount() const;
  const std::vector<char>& cubin(size_t module) const;
  const std::string& ptx(size_t module) const;

  // A kernel the JIT compiled with backward kernels leaves the deterministic mode's two (kv_nodq
  // and q: two of its five NVRTC programs, which most callers never launch) for later: the first
  // backward() with deterministic = true compiles them (through the same disk cache), or this call
  // does, ahead of time and without a GPU. Once: later calls, and concurrent ones, return the first
  // one's status; the kernel's modules then include theirs (moduleCount() grows). Success at once
  // where nothing is deferred (a kernel built ahead of time, or one without backward kernels).
  Status compileDeferred() const;
  // Whether compileDeferred() has something left to compile (true while a build runs; it does
  // not wait for one).
  bool hasDeferred() const;

  struct Impl;

private:
  std::shared_ptr<Impl> impl_;
  friend struct KernelAccess;  // runtime/KernelAccess.h: what the JIT attaches to a kernel
};

// Device memory through the same dlopen-ed driver, so examples and tests need no CUDA toolkit.
// Apps with their own allocator (PyTorch, cudaMalloc) pass their pointers instead. Uses the current
// context, or makes device 0's primary context current.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  static DeviceBuffer allocate(size_t bytes, Status* status);
  void* data() const { return reinterpret_cast<void*>(pointer_); }
  size_t size() const { return size_; }
  Status upload(const void* host, size_t bytes);
  Status download(void* host, size_t bytes) const;
  // Copies `bytes` bytes from `source` at byte `sourceOffset` to this buffer at byte `offset`,
  // device to device (cuMemcpyDtoD: ordered with the legacy default stream's work). Both ranges
  // must lie inside their buffers, and not overlap where source is this buffer.
  Status copyFrom(size_t offset, const DeviceBuffer& source, size_t sourceOffset, size_t bytes);

private:
  unsigned long long pointer_ = 0;
  size_t size_ = 0;
};

// Waits for all work in the current context (cuCtxSynchronize): where kernel faults surface.
Status synchronize();

// ---- JIT (library attncJit) -------------------------------------------------------------------

struct JitOptions {
  std::string cacheDir;  // empty: $ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else ~/.cache/attnc
  bool useCache = true;  // false: always compile, never read or write the disk cache
  // Wall-clock limit of one compile's NVRTC work, in seconds; past it compile() returns an error.
  // 0: $ATTNC_COMPILE_TIMEOUT when set, else no limit.
  double compileTimeoutSeconds = 0;
  // Where the JIT's warnings go (e.g. a cache directory it cannot use, or a spec's warnings as
  // docs/spec.md lists them, "file:line:col: warning: ..."), each said once per compiler; empty:
  // standard error.
  std::function<void(const std::string& message)> log;
};

// Process-wide counters (all JitCompiler objects together), for tests and tools.
struct JitStats {
  long long compiles = 0;  // compile*() calls that returned a kernel
  // Kernel builds by NVRTC: one per cache miss, however many entry groups.
  long long nvrtcRuns = 0;
  long long cacheHits = 0;      // kernels read from the disk cache
  long long cacheRebuilds = 0;  // corrupt or mismatched cache entries deleted and rebuilt
  // Kernels built but not stored: the cache directory unusable (read-only, full, a file) or an
  // entry's path held by something that could not be removed (JitOptions::log says why, once).
  long long cacheStoreFailures = 0;
};

// Compiles specs to kernels at run time: spec -> attn passes -> CUDA C++ -> NVRTC -> cubin,
// through the on-disk kernel cache (keyed by a SHA-256 of the whole spec, the generated source and
// the metadata derived from it, NVRTC version, target, options and attnc version; a hit whose
// metadata differs from the spec's is rebuilt). Thread-safe; several threads asking for one kernel
// at once compile it once.
class JitCompiler {
public:
  JitCompiler();
  explicit JitCompiler(JitOptions options);
  ~JitCompiler();
  JitCompiler(JitCompiler&&) noexcept;
  JitCompiler& operator=(JitCompiler&&) noexcept;

  // spec: as SpecBuilder::build() returns it (checked; a Spec assembled field by field is not).
  // withBackward: also compile the backward kernels (Kernel::backward); slower to compile, and
  // cached separately from the forward-only kernel.
  Kernel compile(const Spec& spec, const Target& target, Status* status, bool withBackward = false);
  Kernel compileFile(const std::string& specPath, const Target& target, Status* status,
                     bool withBackward = false);
  Kernel compileText(const std::string& yaml, const Target& target, Status* status,
                     bool withBackward = false);

  // Where the cache lives for these options.
  std::string cacheDirectory() const;
  static JitStats stats();

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnc
