// Device-side copies of host tensors (see DeviceMirror.h).
#include "runtime/DeviceMirror.h"

#include "base/Error.h"

#include <algorithm>
#include <bit>

namespace dnnc::rt {

DeviceMirror::~DeviceMirror() {
  for (auto &[host, m] : mirrors_)
    memory_.release(m.address);
  launchDone();
  for (auto &[capacity, address] : pool_)
    memory_.release(address);
  if (empty_)
    memory_.release(empty_);
}

uint64_t DeviceMirror::acquire(size_t bytes, size_t &capacity) {
  // Size classes of powers of two from 256 bytes: allocating and freeing device memory
  // costs more than most kernels.
  capacity = std::max<size_t>(std::bit_ceil(std::max<size_t>(bytes, 1)), 256);
  if (auto it = pool_.find(capacity); it != pool_.end()) {
    uint64_t address = it->second;
    pool_.erase(it);
    return address;
  }
  return memory_.allocate(capacity);
}

void DeviceMirror::recycle(const Mirror &m) { retired_.emplace_back(m.capacity, m.address); }

void DeviceMirror::launchDone() {
  for (auto [capacity, address] : retired_)
    pool_.emplace(capacity, address);
  retired_.clear();
}

void DeviceMirror::beginRun(const std::vector<const Tensor *> &params, std::vector<Range> arenas) {
  params_.clear();
  for (const Tensor *t : params)
    params_.emplace_back(t->data(), t->byteSize());
  for (auto it = mirrors_.begin(); it != mirrors_.end();) {
    Mirror &m = it->second;
    // Resident memory's copy is the newest; a param's (never written by a kernel: that
    // makes a result, no longer a param's mirror) is still the param's values.
    bool resident = inside(resident_, it->first, m.bytes), param = inside(params_, it->first, m.bytes);
    if (resident || (m.param && !m.deviceNewer && param)) {
      m.param = param;
      ++it;
      continue;
    }
    recycle(m);
    it = mirrors_.erase(it);
  }
  arenas_ = std::move(arenas);
  launchDone();
}

void DeviceMirror::paramsChanged() {
  for (auto it = mirrors_.begin(); it != mirrors_.end();) {
    if (!it->second.param || inside(resident_, it->first, it->second.bytes)) {
      ++it;
      continue;
    }
    recycle(it->second);
    it = mirrors_.erase(it);
  }
  launchDone();
}

bool DeviceMirror::inside(const std::vector<Range> &ranges, const uint8_t *begin, size_t bytes) const {
  return std::any_of(ranges.begin(), ranges.end(),
                     [&](const Range &r) { return r.first <= begin && begin + bytes <= r.first + r.second; });
}

void DeviceMirror::download(const uint8_t *host, Mirror &m) {
  if (m.deviceNewer && m.bytes) {
    memory_.download(const_cast<uint8_t *>(host), m.address, m.bytes);
    ++downloads_;
    residentDownloads_ += inside(resident_, host, m.bytes);
  }
  m.deviceNewer = false;
}

void DeviceMirror::downloadOverlapping(const uint8_t *begin, size_t bytes) {
  for (auto &[host, m] : mirrors_)
    if (m.deviceNewer && host < begin + bytes && begin < host + m.bytes)
      download(host, m);
}

void DeviceMirror::forgetOverlapping(const uint8_t *begin, size_t bytes, bool written) {
  for (auto it = mirrors_.begin(); it != mirrors_.end();) {
    const Mirror &m = it->second;
    bool overlaps = it->first < begin + std::max<size_t>(bytes, 1) && begin < it->first + std::max<size_t>(m.bytes, 1);
    // Params' mirrors stay valid (params change only by an update written over them),
    // except the one a new mirror replaces at its address.
    if (overlaps && (!m.param || written || it->first == begin)) {
      recycle(m);
      it = mirrors_.erase(it);
    } else {
      ++it;
    }
  }
}

uint64_t DeviceMirror::emptyBuffer() {
  // An empty tensor shares its host address with whatever the plan put there (it takes no
  // bytes), so it must neither replace nor reuse that value's mirror.
  if (!empty_) {
    size_t capacity = 0;
    empty_ = acquire(1, capacity);
  }
  return empty_;
}

uint64_t DeviceMirror::input(const Tensor &t) {
  const uint8_t *host = t.data();
  size_t bytes = t.byteSize();
  if (bytes == 0)
    return emptyBuffer();
  if (auto it = mirrors_.find(host); it != mirrors_.end() && it->second.bytes >= bytes)
    return it->second.address;
  // A view inside resident memory (a layer's row `w[l]` of a stacked param an update
  // wrote): the device's copy of the whole is the newest, so the view is read there.
  if (inside(resident_, host, bytes))
    for (auto it = mirrors_.upper_bound(host); it != mirrors_.begin();) {
      --it;
      if (it->first + it->second.bytes >= host + bytes && inside(resident_, it->first, it->second.bytes))
        return it->second.address + static_cast<uint64_t>(host - it->first);
    }
  // The host's copy is the one to upload, once what the device has newer of it is back.
  downloadOverlapping(host, bytes);
  forgetOverlapping(host, bytes, false);
  Mirror m;
  m.bytes = bytes;
  m.address = acquire(bytes, m.capacity);
  m.param = inside(params_, host, bytes);
  if (bytes) {
    memory_.upload(m.address, host, bytes);
    ++uploads_;
    residentUploads_ += inside(resident_, host, bytes);
  }
  mirrors_[host] = m;
  return m.address;
}

uint64_t DeviceMirror::output(const Tensor &t) {
  const uint8_t *host = t.data();
  size_t bytes = t.byteSize();
  if (bytes == 0)
    return emptyBuffer();
  // The buffer at this address is reused when it fits; older results this one overwrites
  // are dead.
  Mirror m;
  if (auto it = mirrors_.find(host); it != mirrors_.end() && !it->second.param && it->second.capacity >= bytes) {
    m = it->second;
    mirrors_.erase(it);
  } else {
    m.address = acquire(bytes, m.capacity);
  }
  forgetOverlapping(host, bytes, true); // views of a param an update overwrites too
  m.bytes = bytes;
  m.deviceNewer = true;
  mirrors_[host] = m;
  return m.address;
}

std::string DeviceMirror::copies() const {
  std::string text = std::to_string(uploads_) + " uploads, " + std::to_string(downloads_) + " downloads (all runs)";
  if (residentUploads_ || residentDownloads_)
    text += "; of memory kept on the device between runs: " + std::to_string(residentUploads_) + " uploads, " +
            std::to_string(residentDownloads_) + " downloads";
  return text;
}

void DeviceMirror::hostReads(const std::vector<const Tensor *> &tensors, bool hostMayAllocate) {
  for (const Tensor *t : tensors)
    downloadOverlapping(t->data(), t->byteSize());
  if (!hostMayAllocate)
    return;
  for (auto it = mirrors_.begin(); it != mirrors_.end();) {
    if (it->second.param || inside(arenas_, it->first, it->second.bytes) || inside(resident_, it->first, it->second.bytes)) {
      ++it;
      continue;
    }
    download(it->first, it->second);
    recycle(it->second);
    it = mirrors_.erase(it);
  }
}

void DeviceMirror::setResident(std::vector<Range> ranges) {
  for (auto it = mirrors_.begin(); it != mirrors_.end();) {
    if (!inside(resident_, it->first, it->second.bytes) || inside(ranges, it->first, it->second.bytes)) {
      ++it;
      continue;
    }
    download(it->first, it->second);
    recycle(it->second);
    it = mirrors_.erase(it);
  }
  resident_ = std::move(ranges);
  launchDone();
}

void DeviceMirror::setArenas(std::vector<Range> arenas) {
  for (auto it = mirrors_.begin(); it != mirrors_.end();) {
    const Mirror &m = it->second;
    if (!inside(arenas_, it->first, m.bytes) || inside(arenas, it->first, m.bytes)) {
      ++it;
      continue;
    }
    if (m.deviceNewer)
      throw InternalError("a result the device holds lives in arena memory that moved");
    recycle(m);
    it = mirrors_.erase(it);
  }
  arenas_ = std::move(arenas);
}

} // namespace dnnc::rt
