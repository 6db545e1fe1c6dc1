// Classifies the tile grid with the kernel's own interval evaluation, and draws it: text for the
// terminal, a PNG (written here with LLVM's zlib and CRC-32: no image library) for a notebook.
#include "BlockMap.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CRC.h"
#include "llvm/Support/Compression.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Process.h"

#include <algorithm>
#include <cstdlib>

namespace attnc {

using mlir::attn::BlockClass;

namespace {

// Text rows past this many scroll the classification they illustrate off a screen: longer grids
// are drawn in cells of several q tiles.
constexpr int64_t kMaxTextRows = 48;
// The narrowest map drawn, whatever the terminal says.
constexpr unsigned kMinTextCells = 8;
// Larger grids are drawn in cells of several tiles, so the image stays small enough to show.
constexpr int64_t kPngMaxCells = 1024;
// Pixels a cell takes in the PNG aim at a map of about this many pixels a side.
constexpr int64_t kPngTargetSide = 512;
constexpr int64_t kPngMaxCellPixels = 16;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A cell of tiles [q0, q1) x [k0, k1): their class where they all share it, else partial (a
// cell of both computed and skipped tiles is neither).
BlockClass cellClass(const BlockMap& map, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
  BlockClass first = map.at(q0, k0);
  for (int64_t q = q0; q < q1; ++q)
    for (int64_t k = k0; k < k1; ++k)
      if (map.at(q, k) != first) return BlockClass::Partial;
  return first;
}

char glyph(BlockClass c) {
  return c == BlockClass::Full ? '#' : c == BlockClass::Partial ? '+' : '.';
}

std::string plural(int64_t n, const char* unit) {
  return llvm::formatv("{0} {1}{2}", n, unit, n == 1 ? "" : "s").str();
}

}  // namespace

mlir::attn::TileCounts BlockMap::counts() const {
  mlir::attn::TileCounts counts;
  for (BlockClass c : classes)
    ++(c == BlockClass::Empty  ? counts.empty
       : c == BlockClass::Full ? counts.full
                               : counts.partial);
  return counts;
}

BlockMap mapBlocks(const mlir::attn::MaskEvaluator& mask, int blockQ, int blockKV, int qLen,
                   int kvLen, const mlir::attn::MaskInputs& inputs, int b, int h) {
  BlockMap map;
  map.blockQ = blockQ, map.blockKV = blockKV;
  map.qTiles = ceilDiv(qLen, blockQ), map.kvTiles = ceilDiv(kvLen, blockKV);
  map.classes.reserve(size_t(map.qTiles * map.kvTiles));
  for (int qLo = 0; qLo < qLen; qLo += blockQ) {
    int qHi = std::min(qLo + blockQ, qLen) - 1;
    for (int kLo = 0; kLo < kvLen; kLo += blockKV) {
      int kHi = std::min(kLo + blockKV, kvLen) - 1;
      map.classes.push_back(mask.classify(b, h, qLo, qHi, kLo, kHi, qLen, kvLen, inputs));
    }
  }
  return map;
}

unsigned terminalColumns() {
  // $COLUMNS first, so that a pipe (less, a test) can ask for a width too.
  if (const char* env = std::getenv("COLUMNS")) {
    unsigned columns = 0;
    if (llvm::to_integer(llvm::StringRef(env).trim(), columns, 10) && columns > 0) return columns;
  }
  if (unsigned columns = llvm::sys::Process::StandardOutColumns()) return columns;
  return 80;
}

void printBlockMap(llvm::raw_ostream& os, const BlockMap& map, unsigned columns) {
  // A row: two spaces, the first query position of the row right-aligned, " |", cells, "|".
  const int64_t lastQ = (map.qTiles - 1) * map.blockQ;
  const unsigned labelWidth = unsigned(std::to_string(lastQ).size());
  const unsigned frame = 2 + labelWidth + 3;
  const int64_t cellsAcross = std::max<int64_t>(kMinTextCells, int64_t(columns) - frame);
  const int64_t kvPerCell = ceilDiv(map.kvTiles, cellsAcross);
  const int64_t qPerCell = ceilDiv(map.qTiles, kMaxTextRows);

  os << "  block map: q tiles down (first query of each row), kv tiles across; a cell is ";
  if (qPerCell == 1 && kvPerCell == 1)
    os << "one tile of " << map.blockQ << " x " << map.blockKV << "\n";
  else
    os << llvm::formatv("{0} x {1} ({2} x {3}: {4} x {5} tiles of {6} x {7})\n", plural(qPerCell,
                        "q tile"), plural(kvPerCell, "kv tile"), qPerCell * map.blockQ,
                        kvPerCell * map.blockKV, qPerCell, kvPerCell, map.blockQ, map.blockKV);
  os << "  legend: # full (no mask evaluated), + partial (mask per element"
     << (qPerCell * kvPerCell > 1 ? "; or a cell of tiles of different classes" : "")
     << "), . skipped\n";
  for (int64_t q0 = 0; q0 < map.qTiles; q0 += qPerCell) {
    const int64_t q1 = std::min(q0 + qPerCell, map.qTiles);
    os << "  " << llvm::right_justify(std::to_string(q0 * map.blockQ), labelWidth) << " |";
    for (int64_t k0 = 0; k0 < map.kvTiles; k0 += kvPerCell)
      os << glyph(cellClass(map, q0, q1, k0, std::min(k0 + kvPerCell, map.kvTiles)));
    os << "|\n";
  }
}

namespace {

struct Rgb {
  uint8_t r, g, b;
};
constexpr Rgb kWhite{255, 255, 255}, kInk{40, 40, 40};
Rgb colour(BlockClass c) {
  return c == BlockClass::Full      ? Rgb{31, 119, 180}   // blue: computed, no mask
         : c == BlockClass::Partial ? Rgb{255, 127, 14}   // orange: the mask per element
                                    : Rgb{224, 224, 224}; // grey: skipped
}

// A 3 x 5 pixel font with the letters of the legend, a row of 3 bits (high bit left) per line.
const uint8_t* glyphRows(char c) {
  static const struct {
    char letter;
    uint8_t rows[5];
  } font[] = {
      {'A', {2, 5, 7, 5, 5}}, {'D', {6, 5, 5, 5, 6}}, {'E', {7, 4, 6, 4, 7}},
      {'F', {7, 4, 6, 4, 4}}, {'I', {7, 2, 2, 2, 7}}, {'K', {5, 5, 6, 5, 5}},
      {'L', {4, 4, 4, 4, 7}}, {'P', {6, 5, 6, 4, 4}}, {'R', {6, 5, 6, 5, 5}},
      {'S', {3, 4, 2, 1, 6}}, {'T', {7, 2, 2, 2, 2}}, {'U', {5, 5, 5, 5, 7}},
  };
  for (const auto& g : font)
    if (g.letter == c) return g.rows;
  return nullptr;
}

class Image {
public:
  Image(int64_t width, int64_t height)
      : width(width), height(height), pixels(size_t(width * height), kWhite) {}

  void fill(int64_t x, int64_t y, int64_t w, int64_t h, Rgb c) {
    for (int64_t j = y; j < std::min(y + h, height); ++j)
      for (int64_t i = x; i < std::min(x + w, width); ++i) pixels[size_t(j * width + i)] = c;
  }
  // Writes `text` (legend letters) at (x, y), `scale` pixels a font pixel; returns the x after it.
  int64_t text(int64_t x, int64_t y, llvm::StringRef text, int64_t scale) {
    for (char c : text) {
      if (const uint8_t* rows = glyphRows(c))
        for (int row = 0; row < 5; ++row)
          for (int bit = 0; bit < 3; ++bit)
            if (rows[row] & (4 >> bit)) fill(x + bit * scale, y + row * scale, scale, scale, kInk);
      x += 4 * scale;
    }
    return x;
  }

  // PNG: 8-bit RGB, no interlace, filter 0 on every row, one IDAT.
  std::string encode() const {
    std::vector<uint8_t> raw;
    raw.reserve(size_t(height * (1 + 3 * width)));
    for (int64_t y = 0; y < height; ++y) {
      raw.push_back(0);
      for (int64_t x = 0; x < width; ++x) {
        const Rgb& p = pixels[size_t(y * width + x)];
        raw.insert(raw.end(), {p.r, p.g, p.b});
      }
    }
    llvm::SmallVector<uint8_t, 0> compressed;
    llvm::compression::zlib::compress(raw, compressed,
                                      llvm::compression::zlib::BestSizeCompression);
    std::string png("\x89PNG\r\n\x1a\n", 8);
    std::vector<uint8_t> header;
    appendBigEndian(header, uint32_t(width));
    appendBigEndian(header, uint32_t(height));
    // Bit depth 8, RGB, deflate, filter method 0, no interlace.
    header.insert(header.end(), {8, 2, 0, 0, 0});
    chunk(png, "IHDR", header);
    chunk(png, "IDAT", compressed);
    chunk(png, "IEND", {});
    return png;
  }

private:
  static void appendBigEndian(std::vector<uint8_t>& out, uint32_t v) {
    out.insert(out.end(), {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)});
  }
  // A chunk: length, type, data, and the CRC-32 of type and data.
  static void chunk(std::string& png, const char type[4], llvm::ArrayRef<uint8_t> data) {
    std::vector<uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    std::vector<uint8_t> out;
    appendBigEndian(out, uint32_t(data.size()));
    out.insert(out.end(), body.begin(), body.end());
    appendBigEndian(out, llvm::crc32(body));
    png.append(out.begin(), out.end());
  }

  int64_t width, height;
  std::vector<Rgb> pixels;
};

}  // namespace

std::string encodeBlockMapPng(const BlockMap& map, std::string& error) {
  if (!llvm::compression::zlib::isAvailable()) {
    error = "--png: this attnc was built without zlib, which PNG compression needs";
    return {};
  }
  const int64_t perCell = ceilDiv(std::max(map.qTiles, map.kvTiles), kPngMaxCells);
  const int64_t rows = ceilDiv(map.qTiles, perCell), cols = ceilDiv(map.kvTiles, perCell);
  const int64_t cell =
      std::clamp<int64_t>(kPngTargetSide / std::max(rows, cols), 1, kPngMaxCellPixels);
  // A white line between cells where they are large enough to spare it: tiles stay countable.
  const int64_t gap = cell >= 6 ? 1 : 0;

  // The legend: a swatch and a word per class, in a font 2 pixels a dot (10 pixels high).
  constexpr int64_t kScale = 2, kLegendHeight = 5 * kScale, kMargin = 4;
  const std::pair<BlockClass, llvm::StringRef> legend[] = {
      {BlockClass::Full, "FULL"}, {BlockClass::Partial, "PARTIAL"}, {BlockClass::Empty, "SKIPPED"}};
  int64_t legendWidth = kMargin;
  for (const auto& [c, word] : legend)
    legendWidth += kLegendHeight + kMargin + int64_t(word.size()) * 4 * kScale + 2 * kMargin;

  const int64_t mapWidth = cols * cell, mapHeight = rows * cell;
  Image image(std::max(mapWidth, legendWidth), mapHeight + 2 * kMargin + kLegendHeight);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      image.fill(c * cell, r * cell, cell - gap, cell - gap,
                 colour(cellClass(map, r * perCell, std::min((r + 1) * perCell, map.qTiles),
                                  c * perCell, std::min((c + 1) * perCell, map.kvTiles))));
  int64_t x = kMargin;
  const int64_t y = mapHeight + kMargin;
  for (const auto& [c, word] : legend) {
    image.fill(x, y, kLegendHeight, kLegendHeight, colour(c));
    x = image.text(x + kLegendHeight + kMargin, y, word, kScale) + 2 * kMargin;
  }
  return image.encode();
}

}  // namespace attnc
