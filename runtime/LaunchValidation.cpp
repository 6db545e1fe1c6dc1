// Every check of a launch's arguments that needs no GPU (Kernel::validate, validateBackward):
// pointers, alignment, lengths, strides, declared inputs, and that what a launch writes shares no
// byte with anything else it reads or writes (each tensor's footprint).
#include "attnc/attnc.h"

#include "runtime/LaunchValidation.h"
#include "runtime/PerSequenceLaunch.h"
#include "runtime/PreparedInputs.h"
#include "runtime/SeqLayoutValidation.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace attnc {

namespace {

std::string hexAddress(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

// Bytes of an element of Q, K, V, O, dO, dQ, dK and dV (bf16 and fp16).
constexpr int64_t kTensorElementBytes = 2;
// Bytes of an element of the LSE (f32) and of a declared input (i32 or f32).
constexpr int64_t kWordBytes = 4;

// The bytes a tensor spans: rows (b, h, s) of `row` contiguous bytes, row (i, j, k) at `base` +
// i stride[0] + j stride[1] + k stride[2] (bytes) for indices below `extent`; `end` is one past
// the offset of its last byte. A stride's argument is `name`.`strideNames[d]`, or strideNames[d]
// itself where it names a field of its own (a paged pool's "paged.k_stride_page").
struct Footprint {
  std::string name;
  const char* strideNames[3] = {"stride_b", "stride_h", "stride_s"};
  std::string strideArgument(int d) const {
    const std::string stride = strideNames[d];
    return stride.find('.') != std::string::npos ? stride : name + "." + stride;
  }
  int64_t elementBytes = kTensorElementBytes;
  uintptr_t base = 0;
  int64_t stride[3] = {}, extent[3] = {1, 1, 1};
  int64_t row = 0, end = 0;
};

// One dimension of a lattice of rows: its stride in bytes and how many rows it spans.
struct LatticeDim {
  __int128 stride, extent;
};

// Whether the rows of `dims` (each `row` bytes) are pairwise disjoint because their dimensions
// nest: ordered by stride, each stride is at least the span of the rows below it (the rows of
// the smaller strides, from the first byte to one past the last). This is the rule for written
// tensors; it is sufficient, and cheap, though a layout whose dimensions interleave without
// sharing bytes fails it. -1 if they nest, else the position in `dims` of the first dimension
// that breaks it; *needed is then the stride it would need.
int firstNonNestingDim(const LatticeDim* dims, int count, __int128 row, __int128* needed) {
  int order[4];
  int used = 0;
  for (int i = 0; i < count; ++i)
    if (dims[i].extent > 1) order[used++] = i;
  // (stable: of two equal strides, the one later in b, h, s order is the one named)
  std::stable_sort(order, order + used,
                   [&](int a, int b) { return dims[a].stride < dims[b].stride; });
  __int128 span = row;
  for (int i = 0; i < used; ++i) {
    const LatticeDim& d = dims[order[i]];
    if (d.stride < span) {
      *needed = span;
      return order[i];
    }
    span += d.stride * (d.extent - 1);
  }
  return -1;
}

// Whether two footprints share no byte: their byte ranges are apart, or (a packed layout: dQ, dK
// and dV in one [b, s, 3, h, d] buffer) they have the same strides over every dimension either
// spans and, with the distance between their bases as one more dimension of extent 2, the
// combined lattice of rows of the longer row nests.
bool disjoint(const Footprint& a, const Footprint& b) {
  const Footprint& low = a.base <= b.base ? a : b;
  const Footprint& high = a.base <= b.base ? b : a;
  const uintptr_t distance = high.base - low.base;
  if (distance >= uint64_t(low.end)) return true;
  LatticeDim dims[4];
  int count = 0;
  for (int d = 0; d < 3; ++d) {
    if (a.extent[d] > 1 && b.extent[d] > 1 && a.stride[d] != b.stride[d]) return false;
    dims[count++] = {a.extent[d] > 1 ? a.stride[d] : b.stride[d],
                     std::max(a.extent[d], b.extent[d])};
  }
  dims[count++] = {__int128(distance), 2};
  __int128 needed = 0;
  return firstNonNestingDim(dims, count, std::max(a.row, b.row), &needed) < 0;
}

// Collects the first problem with a launch's arguments.
struct Checker {
  Status status;
  std::string prefix = "ForwardArgs.";

  bool fail(const std::string& argument, const std::string& expected, const std::string& given) {
    if (status.ok)
      status = Status::error(prefix + argument + ": expected " + expected + ", got " + given);
    return false;
  }
  void pointer(const std::string& argument, const void* p, unsigned alignment) {
    if (!p) {
      fail(argument, "a device pointer", "null");
    } else if (reinterpret_cast<uintptr_t>(p) % alignment) {
      fail(argument, std::to_string(alignment) + "-byte alignment",
           hexAddress(p) + " (address % " + std::to_string(alignment) + " = " +
               std::to_string(reinterpret_cast<uintptr_t>(p) % alignment) + ")");
    }
  }
  void length(const std::string& argument, int64_t value, int64_t most) {
    if (value < 1 || value > most)
      fail(argument, "a value in [1, " + std::to_string(most) + "]", std::to_string(value));
  }
  // The sizes both launches share: batch and heads along the grid's y and z, the lengths within
  // the templates' 32-bit position arithmetic.
  void launchSizes(const KernelMetadata& m, int64_t batch, int64_t qLen, int64_t kvLen) {
    length("batch", batch, kMaxGridYZ);
    length("q_len", qLen, kMaxLength);
    length("kv_len", kvLen, kMaxLength);
    if (m.headsQ > kMaxGridYZ)
      fail("(kernel) heads_q", "at most 65535 (the grid's y dimension)", std::to_string(m.headsQ));
  }
  // Tensor strides: multiples of 8 elements (16-byte vector loads); O's also positive (rows never
  // overlap), inputs' at least 0.
  void stride(const std::string& argument, int64_t value, bool positive, bool multipleOf8) {
    if (positive ? value <= 0 : value < 0)
      fail(argument, positive ? "a positive stride" : "a non-negative stride",
           std::to_string(value));
    else if (multipleOf8 && value % 8 != 0)
      fail(argument, "a multiple of 8 elements", std::to_string(value));
  }
  // `batched`: false where the tensor is packed or paged (ForwardArgs::varlen, paged), whose
  // stride_b is never used.
  template <class T>
  void tensor(const std::string& name, const T& t, bool output, bool batched = true) {
    pointer(name + ".data", t.data, 16);
    if (batched) stride(name + ".stride_b", t.stride_b, output, true);
    stride(name + ".stride_h", t.stride_h, output, true);
    stride(name + ".stride_s", t.stride_s, output, true);
  }
  // One InputArg per declared input, in the spec's order.
  void inputs(const KernelMetadata& m, const std::vector<InputArg>& given) {
    if (given.size() != m.inputs.size()) {
      std::string names;
      for (const InputInfo& input : m.inputs) names += (names.empty() ? "" : ", ") + input.name;
      fail("inputs", std::to_string(m.inputs.size()) + " input(s)" +
                         (names.empty() ? "" : " (" + names + ")"),
           std::to_string(given.size()));
      return;
    }
    for (size_t i = 0; i < given.size(); ++i) {
      const InputArg& in = given[i];
      std::string name = inputName(m, i);
      pointer(name + ".data", in.data, 4);
      if (inputHas(m, i, "b")) stride(name + ".stride_b", in.stride_b, false, false);
      if (inputHas(m, i, "h")) stride(name + ".stride_h", in.stride_h, false, false);
      if (inputHas(m, i, "pos")) stride(name + ".stride_pos", in.stride_pos, false, false);
    }
  }
  static std::string inputName(const KernelMetadata& m, size_t i) {
    return "inputs[" + std::to_string(i) + "] (" + m.inputs[i].name + ")";
  }
  static bool inputHas(const KernelMetadata& m, size_t i, const char* dim) {
    return ("," + m.inputs[i].dims + ",").find(std::string(",") + dim + ",") != std::string::npos;
  }

  // *out: the footprint of `rowElements` elements of `elementBytes` at `data` with element
  // strides `strides` over `extents`, or false (and why) where its last byte's offset passes
  // INT64_MAX or its last byte the end of the address space.
  bool span(Footprint* out, const std::string& name, const void* data, const int64_t (&strides)[3],
            const int64_t (&extents)[3], int64_t rowElements, int64_t elementBytes) {
    out->name = name;
    out->elementBytes = elementBytes;
    out->base = reinterpret_cast<uintptr_t>(data);
    out->row = rowElements * elementBytes;
    int64_t last = 0;
    for (int d = 0; d < 3; ++d) {
      out->extent[d] = extents[d];
      if (extents[d] == 1) continue;  // its stride is never used
      int64_t bytes = 0, reach = 0;
      if (__builtin_mul_overflow(strides[d], elementBytes, &bytes) ||
          __builtin_mul_overflow(bytes, extents[d] - 1, &reach) ||
          __builtin_add_overflow(last, reach, &last))
        return fail(out->strideArgument(d),
                    "a stride that keeps the tensor's last byte within 2^63 bytes of its start "
                    "(" + std::to_string(extents[d]) + " along it, " +
                        std::to_string(elementBytes) + "-byte elements)",
                    std::to_string(strides[d]));
      out->stride[d] = bytes;
    }
    uintptr_t endAddress = 0;
    if (__builtin_add_overflow(last, out->row, &out->end) ||
        __builtin_add_overflow(out->base, uint64_t(out->end), &endAddress))
      return fail(name + ".data", "a tensor that ends inside the address space",
                  hexAddress(data) + " + " + std::to_string(last) + " + " +
                      std::to_string(out->row) + " bytes");
    return true;
  }
  // A Q, K, V, O, dO, dQ, dK or dV tensor of [batch, heads, len, dim] elements.
  template <class T>
  bool tensorSpan(Footprint* out, const std::string& name, const T& t, int64_t batch,
                  int64_t heads, int64_t len, int64_t dim) {
    return span(out, name, t.data, {t.stride_b, t.stride_h, t.stride_s}, {batch, heads, len}, dim,
                kTensorElementBytes);
  }
  // A paged K or V pool: num_pages pages of page_size rows of each head (PagedKVArg).
  template <class T>
  bool poolSpan(Footprint* out, const char* name, const char* stridePageName, const T& t,
                int64_t stridePage, int64_t pages, int64_t heads, int64_t pageSize,
                int64_t dim) {
    out->strideNames[0] = stridePageName;
    return span(out, name, t.data, {stridePage, t.stride_h, t.stride_s}, {pages, heads, pageSize},
                dim, kTensorElementBytes);
  }
  // A device array of `rows` rows of `count` int32 (cu_seqlens, seq_lens_kv, the block table).
  bool indexSpan(std::vector<Footprint>* out, const std::string& name, const int32_t* data,
                 const char* strideName, int64_t stride, int64_t rows, int64_t count) {
    Footprint f;
    f.strideNames[0] = strideName;
    if (!span(&f, name, data, {stride, 0, 0}, {rows, 1, 1}, count, kWordBytes)) return false;
    out->push_back(f);
    return true;
  }
  // The LSE: [batch, heads_q, q_len] f32, contiguous.
  bool lseSpan(Footprint* out, const std::string& name, const void* lse, int64_t batch,
               int64_t heads, int64_t len) {
    if (__int128(batch) * heads * len * kWordBytes > INT64_MAX)
      return fail(name, "batch x heads_q x q_len x 4 bytes within 2^63 bytes",
                  std::to_string(batch) + " x " + std::to_string(heads) + " x " +
                      std::to_string(len) + " x 4");
    return span(out, name, lse, {heads * len, len, 1}, {batch, heads, len}, 1, kWordBytes);
  }
  // The declared inputs: 4-byte elements indexed by b (batch), h (heads_q) and pos (the longer
  // length, expr::input_extents); dimensions an input lacks span one element.
  bool inputSpans(std::vector<Footprint>* out, const KernelMetadata& m,
                  const std::vector<InputArg>& inputs, int64_t batch, int64_t q_len,
                  int64_t kv_len) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const InputArg& in = inputs[i];
      const bool b = inputHas(m, i, "b"), h = inputHas(m, i, "h"), pos = inputHas(m, i, "pos");
      Footprint f;
      f.strideNames[2] = "stride_pos";
      if (!span(&f, inputName(m, i), in.data,
                {b ? in.stride_b : 0, h ? in.stride_h : 0, pos ? in.stride_pos : 0},
                {b ? batch : 1, h ? int64_t(m.headsQ) : 1, pos ? std::max(q_len, kv_len) : 1}, 1,
                kWordBytes))
        return false;
      out->push_back(f);
    }
    return true;
  }
  // Each written footprint's rows nest (no row overlaps another), and no written footprint shares
  // a byte with any other footprint, read or written. Read ones may overlap each other (Q == K).
  void noOverlaps(const std::vector<Footprint>& written, const std::vector<Footprint>& read) {
    for (const Footprint& w : written) {
      LatticeDim dims[3];
      for (int d = 0; d < 3; ++d) dims[d] = {w.stride[d], w.extent[d]};
      __int128 needed = 0;
      if (int d = firstNonNestingDim(dims, 3, w.row, &needed); d >= 0)
        return void(fail(
            w.strideArgument(d),
            "a stride of at least " + std::to_string(int64_t(needed / w.elementBytes)) +
                " elements (the rows of a written tensor must not overlap: ordered by stride, "
                "each stride covers the rows of the smaller ones)",
            std::to_string(w.stride[d] / w.elementBytes)));
    }
    auto range = [](const Footprint& f) {
      return f.name + " at [" + hexAddress(reinterpret_cast<const void*>(f.base)) + ", +" +
             std::to_string(f.end) + ")";
    };
    for (size_t i = 0; i < written.size(); ++i) {
      const Footprint& w = written[i];
      for (size_t j = i + 1; j < written.size(); ++j)
        if (!disjoint(w, written[j]))
          return void(fail(w.name, "no byte in common with " + written[j].name,
                           range(w) + " and " + range(written[j])));
      for (const Footprint& r : read)
        if (!disjoint(w, r))
          return void(fail(w.name, "no byte in common with " + r.name,
                           range(w) + " and " + range(r)));
    }
  }
};

}  // namespace

Status Kernel::validate(const ForwardArgs& args) const {
  if (!impl_) return Status::error("Kernel: empty kernel (its creation failed)");
  const KernelMetadata& m = metadata();
  // Packed Q/O rows (varlen) and packed or paged K/V: their tensors have no batch dimension.
  const VarlenArg* varlen = args.varlen;
  const PagedKVArg* paged = args.paged;
  const bool packedQ = varlen && varlen->cu_seqlens_q;
  const bool packedKV = varlen && varlen->cu_seqlens_kv;
  Checker check;
  check.tensor("q", args.q, false, !packedQ);
  check.tensor("k", args.k, false, !packedKV && !paged);
  check.tensor("v", args.v, false, !packedKV && !paged);
  check.tensor("o", args.o, true, !packedQ);
  if (args.lse) check.pointer("lse", args.lse, 4);
  check.launchSizes(m, args.batch, args.q_len, args.kv_len);
  check.inputs(m, args.inputs);
  if (!check.status.ok) return check.status;
  if (Status status = validateSeqLayout(m, args); !status) return status;
  // The split partials' workspace, the caller's (forwardWorkspaceBytes sizes it without it).
  size_t workspaceBytes = 0;
  if (args.workspace) {
    check.pointer("workspace", args.workspace, 16);
    workspaceBytes = forwardWorkspaceBytes(args);
    if (check.status.ok && args.workspace_bytes < workspaceBytes)
      check.fail("workspace_bytes",
                 "at least " + std::to_string(workspaceBytes) + " (forwardWorkspaceBytes(args))",
                 std::to_string(args.workspace_bytes));
  }
  // What the launch writes (O, the LSE, the workspace's first workspaceBytes bytes) shares no
  // byte with anything else it reads or writes.
  if (check.status.ok) {
    Footprint q, k, v, o, lse, workspace;
    std::vector<Footprint> inputs, arrays, read, written;  // arrays: the layout's int32 ones
    const int64_t B = args.batch;
    // Packed Q/O: [total_q rows]; packed K/V: [total_kv rows]; the LSE of packed Q is
    // [heads_q, total_q].
    const int64_t qBatch = packedQ ? 1 : B, qRows = packedQ ? varlen->total_q : args.q_len;
    const int64_t kvBatch = packedKV ? 1 : B, kvRows = packedKV ? varlen->total_kv : args.kv_len;
    const bool kvSpans =
        paged ? check.poolSpan(&k, "k", "paged.k_stride_page", args.k, paged->k_stride_page,
                               paged->num_pages, m.headsKV, paged->page_size, m.headDim) &&
                    check.poolSpan(&v, "v", "paged.v_stride_page", args.v, paged->v_stride_page,
                                   paged->num_pages, m.headsKV, paged->page_size, m.headDimV)
              : check.tensorSpan(&k, "k", args.k, kvBatch, m.headsKV, kvRows, m.headDim) &&
                    check.tensorSpan(&v, "v", args.v, kvBatch, m.headsKV, kvRows, m.headDimV);
    if (check.tensorSpan(&q, "q", args.q, qBatch, m.headsQ, qRows, m.headDim) && kvSpans &&
        check.tensorSpan(&o, "o", args.o, qBatch, m.headsQ, qRows, m.headDimV) &&
        (!args.lse || check.lseSpan(&lse, "lse", args.lse, qBatch, m.headsQ, qRows)) &&
        check.inputSpans(&inputs, m, args.inputs, B, args.q_len, args.kv_len) &&
        (!packedQ || check.indexSpan(&arrays, "varlen.cu_seqlens_q", varlen->cu_seqlens_q,
                                     "stride", 0, 1, B + 1)) &&
        (!packedKV || check.indexSpan(&arrays, "varlen.cu_seqlens_kv", varlen->cu_seqlens_kv,
                                      "stride", 0, 1, B + 1)) &&
        (!paged || (check.indexSpan(&arrays, "paged.seq_lens_kv", paged->seq_lens_kv, "stride",
                                    0, 1, B) &&
                    check.indexSpan(&arrays, "paged.block_table", paged->block_table,
                                    "paged.block_table_stride", paged->block_table_stride, B,
                                    paged->max_pages))) &&
        (workspaceBytes == 0 ||
         check.span(&workspace, "workspace", args.workspace, {0, 0, 0}, {1, 1, 1},
                    int64_t(workspaceBytes), 1))) {
      read = {q, k, v};
      read.insert(read.end(), inputs.begin(), inputs.end());
      read.insert(read.end(), arrays.begin(), arrays.end());
      written.push_back(o);
      if (args.lse) written.push_back(lse);
      if (workspaceBytes) written.push_back(workspace);
      check.noOverlaps(written, read);
    }
  }
  if (check.status.ok && args.prepared)
    return checkPrepared(args.prepared->impl_.get(), impl_.get(), args, "ForwardArgs.prepared: ");
  return check.status;
}

Status Kernel::validateBackward(const BackwardArgs& args) const {
  if (!impl_) return Status::error("Kernel: empty kernel (its creation failed)");
  const KernelMetadata& m = metadata();
  if (!m.backward)
    return Status::error("kernel '" + m.name +
                         "': this kernel was compiled without backward kernels: compile with "
                         "backward enabled (JitCompiler::compile(..., withBackward = true), "
                         "attnc_compile_*_ex with ATTNC_COMPILE_BACKWARD)");
  if (args.varlen) return validateBackwardVarlen(*this, args);
  Checker check;
  check.prefix = "BackwardArgs.";
  check.tensor("q", args.q, false);
  check.tensor("k", args.k, false);
  check.tensor("v", args.v, false);
  check.tensor("o", args.o, false);
  check.tensor("d_o", args.d_o, false);
  check.tensor("dq", args.dq, true);
  check.tensor("dk", args.dk, true);
  check.tensor("dv", args.dv, true);
  check.pointer("lse", args.lse, 4);
  check.launchSizes(m, args.batch, args.q_len, args.kv_len);
  check.inputs(m, args.inputs);
  // The workspace the launch uses, the caller's or the kernel's: a size that fits in int64.
  const size_t needed = check.status.ok
                            ? backwardWorkspaceBytes(args.batch, args.q_len, args.deterministic)
                            : 0;
  if (check.status.ok && needed == 0)
    check.fail("q_len", "a backward workspace (fp32 rows of batch x heads_q x q_len) within 2^63 "
                        "bytes", "batch " + std::to_string(args.batch) + ", heads_q " +
                                     std::to_string(m.headsQ) + ", q_len " +
                                     std::to_string(args.q_len));
  if (check.status.ok && args.workspace) {
    check.pointer("workspace", args.workspace, 16);
    if (args.workspace_bytes < needed)
      check.fail("workspace_bytes",
                 "at least " + std::to_string(needed) + " (backwardWorkspaceBytes(" +
                     std::to_string(args.batch) + ", " + std::to_string(args.q_len) + ", " +
                     (args.deterministic ? "true" : "false") + "))",
                 std::to_string(args.workspace_bytes));
  }
  // What the launch writes (dQ, dK, dV, the workspace's first `needed` bytes) shares no byte with
  // anything else it reads or writes.
  if (check.status.ok) {
    Footprint q, k, v, o, d_o, lse, dq, dk, dv, workspace;
    std::vector<Footprint> inputs, read, written;
    const int64_t B = args.batch, Sq = args.q_len, Skv = args.kv_len;
    if (check.tensorSpan(&q, "q", args.q, B, m.headsQ, Sq, m.headDim) &&
        check.tensorSpan(&k, "k", args.k, B, m.headsKV, Skv, m.headDim) &&
        check.tensorSpan(&v, "v", args.v, B, m.headsKV, Skv, m.headDimV) &&
        check.tensorSpan(&o, "o", args.o, B, m.headsQ, Sq, m.headDimV) &&
        check.tensorSpan(&d_o, "d_o", args.d_o, B, m.headsQ, Sq, m.headDimV) &&
        check.lseSpan(&lse, "lse", args.lse, B, m.headsQ, Sq) &&
        check.tensorSpan(&dq, "dq", args.dq, B, m.headsQ, Sq, m.headDim) &&
        check.tensorSpan(&dk, "dk", args.dk, B, m.headsKV, Skv, m.headDim) &&
        check.tensorSpan(&dv, "dv", args.dv, B, m.headsKV, Skv, m.headDimV) &&
        (!args.workspace ||
         check.span(&workspace, "workspace", args.workspace, {0, 0, 0}, {1, 1, 1},
                    int64_t(needed), 1)) &&
        check.inputSpans(&inputs, m, args.inputs, B, Sq, Skv)) {
      read = {q, k, v, o, d_o, lse};
      read.insert(read.end(), inputs.begin(), inputs.end());
      written = {dq, dk, dv};
      if (args.workspace) written.push_back(workspace);
      check.noOverlaps(written, read);
    }
  }
  if (check.status.ok && args.prepared) {
    const PreparedInputs::Impl* prepared = args.prepared->impl_.get();
    if (Status status = checkPrepared(prepared, impl_.get(), args, "BackwardArgs.prepared: ");
        !status)
      return status;
    if (!prepared->backward)
      return Status::error("BackwardArgs.prepared: expected one with the backward's part, got "
                           "one without");
  }
  return check.status;
}

}  // namespace attnc
