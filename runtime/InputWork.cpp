// The input work of a launch (InputWork.h). A kernel whose mask reads declared inputs along
// positions first runs its summary entry (KernelMetadata::summaryEntry, attnc::SummaryParams) on
// the same stream: grid summaryBlocks(entries), block kSummaryThreads, into a buffer per
// (context, stream); then its tile-classes entries (tile_classes.h): grid tileClassBlocks(rows),
// block kTileClassThreads.
#include "runtime/InputWork.h"

#include "attnc/common/tile_classes.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Summaries.h"

#include <algorithm>
#include <initializer_list>
#include <string>

namespace attnc {

namespace {

// Launches the summary entry on `stream` for the summarized inputs of `inputs` (as the kernels
// will see them) and points their InputRef::summary at the result. The returned lock keeps the
// stream's buffer until the caller has enqueued the kernels that read it. Nothing to do (and
// no lock) when the loaded image summarizes no input. `extraBytes` more of the same buffer, after
// the summaries, are the caller's at *extra (the forward's tile classes); null without summaries.
// With `own` (PreparedInputs), the summaries and the extra bytes go into that buffer, which
// must be empty (no lock).
Status summarize(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                 const Kernel::Impl::Loaded& entry, InputRef* inputs, int batch, int q_len,
                 int kv_len, cu::Stream stream, std::unique_lock<std::mutex>* lock,
                 size_t extraBytes = 0, char** extra = nullptr, DeviceBuffer* own = nullptr) {
  const KernelMetadata& m = entry.image->metadata;
  SummaryPlan plan = planSummaries(m, inputs, batch, q_len, kv_len);
  if (extra) *extra = nullptr;
  if (!entry.summary || plan.totalBytes == 0) return Status::success();
  if (!own) *lock = std::unique_lock<std::mutex>(impl.summaryMutex);
  DeviceBuffer& buffer = own ? *own : impl.summaryBuffers[{context, stream}];
  const size_t needed = saturatingSum(plan.totalBytes, extraBytes);
  if (buffer.size() < needed && driver.capturing(stream))
    return Status::error("kernel '" + m.name + "': the stream is capturing a CUDA graph, and " +
                         (own ? std::string("prepared inputs allocate their buffer")
                              : "its buffer of input summaries must first grow to " +
                                    std::to_string(needed) + " bytes") +
                         ", which a capture cannot hold: launch once on this stream with these "
                         "sizes before capturing");
  bool waitFailed = false;
  Status grown = growBuffer(
      buffer, needed,
      [&](std::string* error) {
        return driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize", error);
      },
      &waitFailed);
  if (!grown)
    return Status::error(
        "kernel '" + m.name + "': " +
        (waitFailed ? "growing the summary buffer: "
                    : "allocating " + std::to_string(saturatingSum(plan.totalBytes, extraBytes)) +
                          " bytes of input summaries: ") +
        grown.message);
  if (extra && extraBytes > 0) *extra = static_cast<char*>(buffer.data()) + plan.totalBytes;
  std::string error;
  SummaryParams p{};
  p.batch = batch;
  p.heads_q = m.headsQ;
  p.q_len = q_len;
  p.kv_len = kv_len;
  for (int i = 0; i < kMaxInputs; ++i) {
    if (plan.used[i]) inputs[i].summary = static_cast<char*>(buffer.data()) + plan.offset[i];
    p.inputs[i] = inputs[i];
  }
  void* params[] = {&p};
  if (!driver.check(driver.cuLaunchKernel(entry.summary, summaryBlocks(plan.mostEntries), 1, 1,
                                          kSummaryThreads, 1, 1, 0, stream, params, nullptr),
                    ("cuLaunchKernel(" + m.summaryEntry + ")").c_str(), &error))
    return Status::error("kernel '" + m.name + "': " + error);
  return Status::success();
}

// One tile-classes entry's launch (tile_classes.h) and where its output goes: `rows` rows of
// first/last live tile and of `words` class words, which `bounds`, `classWords` and `wordCount`
// (fields of the launch's parameters) are pointed at; with `groupWords` > 0 (the sm_90a forward)
// rows of that many words of its consumer warpgroups' classes follow, at *groups; with `order`, an
// int a row after them (the forward's q tile order).
struct TileClassOutput {
  cu::Function entry = nullptr;
  // The entry's name (for errors): `name` then `suffix`.
  const std::string* name = nullptr;
  const char* suffix = "";
  i64 rows = 0;
  int words = 0;
  const int** bounds = nullptr;
  const u32** classWords = nullptr;
  int* wordCount = nullptr;
  int groupWords = 0;
  const u32** groups = nullptr;
  int* groupWordCount = nullptr;
  const int** order = nullptr;

  size_t boundsBytes() const { return align256(saturatingProduct(size_t(rows), 2 * sizeof(int))); }
  size_t wordsBytes() const { return align256(rowBytes(size_t(words) * sizeof(u32))); }
  size_t groupBytes() const { return align256(rowBytes(size_t(groupWords) * sizeof(u32))); }
  size_t orderBytes() const { return order ? align256(rowBytes(sizeof(int))) : 0; }
  size_t bytes() const {
    return saturatingSum(saturatingSum(boundsBytes(), wordsBytes()),
                         saturatingSum(groupBytes(), orderBytes()));
  }
  size_t rowBytes(size_t perRow) const { return saturatingProduct(size_t(rows), perRow); }
};

// The summaries of the declared inputs the mask reads (summarize: on `stream`, the
// InputRefs pointed at them; *lock held until the kernels using them are enqueued), then each of
// `outputs` whose entry the image has (the others are skipped), after them in the same buffer,
// each entry launched on `stream` with p once p points at all of them. A kernel whose unit has
// such an entry reads them instead of classifying tiles itself, so they are not optional.
template <class Params>
Status summarizeAndClassify(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                            const Kernel::Impl::Loaded& loaded, Params& p,
                            std::initializer_list<TileClassOutput> outputs, cu::Stream stream,
                            std::unique_lock<std::mutex>* lock, DeviceBuffer* own = nullptr) {
  size_t bytes = 0;
  bool any = false;
  for (const TileClassOutput& o : outputs)
    if (o.entry) bytes = saturatingSum(bytes, o.bytes()), any = true;
  char* buffer = nullptr;
  if (Status status = summarize(impl, driver, context, loaded, p.inputs, p.batch, p.q_len,
                                p.kv_len, stream, lock, bytes, &buffer, own);
      !status)
    return status;
  if (!any) return Status::success();
  const std::string& kernel = loaded.image->metadata.name;
  if (!buffer)
    return Status::error("kernel '" + kernel + "': its tile classes need the input summaries, and "
                         "the launch made none");
  for (const TileClassOutput& o : outputs) {
    if (!o.entry) continue;
    *o.bounds = reinterpret_cast<const int*>(buffer);
    *o.classWords = reinterpret_cast<const u32*>(buffer + o.boundsBytes());
    *o.wordCount = o.words;
    if (o.groupWords > 0) {
      *o.groups = reinterpret_cast<const u32*>(buffer + o.boundsBytes() + o.wordsBytes());
      *o.groupWordCount = o.groupWords;
    }
    if (o.order)
      *o.order = reinterpret_cast<const int*>(buffer + o.boundsBytes() + o.wordsBytes() +
                                              o.groupBytes());
    buffer += o.bytes();
  }
  for (const TileClassOutput& o : outputs) {
    if (!o.entry) continue;
    void* params[] = {&p};
    std::string error;
    if (!driver.check(driver.cuLaunchKernel(o.entry, tileClassBlocks(o.rows), 1, 1,
                                            kTileClassThreads, 1, 1, 0, stream, params, nullptr),
                      ("cuLaunchKernel(" + *o.name + o.suffix + ")").c_str(), &error))
      return Status::error("kernel '" + kernel + "': " + error);
  }
  return Status::success();
}

// The heads the tile-class rows of a loaded image have (templates/attnc/common/kv_tiles.h
// tileClassHeads): heads_q, or 1 where its mask ignores the head.
int tileClassHeads(const KernelMetadata& image) {
  return image.maskIgnoresHead ? 1 : image.headsQ;
}

}  // namespace

Status launchDecodeInputWork(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                             const Kernel::Impl::Loaded& loaded, FwdParams& p, cu::Stream stream,
                             std::unique_lock<std::mutex>* summaryLock) {
  return summarizeAndClassify(impl, driver, context, loaded, p, {}, stream, summaryLock);
}

Status launchInputWork(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                       const Kernel::Impl::Loaded& loaded, const KernelMetadata& m, FwdParams& p,
                       cu::Stream stream, std::unique_lock<std::mutex>* summaryLock,
                       DeviceBuffer* own) {
  const KernelMetadata& tiles = loaded.image->metadata;
  const bool orderTiles = loaded.tileOrder && tiles.forwardKernel == KernelFamily::Sm90 &&
                          ceilDiv(p.q_len, tiles.blockQ) <= kTileOrderMaxTiles;
  // Tile classes: rows (b, h, q tile) of kv tiles, 2 bits a tile; for the sm_90a kernel also
  // 8 bits a tile of its consumer warpgroups' classes.
  const int heads = tileClassHeads(tiles);
  TileClassOutput classes;
  classes.entry = loaded.tileClasses;
  classes.name = &tiles.tileClassesEntry;
  classes.rows = tileClassRows(p.batch, heads, p.q_len, tiles.blockQ);
  classes.words = tileClassWords(p.kv_len, tiles.blockKV);
  classes.bounds = &p.kv_tile_bounds;
  classes.classWords = &p.kv_tile_classes;
  classes.wordCount = &p.kv_class_words;
  if (tiles.forwardKernel == KernelFamily::Sm90) {
    classes.groupWords = tileGroupWords(p.kv_len, tiles.blockKV);
    classes.groups = &p.kv_group_classes;
    classes.groupWordCount = &p.kv_group_words;
  }
  if (orderTiles) classes.order = &p.q_tile_order;
  if (Status status = summarizeAndClassify(impl, driver, context, loaded, p, {classes}, stream,
                                           summaryLock, own);
      !status)
    return status;
  // The q tiles of each (b, h) longest kv range first, after the classes (tile_classes.h
  // writeTileOrder; docs/templates.md).
  if (orderTiles) {  // (tileOrder is looked up only beside tileClasses)
    void* orderParams[] = {&p};
    const unsigned blocks = unsigned(std::min<long long>((long long)p.batch * heads, 65535));
    std::string error;
    if (!driver.check(driver.cuLaunchKernel(loaded.tileOrder, blocks, 1, 1, kTileClassThreads, 1,
                                            1, 0, stream, orderParams, nullptr),
                      "cuLaunchKernel(tile order)", &error))
      return Status::error("kernel '" + m.name + "': " + error);
  }
  return Status::success();
}

Status launchBackwardInputWork(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                               const Kernel::Impl::Loaded& loaded, BwdParams& p, bool dqKernel,
                               cu::Stream stream, std::unique_lock<std::mutex>* summaryLock,
                               DeviceBuffer* own) {
  const KernelMetadata& image = loaded.image->metadata;
  const BackwardMetadata& b = *image.backward;
  const int heads = tileClassHeads(image);
  TileClassOutput kv;
  kv.entry = loaded.backwardTileClasses;
  kv.name = &b.entryStem;
  kv.suffix = "_tile_classes";
  kv.rows = tileClassRows(p.batch, heads, p.kv_len, b.kvBlockKV);
  kv.words = tileClassWords(p.q_len, 16);
  kv.bounds = &p.q_tile_bounds;
  kv.classWords = &p.q_tile_classes;
  kv.wordCount = &p.q_class_words;
  TileClassOutput q;
  if (dqKernel && b.qKernel == KernelFamily::Sm90) {
    q.entry = loaded.backwardQTileClasses;
    q.name = &b.entryStem;
    q.suffix = "_q_tile_classes";
    q.rows = tileClassRows(p.batch, heads, p.q_len, b.qBlockQ);
    q.words = tileClassWords(p.kv_len, b.qBlockKV);
    q.bounds = &p.kv_tile_bounds;
    q.classWords = &p.kv_tile_classes;
    q.wordCount = &p.kv_class_words;
  }
  return summarizeAndClassify(impl, driver, context, loaded, p, {kv, q}, stream, summaryLock, own);
}

}  // namespace attnc
