// The on-disk kernel cache: one file per key holding a header (magic, format version, key,
// payload length, FNV-1a checksum of the payload) and the payload (metadata text, cubin, PTX, and
// the cubin and PTX of each further module).
// Writes go to a temporary file in the same directory and are renamed into place, so readers in
// any process see a whole entry or none; a damaged entry is detected, deleted and rebuilt.
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

  explicit KernelCache(std::string directory);

  // $ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else $HOME/.cache/attnc; "" when none is set.
  static std::string defaultDirectory();

  const std::string& directory() const { return directory_; }
  std::string pathFor(const std::string& key) const;  // <directory>/<key>.kernel

  enum class Lookup { Hit, Missing, Corrupt };
  // Reads the entry for `key`. A damaged or mismatched file is deleted (Corrupt, reason in *why).
  Lookup load(const std::string& key, CacheEntry* entry, std::string* why) const;
  // Writes the entry atomically (temp file + rename), creating the directory if needed.
  Status store(const std::string& key, const CacheEntry& entry) const;

  struct Outcome {
    bool hit = false;        // read from disk
    bool rebuilt = false;    // a damaged entry was found and replaced
    std::string storeError;  // the entry was built but could not be written (still returned)
  };
  // The entry for `key`, from disk or from `build` (then stored). Threads of this process that ask
  // for one key at once build it once: the others wait and then read what the first one stored.
  // Across processes two may build the same key; the renames make either result whole.
  Status getOrBuild(const std::string& key, const std::function<Status(CacheEntry*)>& build,
                    CacheEntry* entry, Outcome* outcome) const;

private:
  std::string directory_;
};

}  // namespace attnc
