// See KernelCache.h for the file format and the concurrency rules.
#include "runtime/KernelCache.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace attnc {

namespace {

constexpr char kMagic[8] = {'A', 'T', 'T', 'N', 'C', 'K', 'C', '\n'};

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// Reads from a byte string with bounds checks.
struct Reader {
  const std::string& bytes;
  size_t at = 0;

  template <class T>
  bool get(T* value) {
    if (bytes.size() - at < sizeof(T)) return false;
    std::memcpy(value, bytes.data() + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
  bool take(size_t size, std::string* out) {
    if (bytes.size() - at < size) return false;
    out->assign(bytes.data() + at, size);
    at += size;
    return true;
  }
};

bool makeDirectories(const std::string& path, std::string* error) {
  std::string partial;
  std::stringstream parts(path);
  std::string part;
  if (!path.empty() && path[0] == '/') partial = "/";
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    partial += part + "/";
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = "cannot create '" + partial + "': " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

// One mutex per cache file, for the whole process: what makes concurrent getOrBuild calls for one
// key build once. Entries are never removed (one small mutex per distinct kernel compiled).
std::shared_ptr<std::mutex> keyMutex(const std::string& path) {
  static std::mutex mapMutex;
  static std::map<std::string, std::shared_ptr<std::mutex>> mutexes;
  std::lock_guard<std::mutex> lock(mapMutex);
  auto& m = mutexes[path];
  if (!m) m = std::make_shared<std::mutex>();
  return m;
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t size, uint64_t seed) {
  uint64_t hash = seed;
  const unsigned char* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string encodeCacheEntry(const std::string& key, const CacheEntry& entry) {
  std::string payload;
  std::string metadata = entry.metadata.serialize();
  put<uint32_t>(payload, uint32_t(metadata.size()));
  payload += metadata;
  // A module: its cubin and its PTX, each length-prefixed.
  auto putModule = [&](const std::vector<char>& cubin, const std::string& ptx) {
    put<uint64_t>(payload, cubin.size());
    payload.append(cubin.data(), cubin.size());
    put<uint64_t>(payload, ptx.size());
    payload += ptx;
  };
  putModule(entry.cubin, entry.ptx);
  put<uint32_t>(payload, uint32_t(entry.moreModules.size()));
  for (const CacheEntry::Module& module : entry.moreModules) putModule(module.cubin, module.ptx);

  std::string out(kMagic, sizeof kMagic);
  put<uint32_t>(out, KernelCache::kFormatVersion);
  put<uint32_t>(out, uint32_t(key.size()));
  out += key;
  put<uint64_t>(out, payload.size());
  put<uint64_t>(out, fnv1a64(payload.data(), payload.size()));
  out += payload;
  return out;
}

bool decodeCacheEntry(const std::string& bytes, const std::string& key, CacheEntry* entry,
                      std::string* why) {
  auto fail = [&](const std::string& reason) {
    *why = reason;
    return false;
  };
  Reader in{bytes};
  std::string magic, storedKey, payload;
  uint32_t format = 0, keySize = 0;
  uint64_t payloadSize = 0, checksum = 0;
  if (!in.take(sizeof kMagic, &magic) || magic != std::string(kMagic, sizeof kMagic))
    return fail("not an attnc cache entry (bad magic)");
  if (!in.get(&format) || format != KernelCache::kFormatVersion)
    return fail("cache format " + std::to_string(format) + ", expected " +
                std::to_string(KernelCache::kFormatVersion));
  if (!in.get(&keySize) || !in.take(keySize, &storedKey) || storedKey != key)
    return fail("entry is for another key");
  if (!in.get(&payloadSize) || !in.get(&checksum)) return fail("truncated header");
  if (bytes.size() - in.at != payloadSize)
    return fail("payload is " + std::to_string(bytes.size() - in.at) + " bytes, header says " +
                std::to_string(payloadSize) + " (truncated?)");
  in.take(payloadSize, &payload);
  if (fnv1a64(payload.data(), payload.size()) != checksum) return fail("payload checksum mismatch");

  Reader body{payload};
  // A module as putModule wrote it.
  auto takeModule = [&](std::vector<char>* cubin, std::string* ptx) {
    uint64_t cubinSize = 0, ptxSize = 0;
    std::string bytes;
    if (!body.get(&cubinSize) || !body.take(cubinSize, &bytes) || !body.get(&ptxSize) ||
        !body.take(ptxSize, ptx))
      return false;
    cubin->assign(bytes.begin(), bytes.end());
    return true;
  };
  uint32_t metadataSize = 0;
  uint32_t moreModules = 0;
  std::string metadata, error;
  std::vector<char> cubin;
  if (!body.get(&metadataSize) || !body.take(metadataSize, &metadata) ||
      !takeModule(&cubin, &entry->ptx) || !body.get(&moreModules))
    return fail("malformed payload");
  entry->moreModules.clear();
  for (uint32_t i = 0; i < moreModules; ++i) {
    CacheEntry::Module module;
    if (!takeModule(&module.cubin, &module.ptx))
      return fail("malformed payload (module " + std::to_string(i + 1) + ")");
    entry->moreModules.push_back(std::move(module));
  }
  if (body.at != payload.size()) return fail("malformed payload");
  std::optional<KernelMetadata> parsed = KernelMetadata::parse(metadata, &error);
  if (!parsed) return fail(error);
  entry->metadata = std::move(*parsed);
  entry->cubin = std::move(cubin);
  return true;
}

KernelCache::KernelCache(std::string directory) : directory_(std::move(directory)) {}

std::string KernelCache::defaultDirectory() {
  auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value ? value : "";
  };
  if (std::string dir = env("ATTNC_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string dir = env("XDG_CACHE_HOME"); !dir.empty()) return dir + "/attnc";
  if (std::string home = env("HOME"); !home.empty()) return home + "/.cache/attnc";
  return "";
}

std::string KernelCache::pathFor(const std::string& key) const {
  return directory_ + "/" + key + ".kernel";
}

KernelCache::Lookup KernelCache::load(const std::string& key, CacheEntry* entry,
                                      std::string* why) const {
  std::ifstream file(pathFor(key), std::ios::binary);
  if (!file) return Lookup::Missing;
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (decodeCacheEntry(bytes, key, entry, why)) return Lookup::Hit;
  std::remove(pathFor(key).c_str());
  return Lookup::Corrupt;
}

Status KernelCache::store(const std::string& key, const CacheEntry& entry) const {
  std::string error;
  if (directory_.empty()) return Status::error("kernel cache: no directory (set ATTNC_CACHE_DIR)");
  if (!makeDirectories(directory_, &error)) return Status::error("kernel cache: " + error);
  static std::atomic<unsigned> counter{0};
  std::string temp = pathFor(key) + ".tmp." + std::to_string(getpid()) + "." +
                     std::to_string(counter.fetch_add(1));
  std::string bytes = encodeCacheEntry(key, entry);
  {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    file.write(bytes.data(), std::streamsize(bytes.size()));
    file.close();
    if (!file) {
      std::remove(temp.c_str());
      return Status::error("kernel cache: cannot write '" + temp + "'");
    }
  }
  if (std::rename(temp.c_str(), pathFor(key).c_str()) != 0) {
    std::string reason = std::strerror(errno);
    std::remove(temp.c_str());
    return Status::error("kernel cache: cannot rename '" + temp + "' into place: " + reason);
  }
  return Status::success();
}

Status KernelCache::getOrBuild(const std::string& key,
                               const std::function<Status(CacheEntry*)>& build, CacheEntry* entry,
                               Outcome* outcome) const {
  *outcome = Outcome{};
  std::shared_ptr<std::mutex> mutex = keyMutex(pathFor(key));
  std::lock_guard<std::mutex> lock(*mutex);
  std::string why;
  Lookup found = directory_.empty() ? Lookup::Missing : load(key, entry, &why);
  if (found == Lookup::Hit) {
    outcome->hit = true;
    return Status::success();
  }
  outcome->rebuilt = found == Lookup::Corrupt;
  if (Status status = build(entry); !status) return status;
  if (Status stored = store(key, *entry); !stored) outcome->storeError = stored.message;
  return Status::success();
}

}  // namespace attnc
