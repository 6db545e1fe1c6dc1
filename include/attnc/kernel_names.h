// The names a compiled kernel's parts go by, shared by the code generator that writes them, the
// metadata that records them and the runtime that launches them: the kernel families (template and
// launch ABI) and the backward's entry points. Standard C++ only: the runtime has no LLVM.
#pragma once

#include <optional>
#include <string_view>

namespace attnc {

// The template and launch ABI a forward, dK/dV or dQ kernel comes from: the sm_80 family's
// (mma.sync, cp.async; attnc::FwdParams or BwdParams) or the sm_90a one's (wgmma, TMA; the
// parameters plus TMA tensor maps, FwdParamsTma or BwdParamsTma).
enum class KernelFamily { Sm80, Sm90 };

// "sm80" | "sm90": the family's spelling in the tiled IR and the metadata text.
constexpr const char* kernelFamilyName(KernelFamily family) {
  return family == KernelFamily::Sm90 ? "sm90" : "sm80";
}

// The family kernelFamilyName() spells `name`; nullopt for any other text.
inline std::optional<KernelFamily> kernelFamilyNamed(std::string_view name) {
  if (name == kernelFamilyName(KernelFamily::Sm80)) return KernelFamily::Sm80;
  if (name == kernelFamilyName(KernelFamily::Sm90)) return KernelFamily::Sm90;
  return std::nullopt;
}

// The backward's entry points, each <BackwardMetadata::entryStem><suffix>: _preprocess (zeroes
// dq_accum, writes delta), _kv (dK, dV and fp32 atomics into dq_accum), _kv_nodq (dK and dV only),
// _convert_dq (dq_accum to dQ) and _q (dQ by a kernel of its own).
enum class BackwardEntry { Preprocess, Kv, KvNoDq, ConvertDq, Q };

// How many there are, for tables indexed by int(BackwardEntry).
constexpr int kBackwardEntries = 5;
constexpr BackwardEntry kAllBackwardEntries[kBackwardEntries] = {
    BackwardEntry::Preprocess, BackwardEntry::Kv, BackwardEntry::KvNoDq, BackwardEntry::ConvertDq,
    BackwardEntry::Q};
static_assert(int(BackwardEntry::Q) + 1 == kBackwardEntries, "every entry has a table slot");

constexpr const char* backwardEntrySuffix(BackwardEntry entry) {
  switch (entry) {
  case BackwardEntry::Preprocess: return "_preprocess";
  case BackwardEntry::Kv: return "_kv";
  case BackwardEntry::KvNoDq: return "_kv_nodq";
  case BackwardEntry::ConvertDq: return "_convert_dq";
  case BackwardEntry::Q: return "_q";
  }
  return "";
}

// The decode kernel's entries: <name> + suffix (DecodeMetadata).
constexpr const char* kDecodeEntrySuffix = "_decode";
constexpr const char* kDecodeCombineEntrySuffix = "_decode_combine";

}  // namespace attnc
