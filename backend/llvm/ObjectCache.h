// Compiled kernels kept on disk between runs, so that running a model again (at another
// binding, in another process) skips LLVM: what ccache is to a C compiler. An object is a
// file named by the SHA-256 of everything that decided it: the codes it holds (the
// hashes of their keys), the target machine (CPU, features, relocation model),
// LLVM's version and the dnnc binary that compiled it (its size and modification time,
// ccache's compiler check). The folder is $DNNC_CACHE_DIR, else the kernels folder under
// dnncCacheFolder() (runtime/GemmSelect.h). DNNC_CACHE_DIR=off turns the cache off, as
// does an environment with neither XDG_CACHE_HOME nor HOME. It keeps at most
// kObjectCacheBytes, dropping the least recently used objects. A failure to read or write
// it is a miss, never an error: the cache only saves time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dnnc::backend {

inline constexpr uint64_t kObjectCacheBytes = uint64_t(1) << 30;

class ObjectCache {
public:
  // The cache as the environment sets it now, or nothing when it is off or this binary
  // cannot be identified.
  static std::optional<ObjectCache> fromEnvironment();
  // The file name for the object that `what` (all that decides it but the binary) decides.
  std::string keyOf(std::string_view what) const;
  std::optional<std::string> load(const std::string &key) const;
  void store(const std::string &key, std::string_view object) const;
  // Once the folder holds more than `limit` bytes of objects, drops the least recently
  // used (a hit touches its file) until it holds at most 90% of it; and the partial files
  // of writers killed over an hour ago. Only the files it names itself: the folder may be
  // shared with others. A compile that stored objects calls it once: it lists the folder.
  void trim(uint64_t limit = kObjectCacheBytes) const;

private:
  std::string folder_;
};

} // namespace dnnc::backend
