#include "backend/llvm/ObjectCache.h"

#include "runtime/GemmSelect.h"

#include <llvm/ADT/StringExtras.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/SHA256.h>

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

namespace dnnc::backend {
namespace fs = std::filesystem;

namespace {

// The binary holding this code (dnnc, or the library a Python process loaded), as size and
// modification time; "" when it cannot be found. A rebuilt dnnc never reads its
// predecessor's objects.
const std::string &binaryIdentity() {
  static const std::string identity = [] {
    Dl_info info{};
    std::string path = "/proc/self/exe";
    if (dladdr(reinterpret_cast<void *>(&binaryIdentity), &info) && info.dli_fname && info.dli_fname[0] == '/')
      path = info.dli_fname;
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0)
      return std::string();
    return path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec);
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

// Drops the least recently used objects (a hit touches its file) until the folder holds
// at most 90% of kObjectCacheBytes.
void trim(const fs::path &folder) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> objects;
  uint64_t total = 0;
  for (const auto &entry : fs::directory_iterator(folder, ec)) {
    if (entry.path().extension() != ".o")
      continue;
    uint64_t size = entry.file_size(ec);
    if (ec)
      continue;
    total += size;
    objects.emplace_back(entry.last_write_time(ec), entry.path());
  }
  if (total <= kObjectCacheBytes)
    return;
  std::sort(objects.begin(), objects.end());
  for (const auto &[time, path] : objects) {
    if (total <= kObjectCacheBytes / 10 * 9)
      break;
    uint64_t size = fs::file_size(path, ec);
    if (!ec && fs::remove(path, ec))
      total -= size;
  }
}

} // namespace

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
std::optional<std::string> ObjectCache::load(const std::string &key) const {
  fs::path path = fs::path(folder_) / (key + ".o");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::stringstream content;
  content << in.rdbuf();
  std::string file = content.str();
  if (file.size() <= 32 || bytes(sha256(std::string_view(file).substr(32))) != std::string_view(file).substr(0, 32))
    return std::nullopt;
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);
  return file.substr(32);
}

// Written under a name of its own and renamed into place, so that processes sharing the
// folder never read half an object.
void ObjectCache::store(const std::string &key, std::string_view object) const {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec)
    return;
  std::random_device random;
  fs::path temporary = fs::path(folder_) / (key + ".tmp" + std::to_string(::getpid()) + "-" + std::to_string(random()));
  {
    std::ofstream out(temporary, std::ios::binary);
    out << bytes(sha256(object)) << object;
    if (!out.flush()) {
      out.close();
      fs::remove(temporary, ec);
      return;
    }
  }
  fs::rename(temporary, fs::path(folder_) / (key + ".o"), ec);
  if (ec)
    fs::remove(temporary, ec);
  trim(folder_);
}

} // namespace dnnc::backend
