// The C API argument fuzzer: random attnc_forward_args and attnc_backward_args (boundary lengths
// and strides, misaligned and null pointers, aliasing, overlapping and packed layouts, counts
// past the caller's array) through attnc_kernel_validate, attnc_kernel_backward_validate and
// attnc_kernel_backward_workspace_bytes of a few small kernels; attnc_kernel_validate_ex without a
// layout must give each forward's verdict and message. An oracle written here from the
// documented contract (docs/runtime.md, "Launch arguments") says accept or reject; a disagreement,
// a crash, or an error that names no argument the oracle found wrong is a failure, printed with
// the seed and case number. For accepted layouts small enough to enumerate, every written row is
// also checked by brute force against every other row.
//
//   attnc-capi-fuzz [--seed N] [--cases N]
//
// Needs NVRTC (the kernels are compiled once, into $ATTNC_CACHE_DIR or a temporary cache); no GPU.
#include "attnc/attnc_c.h"

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace {

using i128 = __int128;

// The contract's bounds (docs/runtime.md): batch along the grid's z, lengths that the kernels'
// 32-bit position arithmetic takes with room to spare.
constexpr int64_t kMaxBatch = 65535;
constexpr int64_t kMaxLength = int64_t(1) << 30;

struct InputDecl {
  const char* name;
  bool b, h, pos;
};

struct KernelCase {
  const char* spec;
  const char* target;
  bool backward;
  std::vector<InputDecl> inputs;
  attnc_kernel* kernel = nullptr;
  attnc_info info{};
};

std::vector<KernelCase> kernelCases() {
  return {
      {"name: fz_plain\nhead_dim: 16\nheads: 2\n", "sm_80", false, {}},
      {"name: fz_gqa\nhead_dim: 32\nhead_dim_v: 16\nheads: {q: 4, kv: 2}\nmask: causal\n",
       "sm_90a", true, {}},
      {"name: fz_doc\nhead_dim: 16\nheads: 2\nmask: \"doc[q] == doc[k] && q >= k\"\n"
       "score: \"score + slopes[h] * (k - q) + bias[b, k]\"\ndropout: 0.1\n"
       "inputs:\n  doc: {dtype: i32, dims: [pos]}\n  slopes: {dtype: f32, dims: [h]}\n"
       "  bias: {dtype: f32, dims: [b, pos]}\n",
       "sm_80",
       true,
       {{"doc", false, false, true}, {"slopes", false, true, false}, {"bias", true, false, true}}},
  };
}

// ---- The oracle: the contract, written from the documentation ---------------------------------

// Rows (b, h, s) of `row` bytes at base + b sb + h sh + s ss (bytes), indices below the extents.
struct Span {
  std::string name;
  uint64_t base = 0;
  i128 stride[3] = {0, 0, 0};
  int64_t extent[3] = {1, 1, 1};
  i128 row = 0;
  i128 last = 0;  // offset of the last byte
};

// Strides of dimensions of extent 1 are never used; the others nest when, sorted by stride, each
// is at least the distance from the first byte to one past the last of the rows below it.
bool nests(std::vector<std::pair<i128, i128>> dims, i128 row) {
  dims.erase(std::remove_if(dims.begin(), dims.end(), [](auto& d) { return d.second <= 1; }),
             dims.end());
  std::stable_sort(dims.begin(), dims.end(), [](auto& x, auto& y) { return x.first < y.first; });
  i128 reach = row;
  for (auto& [stride, extent] : dims) {
    if (stride < reach) return false;
    reach += stride * (extent - 1);
  }
  return true;
}

// Two spans share no byte: byte ranges apart, or equal strides where both span more than one
// row and the lattice with the distance of their bases as one more dimension (extent 2) nests.
bool apart(const Span& a, const Span& b) {
  const Span& lo = a.base <= b.base ? a : b;
  const Span& hi = a.base <= b.base ? b : a;
  if (i128(hi.base - lo.base) > lo.last) return true;
  std::vector<std::pair<i128, i128>> dims;
  for (int d = 0; d < 3; ++d) {
    if (a.extent[d] > 1 && b.extent[d] > 1 && a.stride[d] != b.stride[d]) return false;
    dims.push_back(
        {a.extent[d] > 1 ? a.stride[d] : b.stride[d], std::max(a.extent[d], b.extent[d])});
  }
  dims.push_back({i128(hi.base - lo.base), 2});
  return nests(dims, std::max(a.row, b.row));
}

struct Verdict {
  std::set<std::string> wrong;  // the arguments that break the contract; empty: accept
  void bad(const std::string& field) { wrong.insert(field); }
};

bool validLength(int64_t v, int64_t most) { return v >= 1 && v <= most; }

// A Q/K/V/O-like tensor: pointer, strides, alignment; its span when in bounds.
void tensorRules(Verdict& v, const char* name, const attnc_tensor& t, bool written) {
  if (!t.data || uintptr_t(t.data) % 16) v.bad(name);
  for (int64_t s : {t.stride_b, t.stride_h, t.stride_s})
    if (s < 0 || (written && s == 0) || s % 8) v.bad(name);
}

// The span of `extents` rows of `rowElements` elements of `bytes`; false past INT64_MAX bytes or
// the end of the address space.
bool makeSpan(Span* out, const std::string& name, const void* data, const int64_t (&strides)[3],
              const int64_t (&extents)[3], int64_t rowElements, int64_t bytes) {
  out->name = name;
  out->base = uintptr_t(data);
  out->row = i128(rowElements) * bytes;
  i128 last = out->row - 1;
  for (int d = 0; d < 3; ++d) {
    out->extent[d] = extents[d];
    out->stride[d] = extents[d] > 1 ? i128(strides[d]) * bytes : 0;
    last += out->stride[d] * (extents[d] - 1);
  }
  out->last = last;
  return last < i128(INT64_MAX) && i128(out->base) + last < (i128(1) << 64);
}

struct Shape {
  int64_t batch, q_len, kv_len;
};

// Inputs and their spans; declared dims only.
void inputRules(Verdict& v, const KernelCase& k, const attnc_input* inputs, Shape s,
                std::vector<Span>* spans) {
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const attnc_input& in = inputs[i];
    const InputDecl& d = k.inputs[i];
    bool ok = in.data && uintptr_t(in.data) % 4 == 0;
    if ((d.b && in.stride_b < 0) || (d.h && in.stride_h < 0) || (d.pos && in.stride_pos < 0))
      ok = false;
    if (!ok) {
      v.bad("inputs");
      continue;
    }
    Span span;
    if (!makeSpan(
            &span, "inputs", in.data,
            {d.b ? in.stride_b : 0, d.h ? in.stride_h : 0, d.pos ? in.stride_pos : 0},
            {d.b ? s.batch : 1, d.h ? k.info.heads_q : 1, d.pos ? std::max(s.q_len, s.kv_len) : 1},
            1, 4))
      v.bad("inputs");
    else
      spans->push_back(span);
  }
}

// Written spans nest; none shares a byte with another span.
void overlapRules(Verdict& v, const std::vector<Span>& written, const std::vector<Span>& read) {
  for (const Span& w : written) {
    std::vector<std::pair<i128, i128>> dims;
    for (int d = 0; d < 3; ++d) dims.push_back({w.stride[d], w.extent[d]});
    if (!nests(dims, w.row)) v.bad(w.name);
  }
  for (size_t i = 0; i < written.size(); ++i) {
    for (size_t j = i + 1; j < written.size(); ++j)
      if (!apart(written[i], written[j])) v.bad(written[i].name), v.bad(written[j].name);
    for (const Span& r : read)
      if (!apart(written[i], r)) v.bad(written[i].name), v.bad(r.name);
  }
}

i128 align256(i128 n) { return (n + 255) / 256 * 256; }

// The backward workspace (docs/runtime.md): 256-byte aligned fp32 dq_accum (not deterministic)
// of batch x heads_q x (q_len up to a multiple of 64) x (head_dim up to a multiple of 32, or of
// 128 past 64), then the fp32 delta of batch x heads_q x q_len; 0 out of bounds or past INT64_MAX.
int64_t oracleWorkspace(const KernelCase& k, int64_t batch, int64_t q_len, int32_t deterministic) {
  if (!k.backward || !validLength(batch, kMaxBatch) || !validLength(q_len, kMaxLength) ||
      (deterministic != 0 && deterministic != 1))
    return 0;
  const int64_t hd = k.info.head_dim;
  const i128 columns = hd <= 64 ? (hd + 31) / 32 * 32 : (hd + 127) / 128 * 128;
  const i128 rows = i128(batch) * k.info.heads_q;
  const i128 accum = deterministic ? 0 : align256(rows * ((q_len + 63) / 64 * 64) * columns * 4);
  const i128 total = accum + align256(rows * q_len * 4);
  return total > i128(INT64_MAX) || accum > i128(INT64_MAX) ? 0 : int64_t(total);
}

// The forward contract; `spans` receives what it could make of the tensors (for the brute-force
// check of accepted layouts).
Verdict oracleForward(const KernelCase& k, const attnc_forward_args& a, std::vector<Span>* written,
                      std::vector<Span>* read) {
  Verdict v;
  if (a.num_inputs != int64_t(k.inputs.size()))
    v.bad("num_inputs");
  else if (a.num_inputs > 0 && !a.inputs)
    v.bad("inputs");
  tensorRules(v, "q", a.q, false);
  tensorRules(v, "k", a.k, false);
  tensorRules(v, "v", a.v, false);
  tensorRules(v, "o", a.o, true);
  if (a.lse && uintptr_t(a.lse) % 4) v.bad("lse");
  if (!validLength(a.batch, kMaxBatch)) v.bad("batch");
  if (!validLength(a.q_len, kMaxLength)) v.bad("q_len");
  if (!validLength(a.kv_len, kMaxLength)) v.bad("kv_len");
  if (!v.wrong.empty()) return v;
  const Shape s{a.batch, a.q_len, a.kv_len};
  const attnc_info& m = k.info;
  auto tensor = [&](const char* name, const attnc_tensor& t, int64_t heads, int64_t len,
                    int64_t dim, std::vector<Span>* into) {
    Span span;
    if (makeSpan(&span, name, t.data, {t.stride_b, t.stride_h, t.stride_s}, {s.batch, heads, len},
                 dim, 2))
      into->push_back(span);
    else
      v.bad(name);
  };
  tensor("q", a.q, m.heads_q, s.q_len, m.head_dim, read);
  tensor("k", a.k, m.heads_kv, s.kv_len, m.head_dim, read);
  tensor("v", a.v, m.heads_kv, s.kv_len, m.head_dim_v, read);
  tensor("o", a.o, m.heads_q, s.q_len, m.head_dim_v, written);
  if (a.lse) {
    Span lse;
    if (makeSpan(&lse, "lse", a.lse, {m.heads_q * s.q_len, s.q_len, 1},
                 {s.batch, m.heads_q, s.q_len}, 1, 4))
      written->push_back(lse);
    else
      v.bad("lse");
  }
  if (a.num_inputs > 0) inputRules(v, k, a.inputs, s, read);
  if (v.wrong.empty()) overlapRules(v, *written, *read);
  return v;
}

Verdict oracleBackward(const KernelCase& k, const attnc_backward_args& a,
                       std::vector<Span>* written, std::vector<Span>* read) {
  Verdict v;
  if (a.num_inputs != int64_t(k.inputs.size()))
    v.bad("num_inputs");
  else if (a.num_inputs > 0 && !a.inputs)
    v.bad("inputs");
  if (a.deterministic != 0 && a.deterministic != 1) v.bad("deterministic");
  if (a.reserved != 0) v.bad("reserved");
  if (a.workspace_bytes < 0) v.bad("workspace_bytes");
  if (!v.wrong.empty()) return v;  // checked while converting, before the rest
  if (!k.backward) {
    v.bad("kernel");
    return v;
  }
  tensorRules(v, "q", a.q, false);
  tensorRules(v, "k", a.k, false);
  tensorRules(v, "v", a.v, false);
  tensorRules(v, "o", a.o, false);
  tensorRules(v, "d_o", a.d_o, false);
  tensorRules(v, "dq", a.dq, true);
  tensorRules(v, "dk", a.dk, true);
  tensorRules(v, "dv", a.dv, true);
  if (!a.lse || uintptr_t(a.lse) % 4) v.bad("lse");
  if (!validLength(a.batch, kMaxBatch)) v.bad("batch");
  if (!validLength(a.q_len, kMaxLength)) v.bad("q_len");
  if (!validLength(a.kv_len, kMaxLength)) v.bad("kv_len");
  if (!v.wrong.empty()) return v;
  if (a.num_inputs > 0)
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      const attnc_input& in = a.inputs[i];
      const InputDecl& d = k.inputs[i];
      if (!in.data || uintptr_t(in.data) % 4 || (d.b && in.stride_b < 0) ||
          (d.h && in.stride_h < 0) || (d.pos && in.stride_pos < 0))
        v.bad("inputs");
    }
  if (!v.wrong.empty()) return v;
  const int64_t needed = oracleWorkspace(k, a.batch, a.q_len, a.deterministic);
  if (needed == 0) {
    v.bad("q_len");
    v.bad("batch");
    return v;
  }
  if (a.workspace) {
    if (uintptr_t(a.workspace) % 16) v.bad("workspace");
    if (a.workspace_bytes < needed) v.bad("workspace_bytes");
    if (!v.wrong.empty()) return v;
  }
  const Shape s{a.batch, a.q_len, a.kv_len};
  const attnc_info& m = k.info;
  auto tensor = [&](const char* name, const attnc_tensor& t, int64_t heads, int64_t len,
                    int64_t dim, std::vector<Span>* into) {
    Span span;
    if (makeSpan(&span, name, t.data, {t.stride_b, t.stride_h, t.stride_s}, {s.batch, heads, len},
                 dim, 2))
      into->push_back(span);
    else
      v.bad(name);
  };
  tensor("q", a.q, m.heads_q, s.q_len, m.head_dim, read);
  tensor("k", a.k, m.heads_kv, s.kv_len, m.head_dim, read);
  tensor("v", a.v, m.heads_kv, s.kv_len, m.head_dim_v, read);
  tensor("o", a.o, m.heads_q, s.q_len, m.head_dim_v, read);
  tensor("d_o", a.d_o, m.heads_q, s.q_len, m.head_dim_v, read);
  Span lse;
  if (makeSpan(&lse, "lse", a.lse, {m.heads_q * s.q_len, s.q_len, 1}, {s.batch, m.heads_q, s.q_len},
               1, 4))
    read->push_back(lse);
  else
    v.bad("lse");
  tensor("dq", a.dq, m.heads_q, s.q_len, m.head_dim, written);
  tensor("dk", a.dk, m.heads_kv, s.kv_len, m.head_dim, written);
  tensor("dv", a.dv, m.heads_kv, s.kv_len, m.head_dim_v, written);
  if (a.workspace) {
    Span w;
    if (makeSpan(&w, "workspace", a.workspace, {0, 0, 0}, {1, 1, 1}, needed, 1))
      written->push_back(w);
    else
      v.bad("workspace");
  }
  if (a.num_inputs > 0) inputRules(v, k, a.inputs, s, read);
  if (v.wrong.empty()) overlapRules(v, *written, *read);
  return v;
}

// For an accepted call whose spans are small: no byte of a written row lies in any other row
// (written or read), by listing every row's byte range. Independent of the nesting rule.
bool bruteForceDisjoint(const std::vector<Span>& written, const std::vector<Span>& read,
                        std::string* why, bool* listed) {
  struct Range {
    uint64_t begin, end;  // [begin, end)
    size_t owner;
    bool written;
  };
  std::vector<Range> ranges;
  std::vector<const Span*> all;
  for (const Span& s : written) all.push_back(&s);
  for (const Span& s : read) all.push_back(&s);
  i128 rows = 0;
  for (const Span* s : all) rows += i128(s->extent[0]) * s->extent[1] * s->extent[2];
  if (rows > 20000) return true;  // too many to list: the oracle's rule stands alone
  *listed = true;
  for (size_t i = 0; i < all.size(); ++i) {
    const Span& s = *all[i];
    for (int64_t b = 0; b < s.extent[0]; ++b)
      for (int64_t h = 0; h < s.extent[1]; ++h)
        for (int64_t p = 0; p < s.extent[2]; ++p) {
          const uint64_t begin =
              s.base + uint64_t(b * s.stride[0] + h * s.stride[1] + p * s.stride[2]);
          ranges.push_back({begin, begin + uint64_t(s.row), i, i < written.size()});
        }
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& x, const Range& y) { return x.begin < y.begin; });
  // Sweep: the furthest-reaching earlier range of any owner, and the furthest written one.
  uint64_t reachAny = 0, reachWritten = 0;
  size_t ownerAny = 0, ownerWritten = 0;
  bool anySeen = false, writtenSeen = false;
  for (const Range& r : ranges) {
    if (anySeen && r.written && r.begin < reachAny) {
      *why = all[r.owner]->name + " overlaps " + all[ownerAny]->name;
      return false;
    }
    if (writtenSeen && r.begin < reachWritten) {
      *why = all[ownerWritten]->name + " overlaps " + all[r.owner]->name;
      return false;
    }
    if (!anySeen || r.end > reachAny) reachAny = r.end, ownerAny = r.owner, anySeen = true;
    if (r.written && (!writtenSeen || r.end > reachWritten))
      reachWritten = r.end, ownerWritten = r.owner, writtenSeen = true;
  }
  return true;
}

// ---- Generation --------------------------------------------------------------------------------

struct Rng {
  std::mt19937_64 engine;
  explicit Rng(uint64_t seed) : engine(seed) {}
  uint64_t next() { return engine(); }
  int64_t range(int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + int64_t(next() % uint64_t(hi - lo + 1));
  }
  bool chance(int percent) { return range(0, 99) < percent; }
  template <class T>
  T pick(const std::vector<T>& items) {
    return items[size_t(next() % items.size())];
  }
};

const std::vector<int64_t> kBoundaryLengths = {
    0, 1, -1, INT32_MAX, int64_t(1) << 31, (int64_t(1) << 32) + 1, INT64_MAX, INT64_MIN,
    kMaxLength, kMaxLength + 1, kMaxBatch, kMaxBatch + 1, 63, 64, 65};
const std::vector<int64_t> kBoundaryStrides = {
    0, 8, -8, 7, 16, 32, 64, int64_t(1) << 31, int64_t(1) << 40, int64_t(1) << 59,
    int64_t(1) << 62, INT64_MAX, INT64_MAX - 7, INT64_MIN};

// Fake device addresses: validation never reads them. Tensors are placed in disjoint 2^36-byte
// slots far apart, so a valid draw is disjoint unless a mutation makes it otherwise.
constexpr uint64_t kSlot = uint64_t(1) << 36;
uintptr_t slotAddress(int slot) { return uintptr_t(kSlot) * uintptr_t(slot + 1); }

struct Layout {
  bool bshd;
};
attnc_tensor makeTensor(uintptr_t at, Layout l, int64_t heads, int64_t len, int64_t dim) {
  const int64_t padded = (dim + 7) / 8 * 8;
  if (l.bshd)
    return {reinterpret_cast<const void*>(at), len * heads * padded, padded, heads * padded};
  return {reinterpret_cast<const void*>(at), heads * len * padded, len * padded, padded};
}

// The caller's inputs array: exactly the kernel's declared count, at the end of a page followed by
// an inaccessible page, so any read past it faults.
struct GuardedInputs {
  void* pages = nullptr;
  size_t pageSize = 0;
  attnc_input* array = nullptr;
  explicit GuardedInputs(size_t count) {
    pageSize = size_t(sysconf(_SC_PAGESIZE));
    pages = mmap(nullptr, 2 * pageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED) std::abort();
    mprotect(static_cast<char*>(pages) + pageSize, pageSize, PROT_NONE);
    array = reinterpret_cast<attnc_input*>(static_cast<char*>(pages) + pageSize) - count;
  }
  ~GuardedInputs() { munmap(pages, 2 * pageSize); }
};

struct Draw {
  Shape shape;
  attnc_tensor q, k, v, o, d_o, dq, dk, dv;
  float* lse;
  std::vector<attnc_input> inputs;
};

Draw validDraw(Rng& rng, const KernelCase& k) {
  const attnc_info& m = k.info;
  Draw d{};
  const bool big = rng.chance(10);
  d.shape = {rng.range(1, big ? kMaxBatch : 4), rng.range(1, big ? kMaxLength : 100),
             rng.range(1, big ? kMaxLength : 100)};
  Layout l{rng.chance(50)};
  const Shape& s = d.shape;
  d.q = makeTensor(slotAddress(0), l, m.heads_q, s.q_len, m.head_dim);
  d.k = makeTensor(slotAddress(1), l, m.heads_kv, s.kv_len, m.head_dim);
  d.v = makeTensor(slotAddress(2), l, m.heads_kv, s.kv_len, m.head_dim_v);
  d.o = makeTensor(slotAddress(3), l, m.heads_q, s.q_len, m.head_dim_v);
  d.d_o = makeTensor(slotAddress(4), l, m.heads_q, s.q_len, m.head_dim_v);
  d.dq = makeTensor(slotAddress(5), l, m.heads_q, s.q_len, m.head_dim);
  d.dk = makeTensor(slotAddress(6), l, m.heads_kv, s.kv_len, m.head_dim);
  d.dv = makeTensor(slotAddress(7), l, m.heads_kv, s.kv_len, m.head_dim_v);
  d.lse = reinterpret_cast<float*>(slotAddress(8));
  const int64_t positions = std::max(s.q_len, s.kv_len);
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const InputDecl& in = k.inputs[i];
    d.inputs.push_back({reinterpret_cast<const void*>(slotAddress(9 + int(i))),
                        in.b ? (in.h ? m.heads_q : 1) * (in.pos ? positions : 1) : 0,
                        in.h ? (in.pos ? positions : 1) : 0, in.pos ? 1 : 0});
  }
  return d;
}

// A packed [b, s, 3, h, d] triple (Q, K, V or dQ, dK, dV) where the shapes allow one.
void packTriple(const attnc_info& m, const Shape& s, uintptr_t at, attnc_tensor* x, attnc_tensor* y,
                attnc_tensor* z) {
  const int64_t d = m.head_dim;
  const int64_t position = 3 * m.heads_q * d;  // elements from one position to the next
  const attnc_tensor t{reinterpret_cast<const void*>(at), s.q_len * position, d, position};
  *x = *y = *z = t;
  y->data = reinterpret_cast<const void*>(at + uintptr_t(m.heads_q * d * 2));
  z->data = reinterpret_cast<const void*>(at + uintptr_t(2 * m.heads_q * d * 2));
}

// `p` moved by `bytes`, as an address (null or not: validation never dereferences it).
const void* moved(const void* p, int64_t bytes) {
  return reinterpret_cast<const void*>(uintptr_t(p) + uint64_t(bytes));
}

// One mutation of a drawn launch: `tensors` are its tensors by name; `k` declares how many
// entries the caller's inputs array honestly has.
template <class Args>
void mutate(Rng& rng, Args& a, std::vector<std::pair<const char*, attnc_tensor*>>& tensors,
            const KernelCase& k) {
  attnc_tensor& t = *rng.pick(tensors).second;
  attnc_tensor& other = *rng.pick(tensors).second;
  switch (rng.range(0, 13)) {
  case 0: a.batch = rng.pick(kBoundaryLengths); break;
  case 1: a.q_len = rng.pick(kBoundaryLengths); break;
  case 2: a.kv_len = rng.pick(kBoundaryLengths); break;
  case 3: {
    int64_t* strides[3] = {&t.stride_b, &t.stride_h, &t.stride_s};
    *strides[rng.range(0, 2)] = rng.pick(kBoundaryStrides);
    break;
  }
  case 4: t.data = moved(t.data, rng.pick(std::vector<int64_t>{1, 2, 4, 8})); break;
  case 5: t.data = nullptr; break;
  case 6: t.data = other.data; break;  // aliasing
  case 7:                              // overlapping by a few rows
    t.data = moved(other.data, 16 * rng.range(-64, 64));
    break;
  case 8: std::swap(t.stride_h, t.stride_s); break;
  case 9: t.stride_s = rng.range(0, 8) * 8; break;  // rows closer than the head dim
  case 10:
    a.num_inputs = rng.pick(std::vector<int64_t>{0, 1, 2, 3, 4, 1000000, -1, INT64_MAX, INT64_MIN});
    break;
  case 11: a.inputs = nullptr; break;
  case 12:
    if (!k.inputs.empty() && a.inputs) {
      const int64_t last = int64_t(k.inputs.size()) - 1;
      attnc_input& in = const_cast<attnc_input&>(a.inputs[rng.range(0, last)]);
      switch (rng.range(0, 4)) {
      case 0: in.data = nullptr; break;
      case 1: in.data = moved(in.data, 2); break;
      case 2: in.stride_pos = rng.pick(kBoundaryStrides); break;
      case 3: in.stride_b = rng.pick(kBoundaryStrides); break;
      default: in.data = other.data; break;  // an input inside a tensor
      }
    }
    break;
  default: {  // the lse inside another tensor, misaligned, or null
    const int which = int(rng.range(0, 2));
    float* lse = which == 0 ? nullptr
                 : which == 1
                     ? reinterpret_cast<float*>(const_cast<void*>(other.data)) + rng.range(0, 4)
                     : reinterpret_cast<float*>(uintptr_t(a.lse) + 2);
    a.lse = lse;
    break;
  }
  }
}

// The argument an error names: what follows the struct's name up to '.', ':', ' ' or '['.
std::string namedArgument(const std::string& message) {
  for (const char* prefix :
       {"attnc_forward_args.", "attnc_backward_args.", "ForwardArgs.", "BackwardArgs."}) {
    if (message.rfind(prefix, 0) == 0) {
      std::string rest = message.substr(std::strlen(prefix));
      return rest.substr(0, rest.find_first_of(".: ["));
    }
  }
  if (message.rfind("kernel '", 0) == 0) return "kernel";
  return "";
}

struct Failures {
  uint64_t seed;
  int count = 0;
  int64_t accepted = 0, rejected = 0, bruteForced = 0;
  void report(int64_t caseIndex, const char* call, const std::string& what) {
    if (++count <= 20)
      std::fprintf(stderr, "capi-fuzz: seed %" PRIu64 " case %" PRId64 " %s: %s\n", seed, caseIndex,
                   call, what.c_str());
  }
};

std::string joined(const std::set<std::string>& names) {
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}

std::string describeShape(const Shape& s) {
  return "batch " + std::to_string(s.batch) + ", q_len " + std::to_string(s.q_len) + ", kv_len " +
         std::to_string(s.kv_len);
}

// Compares one call's result with the oracle's verdict.
void judge(Failures& f, int64_t caseIndex, const char* call, const KernelCase& k, int status,
           char* message, const Verdict& verdict, const std::vector<Span>& written,
           const std::vector<Span>& read, const Shape& shape) {
  const std::string text = message ? message : "";
  attnc_free_string(message);
  const std::string where =
      std::string(" [kernel ") + k.info.name + ", " + describeShape(shape) + "]";
  ++(status == ATTNC_OK ? f.accepted : f.rejected);
  if (verdict.wrong.empty() && status != ATTNC_OK) {
    f.report(caseIndex, call, "rejected what the contract accepts: " + text + where);
  } else if (!verdict.wrong.empty() && status == ATTNC_OK) {
    f.report(caseIndex, call,
             "accepted what the contract rejects (" + joined(verdict.wrong) + ")" + where);
  } else if (status != ATTNC_OK) {
    const std::string named = namedArgument(text);
    if (!verdict.wrong.count(named))
      f.report(caseIndex, call,
               "the error names '" + named + "', the oracle found " + joined(verdict.wrong) +
                   " wrong: " + text + where);
  } else {
    std::string why;
    bool listed = false;
    if (!bruteForceDisjoint(written, read, &why, &listed))
      f.report(caseIndex, call, "accepted, but " + why + where);
    f.bruteForced += listed;
  }
}

int run(uint64_t seed, int64_t cases) {
  // A cache of the fuzzer's own unless the caller chose one (ctest does, in the build tree).
  std::string temporary;
  if (!std::getenv("ATTNC_CACHE_DIR")) {
    char pattern[] = "/tmp/attnc-capi-fuzz-XXXXXX";
    if (!mkdtemp(pattern)) return std::perror("mkdtemp"), 2;
    temporary = pattern;
    setenv("ATTNC_CACHE_DIR", pattern, 1);
  }
  std::vector<KernelCase> kernels = kernelCases();
  int status = 0;
  for (KernelCase& k : kernels) {
    char* message = nullptr;
    if (attnc_compile_text_ex(k.spec, k.target, k.backward ? ATTNC_COMPILE_BACKWARD : 0, &k.kernel,
                              &message) != ATTNC_OK) {
      std::fprintf(stderr, "capi-fuzz: compiling %s for %s: %s\n", k.spec, k.target,
                   message ? message : "?");
      attnc_free_string(message);
      status = 2;
      break;
    }
    attnc_kernel_info(k.kernel, &k.info);
  }
  Failures failures{seed};
  Rng rng(seed);
  int64_t calls = 0;
  for (int64_t c = 0; status == 0 && c < cases; ++c) {
    const KernelCase& k = kernels[size_t(rng.range(0, int64_t(kernels.size()) - 1))];
    Draw d = validDraw(rng, k);
    GuardedInputs guarded(d.inputs.size());
    std::copy(d.inputs.begin(), d.inputs.end(), guarded.array);
    const int mutations = int(rng.range(0, 3));
    const int which = int(rng.range(0, 2));
    if (which == 0) {  // forward
      attnc_forward_args a{};
      a.q = d.q, a.k = d.k, a.v = d.v, a.o = d.o;
      a.lse = rng.chance(50) ? d.lse : nullptr;
      a.batch = d.shape.batch, a.q_len = d.shape.q_len, a.kv_len = d.shape.kv_len;
      a.inputs = d.inputs.empty() ? nullptr : guarded.array;
      a.num_inputs = int64_t(d.inputs.size());
      a.dropout_seed = rng.next(), a.dropout_offset = rng.next();
      if (rng.chance(10) && k.info.head_dim == k.info.head_dim_v &&
          k.info.heads_q == k.info.heads_kv) {
        a.kv_len = a.q_len;
        packTriple(k.info, {a.batch, a.q_len, a.kv_len}, slotAddress(12), &a.q, &a.k, &a.v);
      }
      if (rng.chance(10)) a.k = a.v = a.q;  // self-attention reads one tensor thrice
      std::vector<std::pair<const char*, attnc_tensor*>> tensors = {
          {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"o", &a.o}};
      for (int i = 0; i < mutations; ++i) mutate(rng, a, tensors, k);
      std::vector<Span> written, read;
      const Verdict verdict = oracleForward(k, a, &written, &read);
      char* message = nullptr;
      const int result = attnc_kernel_validate(k.kernel, &a, &message);
      ++calls;
      // The same arguments through the _ex call without a layout, its struct in the first
      // version's size every fourth case (no draw: the cases stay those of earlier versions).
      attnc_forward_args_ex ex{};
      const size_t firstVersion = offsetof(attnc_forward_args_ex, layout) + sizeof(void*);
      ex.struct_size = uint32_t(c % 4 == 0 ? firstVersion : sizeof ex);
      ex.base = a;
      char* exMessage = nullptr;
      const int exResult = attnc_kernel_validate_ex(k.kernel, &ex, &exMessage);
      ++calls;
      const std::string plain = message ? message : "", extended = exMessage ? exMessage : "";
      attnc_free_string(exMessage);
      if (exResult != result || extended != plain)
        failures.report(c, "attnc_kernel_validate_ex",
                        "without a layout, expected attnc_kernel_validate's " +
                            std::to_string(result) + " '" + plain + "', got " +
                            std::to_string(exResult) + " '" + extended + "'");
      judge(failures, c, "attnc_kernel_validate", k, result, message, verdict, written, read,
            {a.batch, a.q_len, a.kv_len});
    } else if (which == 1) {  // backward
      attnc_backward_args a{};
      a.q = d.q, a.k = d.k, a.v = d.v, a.o = d.o, a.d_o = d.d_o;
      a.dq = d.dq, a.dk = d.dk, a.dv = d.dv;
      a.lse = d.lse;
      a.batch = d.shape.batch, a.q_len = d.shape.q_len, a.kv_len = d.shape.kv_len;
      a.inputs = d.inputs.empty() ? nullptr : guarded.array;
      a.num_inputs = int64_t(d.inputs.size());
      a.deterministic = rng.chance(90) ? int32_t(rng.range(0, 1))
                                       : rng.pick(std::vector<int32_t>{2, -1, INT32_MIN});
      a.reserved = rng.chance(95) ? 0 : int32_t(rng.range(1, 5));
      if (rng.chance(10) && k.info.head_dim == k.info.head_dim_v &&
          k.info.heads_q == k.info.heads_kv) {
        a.kv_len = a.q_len;
        packTriple(k.info, {a.batch, a.q_len, a.kv_len}, slotAddress(12), &a.dq, &a.dk, &a.dv);
      }
      if (rng.chance(50)) {
        const int64_t needed = oracleWorkspace(k, a.batch, a.q_len, a.deterministic);
        a.workspace = reinterpret_cast<void*>(slotAddress(13));
        a.workspace_bytes = rng.pick(
            std::vector<int64_t>{needed, needed, needed - 1, needed + 1, 0, -1, INT64_MAX});
        if (rng.chance(20))  // inside a gradient or the lse
          a.workspace = rng.chance(50) ? const_cast<void*>(a.dq.data)
                                       : static_cast<void*>(const_cast<float*>(a.lse) + 64);
        if (rng.chance(5)) a.workspace = static_cast<char*>(a.workspace) + 8;
      }
      std::vector<std::pair<const char*, attnc_tensor*>> tensors = {
          {"q", &a.q},     {"k", &a.k},   {"v", &a.v},   {"o", &a.o},
          {"d_o", &a.d_o}, {"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv}};
      for (int i = 0; i < mutations; ++i) mutate(rng, a, tensors, k);
      std::vector<Span> written, read;
      const Verdict verdict = oracleBackward(k, a, &written, &read);
      char* message = nullptr;
      const int result = attnc_kernel_backward_validate(k.kernel, &a, &message);
      ++calls;
      judge(failures, c, "attnc_kernel_backward_validate", k, result, message, verdict, written,
            read, {a.batch, a.q_len, a.kv_len});
    } else {  // the workspace size: exact or 0
      const int64_t batch = rng.chance(50) ? rng.pick(kBoundaryLengths) : d.shape.batch;
      const int64_t q_len = rng.chance(50) ? rng.pick(kBoundaryLengths) : d.shape.q_len;
      const int32_t deterministic = rng.chance(90) ? int32_t(rng.range(0, 1)) : 3;
      const int64_t got =
          attnc_kernel_backward_workspace_bytes(k.kernel, batch, q_len, deterministic);
      ++calls;
      const int64_t expected = oracleWorkspace(k, batch, q_len, deterministic);
      if (got != expected)
        failures.report(c, "attnc_kernel_backward_workspace_bytes",
                        "expected " + std::to_string(expected) + ", got " + std::to_string(got) +
                            " [kernel " + k.info.name + ", batch " + std::to_string(batch) +
                            ", q_len " + std::to_string(q_len) + ", deterministic " +
                            std::to_string(deterministic) + "]");
    }
  }
  for (KernelCase& k : kernels) attnc_kernel_free(k.kernel);
  if (!temporary.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(temporary, ignored);
  }
  if (status != 0) return status;
  std::printf("capi-fuzz: seed %" PRIu64 ": %" PRId64 " calls (validation: %" PRId64
              " accepted, %" PRId64 " of them checked row by row; %" PRId64
              " rejected), %d "
              "failures\n",
              seed, calls, failures.accepted, failures.bruteForced, failures.rejected,
              failures.count);
  return failures.count == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // The ctest run: a fixed seed and about 2,000 calls (a second or two after the compiles).
  uint64_t seed = 1, cases = 2000;
  for (int i = 1; i < argc; ++i) {
    // --flag N or --flag=N, as the spec fuzzer takes them.
    std::string flag = argv[i], inlineValue;
    const bool hasInline = flag.find('=') != std::string::npos;
    if (hasInline) {
      inlineValue = flag.substr(flag.find('=') + 1);
      flag = flag.substr(0, flag.find('='));
    }
    if ((flag == "--seed" || flag == "--cases") && (hasInline || i + 1 < argc)) {
      char* end = nullptr;
      const char* text = hasInline ? inlineValue.c_str() : argv[++i];
      const unsigned long long value = std::strtoull(text, &end, 10);
      if (!*text || *end || (flag == "--cases" && value > uint64_t(INT64_MAX))) {
        std::fprintf(stderr, "capi-fuzz: %s: expected a non-negative integer, got '%s'\n",
                     flag.c_str(), text);
        return 2;
      }
      (flag == "--seed" ? seed : cases) = value;
    } else {
      std::fprintf(stderr, "usage: %s [--seed[=]N] [--cases[=]N]\n", argv[0]);
      return 2;
    }
  }
  return run(seed, int64_t(cases));
}
