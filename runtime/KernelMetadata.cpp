// KernelMetadata as text: one "key value" line per field and one "input name type dims [summarized]"
// line per declared input. The JIT cache stores it beside the cubin; parse() rejects anything unexpected so
// that a damaged cache entry is never launched with wrong shapes.
#include "attnc/attnc.h"
#include "attnc/common/philox.h"

#include <cstdlib>
#include <sstream>

namespace attnc {

const char* version() { return ATTNC_VERSION_STRING; }

std::string KernelMetadata::serialize() const {
  std::ostringstream os;
  os.precision(9);  // round-trips a float
  os << "name " << name << "\nentry " << entry << "\ntarget " << target << "\ncompute "
     << computeMajor << "." << computeMinor << "\nfwd_kernel " << kernelFamilyName(forwardKernel)
     << "\nthreads " << threads << "\nsmem_bytes " << smemBytes << "\nblock_q " << blockQ
     << "\nblock_kv " << blockKV << "\nhead_dim " << headDim << "\nhead_dim_v " << headDimV
     << "\nheads_q " << headsQ << "\nheads_kv " << headsKV
     << "\ndtype " << dtype << "\nscale " << scale << "\ndropout " << dropout
     << "\nattnc_version " << attncVersion << "\n";
  if (backward)  // absent in forward-only entries (and in entries older than the backward)
    os << "bwd_entry_stem " << backward->entryStem << "\nbwd_kv_threads " << backward->kvThreads
       << "\nbwd_q_threads " << backward->qThreads << "\nbwd_kv_block_kv " << backward->kvBlockKV
       << "\nbwd_q_block_q " << backward->qBlockQ << "\nbwd_preprocess_rows "
       << backward->preprocessRows << "\nbwd_kv_smem_bytes " << backward->kvSmemBytes
       << "\nbwd_q_smem_bytes " << backward->qSmemBytes << "\nbwd_kv_kernel "
       << kernelFamilyName(backward->kvKernel)
       << "\nbwd_preprocess_threads " << backward->preprocessThreads << "\n"
       << (backward->kvOrderedGrid ? "bwd_kv_grid ordered\n" : "");
  if (backward && backward->qKernel != KernelFamily::Sm80)  // optional: absent means the sm80 _q
    os << "bwd_q_kernel " << kernelFamilyName(backward->qKernel) << "\nbwd_q_block_kv "
       << backward->qBlockKV << "\n";
  if (backward && backward->separateDq) os << "bwd_dq separate\n";
  if (dropoutRounds != 0) os << "dropout_rounds " << dropoutRounds << "\n";
  if (!summaryEntry.empty()) os << "summary_entry " << summaryEntry << "\n";
  if (!tileClassesEntry.empty()) os << "tile_classes_entry " << tileClassesEntry << "\n";
  if (orderedGrid) os << "fwd_grid ordered\n";
  if (maskIgnoresHead) os << "tile_class_heads one\n";
  if (decode)  // absent for specs with dropout (and in entries older than the decode kernel)
    os << "decode_entry " << decode->entry << "\ndecode_combine_entry " << decode->combineEntry
       << "\ndecode_threads " << decode->threads << "\ndecode_rows " << decode->rows
       << "\ndecode_block_kv " << decode->blockKV << "\ndecode_stages " << decode->stages
       << "\ndecode_smem_bytes " << decode->smemBytes << "\n";
  for (const InputInfo& input : inputs)
    os << "input " << input.name << " " << input.type << " " << input.dims
       << (input.summarized ? " summarized" : "") << "\n";
  return os.str();
}

namespace {

// Why the fields parse() read do not fit together (required ones missing or non-positive, an
// optional line without the ones it goes with), or "" where they do. `seen` and `seenBackward`
// count the required and backward lines read.
std::string inconsistency(const KernelMetadata& m, const BackwardMetadata& b, int seen,
                          int seenBackward, const DecodeMetadata& d, int seenDecode) {
  if (seen != 17) return "expected 17 fields, got " + std::to_string(seen);
  if (m.name.empty() || m.entry.empty() || m.target.empty() || m.threads <= 0 || m.headDim <= 0 ||
      m.headDimV <= 0 || m.headsQ <= 0 || m.headsKV <= 0 || !(m.scale > 0))
    return "missing or non-positive fields";
  if (b.kvOrderedGrid && seenBackward == 0) return "a bwd_kv_grid line needs the backward fields";
  if ((b.qKernel != KernelFamily::Sm80) != (b.qBlockKV > 0))
    return "a bwd_q_kernel line needs a bwd_q_block_kv line, and the other way round";
  if ((b.qKernel != KernelFamily::Sm80 || b.separateDq) && seenBackward == 0)
    return "bwd_q_kernel and bwd_dq lines need the backward fields";
  if (b.separateDq && b.qKernel == KernelFamily::Sm80)
    return "a bwd_dq line needs the sm90 dQ kernel (bwd_q_kernel)";
  if (seenBackward != 0) {
    if (seenBackward != 10)
      return "expected 10 backward fields, got " + std::to_string(seenBackward);
    if (b.entryStem.empty() || b.kvThreads <= 0 || b.qThreads <= 0 || b.kvBlockKV <= 0 ||
        b.preprocessThreads <= 0 ||
        b.qBlockQ <= 0 || b.preprocessRows <= 0 || b.kvSmemBytes < 0 || b.qSmemBytes < 0)
      return "missing or non-positive backward fields";
  }
  if (seenDecode != 0) {
    if (seenDecode != 7) return "expected 7 decode fields, got " + std::to_string(seenDecode);
    if (d.entry.empty() || d.combineEntry.empty() || d.threads <= 0 || d.rows <= 0 ||
        d.rows % 16 != 0 || d.blockKV <= 0 || d.stages < 2 || d.smemBytes <= 0)
      return "missing or non-positive decode fields";
    if (m.dropout > 0) return "a decode kernel with dropout";
  }
  if ((m.dropout > 0) != (m.dropoutRounds != 0))
    return "a dropout needs a dropout_rounds line, and the other way round";
  bool anySummarized = false;
  for (const InputInfo& input : m.inputs) anySummarized = anySummarized || input.summarized;
  if (anySummarized != !m.summaryEntry.empty())
    return "a summary_entry line needs at least one summarized input, and the other way round";
  if (!m.tileClassesEntry.empty() && m.summaryEntry.empty())
    return "a tile_classes_entry line needs a summary_entry line";
  if (m.maskIgnoresHead && m.tileClassesEntry.empty())
    return "a tile_class_heads line needs a tile_classes_entry line";
  return "";
}

}  // namespace

std::optional<KernelMetadata> KernelMetadata::parse(const std::string& text, std::string* error) {
  KernelMetadata m;
  auto fail = [&](const std::string& message) -> std::optional<KernelMetadata> {
    if (error) *error = "kernel metadata: " + message;
    return std::nullopt;
  };
  std::istringstream lines(text);
  std::string line;
  int seen = 0, seenBackward = 0, seenDecode = 0;
  BackwardMetadata b;
  DecodeMetadata d;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string key, value;
    fields >> key >> value;
    if (key.empty()) continue;
    if (key == "input") {
      InputInfo input{value, "", ""};
      std::string flag, extra;
      fields >> input.type >> input.dims >> flag >> extra;
      input.summarized = flag == "summarized";
      if (input.name.empty() || (input.type != "i32" && input.type != "f32") || input.dims.empty() ||
          !(flag.empty() || input.summarized) || !extra.empty())
        return fail("bad input line '" + line + "'");
      m.inputs.push_back(input);
      continue;
    }
    auto integer = [&](auto& out) {
      char* end = nullptr;
      long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end) return false;
      out = static_cast<std::remove_reference_t<decltype(out)>>(v);
      return true;
    };
    auto family = [&](KernelFamily& out) {
      std::optional<KernelFamily> named = kernelFamilyNamed(value);
      if (named) out = *named;
      return named.has_value();
    };
    auto real = [&](float& out) {
      char* end = nullptr;
      out = std::strtof(value.c_str(), &end);
      return !value.empty() && !*end;
    };
    bool ok = true;
    if (key == "bwd_kv_grid") {  // optional: absent means (kv tiles, heads_kv, batch)
      if (value != "ordered") return fail("bad value in '" + line + "'");
      b.kvOrderedGrid = true;
      continue;
    }
    if (key == "bwd_dq") {  // optional: absent means dq_accum in the default backward
      if (value != "separate") return fail("bad value in '" + line + "'");
      b.separateDq = true;
      continue;
    }
    if (key == "bwd_q_kernel") {  // optional, with bwd_q_block_kv
      if (kernelFamilyNamed(value) != KernelFamily::Sm90)
        return fail("bad value in '" + line + "'");
      b.qKernel = KernelFamily::Sm90;
      continue;
    }
    if (key == "bwd_q_block_kv") {
      if (!integer(b.qBlockKV) || b.qBlockKV <= 0) return fail("bad value in '" + line + "'");
      continue;
    }
    if (key.rfind("bwd_", 0) == 0) {
      if (key == "bwd_entry_stem") b.entryStem = value;
      else if (key == "bwd_kv_threads") ok = integer(b.kvThreads);
      else if (key == "bwd_q_threads") ok = integer(b.qThreads);
      else if (key == "bwd_kv_block_kv") ok = integer(b.kvBlockKV);
      else if (key == "bwd_q_block_q") ok = integer(b.qBlockQ);
      else if (key == "bwd_preprocess_rows") ok = integer(b.preprocessRows);
      else if (key == "bwd_kv_smem_bytes") ok = integer(b.kvSmemBytes);
      else if (key == "bwd_q_smem_bytes") ok = integer(b.qSmemBytes);
      else if (key == "bwd_kv_kernel") ok = family(b.kvKernel);
      else if (key == "bwd_preprocess_threads") ok = integer(b.preprocessThreads);
      else return fail("unknown key '" + key + "'");
      if (!ok) return fail("bad value in '" + line + "'");
      ++seenBackward;
      continue;
    }
    if (key.rfind("decode_", 0) == 0) {  // optional, all or none
      if (key == "decode_entry") d.entry = value;
      else if (key == "decode_combine_entry") d.combineEntry = value;
      else if (key == "decode_threads") ok = integer(d.threads);
      else if (key == "decode_rows") ok = integer(d.rows);
      else if (key == "decode_block_kv") ok = integer(d.blockKV);
      else if (key == "decode_stages") ok = integer(d.stages);
      else if (key == "decode_smem_bytes") ok = integer(d.smemBytes);
      else return fail("unknown key '" + key + "'");
      if (!ok || value.empty()) return fail("bad value in '" + line + "'");
      ++seenDecode;
      continue;
    }
    if (key == "summary_entry") {  // optional, like the bwd_ lines
      m.summaryEntry = value;
      if (value.empty()) return fail("bad value in '" + line + "'");
      continue;
    }
    if (key == "dropout_rounds") {  // where dropout > 0 (checked below)
      if (!integer(m.dropoutRounds) || m.dropoutRounds < kDropoutRoundsMin ||
          m.dropoutRounds > kDropoutRoundsMax)
        return fail("bad value in '" + line + "'");
      continue;
    }
    if (key == "tile_classes_entry") {  // optional
      m.tileClassesEntry = value;
      if (value.empty()) return fail("bad value in '" + line + "'");
      continue;
    }
    if (key == "tile_class_heads") {  // optional: absent means heads_q
      if (value != "one") return fail("bad value in '" + line + "'");
      m.maskIgnoresHead = true;
      continue;
    }
    if (key == "fwd_grid") {  // optional: absent means (q tiles, heads_q, batch)
      if (value != "ordered") return fail("bad value in '" + line + "'");
      m.orderedGrid = true;
      continue;
    }
    if (key == "name") m.name = value;
    else if (key == "entry") m.entry = value;
    else if (key == "target") m.target = value;
    else if (key == "compute") {
      size_t dot = value.find('.');
      ok = dot != std::string::npos;
      if (ok) {
        m.computeMajor = std::atoi(value.substr(0, dot).c_str());
        m.computeMinor = std::atoi(value.substr(dot + 1).c_str());
      }
    } else if (key == "fwd_kernel") ok = family(m.forwardKernel);
    else if (key == "threads") ok = integer(m.threads);
    else if (key == "smem_bytes") ok = integer(m.smemBytes);
    else if (key == "block_q") ok = integer(m.blockQ);
    else if (key == "block_kv") ok = integer(m.blockKV);
    else if (key == "head_dim") ok = integer(m.headDim);
    else if (key == "head_dim_v") ok = integer(m.headDimV);
    else if (key == "heads_q") ok = integer(m.headsQ);
    else if (key == "heads_kv") ok = integer(m.headsKV);
    else if (key == "dtype") ok = value == "bf16" || value == "fp16", m.dtype = value;
    else if (key == "scale") ok = real(m.scale);
    else if (key == "dropout") ok = real(m.dropout);
    else if (key == "attnc_version") m.attncVersion = value;
    else return fail("unknown key '" + key + "'");
    if (!ok) return fail("bad value in '" + line + "'");
    ++seen;
  }
  if (std::string why = inconsistency(m, b, seen, seenBackward, d, seenDecode); !why.empty())
    return fail(why);
  if (seenBackward != 0) m.backward = b;
  if (seenDecode != 0) m.decode = d;
  return m;
}

}  // namespace attnc
