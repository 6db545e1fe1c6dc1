// Reads sample values of declared inputs: .npy files (format 1.0 to 3.0, parsed here: a magic
// string, a header length, a Python dict literal with descr, fortran_order and shape, then the
// data) and inline lists.
#include "SampleInputs.h"

#include "compiler/Spec/Spec.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <climits>
#include <cstring>

namespace attnc {

namespace {

// The element type of a .npy file, from its header's 'descr'.
struct NpyType {
  bool isFloat;
  unsigned bytes;
};

// The value of `key` in the header's dict literal ("'descr': '<i4', 'shape': (6,), ..."), as text.
std::optional<llvm::StringRef> headerField(llvm::StringRef header, llvm::StringRef key) {
  size_t at = header.find(("'" + key + "'").str());
  if (at == llvm::StringRef::npos) return std::nullopt;
  llvm::StringRef rest = header.drop_front(at + key.size() + 2).ltrim();
  if (!rest.consume_front(":")) return std::nullopt;
  rest = rest.ltrim();
  if (rest.starts_with("(")) return rest.take_until([](char c) { return c == ')'; }).drop_front();
  if (rest.starts_with("'")) return rest.drop_front().take_until([](char c) { return c == '\''; });
  return rest.take_until([](char c) { return c == ',' || c == '}'; }).trim();
}

bool readNpy(const std::string& path, SampleInput& sample, std::vector<unsigned char>& data,
             NpyType& type, std::string& error) {
  auto fail = [&](const llvm::Twine& what) {
    error = (path + ": " + what).str();
    return false;
  };
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false);
  if (!buffer) return fail("cannot read: " + buffer.getError().message());
  llvm::StringRef bytes = (*buffer)->getBuffer();
  if (!bytes.starts_with("\x93NUMPY") || bytes.size() < 10)
    return fail("not a .npy file (it does not start with \\x93NUMPY)");
  const unsigned major = uint8_t(bytes[6]);
  if (major < 1 || major > 3)
    return fail(llvm::formatv("unknown .npy format version {0}.{1}", major, uint8_t(bytes[7])));
  // Version 1.0 has a 2-byte little-endian header length; 2.0 and 3.0 a 4-byte one.
  const size_t lengthBytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + lengthBytes) return fail("truncated header");
  const uint64_t headerLength =
      major == 1 ? llvm::support::endian::read16le(bytes.data() + 8)
                 : llvm::support::endian::read32le(bytes.data() + 8);
  const size_t dataStart = 8 + lengthBytes + headerLength;
  if (bytes.size() < dataStart) return fail("truncated header");
  llvm::StringRef header = bytes.substr(8 + lengthBytes, headerLength);

  std::optional<llvm::StringRef> descr = headerField(header, "descr");
  std::optional<llvm::StringRef> order = headerField(header, "fortran_order");
  std::optional<llvm::StringRef> shape = headerField(header, "shape");
  if (!descr || !order || !shape)
    return fail("the header lacks 'descr', 'fortran_order' or 'shape': " + header.trim());
  // int32 and float32 as the kernel reads them; int64 (numpy's default integer) converted.
  if (*descr == "<i4" || *descr == "|i4" || *descr == "=i4")
    type = {false, 4};
  else if (*descr == "<i8" || *descr == "=i8")
    type = {false, 8};
  else if (*descr == "<f4" || *descr == "=f4")
    type = {true, 4};
  else
    return fail("dtype '" + *descr + "' is not int32 ('<i4') or float32 ('<f4')");
  if (*order != "False") return fail("a Fortran-order array: save it in C order");

  llvm::SmallVector<llvm::StringRef, 3> extents;
  shape->split(extents, ',', -1, /*KeepEmpty=*/false);
  sample.shape.clear();
  uint64_t count = 1;
  for (llvm::StringRef extent : extents) {
    int64_t n = 0;
    if (extent.trim().empty()) continue;
    if (!llvm::to_integer(extent.trim(), n, 10) || n < 0)
      return fail("a shape of non-integer extents: (" + *shape + ")");
    sample.shape.push_back(n);
    count *= uint64_t(n);
  }
  if (sample.shape.empty() || sample.shape.size() > 2)
    return fail(llvm::formatv("shape ({0}) has {1} dimensions; explain takes 1 (positions, or "
                              "the input's one dim) or 2 (e.g. batch x positions)",
                              *shape, sample.shape.size()));
  if (count == 0) return fail("an empty array");
  const uint64_t need = count * type.bytes;
  if (bytes.size() - dataStart < need)
    return fail(llvm::formatv("{0} bytes of data; shape ({1}) of {2}-byte elements needs {3}",
                              bytes.size() - dataStart, *shape, type.bytes, need));
  data.assign(bytes.begin() + dataStart, bytes.begin() + dataStart + need);
  return true;
}

}  // namespace

InputRef SampleInput::ref() const {
  InputRef ref{words.data(), 0, 0, 0, nullptr};
  // The sample's dims are the input's last ones; the innermost is contiguous.
  const size_t dims = decl->dims.size();
  int64_t stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    InputDim dim = decl->dims[dims - 1 - i];
    i64& field = dim == InputDim::B ? ref.stride_b : dim == InputDim::H ? ref.stride_h
                                                                            : ref.stride_pos;
    field = shape[shape.size() - 1 - i] > 1 ? stride : 0;
    stride *= shape[shape.size() - 1 - i];
  }
  return ref;
}

int64_t SampleInput::extent(InputDim dim) const {
  const size_t dims = decl->dims.size();
  for (size_t i = 0; i < shape.size(); ++i)
    if (decl->dims[dims - 1 - i] == dim) return shape[shape.size() - 1 - i];
  return 1;
}

std::optional<SampleInput> parseSampleInput(const std::string& argument, const Spec& spec,
                                            std::string& error) {
  auto [name, value] = llvm::StringRef(argument).split('=');
  name = name.trim();
  if (name.empty() || value.empty()) {
    error = "--input: expected NAME=FILE.npy or NAME=V,V,..., given '" + argument + "'";
    return std::nullopt;
  }
  SampleInput sample;
  sample.name = name.str();
  for (auto [slot, input] : llvm::enumerate(spec.inputs))
    if (input.name == name) sample.decl = &input, sample.slot = int(slot);
  if (!sample.decl) {
    std::vector<std::string> names;
    for (const InputDecl& input : spec.inputs) names.push_back(input.name);
    error = "--input " + argument + ": spec '" + spec.name + "' declares no input '" + name.str() +
            "'" +
            (names.empty() ? std::string(" (it declares none)")
                           : " (it declares: " + llvm::join(names, ", ") + ")");
    return std::nullopt;
  }
  const bool wantFloat = sample.decl->type == ScalarType::F32;
  const char* typeName = wantFloat ? "f32" : "i32";

  if (value.ends_with(".npy")) {
    sample.source = value.str();
    std::vector<unsigned char> data;
    NpyType type{};
    if (!readNpy(value.str(), sample, data, type, error)) return std::nullopt;
    if (type.isFloat != wantFloat) {
      error = llvm::formatv("{0}: {1} values for input '{2}', declared {3}", value,
                            type.isFloat ? "float32" : "integer", name, typeName)
                  .str();
      return std::nullopt;
    }
    const size_t count = data.size() / type.bytes;
    sample.words.resize(count);
    for (size_t i = 0; i < count; ++i) {
      if (type.bytes == 4) {
        sample.words[i] = llvm::support::endian::read32le(data.data() + 4 * i);
        continue;
      }
      int64_t v = int64_t(llvm::support::endian::read64le(data.data() + 8 * i));
      if (v < INT32_MIN || v > INT32_MAX) {
        error = llvm::formatv("{0}: element {1} = {2} does not fit in int32", value, i, v).str();
        return std::nullopt;
      }
      sample.words[i] = uint32_t(int32_t(v));
    }
  } else {
    sample.source = "inline";
    llvm::SmallVector<llvm::StringRef, 16> items;
    value.split(items, ',');
    for (auto [i, item] : llvm::enumerate(items)) {
      llvm::StringRef text = item.trim();
      int32_t n = 0;
      double f = 0;
      if (!wantFloat && llvm::to_integer(text, n, 10)) {
        sample.words.push_back(uint32_t(n));
      } else if (wantFloat && !text.getAsDouble(f)) {
        float single = float(f);
        uint32_t bits;
        std::memcpy(&bits, &single, sizeof bits);
        sample.words.push_back(bits);
      } else {
        error = llvm::formatv("--input {0}: value {1} '{2}' is not {3} (input '{0}' is declared "
                              "{4}; a file must end in .npy)",
                              name, i + 1, text, wantFloat ? "a number" : "an int32 integer",
                              typeName)
                    .str();
        return std::nullopt;
      }
    }
    sample.shape = {int64_t(sample.words.size())};
  }
  if (sample.shape.size() > sample.decl->dims.size()) {
    error = llvm::formatv("{0}: {1} dimensions for input '{2}', declared with {3}", sample.source,
                          sample.shape.size(), name, sample.decl->dims.size())
                .str();
    return std::nullopt;
  }
  return sample;
}

}  // namespace attnc
