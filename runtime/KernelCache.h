// The on-disk kernel cache: one file per key holding a header (magic, format version, key,
// payload length, FNV-1a checksum of the payload) and the payload (metadata text, cubin, PTX, and
// the cubin and PTX of each further module).
// Writes go to a temporary file in the same directory and are renamed into place, so readers in
// any process see a whole entry or none; a damaged entry is detected, deleted and rebuilt.
// Only regular files are read, and no more than kMaxEntryBytes of them: whatever else sits at an
// entry's path (a FIFO, a directory, a symlink, a device) is removed where it can be and rebuilt.
// Plain C++ (no LLVM): the JIT computes keys, this only stores bytes under them.
#pragma once

#include "attnc/attnc.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace attnc {

struct CacheEntry {
  KernelMetadata metadata;
  std::vector<char> cubin;
  std::string ptx;
  // KernelImage::moreModules: the cubins (and PTX) of the entry groups compiled apart.
  struct Module {
    std::vector<char> cubin;
    std::string ptx;
  };
  std::vector<Module> moreModules;
};

// 64-bit FNV-1a: the payload checksum (detects truncation and flipped bits, not tampering).
uint64_t fnv1a64(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ULL);

// The bytes of a cache file for `entry` under `key`, and back. decode() fails, saying why, on a
// wrong magic, format version or key, a length that does not match, or a checksum mismatch.
std::string encodeCacheEntry(const std::string& key, const CacheEntry& entry);
bool decodeCacheEntry(const std::string& bytes, const std::string& key, CacheEntry* entry,
                      std::string* why);

class KernelCache {
public:
  // 2: the payload ends with the further modules (count, then each one's cubin and PTX).
  static constexpr uint32_t kFormatVersion = 2;

  // The largest entry read: a backward kernel's five programs (cubin and PTX) take a few MiB, so
  // anything this large is not an entry, and reading it would only spend memory.
  static constexpr long long kMaxEntryBytes = 256ll << 20;
  // A temporary file is stale (left by a writer killed before its rename) when older than this:
  // a writer holds one for the milliseconds a write takes.
  static constexpr long long kStaleTempSeconds = 10 * 60;
  // ... or when the process named in it is gone from this host and it is older than this: the
  // margin covers a writer in another PID namespace sharing the directory under the same number.
  static constexpr long long kDeadWriterTempSeconds = 10;

  explicit KernelCache(std::string directory);

  // $ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else $HOME/.cache/attnc; "" when none is set.
  static std::string defaultDirectory();

  const std::string& directory() const { return directory_; }
  std::string pathFor(const std::string& key) const;  // <directory>/<key>.kernel

  enum class Lookup { Hit, Missing, Corrupt };
  // Reads the entry for `key`. A damaged or mismatched file, or anything at the path that is not
  // a regular file of at most kMaxEntryBytes, is removed where it can be (Corrupt, reason in
  // *why); a FIFO or device there is never opened. Missing when nothing is there (or the
  // directory cannot be searched).
  Lookup load(const std::string& key, CacheEntry* entry, std::string* why) const;
  // Writes the entry atomically (temp file <key>.kernel.tmp.<pid>.<n> + rename), creating the
  // directory if needed. The error names the path and the reason (read-only, full, not a
  // directory, a directory in the entry's place...).
  Status store(const std::string& key, const CacheEntry& entry) const;
  // Deletes the temporary files of writers that died before their rename (kStaleTempSeconds,
  // kDeadWriterTempSeconds); returns how many it deleted.
  int removeStaleTemps() const;

  struct Outcome {
    bool hit = false;          // read from disk
    bool rebuilt = false;    // a damaged or mismatched entry was found and replaced
    std::string storeError;  // the entry was built but could not be written (still returned)
  };
  // Whether an entry read from disk is the one wanted (else why not): the caller's own check of
  // what it can recompute, beyond the key and checksum that load() checks.
  using Check = std::function<bool(const CacheEntry&, std::string* why)>;
  // The entry for `key`, from disk or from `build` (then stored). An entry that fails `check`
  // (when given) is deleted and rebuilt, as a damaged one is. A miss also removes stale temporary
  // files. Threads of this process that ask for one key at once build it once: the others wait
  // and then read what the first one stored. Across processes two may build the same key; the
  // renames make either result whole.
  Status getOrBuild(const std::string& key, const std::function<Status(CacheEntry*)>& build,
                    CacheEntry* entry, Outcome* outcome, const Check& check = nullptr) const;

private:
  std::string directory_;
};

}  // namespace attnc
