// See KernelCache.h for the file format and the concurrency rules.
#include "runtime/KernelCache.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace attnc {

namespace {

constexpr char kMagic[8] = {'A', 'T', 'T', 'N', 'C', 'K', 'C', '\n'};
// Between an entry's file name and its writer's pid in a temporary file's name.
constexpr const char* kTempInfix = ".kernel.tmp.";

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
  const std::string path = pathFor(key);
  // Something at the entry's path that is not an entry: removed so that the rebuilt one can take
  // its place (an empty directory too; what cannot be removed makes store() fail and say so).
  auto discard = [&](const std::string& reason, bool directory = false) {
    *why = "'" + path + "' " + reason;
    directory ? (void)rmdir(path.c_str()) : (void)unlink(path.c_str());
    return Lookup::Corrupt;
  };
  struct stat link;
  if (lstat(path.c_str(), &link) != 0)
    return errno == ENOENT || errno == ENOTDIR || errno == EACCES ? Lookup::Missing
                                                                   : discard(std::strerror(errno));
  if (S_ISLNK(link.st_mode)) return discard("is a symbolic link, not an entry");
  if (S_ISDIR(link.st_mode)) return discard("is a directory, not an entry", /*directory=*/true);
  if (!S_ISREG(link.st_mode)) return discard("is not a regular file (a FIFO, socket or device)");
  if (link.st_size > kMaxEntryBytes)
    return discard("is " + std::to_string(link.st_size) + " bytes, more than an entry can be (" +
                   std::to_string(kMaxEntryBytes) + ")");
  // O_NOFOLLOW and O_NONBLOCK: if the path was swapped for a link or a FIFO since lstat, the open
  // fails or returns at once, and fstat below sees what it opened.
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? Lookup::Missing : discard(std::string("cannot be opened: ") +
                                                       std::strerror(errno));
  struct stat opened;
  if (fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode) || opened.st_size > kMaxEntryBytes) {
    close(fd);
    return discard("changed while it was opened");
  }
  std::string bytes(size_t(opened.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  close(fd);
  bytes.resize(got);  // a short read is a truncated entry, which decode rejects
  if (decodeCacheEntry(bytes, key, entry, why)) return Lookup::Hit;
  unlink(path.c_str());
  return Lookup::Corrupt;
}

Status KernelCache::store(const std::string& key, const CacheEntry& entry) const {
  std::string error;
  if (directory_.empty()) return Status::error("kernel cache: no directory (set ATTNC_CACHE_DIR)");
  if (!makeDirectories(directory_, &error)) return Status::error("kernel cache: " + error);
  static std::atomic<unsigned> counter{0};
  const std::string path = pathFor(key);
  const std::string temp = directory_ + "/" + key + kTempInfix + std::to_string(getpid()) + "." +
                           std::to_string(counter.fetch_add(1));
  auto fail = [&](const std::string& what) {
    std::string reason = std::strerror(errno);
    unlink(temp.c_str());
    return Status::error("kernel cache: cannot " + what + ": " + reason);
  };
  const std::string bytes = encodeCacheEntry(key, entry);
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return fail("create '" + temp + "'");
  for (size_t written = 0; written < bytes.size();) {
    ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      close(fd);
      return fail("write '" + temp + "'");
    }
    written += size_t(n);
  }
  if (close(fd) != 0) return fail("write '" + temp + "'");
  if (std::rename(temp.c_str(), path.c_str()) != 0)
    return fail("rename '" + temp + "' to '" + path + "'");
  return Status::success();
}

int KernelCache::removeStaleTemps() const {
  DIR* dir = opendir(directory_.c_str());
  if (!dir) return 0;
  const time_t now = time(nullptr);
  int removed = 0;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    const size_t infix = name.find(kTempInfix);
    if (infix == std::string::npos) continue;
    // <key>.kernel.tmp.<pid>.<n>
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + infix + std::strlen(kTempInfix), &end, 10);
    const std::string path = directory_ + "/" + name;
    struct stat st;
    if (end == nullptr || *end != '.' || pid <= 0 || lstat(path.c_str(), &st) != 0 ||
        !S_ISREG(st.st_mode))
      continue;
    const long long age = static_cast<long long>(now - st.st_mtime);
    const bool writerGone = kill(pid_t(pid), 0) != 0 && errno == ESRCH;
    if (age > kStaleTempSeconds || (writerGone && age > kDeadWriterTempSeconds))
      removed += unlink(path.c_str()) == 0;
  }
  closedir(dir);
  return removed;
}

Status KernelCache::getOrBuild(const std::string& key,
                               const std::function<Status(CacheEntry*)>& build, CacheEntry* entry,
                               Outcome* outcome, const Check& check) const {
  *outcome = Outcome{};
  std::shared_ptr<std::mutex> mutex = keyMutex(pathFor(key));
  std::lock_guard<std::mutex> lock(*mutex);
  std::string why;
  Lookup found = directory_.empty() ? Lookup::Missing : load(key, entry, &why);
  if (found == Lookup::Hit) {
    if (!check || check(*entry, &why)) {
      outcome->hit = true;
      return Status::success();
    }
    unlink(pathFor(key).c_str());
    found = Lookup::Corrupt;
  }
  outcome->rebuilt = found == Lookup::Corrupt;
  if (!directory_.empty()) removeStaleTemps();
  if (Status status = build(entry); !status) return status;
  if (Status stored = store(key, *entry); !stored) outcome->storeError = stored.message;
  return Status::success();
}

}  // namespace attnc
