// Device-side copies of host tensors, for devices with memory of their own (CUDA, the
// simulated GPU): kernel results stay on the device while kernels consume them, inputs
// are uploaded once per run and reused, params once while their values stay, and device
// buffers are pooled.
//
// Contract (the runtime's part): only kernels write the arenas (the memory plan's), each
// result in full; the host reads tensor data only after hostReads() for those tensors;
// params do not change during a run except by a kernel's in-place update (an output over
// a param's memory), nor between runs unless paramsChanged() says so (the contract of
// the CPU's prepacked weights too: Executable::paramsChanged; each of several mirrors
// over the same params must be told, and a training step's executables are told before
// every run); the arenas move only through setArenas(). Resident memory (setResident)
// is not changed by the host while it is resident.
// Mirrors are keyed by host address. A result written where older mirrors overlap
// replaces them (the memory plan never overlaps live values). Results in the arenas stay
// on the device across host phases (the host never frees or writes arena memory); when
// the host may allocate, mirrors of other host memory are forgotten, since that memory
// may be freed and reused.
#pragma once

#include "base/Tensor.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dnnc::rt {

class DeviceMirror {
public:
  // Device memory: addresses are 64-bit values, and an address plus an offset inside its
  // allocation addresses those bytes (as device pointers do).
  struct Memory {
    virtual ~Memory() = default;
    virtual uint64_t allocate(size_t bytes) = 0;
    virtual void release(uint64_t address) = 0;
    virtual void upload(uint64_t to, const void *from, size_t bytes) = 0;
    virtual void download(void *to, uint64_t from, size_t bytes) = 0;
  };
  explicit DeviceMirror(Memory &memory) : memory_(memory) {}
  ~DeviceMirror();
  DeviceMirror(const DeviceMirror &) = delete;
  DeviceMirror &operator=(const DeviceMirror &) = delete;

  using Range = std::pair<const uint8_t *, size_t>; // host memory: start, bytes
  // A run starts: every mirror is forgotten but resident memory's and those of `params`
  // (and of views inside them) that earlier runs uploaded: params are constants, so a
  // model's weights cross to the device once, not on every call.
  void beginRun(const std::vector<const Tensor *> &params, std::vector<Range> arenas);
  // The host's params have new values (loaded afresh, perhaps into memory an old param
  // had): their device copies are forgotten, except resident memory's (the device's are
  // the newest there). Called between runs.
  void paramsChanged();
  // Host memory whose device copy stays the newest across runs (Device::setResident): its
  // mirrors survive beginRun and host phases, and come back only through hostReads.
  // Mirrors of memory that leaves the set are copied back where newer, and forgotten.
  void setResident(std::vector<Range> ranges);
  // The host reads `tensors` next: results the device holds newer are copied back. With
  // hostMayAllocate (host ops, control flow), mirrors outside the arenas and params are
  // then forgotten (copied back first where the device's are newer).
  void hostReads(const std::vector<const Tensor *> &tensors, bool hostMayAllocate);
  // The arenas are now `arenas` (one grew, and moved): mirrors of the old ones' memory are
  // forgotten. None may hold a result newer than the host (none is live when an arena
  // is sized): InternalError otherwise.
  void setArenas(std::vector<Range> arenas);
  // The device address holding `t`'s values, uploading them unless the device has them.
  uint64_t input(const Tensor &t);
  // The device address a kernel writes result `t` at; its values are the device's after.
  uint64_t output(const Tensor &t);
  // The launch that used the addresses handed out since the last call has finished:
  // buffers forgotten meanwhile may be reused from now on (never within one launch).
  void launchDone();
  size_t uploads() const { return uploads_; }     // for tests and stats
  size_t downloads() const { return downloads_; }
  // Those of them of resident memory (setResident): the params and state a training step
  // updates, uploaded once and downloaded when the caller reads them.
  size_t residentUploads() const { return residentUploads_; }
  size_t residentDownloads() const { return residentDownloads_; }
  std::string copies() const; // "N uploads, M downloads ..." (Device::copies)

private:
  struct Mirror {
    size_t bytes = 0, capacity = 0;
    uint64_t address = 0;
    bool deviceNewer = false, param = false;
  };
  uint64_t acquire(size_t bytes, size_t &capacity);
  void recycle(const Mirror &m);
  // Mirrors overlapping [begin, begin + bytes) that a new one there replaces: all but
  // params' (which change only when `written` over), except one at `begin` itself.
  void forgetOverlapping(const uint8_t *begin, size_t bytes, bool written);
  void download(const uint8_t *host, Mirror &m);
  void downloadOverlapping(const uint8_t *begin, size_t bytes);
  bool inside(const std::vector<Range> &ranges, const uint8_t *begin, size_t bytes) const;
  uint64_t emptyBuffer(); // what empty tensors are given: no mirror

  Memory &memory_;
  std::map<const uint8_t *, Mirror> mirrors_;
  std::vector<Range> params_, arenas_, resident_;
  std::multimap<size_t, uint64_t> pool_; // free device buffers by capacity
  std::vector<std::pair<size_t, uint64_t>> retired_; // forgotten during the current launch
  size_t uploads_ = 0, downloads_ = 0, residentUploads_ = 0, residentDownloads_ = 0;
  uint64_t empty_ = 0;
};

} // namespace dnnc::rt
