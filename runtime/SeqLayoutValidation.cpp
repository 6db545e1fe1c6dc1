// The checks of a forward's varlen, paged K/V and decode options that need no GPU (docs/runtime.md,
// "Varlen, paged K/V and decode"). The kernels clamp what they read from the device arrays, so a
// wrong array there gives wrong numbers; these checks turn what the host can see into an error.
#include "runtime/SeqLayoutValidation.h"

#include "attnc/common/split_kv.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>

namespace attnc {

namespace {

// A page holds 1 << SeqLayout::page_shift rows, a shift of 0..8: the sizes the decode kernel's
// row policy and its tests cover (vLLM's 16, FlashInfer's 1..64, the 256 of a TMA-sized page).
constexpr int64_t kMaxPageSize = 256;
// SeqLayout carries num_pages and max_pages as int; page ids are int32 anyway.
constexpr int64_t kMaxPages = INT32_MAX;
// Bytes of an element of the int32 arrays (cu_seqlens, seq_lens_kv, block_table).
constexpr uintptr_t kIndexBytes = 4;

std::string str(int64_t value) { return std::to_string(value); }

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

std::string address(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

// Every message starts with the argument it is about.
Status bad(const std::string& text) { return Status::error("ForwardArgs." + text); }

// A device array of int32: non-null (where `required`) and 4-byte aligned.
Status indexArray(const std::string& name, const int32_t* p, const char* why) {
  if (!p) return bad(name + " = null: a device pointer (int32) " + why);
  if (reinterpret_cast<uintptr_t>(p) % kIndexBytes)
    return bad(name + " = " + address(p) + ": 4-byte aligned (int32 elements)");
  return Status::success();
}

// A host copy is only a check of the device array it mirrors: one without that array is a
// mistake in the caller's layout.
Status hostCopyHasArray(const std::string& part, const char* copy, const void* hostCopy,
                        const char* array, const void* device) {
  if (hostCopy && !device)
    return bad(part + "." + copy + " = " + address(hostCopy) + ": null without " + array +
               " (a host copy checks the device array; the kernels read that one)");
  return Status::success();
}

Status choices(const KernelMetadata& m, const ForwardArgs& args) {
  const int decode = static_cast<int>(args.decode);
  if (decode < 0 || decode > 2)
    return bad("decode = " + str(decode) + ": Auto (0), Off (1) or On (2)");
  if (args.num_splits < 0 || args.num_splits > kMaxSplits)
    return bad("num_splits = " + str(args.num_splits) + ": in [0, " + str(kMaxSplits) +
               "] (0: derived from the device and the lengths)");
  const bool layout = args.varlen || args.paged;
  const char* part = args.varlen ? "varlen" : "paged";
  if (layout && m.dropout > 0)
    return bad(std::string(part) + " = given: null for kernel '" + m.name +
               "', whose spec has dropout " + number(m.dropout) +
               " (varlen and paged launches run the decode kernel, which has no dropout)");
  if (args.decode == DecodeChoice::On && !m.decode)
    return bad("decode = On: Auto or Off for kernel '" + m.name +
               "' (it has no decode kernel: specs with dropout have none)");
  if (args.decode == DecodeChoice::Off && layout)
    return bad(std::string("decode = Off: Auto or On with ") + part +
               " (the forward kernel takes contiguous Q, K, V only)");
  return Status::success();
}

// One side of a varlen layout (Q or K/V): its device array, total and host copy.
Status varlenSide(const char* array, const int32_t* device, const char* total, int64_t rows,
                  const char* copy, const int32_t* host) {
  const std::string name = std::string("varlen.") + array;
  if (device) {
    if (Status s = indexArray(name, device, "or null"); !s) return s;
    if (rows < 1)
      return bad(std::string("varlen.") + total + " = " + str(rows) + ": at least 1 with " +
                 array + " (the packed tensors' rows)");
  } else if (rows != 0) {
    return bad(std::string("varlen.") + total + " = " + str(rows) + ": 0 without " + array);
  }
  return hostCopyHasArray("varlen", copy, host, array, device);
}

// K and V pools: a page's rows and heads by the tensor's strides fit in the stride between pages.
Status pageStride(const char* field, int64_t stridePage, const TensorArg& t, const char* tensor,
                  int64_t pageSize, int64_t heads, int64_t dim) {
  const std::string name = std::string("paged.") + field;
  if (stridePage % 8 != 0)
    return bad(name + " = " + str(stridePage) + ": a multiple of 8 elements (16-byte rows)");
  // Rows and heads of a page span (page_size - 1) stride_s + (heads - 1) stride_h + dim elements
  // (the strides are non-negative, Kernel::validate checked them first).
  const __int128 page =
      __int128(pageSize - 1) * t.stride_s + __int128(heads - 1) * t.stride_h + dim;
  if (stridePage < page)
    return bad(name + " = " + str(stridePage) + ": at least " + str(int64_t(page)) +
               " elements (a page: " + str(pageSize) + " rows x " + str(heads) + " heads x " +
               str(dim) + " by " + tensor + ".stride_s = " + str(t.stride_s) + ", " + tensor +
               ".stride_h = " + str(t.stride_h) + ")");
  return Status::success();
}

Status pagedScalars(const KernelMetadata& m, const ForwardArgs& args, const PagedKVArg& p) {
  if (Status s = indexArray("paged.block_table", p.block_table, "(a paged K/V cache's pages)"); !s)
    return s;
  if (Status s = indexArray("paged.seq_lens_kv", p.seq_lens_kv, "(required with block_table)");
      !s)
    return s;
  if (p.page_size < 1 || p.page_size > kMaxPageSize || (p.page_size & (p.page_size - 1)))
    return bad("paged.page_size = " + str(p.page_size) + ": a power of two in [1, " +
               str(kMaxPageSize) + "]");
  if (p.num_pages < 1 || p.num_pages > kMaxPages)
    return bad("paged.num_pages = " + str(p.num_pages) + ": in [1, " + str(kMaxPages) + "]");
  if (p.block_table_stride < 1)
    return bad("paged.block_table_stride = " + str(p.block_table_stride) + ": at least 1");
  if (p.max_pages < 1 || p.max_pages > p.block_table_stride || p.max_pages > kMaxPages)
    return bad("paged.max_pages = " + str(p.max_pages) + ": in [1, block_table_stride = " +
               str(std::min(p.block_table_stride, kMaxPages)) + "]");
  if (__int128(args.kv_len) > __int128(p.max_pages) * p.page_size)
    return bad("kv_len = " + str(args.kv_len) + ": at most paged.max_pages x page_size = " +
               str(p.max_pages) + " x " + str(p.page_size) + " = " +
               str(p.max_pages * p.page_size) + " (the longest sequence's pages fit a table row)");
  if (Status s = pageStride("k_stride_page", p.k_stride_page, args.k, "k", p.page_size, m.headsKV,
                            m.headDim);
      !s)
    return s;
  if (Status s = pageStride("v_stride_page", p.v_stride_page, args.v, "v", p.page_size, m.headsKV,
                            m.headDimV);
      !s)
    return s;
  if (Status s = hostCopyHasArray("paged", "host_block_table", p.host_block_table, "block_table",
                                  p.block_table);
      !s)
    return s;
  if (Status s = hostCopyHasArray("paged", "host_seq_lens_kv", p.host_seq_lens_kv, "seq_lens_kv",
                                  p.seq_lens_kv);
      !s)
    return s;
  if (p.host_block_table && !p.host_seq_lens_kv)
    return bad("paged.host_seq_lens_kv = null: a host copy with host_block_table (the entries a "
               "sequence uses follow from its length)");
  return Status::success();
}

// A host copy of cu_seqlens_q or cu_seqlens_kv: batch + 1 offsets from 0, increasing, within the
// packed rows, no sequence longer than the launch's length for it.
Status offsets(const char* array, const int32_t* host, int64_t batch, const char* total,
               int64_t rows, const char* length, int64_t longest) {
  const std::string name = std::string("varlen.") + array;
  if (host[0] != 0) return bad(name + "[0] = " + str(host[0]) + ": the first offset is 0");
  for (int64_t i = 1; i <= batch; ++i) {
    const std::string at = name + "[" + str(i) + "] = " + str(host[i]);
    const std::string before = std::string(array) + "[" + str(i - 1) + "] = " + str(host[i - 1]);
    if (host[i] < host[i - 1]) return bad(at + " < " + before + ": not increasing");
    if (host[i] > rows) return bad(at + " > " + total + " = " + str(rows));
    if (int64_t(host[i]) - host[i - 1] > longest)
      return bad(at + ", " + before + ": sequence " + str(i - 1) + " has " +
                 str(int64_t(host[i]) - host[i - 1]) + " rows, more than " + length + " = " +
                 str(longest));
  }
  return Status::success();
}

// Host copies of seq_lens_kv (and of the block table): each length within the table row's pages
// and kv_len, each page a sequence uses within the pool.
Status pagedHostCopies(const ForwardArgs& args, const PagedKVArg& p) {
  if (!p.host_seq_lens_kv) return Status::success();
  for (int64_t b = 0; b < args.batch; ++b) {
    const int64_t length = p.host_seq_lens_kv[b];
    const std::string at = "paged.seq_lens_kv[" + str(b) + "] = " + str(length);
    if (length < 0) return bad(at + ": in [0, kv_len = " + str(args.kv_len) + "]");
    const int64_t pages = (length + p.page_size - 1) / p.page_size;
    if (pages > p.max_pages)
      return bad(at + " needs " + str(pages) + " pages of " + str(p.page_size) +
                 "; the table row has " + str(p.max_pages));
    if (length > args.kv_len) return bad(at + ": in [0, kv_len = " + str(args.kv_len) + "]");
    if (!p.host_block_table) continue;
    const int32_t* row = p.host_block_table + b * p.block_table_stride;
    for (int64_t j = 0; j < pages; ++j)
      if (row[j] < 0 || row[j] >= p.num_pages)
        return bad("paged.block_table[" + str(b) + "][" + str(j) + "] = " + str(row[j]) +
                   ": outside [0, " + str(p.num_pages) + ") pages");
  }
  return Status::success();
}

}  // namespace

Status validateSeqLayout(const KernelMetadata& m, const ForwardArgs& args) {
  if (Status s = choices(m, args); !s) return s;
  const VarlenArg* varlen = args.varlen;
  const PagedKVArg* paged = args.paged;
  if (varlen) {
    if (!varlen->cu_seqlens_q && !varlen->cu_seqlens_kv)
      return bad("varlen.cu_seqlens_q = null: an array with cu_seqlens_kv null (or varlen null "
                 "for contiguous Q, K, V)");
    if (Status s = varlenSide("cu_seqlens_q", varlen->cu_seqlens_q, "total_q", varlen->total_q,
                              "host_cu_seqlens_q", varlen->host_cu_seqlens_q);
        !s)
      return s;
    if (Status s = varlenSide("cu_seqlens_kv", varlen->cu_seqlens_kv, "total_kv",
                              varlen->total_kv, "host_cu_seqlens_kv", varlen->host_cu_seqlens_kv);
        !s)
      return s;
    if (varlen->cu_seqlens_kv && paged)
      return bad("varlen.cu_seqlens_kv = " + address(varlen->cu_seqlens_kv) +
                 ": null with paged.block_table (either packed K/V or a paged pool)");
  }
  if (paged)
    if (Status s = pagedScalars(m, args, *paged); !s) return s;
  if (varlen && varlen->host_cu_seqlens_q)
    if (Status s = offsets("cu_seqlens_q", varlen->host_cu_seqlens_q, args.batch, "total_q",
                           varlen->total_q, "q_len", args.q_len);
        !s)
      return s;
  if (varlen && varlen->host_cu_seqlens_kv)
    if (Status s = offsets("cu_seqlens_kv", varlen->host_cu_seqlens_kv, args.batch, "total_kv",
                           varlen->total_kv, "kv_len", args.kv_len);
        !s)
      return s;
  if (paged)
    if (Status s = pagedHostCopies(args, *paged); !s) return s;
  return Status::success();
}

}  // namespace attnc
