// The CPU's vector math (backend/llvm/VectorMath.h) against libm in double: each function
// is compiled by the real CPU back end as a vectorized kernel `out[i] = f(x[i])` and run
// over a stratified sweep of every f32 bit pattern (every 61st pattern, both signs, plus
// the special values), asserting the max ULP error the header states. The ops built on
// them (sigmoid, silu) are checked too. DNNC_VM_EXHAUSTIVE=1 sweeps all 2^32 patterns
// (minutes; how the header's table was measured).
#include "backend/llvm/CpuBackend.h"
#include "ir/graph/OpRegistry.h"

#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

using namespace dnnc;

namespace {

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// |got - exact| in units of the last place of the exact value rounded to f32 (denormal
// spacing below 2^-126; 2^104 past FLT_MAX). NaN must meet NaN, infinity the same
// infinity, an exact zero a zero of the same sign.
double ulpError(float got, double exact) {
  if (std::isnan(exact) || std::isnan(got))
    return std::isnan(exact) && std::isnan(got) ? 0 : INFINITY;
  if (std::isinf(exact) || std::isinf(got))
    return static_cast<float>(exact) == got ? 0 : INFINITY;
  if (exact == 0)
    return got == 0 && std::signbit(got) == std::signbit(exact) ? 0 : INFINITY;
  int e = std::ilogb(exact);
  double ulp = std::ldexp(1.0, std::min(std::max(e, -126), 127) - 23);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

// A one-kernel module computing op elementwise over x (and y for a binary op) into out.
struct Kernel {
  std::unique_ptr<backend::CpuModule> module;
  backend::KernelFn fn;

  Kernel(ir::OpKind op, bool binary) {
    kir::Kernel k;
    k.name = "vm";
    sym::ExprRef n = sym::var("N"), i = sym::var(kir::loopVar(0));
    k.buffers.push_back({"x", DType::F32, {n}, false});
    if (binary)
      k.buffers.push_back({"y", DType::F32, {n}, false});
    k.buffers.push_back({"out", DType::F32, {n}, true});
    kir::ValuePtr x = kir::load(0, i, DType::F32);
    kir::ValuePtr v = binary ? kir::binary(op, x, kir::load(1, i, DType::F32), DType::F32) : kir::unary(op, x, DType::F32);
    std::vector<kir::StmtPtr> body;
    body.push_back(kir::store(binary ? 2 : 1, i, v));
    k.body = kir::loop(kir::loopVar(0), n, std::move(body), kir::Stmt::Schedule::Parallel);
    module = backend::CpuModule::compile({&k});
    fn = module->lookup("vm");
  }
  void run(std::vector<float> &x, std::vector<float> *y, std::vector<float> &out) const {
    out.resize(x.size());
    std::vector<uint8_t *> bufs{reinterpret_cast<uint8_t *>(x.data())};
    if (y)
      bufs.push_back(reinterpret_cast<uint8_t *>(y->data()));
    bufs.push_back(reinterpret_cast<uint8_t *>(out.data()));
    int64_t n = static_cast<int64_t>(x.size());
    fn(bufs.data(), &n, 0, n);
  }
};

std::vector<float> specials() {
  float m = std::numeric_limits<float>::denorm_min();
  std::vector<float> v{0.0f, INFINITY, NAN, m, 2 * m, FLT_MIN, FLT_MAX, 1.0f, 0.5f, 2.0f, 0.625f, 0.7853982f, 1.5707964f,
                       3.1415927f, 88.72283f, 88.72284f, 89.0f, 103.9721f, 103.97208f, 104.0f, 10.0546f, 10.06f, 11.0f, 44.0f,
                       9.0f, 0x1p24f, 0x1p24f + 2, 16777215.0f, 0x1p-12f, 0x1p-126f, 1e-30f, 1e30f, 3.0f, 0.3f};
  for (size_t k = 0, end = v.size(); k < end; ++k)
    v.push_back(-v[k]);
  return v;
}

// The sweep of unary inputs: every `stride`-th bit pattern from a per-function offset, then
// the special values; fed to `check` in chunks.
void sweepUnary(const std::function<void(std::vector<float> &)> &check) {
  const char *all = std::getenv("DNNC_VM_EXHAUSTIVE");
  const uint64_t stride = all && *all == '1' ? 1 : 61, chunk = uint64_t(1) << 22;
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += stride) {
    x.push_back(fromBits(static_cast<uint32_t>(u)));
    if (x.size() == chunk) {
      check(x);
      x.clear();
    }
  }
  std::vector<float> s = specials();
  x.insert(x.end(), s.begin(), s.end());
  check(x);
}

struct Worst {
  double ulp = 0;
  float x = 0, y = 0, got = 0;
  double exact = 0;
  void note(double e, float xi, float yi, float g, double ex) {
    if (e > ulp || std::isnan(e))
      *this = {e, xi, yi, g, ex};
  }
};

// Denormal results count in units of 2^-149, as any: silu's x e^x below x = -87 too.
void checkUnary(const char *name, ir::OpKind op, double (*exact)(double), double bound) {
  Kernel k(op, false);
  Worst worst;
  std::vector<float> out;
  sweepUnary([&](std::vector<float> &x) {
    k.run(x, nullptr, out);
    for (size_t i = 0; i < x.size(); ++i)
      worst.note(ulpError(out[i], exact(x[i])), x[i], 0, out[i], exact(x[i]));
  });
  std::printf("%-8s max %.3f ulp at x = %a (got %a, exact %a)\n", name, worst.ulp, worst.x, worst.got, worst.exact);
  INFO(name << ": " << worst.ulp << " ulp at x = " << worst.x << ": got " << worst.got << ", exact " << worst.exact);
  CHECK(worst.ulp <= bound);
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double silu(double x) { return x / (1 + std::exp(-x)); }
double gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

} // namespace

TEST_CASE("vector exp and log are within 1 ulp over the f32 range", "[vecmath]") {
  checkUnary("exp", ir::OpKind::Exp, [](double x) { return std::exp(x); }, 1);
  checkUnary("log", ir::OpKind::Log, [](double x) { return std::log(x); }, 1);
}

TEST_CASE("vector tanh, erf and gelu are within their stated ulp", "[vecmath]") {
  checkUnary("tanh", ir::OpKind::Tanh, [](double x) { return std::tanh(x); }, 1.5);
  checkUnary("erf", ir::OpKind::Erf, [](double x) { return std::erf(x); }, 2.5);
  checkUnary("gelu", ir::OpKind::Gelu, gelu, 7);
}

TEST_CASE("vector sin and cos are within 1 ulp, also for huge arguments", "[vecmath]") {
  checkUnary("sin", ir::OpKind::Sin, [](double x) { return std::sin(x); }, 1);
  checkUnary("cos", ir::OpKind::Cos, [](double x) { return std::cos(x); }, 1);
}

TEST_CASE("sigmoid and silu built on the vector exp", "[vecmath]") {
  checkUnary("sigmoid", ir::OpKind::Sigmoid, sigmoid, 3);
  checkUnary("silu", ir::OpKind::Silu, silu, 4);
}

// pow over pairs: 4096 x values (a stride of the bit patterns, the specials, values near 1)
// times 4096 y values (a stride, the specials, small integers and halves).
TEST_CASE("vector pow is within 1 ulp with C99's special cases", "[vecmath]") {
  std::vector<float> xs = specials(), ys = specials();
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += (uint64_t(1) << 32) / 3900)
    xs.push_back(fromBits(static_cast<uint32_t>(u))), ys.push_back(fromBits(static_cast<uint32_t>(u)));
  for (int k = -64; k <= 64; ++k) {
    xs.push_back(1.0f + k * 0x1p-20f);
    ys.push_back(k * 0.5f);
  }
  Kernel k(ir::OpKind::Pow, true);
  Worst worst;
  std::vector<float> x, y, out;
  for (float xi : xs) {
    x.assign(ys.size(), xi);
    y = ys;
    k.run(x, &y, out);
    for (size_t i = 0; i < y.size(); ++i) {
      double exact = std::pow(static_cast<double>(xi), static_cast<double>(y[i]));
      worst.note(ulpError(out[i], exact), xi, y[i], out[i], exact);
    }
  }
  std::printf("%-8s max %.3f ulp at x = %a, y = %a (got %a, exact %a)\n", "pow", worst.ulp, worst.x, worst.y, worst.got, worst.exact);
  INFO("pow: " << worst.ulp << " ulp at x = " << worst.x << ", y = " << worst.y << ": got " << worst.got << ", exact " << worst.exact);
  CHECK(worst.ulp <= 1);
}
