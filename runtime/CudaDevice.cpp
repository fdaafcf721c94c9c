// The CUDA device on the driver API, loaded with dlopen (see CudaDevice.h).
#include "runtime/CudaDevice.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <algorithm>
#include <bit>
#include <map>
#include <mutex>

#ifdef DNNC_HAVE_CUDA_H
#include <cuda.h>
#endif

namespace dnnc::rt {

#ifdef DNNC_HAVE_CUDA_H
namespace {

// The driver entry points dnnc uses, resolved by their versioned symbol names.
struct Driver {
  void *handle = nullptr;
  std::string error;
  decltype(&::cuInit) init;
  decltype(&::cuDeviceGetCount) deviceGetCount;
  decltype(&::cuDeviceGet) deviceGet;
  decltype(&::cuDeviceGetName) deviceGetName;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute;
  decltype(&::cuDevicePrimaryCtxRetain) primaryCtxRetain;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent;
  decltype(&::cuStreamCreate) streamCreate;
  decltype(&::cuStreamSynchronize) streamSynchronize;
  decltype(&::cuModuleLoadData) moduleLoadData;
  decltype(&::cuModuleGetFunction) moduleGetFunction;
  decltype(&::cuModuleUnload) moduleUnload;
  decltype(&::cuMemAlloc_v2) memAlloc;
  decltype(&::cuMemFree_v2) memFree;
  decltype(&::cuMemcpyHtoDAsync_v2) memcpyHtoD;
  decltype(&::cuMemcpyDtoHAsync_v2) memcpyDtoH;
  decltype(&::cuLaunchKernel) launchKernel;
  decltype(&::cuGetErrorName) getErrorName;
};

const Driver &driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    d.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d.handle) {
      d.error = fmt::format("no CUDA driver on this machine (libcuda.so.1: {})", dlerror());
      return;
    }
    bool missing = false;
    auto get = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(d.handle, name));
      if (!fn && !missing) {
        missing = true;
        d.error = fmt::format("the CUDA driver lacks {} (too old a driver?)", name);
      }
    };
    get(d.init, "cuInit");
    get(d.deviceGetCount, "cuDeviceGetCount");
    get(d.deviceGet, "cuDeviceGet");
    get(d.deviceGetName, "cuDeviceGetName");
    get(d.deviceGetAttribute, "cuDeviceGetAttribute");
    get(d.primaryCtxRetain, "cuDevicePrimaryCtxRetain");
    get(d.ctxSetCurrent, "cuCtxSetCurrent");
    get(d.streamCreate, "cuStreamCreate");
    get(d.streamSynchronize, "cuStreamSynchronize");
    get(d.moduleLoadData, "cuModuleLoadData");
    get(d.moduleGetFunction, "cuModuleGetFunction");
    get(d.moduleUnload, "cuModuleUnload");
    get(d.memAlloc, "cuMemAlloc_v2");
    get(d.memFree, "cuMemFree_v2");
    get(d.memcpyHtoD, "cuMemcpyHtoDAsync_v2");
    get(d.memcpyDtoH, "cuMemcpyDtoHAsync_v2");
    get(d.launchKernel, "cuLaunchKernel");
    get(d.getErrorName, "cuGetErrorName");
    if (missing)
      return;
    if (CUresult r = d.init(0); r != CUDA_SUCCESS) {
      const char *name = nullptr;
      d.getErrorName(r, &name);
      d.error = fmt::format("the CUDA driver found no usable GPU (cuInit: {})", name ? name : "unknown error");
    }
  });
  return d;
}

void check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS)
    return;
  const char *name = nullptr;
  driver().getErrorName(r, &name);
  throw DataError(fmt::format("CUDA: {} failed: {}", what, name ? name : std::to_string(static_cast<int>(r))));
}

} // namespace

CudaProbe probeCuda() {
  CudaProbe p;
  const Driver &d = driver();
  if (!d.error.empty()) {
    p.error = d.error;
    return p;
  }
  int count = 0;
  if (d.deviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    p.error = "the CUDA driver reports no GPU";
    return p;
  }
  CUdevice dev;
  char name[256] = {};
  if (d.deviceGet(&dev, 0) != CUDA_SUCCESS || d.deviceGetName(name, sizeof name, dev) != CUDA_SUCCESS ||
      d.deviceGetAttribute(&p.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
      d.deviceGetAttribute(&p.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS) {
    p.error = "cannot query GPU 0";
    return p;
  }
  p.name = name;
  p.ok = true;
  return p;
}

struct CudaDevice::Impl {
  CudaProbe probe;
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  CUmodule module = nullptr;
  std::vector<CUfunction> fns;
  // Device buffers of finished launches, by size class (powers of two from 256 bytes):
  // cuMemAlloc and cuMemFree (which synchronizes) would otherwise cost more than most
  // kernels. Freed with the device.
  std::multimap<size_t, CUdeviceptr> pool;
};

CudaDevice::CudaDevice(const std::string &ptx, const std::vector<KernelInfo> &kernels) : impl_(std::make_unique<Impl>()) {
  impl_->probe = probeCuda();
  if (!impl_->probe.ok)
    throw DataError(impl_->probe.error);
  const Driver &d = driver();
  CUdevice dev;
  check(d.deviceGet(&dev, 0), "cuDeviceGet");
  check(d.primaryCtxRetain(&impl_->ctx, dev), "cuDevicePrimaryCtxRetain");
  check(d.ctxSetCurrent(impl_->ctx), "cuCtxSetCurrent");
  check(d.streamCreate(&impl_->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(d.moduleLoadData(&impl_->module, ptx.c_str()), "loading the PTX (cuModuleLoadData)");
  for (const KernelInfo &k : kernels) {
    CUfunction f;
    check(d.moduleGetFunction(&f, impl_->module, k.name.c_str()), "cuModuleGetFunction");
    impl_->fns.push_back(f);
  }
}

CudaDevice::~CudaDevice() {
  for (auto &[bytes, p] : impl_->pool)
    driver().memFree(p);
  if (impl_->module)
    driver().moduleUnload(impl_->module);
}

std::string CudaDevice::name() const { return fmt::format("cuda: {} ({})", impl_->probe.name, impl_->probe.arch()); }

void CudaDevice::launch(size_t kernel, const KernelInfo &info, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
                        const Launch &launch) {
  const Driver &d = driver();
  check(d.ctxSetCurrent(impl_->ctx), "cuCtxSetCurrent");
  std::vector<std::pair<size_t, CUdeviceptr>> buffers; // (size class, buffer)
  // Device buffers live for this launch: back to the pool once it has finished, freed
  // when it fails (a kernel may still be running on them).
  struct Release {
    Impl &impl;
    std::vector<std::pair<size_t, CUdeviceptr>> &b;
    bool finished = false;
    ~Release() {
      for (auto [bytes, p] : b)
        if (finished)
          impl.pool.emplace(bytes, p);
        else
          driver().memFree(p);
    }
  } release{*impl_, buffers};
  auto alloc = [&](size_t bytes) {
    size_t sizeClass = std::max<size_t>(std::bit_ceil(bytes), 256);
    CUdeviceptr p = 0;
    if (auto it = impl_->pool.find(sizeClass); it != impl_->pool.end()) {
      p = it->second;
      impl_->pool.erase(it);
    } else {
      check(d.memAlloc(&p, sizeClass), "cuMemAlloc");
    }
    buffers.emplace_back(sizeClass, p);
    return p;
  };
  for (const Tensor *t : in) {
    CUdeviceptr p = alloc(t->byteSize());
    if (t->byteSize())
      check(d.memcpyHtoD(p, t->data(), t->byteSize(), impl_->stream), "copying an operand to the GPU");
  }
  for (const Tensor &t : out)
    alloc(t.byteSize());
  std::vector<void *> params;
  for (auto &[bytes, p] : buffers)
    params.push_back(&p);
  std::vector<int64_t> dimValues(launch.dims);
  for (int64_t &v : dimValues)
    params.push_back(&v);
  // The kernels loop over the grid, so a bounded grid covers any extent.
  auto blocks = [](int64_t wanted) { return static_cast<unsigned>(std::clamp<int64_t>(wanted, 1, 65535)); };
  check(d.launchKernel(impl_->fns.at(kernel), blocks(launch.gridX), blocks(launch.gridY), 1,
                       static_cast<unsigned>(info.blockThreads), 1, 1, 0, impl_->stream, params.data(), nullptr),
        fmt::format("launching {}", info.name).c_str());
  size_t base = in.size();
  for (size_t k = 0; k < out.size(); ++k)
    if (out[k].byteSize())
      check(d.memcpyDtoH(out[k].data(), buffers[base + k].second, out[k].byteSize(), impl_->stream), "copying a result back");
  check(d.streamSynchronize(impl_->stream), fmt::format("running {}", info.name).c_str());
  release.finished = true;
}

#else // built without cuda.h

CudaProbe probeCuda() {
  CudaProbe p;
  p.error = "this dnnc was built without CUDA's cuda.h, so it has no CUDA device (install the CUDA toolkit and rebuild)";
  return p;
}
struct CudaDevice::Impl {};
CudaDevice::CudaDevice(const std::string &, const std::vector<KernelInfo> &) { throw DataError(probeCuda().error); }
CudaDevice::~CudaDevice() = default;
std::string CudaDevice::name() const { return "cuda (unavailable)"; }
void CudaDevice::launch(size_t, const KernelInfo &, const std::vector<const Tensor *> &, std::vector<Tensor> &,
                        const Launch &) {}

#endif

} // namespace dnnc::rt
