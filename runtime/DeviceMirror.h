// Device-side copies of host tensors, for devices with memory of their own (CUDA, the
// simulated GPU): kernel results stay on the device while kernels consume them, inputs
// are uploaded once and reused, params once per run, and device buffers are pooled.
//
// Contract (the runtime's part): only kernels write the planned arena, each result in
// full; host code reads tensor data only after syncToHost() (the interpreter's
// HostAccess hook, index checks, the end of a run); params do not change during a run.
// Mirrors are keyed by host address: a result written where an older mirror overlaps
// replaces it (the memory plan never overlaps live values), and syncToHost() forgets all
// but the params' mirrors, since the host may free and reuse memory after it.
#pragma once

#include "runtime/Tensor.h"

#include <cstdint>
#include <map>
#include <vector>

namespace dnnc::rt {

class DeviceMirror {
public:
  // Device memory: addresses are opaque 64-bit values.
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

  // A run starts: every mirror is forgotten (params may have changed since the last
  // run); those of `params` (and of views inside them) are kept until the next beginRun.
  void beginRun(const std::vector<const Tensor *> &params);
  // The device address holding `t`'s values, uploading them unless the device has them.
  uint64_t input(const Tensor &t);
  // The device address a kernel writes result `t` at; its values are the device's after.
  uint64_t output(const Tensor &t);
  // Copies every result the device holds newer than the host back, then forgets all
  // mirrors but the params'.
  void syncToHost();
  // The launch that used the addresses handed out since the last call has finished:
  // buffers forgotten meanwhile may be reused from now on (never within one launch).
  void launchDone();
  size_t uploads() const { return uploads_; }     // for tests and stats
  size_t downloads() const { return downloads_; }

private:
  struct Mirror {
    size_t bytes = 0, capacity = 0;
    uint64_t address = 0;
    bool deviceNewer = false, param = false;
  };
  uint64_t acquire(size_t bytes, size_t &capacity);
  void recycle(const Mirror &m);
  void forgetOverlapping(const uint8_t *begin, size_t bytes); // results this one overwrites
  bool overlapsNewer(const uint8_t *begin, size_t bytes) const;
  bool insideParam(const uint8_t *begin, size_t bytes) const;

  Memory &memory_;
  std::map<const uint8_t *, Mirror> mirrors_;
  std::map<const uint8_t *, size_t> params_; // their host bytes
  std::multimap<size_t, uint64_t> pool_; // free device buffers by capacity
  std::vector<std::pair<size_t, uint64_t>> retired_; // forgotten during the current launch
  size_t uploads_ = 0, downloads_ = 0;
};

} // namespace dnnc::rt
