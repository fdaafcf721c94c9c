// Kernels with the same code compile once (backend/llvm/CpuBackend.h): within one module
// their names share a function, and a later module borrows the code of an earlier one that
// still lives. Across processes the object cache (backend/llvm/ObjectCache.h) keeps them.
#include "backend/llvm/CpuBackend.h"
#include "backend/llvm/ObjectCache.h"
#include "tests/unit/LoweredKernels.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace dnnc;

namespace {

// exp(x) and exp(y) lower to kernels that differ only in their names and buffers' names.
const char *kTwins = R"(dim N;
model main(x: f32[N], y: f32[N]) -> (f32[N], f32[N], f32[N]) {
  return (exp(x), exp(y), -x);
}
)";

// An elementwise kernel of its inputs, one or two vectors of N.
std::vector<float> call(backend::KernelFn fn, std::vector<float> in, std::vector<float> second = {}) {
  std::vector<float> out(in.size());
  std::vector<uint8_t *> bufs{reinterpret_cast<uint8_t *>(in.data())};
  if (!second.empty())
    bufs.push_back(reinterpret_cast<uint8_t *>(second.data()));
  bufs.push_back(reinterpret_cast<uint8_t *>(out.data()));
  int64_t n = static_cast<int64_t>(in.size());
  fn(bufs.data(), &n, 0, n);
  return out;
}

// DNNC_CACHE_DIR set for a scope (the object cache off unless named).
struct CacheDir {
  std::string old;
  bool had;
  explicit CacheDir(const std::string &dir) : had(std::getenv("DNNC_CACHE_DIR") != nullptr) {
    if (had)
      old = std::getenv("DNNC_CACHE_DIR");
    ::setenv("DNNC_CACHE_DIR", dir.c_str(), 1);
  }
  ~CacheDir() { had ? ::setenv("DNNC_CACHE_DIR", old.c_str(), 1) : ::unsetenv("DNNC_CACHE_DIR"); }
};

std::vector<std::filesystem::path> objectsIn(const std::filesystem::path &dir) {
  std::vector<std::filesystem::path> objects;
  for (const auto &entry : std::filesystem::directory_iterator(dir))
    objects.push_back(entry.path());
  return objects;
}

} // namespace

TEST_CASE("kernels with the same code compile once", "[cpu][codegen]") {
  auto program = test::lowerUnfused(kTwins, "cpu");
  std::vector<const kir::Kernel *> kernels = program->kernels.kernelPointers();
  REQUIRE(kernels.size() == 3);
  std::vector<float> x{0.0f, 1.0f, -2.0f, 0.5f, 3.0f};
  CacheDir off("off");

  size_t before = backend::CpuModule::codesCompiled();
  auto first = backend::CpuModule::compile(kernels);
  CHECK(backend::CpuModule::codesCompiled() - before == 2); // exp once, the negation once
  const std::string expX = kernels[0]->name, expY = kernels[1]->name, neg = kernels[2]->name;
  REQUIRE(neg.find("_neg") != std::string::npos);
  REQUIRE(expX != expY);
  CHECK(first->lookup(expX) == first->lookup(expY));
  CHECK(first->lookup(expX) != first->lookup(neg));
  CHECK(call(first->lookup(expY), x)[1] == Approx(std::exp(1.0f)).epsilon(1e-6));
  CHECK(call(first->lookup(neg), x)[2] == 2.0f);

  SECTION("a later module borrows the code of one that lives") {
    auto second = backend::CpuModule::compile(kernels);
    CHECK(backend::CpuModule::codesCompiled() - before == 2);
    CHECK(second->lookup(kernels) == first->lookup(kernels));
    first.reset(); // the second keeps the code alive
    CHECK(call(second->lookup(neg), x)[4] == -3.0f);
  }
  SECTION("once the module is gone, its code compiles again") {
    first.reset();
    auto again = backend::CpuModule::compile(kernels);
    CHECK(backend::CpuModule::codesCompiled() - before == 4);
    CHECK(call(again->lookup(expX), x)[3] == Approx(std::exp(0.5f)).epsilon(1e-6));
  }
  SECTION("the GPU simulator's kernels share code among themselves, not with the CPU's") {
    auto gpu = test::lowerUnfused(kTwins, "cuda-sim");
    std::vector<const kir::Kernel *> simulatedKernels = gpu->kernels.kernelPointers();
    auto simulated = backend::CpuModule::compile(simulatedKernels, true);
    CHECK(backend::CpuModule::codesCompiled() - before == 4);
    CHECK(simulated->lookup(simulatedKernels[0]->name) == simulated->lookup(simulatedKernels[1]->name));
  }
}

// Two products of different sizes, one with an epilogue: different kernels, whose register
// tiles are the same micro-kernels (backend/llvm/GemmMicroKernel.h).
const char *kTwoProducts = R"(dim M;
model main(x: f32[M, 40], w: f32[40, 24], y: f32[M, 70], v: f32[70, 33]) -> (f32[M, 24], f32[M, 33]) {
  return (relu(x @ w), y @ v);
}
)";

TEST_CASE("GEMM kernels call one compiled copy of each micro-kernel", "[cpu][codegen]") {
  auto program = test::lowerUnfused(kTwoProducts, "cpu");
  std::vector<const kir::Kernel *> kernels = program->kernels.kernelPointers();
  std::vector<std::string> products;
  for (const kir::Kernel *k : kernels)
    if (k->name.find("_matmul") != std::string::npos)
      products.push_back(k->name);
  REQUIRE(products.size() == 2);
  // The printed module: each kernel's function, then each micro-kernel's once.
  std::string ir = backend::hostLLVMIR(kernels);
  std::map<std::string, std::set<std::string>> calls; // by kernel
  std::set<std::string> defined;
  std::string in;
  std::istringstream lines(ir);
  for (std::string line; std::getline(lines, line);) {
    static const std::regex define(R"(^define [^@]*@([A-Za-z0-9_.]+)\()"), call(R"(call void @(dnnc_[0-9a-f]{32})\()");
    std::smatch m;
    if (std::regex_search(line, m, define)) {
      in = m[1];
      if (in.rfind("dnnc_", 0) == 0)
        CHECK(defined.insert(in).second);
    } else if (std::regex_search(line, m, call)) {
      calls[in].insert(m[1]);
    }
  }
  REQUIRE(!defined.empty());
  std::vector<std::string> shared;
  std::set_intersection(calls[products[0]].begin(), calls[products[0]].end(), calls[products[1]].begin(),
                        calls[products[1]].end(), std::back_inserter(shared));
  CHECK(shared.size() >= 4); // the tiles both products keep after O3
  for (const auto &[caller, called] : calls) {
    CHECK(std::find(products.begin(), products.end(), caller) != products.end()); // no micro-kernel calls another
    for (const std::string &symbol : called)
      CHECK(defined.contains(symbol));
  }

  // Compiled: each kernel's code and each micro-kernel once.
  CacheDir off("off");
  size_t before = backend::CpuModule::codesCompiled();
  auto module = backend::CpuModule::compile(kernels);
  CHECK(backend::CpuModule::codesCompiled() - before == kernels.size() + defined.size());
  // A module whose kernels all come from a live one compiles no micro-kernel either.
  auto borrower = backend::CpuModule::compile(kernels);
  CHECK(backend::CpuModule::codesCompiled() - before == kernels.size() + defined.size());
  CHECK(borrower->lookup(products[1]) == module->lookup(products[1]));
}

TEST_CASE("the object cache keeps compiled kernels between modules that never lived together", "[cpu][codegen]") {
  auto program = test::lowerUnfused(kTwins, "cpu");
  std::vector<const kir::Kernel *> kernels = program->kernels.kernelPointers();
  std::vector<float> x{0.0f, 1.0f, -2.0f, 0.5f, 3.0f};
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "dnnc_object_cache_test";
  std::filesystem::remove_all(dir);
  CacheDir cache(dir.string());

  size_t before = backend::CpuModule::codesCompiled();
  backend::CpuModule::compile(kernels).reset();
  CHECK(backend::CpuModule::codesCompiled() - before == 2);
  const size_t objects = objectsIn(dir).size(); // the two codes, in one object or two (by their hash)
  REQUIRE(objects >= 1);
  REQUIRE(objects <= 2);
  auto cached = backend::CpuModule::compile(kernels); // nothing lives to borrow from: the file
  CHECK(backend::CpuModule::codesCompiled() - before == 2);
  CHECK(call(cached->lookup(kernels[2]->name), x)[2] == 2.0f);
  CHECK(cached->lookup(kernels[0]->name) == cached->lookup(kernels[1]->name));
  cached.reset();

  SECTION("a damaged object is a miss, and is written again") {
    for (const std::filesystem::path &object : objectsIn(dir))
      std::filesystem::resize_file(object, std::filesystem::file_size(object) / 2);
    auto again = backend::CpuModule::compile(kernels);
    CHECK(backend::CpuModule::codesCompiled() - before == 4);
    CHECK(call(again->lookup(kernels[1]->name), x)[1] == Approx(std::exp(1.0f)).epsilon(1e-6));
    again.reset();
    backend::CpuModule::compile(kernels).reset();
    CHECK(backend::CpuModule::codesCompiled() - before == 4);
  }
  SECTION("a code alone reads the object it had beside another, unless the two shared one") {
    backend::CpuModule::compile({kernels[2]}).reset();
    CHECK(backend::CpuModule::codesCompiled() - before == (objects == 2 ? 2 : 3));
    CHECK(objectsIn(dir).size() == 2);
  }
  SECTION("a folder that cannot be written is no error") {
    CacheDir unwritable("/proc/dnnc-cache");
    auto module = backend::CpuModule::compile(kernels);
    CHECK(backend::CpuModule::codesCompiled() - before == 4);
    CHECK(call(module->lookup(kernels[2]->name), x)[4] == -3.0f);
  }
  std::filesystem::remove_all(dir);
}

// A model returning `first` (when given), then each unary op of `ops` on x and on y.
std::string unaryOpsModel(const std::vector<std::string> &ops, const std::string &first = "") {
  std::string results = first, types = first.empty() ? "" : "f32[N]";
  for (const std::string &op : ops)
    for (const char *v : {"x", "y"}) {
      results += (results.empty() ? "" : ", ") + op + "(" + v + ")";
      types += std::string(types.empty() ? "" : ", ") + "f32[N]";
    }
  return "dim N;\nmodel main(x: f32[N], y: f32[N]) -> (" + types + ") {\n  return (" + results + ");\n}\n";
}

const std::vector<std::string> kUnaryOps{"exp",   "log",  "tanh",  "sigmoid", "relu", "abs",  "sqrt",  "sin",   "cos",
                                         "floor", "ceil", "round", "sign",    "erf",  "gelu", "silu",  "rsqrt", "neg"};

TEST_CASE("a large module compiles as several objects on several threads, twins sharing a code", "[cpu][codegen]") {
  // 18 unary ops on x and on y: 36 kernels, 18 codes, in objects by their hash.
  auto program = test::lowerUnfused(unaryOpsModel(kUnaryOps).c_str(), "cpu");
  std::vector<const kir::Kernel *> kernels = program->kernels.kernelPointers();
  REQUIRE(kernels.size() == 36);
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "dnnc_object_cache_large";
  std::filesystem::remove_all(dir);
  CacheDir cache(dir.string());
  size_t before = backend::CpuModule::codesCompiled();
  auto module = backend::CpuModule::compile(kernels);
  CHECK(backend::CpuModule::codesCompiled() - before == 18);
  CHECK(objectsIn(dir).size() > 1);
  CHECK(objectsIn(dir).size() <= 18);
  std::vector<float> x{0.25f, 1.0f, 2.0f, 0.5f, 3.0f};
  for (size_t i = 0; i < kernels.size(); i += 2) {
    INFO(kernels[i]->name << " and " << kernels[i + 1]->name);
    CHECK(module->lookup(kernels[i]->name) == module->lookup(kernels[i + 1]->name));
    CHECK(call(module->lookup(kernels[i + 1]->name), x) == call(module->lookup(kernels[i]->name), x));
  }
  CHECK(call(module->lookup(kernels[0]->name), x)[1] == Approx(std::exp(1.0f)).epsilon(1e-6));
  CHECK(call(module->lookup(kernels[35]->name), x)[2] == -2.0f);
  module.reset();

  SECTION("the same codes in another order hit the cache") {
    std::vector<const kir::Kernel *> reversed(kernels.rbegin(), kernels.rend());
    auto again = backend::CpuModule::compile(reversed);
    CHECK(backend::CpuModule::codesCompiled() - before == 18);
    CHECK(call(again->lookup(kernels[0]->name), x)[1] == Approx(std::exp(1.0f)).epsilon(1e-6));
  }
  SECTION("an edit recompiles the object its new code lands in, not the model") {
    // One op more, first: every kernel after it is renamed (numbered one later).
    auto changed = test::lowerUnfused(unaryOpsModel(kUnaryOps, "x + y").c_str(), "cpu");
    std::vector<const kir::Kernel *> changedKernels = changed->kernels.kernelPointers();
    REQUIRE(changedKernels.size() == 37);
    REQUIRE(changedKernels[1]->name != kernels[0]->name);
    auto recompiled = backend::CpuModule::compile(changedKernels);
    size_t compiled = backend::CpuModule::codesCompiled() - before - 18;
    CHECK(compiled >= 1);
    CHECK(compiled <= 9); // the new code and those sharing its object: a few of the 18
    CHECK(call(recompiled->lookup(changedKernels[0]->name), x, x)[2] == 4.0f);
    CHECK(call(recompiled->lookup(changedKernels[36]->name), x)[2] == -2.0f);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("with neither HOME nor XDG_CACHE_HOME, no object is written anywhere", "[cpu][codegen]") {
  auto program = test::lowerUnfused(kTwins, "cpu");
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "dnnc_object_cache_homeless";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::path cwd = std::filesystem::current_path();
  std::map<std::string, std::string> saved;
  for (const char *name : {"HOME", "XDG_CACHE_HOME", "DNNC_CACHE_DIR"})
    if (const char *value = std::getenv(name)) {
      saved[name] = value;
      ::unsetenv(name);
    }
  std::filesystem::current_path(dir);
  size_t before = backend::CpuModule::codesCompiled();
  backend::CpuModule::compile(program->kernels.kernelPointers()).reset();
  backend::CpuModule::compile(program->kernels.kernelPointers()).reset();
  CHECK(backend::CpuModule::codesCompiled() - before == 4); // compiled twice: no cache
  CHECK(std::filesystem::is_empty(dir));
  std::filesystem::current_path(cwd);
  for (const auto &[name, value] : saved)
    ::setenv(name.c_str(), value.c_str(), 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the object cache drops its least recently used objects past its limit, and only its own files", "[cpu][codegen]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "dnnc_object_cache_trim";
  fs::remove_all(dir);
  CacheDir env(dir.string());
  std::optional<backend::ObjectCache> cache = backend::ObjectCache::fromEnvironment();
  REQUIRE(cache);
  auto now = fs::file_time_type::clock::now();
  std::vector<std::string> keys;
  for (int i = 0; i < 4; ++i) { // 1032 bytes each (the object and its checksum), oldest first
    keys.push_back(cache->keyOf("object " + std::to_string(i)));
    cache->store(keys.back(), std::string(1000, char('a' + i)));
    fs::last_write_time(dir / (keys.back() + ".o"), now - std::chrono::minutes(40 - i));
  }
  std::string partial = cache->keyOf("a writer killed") + ".o.tmp", fresh = cache->keyOf("a writer now") + ".o.tmp";
  for (const std::string &name : {partial, fresh, std::string("notes.txt")})
    std::ofstream(dir / name) << "x";
  fs::last_write_time(dir / partial, now - std::chrono::hours(2));
  CHECK(cache->load(keys[0]) == std::string(1000, 'a')); // a hit: now the most recent

  cache->trim(5000); // under the limit: nothing goes but the killed writer's file
  CHECK(objectsIn(dir).size() == 6);
  CHECK_FALSE(fs::exists(dir / partial));
  cache->trim(3000); // over: down to 2700 bytes, the least recently used first
  CHECK(fs::exists(dir / (keys[0] + ".o")));
  CHECK(fs::exists(dir / (keys[3] + ".o")));
  CHECK_FALSE(cache->load(keys[1]));
  CHECK_FALSE(cache->load(keys[2]));
  CHECK(fs::exists(dir / fresh));
  CHECK(fs::exists(dir / "notes.txt"));
  fs::remove_all(dir);
}
