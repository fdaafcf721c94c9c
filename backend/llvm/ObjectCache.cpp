#include "backend/llvm/ObjectCache.h"

#include "base/TensorIO.h"
#include "runtime/GemmSelect.h"

#include <llvm/ADT/StringExtras.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/SHA256.h>
#include <llvm/TargetParser/Host.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace dnnc::backend {
namespace fs = std::filesystem;

namespace {

// The size and modification time of the file holding `code` (/proc/self/exe when it is
// the executable), or "" when there is none to find.
std::string fileIdentity(const void *code) {
  Dl_info info{};
  std::string path = "/proc/self/exe";
  if (dladdr(code, &info) && info.dli_fname && info.dli_fname[0] == '/')
    path = info.dli_fname;
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    return std::string();
  return path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

// The binary holding this code (dnnc, or the library a Python process loaded) and the
// LLVM library it runs: a rebuilt dnnc or an upgraded LLVM never reads its predecessor's
// objects. "" when either cannot be found.
const std::string &binaryIdentity() {
  static const std::string identity = [] {
    std::string dnnc = fileIdentity(reinterpret_cast<const void *>(&binaryIdentity));
    std::string llvm = fileIdentity(reinterpret_cast<const void *>(&llvm::sys::getHostCPUName));
    return dnnc.empty() || llvm.empty() ? std::string() : dnnc + "\n" + llvm;
  }();
  return identity;
}

std::array<uint8_t, 32> sha256(std::string_view data) {
  llvm::SHA256 hash;
  hash.update(llvm::StringRef(data.data(), data.size()));
  return hash.final();
}

std::string_view bytes(const std::array<uint8_t, 32> &digest) {
  return {reinterpret_cast<const char *>(digest.data()), digest.size()};
}

bool isObjectName(const std::string &name) {
  return name.size() == 66 && name.ends_with(".o") &&
         std::all_of(name.begin(), name.end() - 2, [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

} // namespace

void ObjectCache::trim(uint64_t limit) const try {
  fs::path folder(folder_);
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> objects;
  uint64_t total = 0;
  auto stale = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    fs::file_time_type time = it->last_write_time(ec);
    if (ec)
      return;
    // A writer's temporary file (rt::besidePath: KEY.o.tmp.PID-N), left if it was killed.
    if (size_t t = name.find(".o.tmp"); t != std::string::npos && isObjectName(name.substr(0, t + 2))) {
      if (time < stale)
        fs::remove(it->path(), ec);
      ec.clear();
      continue;
    }
    if (!isObjectName(name))
      continue;
    uint64_t size = it->file_size(ec);
    if (ec)
      return;
    total += size;
    objects.emplace_back(time, it->path());
  }
  if (ec || total <= limit)
    return;
  std::sort(objects.begin(), objects.end());
  for (const auto &[time, path] : objects) {
    if (total <= limit / 10 * 9)
      break;
    uint64_t size = fs::file_size(path, ec);
    if (!ec && fs::remove(path, ec))
      total -= size;
  }
} catch (const std::exception &) { // out of memory, a file system's error: trimmed another time
}

std::optional<ObjectCache> ObjectCache::fromEnvironment() {
  auto set = [](const char *name) { return std::getenv(name) && *std::getenv(name); };
  std::string folder;
  if (set("DNNC_CACHE_DIR"))
    folder = std::getenv("DNNC_CACHE_DIR");
  else if (set("XDG_CACHE_HOME") || set("HOME"))
    folder = rt::dnncCacheFolder() + "/kernels";
  else
    return std::nullopt; // no home to keep it in (not the working folder)
  if (folder == "off" || binaryIdentity().empty())
    return std::nullopt;
  ObjectCache cache;
  cache.folder_ = std::move(folder);
  return cache;
}

std::string ObjectCache::keyOf(std::string_view what) const {
  std::string all = "dnnc object cache 1\nLLVM " LLVM_VERSION_STRING "\n" + binaryIdentity() + "\n";
  all.append(what);
  return llvm::toHex(llvm::ArrayRef<uint8_t>(sha256(all)), true);
}

// A file holds the SHA-256 of the object, then the object: a torn or damaged file is a miss.
std::optional<std::string> ObjectCache::load(const std::string &key) const try {
  fs::path path = fs::path(folder_) / (key + ".o");
  std::string file = rt::readFile(path.string());
  if (file.size() <= 32 || bytes(sha256(std::string_view(file).substr(32))) != std::string_view(file).substr(0, 32))
    return std::nullopt;
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);
  return file.substr(32);
} catch (const std::exception &) { // no such object, out of memory, a file system's error: a miss
  return std::nullopt;
}

// Written through a temporary file, so that processes sharing the folder never read half
// an object.
void ObjectCache::store(const std::string &key, std::string_view object) const try {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec)
    return;
  rt::writeFileAtomically((fs::path(folder_) / (key + ".o")).string(), std::string(bytes(sha256(object))).append(object));
} catch (const std::exception &) { // out of memory, a file system's error: not kept
}

} // namespace dnnc::backend
