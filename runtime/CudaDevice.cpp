// The CUDA device on the driver API, loaded with dlopen (see CudaDevice.h).
#include "runtime/CudaDevice.h"

#include "runtime/DeviceMirror.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <algorithm>
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

// Device memory through the driver, copies on the device's stream. A download waits for
// it: the host reads what it copied next.
struct DriverMemory : DeviceMirror::Memory {
  CUstream stream = nullptr;
  uint64_t allocate(size_t bytes) override {
    CUdeviceptr p = 0;
    check(driver().memAlloc(&p, bytes), "cuMemAlloc");
    return p;
  }
  void release(uint64_t address) override { driver().memFree(address); }
  void upload(uint64_t to, const void *from, size_t bytes) override {
    check(driver().memcpyHtoD(to, from, bytes, stream), "copying an operand to the GPU");
  }
  void download(void *to, uint64_t from, size_t bytes) override {
    check(driver().memcpyDtoH(to, from, bytes, stream), "copying a result back");
    check(driver().streamSynchronize(stream), "copying a result back");
  }
};

struct CudaDevice::Impl {
  CudaProbe probe;
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  CUmodule module = nullptr;
  std::vector<CUfunction> fns;
  DriverMemory memory;
  std::unique_ptr<DeviceMirror> mirror; // results stay on the GPU between launches
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
  impl_->memory.stream = impl_->stream;
  impl_->mirror = std::make_unique<DeviceMirror>(impl_->memory);
  check(d.moduleLoadData(&impl_->module, ptx.c_str()), "loading the PTX (cuModuleLoadData)");
  for (const KernelInfo &k : kernels) {
    CUfunction f;
    check(d.moduleGetFunction(&f, impl_->module, (k.entry.empty() ? k.name : k.entry).c_str()), "cuModuleGetFunction");
    impl_->fns.push_back(f);
  }
}

CudaDevice::~CudaDevice() {
  driver().ctxSetCurrent(impl_->ctx);
  impl_->mirror.reset(); // frees the device buffers
  if (impl_->module)
    driver().moduleUnload(impl_->module);
}

std::string CudaDevice::name() const { return fmt::format("cuda: {} ({})", impl_->probe.name, impl_->probe.arch()); }

void CudaDevice::beginRun(const std::vector<const Tensor *> &params, std::vector<Range> arenas) {
  check(driver().ctxSetCurrent(impl_->ctx), "cuCtxSetCurrent");
  impl_->mirror->beginRun(params, std::move(arenas));
}

void CudaDevice::hostReads(const std::vector<const Tensor *> &tensors, bool hostMayAllocate) {
  check(driver().ctxSetCurrent(impl_->ctx), "cuCtxSetCurrent");
  impl_->mirror->hostReads(tensors, hostMayAllocate);
}

void CudaDevice::setArenas(std::vector<Range> arenas) { impl_->mirror->setArenas(std::move(arenas)); }
void CudaDevice::setResident(std::vector<Range> ranges) {
  check(driver().ctxSetCurrent(impl_->ctx), "cuCtxSetCurrent");
  impl_->mirror->setResident(std::move(ranges));
}

void CudaDevice::paramsChanged() { impl_->mirror->paramsChanged(); }

std::string CudaDevice::copies() const { return impl_->mirror->copies(); }

void CudaDevice::launch(size_t kernel, const KernelInfo &info, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
                        const Launch &launch) {
  const Driver &d = driver();
  check(d.ctxSetCurrent(impl_->ctx), "cuCtxSetCurrent");
  // Operands the GPU already holds (earlier results, params) are not copied again;
  // results stay there until the host reads them (syncToHost).
  std::vector<CUdeviceptr> buffers;
  for (const Tensor *t : in)
    buffers.push_back(impl_->mirror->input(*t));
  for (const Tensor &t : out)
    buffers.push_back(impl_->mirror->output(t));
  std::vector<void *> params;
  for (CUdeviceptr &p : buffers)
    params.push_back(&p);
  std::vector<int64_t> dimValues(launch.dims);
  for (int64_t &v : dimValues)
    params.push_back(&v);
  // The kernels loop over the grid, so a bounded grid covers any extent.
  auto blocks = [](int64_t wanted) { return static_cast<unsigned>(std::clamp<int64_t>(wanted, 1, 65535)); };
  check(d.launchKernel(impl_->fns.at(kernel), blocks(launch.gridX), blocks(launch.gridY), 1,
                       static_cast<unsigned>(info.blockThreads), 1, 1, 0, impl_->stream, params.data(), nullptr),
        fmt::format("launching {}", info.name).c_str());
  // Waiting here names the kernel that failed, and lets the next launch reuse buffers.
  check(d.streamSynchronize(impl_->stream), fmt::format("running {}", info.name).c_str());
  impl_->mirror->launchDone();
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
void CudaDevice::beginRun(const std::vector<const Tensor *> &, std::vector<Range>) {}
void CudaDevice::hostReads(const std::vector<const Tensor *> &, bool) {}
void CudaDevice::setArenas(std::vector<Range>) {}
void CudaDevice::setResident(std::vector<Range>) {}
void CudaDevice::paramsChanged() {}
std::string CudaDevice::copies() const { return {}; }

#endif

} // namespace dnnc::rt
