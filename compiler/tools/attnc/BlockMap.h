// The block map of `attnc explain`: the class of every (q tile, kv tile) pair at given lengths, as
// the kernel derives it (attn-classify-blocks' MaskEvaluator), drawn as text or as a PNG.
#pragma once

#include "dialects/Attn/Transforms/MaskEvaluator.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnc {

struct BlockMap {
  int64_t qTiles = 0, kvTiles = 0, blockQ = 0, blockKV = 0;
  std::vector<mlir::attn::BlockClass> classes;  // row-major: q tile, then kv tile

  mlir::attn::BlockClass at(int64_t qTile, int64_t kvTile) const {
    return classes[size_t(qTile * kvTiles + kvTile)];
  }
  mlir::attn::TileCounts counts() const;
};

// Classifies every tile of (b, h) as MaskEvaluator::classify does for countTiles.
BlockMap mapBlocks(const mlir::attn::MaskEvaluator& mask, int blockQ, int blockKV, int qLen,
                   int kvLen, const mlir::attn::MaskInputs& inputs = {}, int b = 0, int h = 0);

// The width of the terminal the map is drawn for: $COLUMNS, else stdout's window, else 80.
unsigned terminalColumns();

// Draws the map in at most `columns` columns (a cell of several tiles where the grid is wider),
// with a line that says what a cell is and the legend, each line indented by two spaces.
void printBlockMap(llvm::raw_ostream& os, const BlockMap& map, unsigned columns);

// The map as a PNG: a few pixels per tile (cells of several tiles past kPngMaxCells a side) and a
// legend row below. Empty, with `error` set, where LLVM was built without zlib.
std::string encodeBlockMapPng(const BlockMap& map, std::string& error);

}  // namespace attnc
