// Device-side copies of host tensors: what is uploaded and downloaded when, on a
// counting heap "device" whose memory is apart from the host's.
#include "runtime/DeviceMirror.h"

#include <catch2/catch.hpp>

#include <cstring>

using namespace dnnc;
using rt::DeviceMirror;
using rt::Tensor;

namespace {

struct Heap : DeviceMirror::Memory {
  int live = 0;
  uint64_t allocate(size_t bytes) override {
    ++live;
    return reinterpret_cast<uint64_t>(new uint8_t[bytes]);
  }
  void release(uint64_t address) override {
    --live;
    delete[] reinterpret_cast<uint8_t *>(address);
  }
  void upload(uint64_t to, const void *from, size_t bytes) override { std::memcpy(reinterpret_cast<void *>(to), from, bytes); }
  void download(void *to, uint64_t from, size_t bytes) override { std::memcpy(to, reinterpret_cast<const void *>(from), bytes); }
};

float *onDevice(uint64_t address) { return reinterpret_cast<float *>(address); }

// A mirror over a 64-byte arena (host memory only "kernels" write).
struct ArenaMirror {
  Heap heap;
  DeviceMirror mirror{heap};
  std::vector<uint8_t> arena = std::vector<uint8_t>(64, 0);
  // `n` floats of the arena from byte `offset`.
  Tensor view(size_t offset, int64_t n) { return Tensor::view(DType::F32, {n}, arena.data() + offset); }
  void beginRun() { mirror.beginRun({}, {{arena.data(), arena.size()}}); }
};

Tensor filled(std::vector<int64_t> shape, float v) {
  Tensor t = Tensor::zeros(DType::F32, std::move(shape));
  for (size_t k = 0; k < t.numel(); ++k)
    t.set(k, v);
  return t;
}

TEST_CASE("results stay on the device until the host reads them", "[mirror]") {
  Heap heap;
  {
    DeviceMirror mirror(heap);
    Tensor param = filled({4}, 2), input = filled({4}, 1), result = Tensor::zeros(DType::F32, {4});
    mirror.beginRun({&param}, {});
    uint64_t p = mirror.input(param), x = mirror.input(input);
    CHECK(mirror.uploads() == 2);
    CHECK(mirror.input(param) == p); // already there
    uint64_t r = mirror.output(result);
    for (int k = 0; k < 4; ++k) // the "kernel"
      onDevice(r)[k] = onDevice(p)[k] + onDevice(x)[k];
    mirror.launchDone();
    CHECK(mirror.input(result) == r); // the next kernel reads it in place
    CHECK(mirror.uploads() == 2);
    CHECK(result.get(0) == 0); // the host's copy is stale until the host reads it
    mirror.hostReads({&result}, false);
    CHECK(mirror.downloads() == 1);
    CHECK(result.get(3) == 3);
    CHECK(mirror.input(input) == x); // nothing forgotten: the host allocated nothing
    mirror.hostReads({}, true);
    mirror.input(param); // params stay when the host may allocate
    CHECK(mirror.uploads() == 2);
    mirror.input(input); // other host memory is forgotten: it may have been reused
    CHECK(mirror.uploads() == 3);
    mirror.beginRun({&param}, {}); // a new run: the param is still on the device, the input not
    CHECK(mirror.input(param) == p);
    CHECK(mirror.uploads() == 3);
    mirror.input(input);
    CHECK(mirror.uploads() == 4);
  }
  CHECK(heap.live == 0); // every device buffer freed
}

TEST_CASE("params cross to the device once until the caller says their values changed", "[mirror]") {
  Heap heap;
  {
    DeviceMirror mirror(heap);
    Tensor param = filled({4}, 2), other = filled({4}, 5), result = Tensor::zeros(DType::F32, {4});
    mirror.beginRun({&param}, {});
    uint64_t p = mirror.input(param);
    for (int run = 0; run < 3; ++run) { // the same params: no upload
      mirror.beginRun({&param}, {});
      CHECK(mirror.input(param) == p);
    }
    CHECK(mirror.uploads() == 1);
    // New values in the same memory (a reload): uploaded again after paramsChanged.
    for (int k = 0; k < 4; ++k)
      param.set(k, 7);
    mirror.paramsChanged();
    mirror.beginRun({&param}, {});
    CHECK(onDevice(mirror.input(param))[2] == 7);
    CHECK(mirror.uploads() == 2);
    // A run whose params are other memory forgets the old params' copies.
    mirror.beginRun({&other}, {});
    mirror.input(param);
    CHECK(mirror.uploads() == 3);
    // A kernel's update written over a param (read first as the param) makes a result,
    // not a param's copy: the next run uploads the host's values (read back) again.
    mirror.beginRun({&param}, {});
    uint64_t in = mirror.input(param);
    CHECK(mirror.uploads() == 4);
    uint64_t r = mirror.output(param);
    for (int k = 0; k < 4; ++k)
      onDevice(r)[k] = onDevice(in)[k] + 2;
    mirror.launchDone();
    mirror.hostReads({&param}, false);
    CHECK(param.get(0) == 9);
    mirror.beginRun({&param}, {});
    CHECK(onDevice(mirror.input(param))[0] == 9);
    CHECK(mirror.uploads() == 5);
    // Resident memory's copy is the newest: paramsChanged leaves it.
    mirror.setResident({{param.data(), param.byteSize()}});
    mirror.beginRun({&param}, {});
    mirror.input(param);
    mirror.paramsChanged();
    mirror.beginRun({&param}, {});
    mirror.input(param);
    CHECK(mirror.uploads() == 5); // the copy made before it became resident, kept
    mirror.setResident({});
    (void)result;
  }
  CHECK(heap.live == 0);
}

TEST_CASE_METHOD(ArenaMirror, "results in the arenas stay on the device across host phases", "[mirror]") {
  beginRun();
  Tensor a = view(0, 4), b = view(16, 4);
  onDevice(mirror.output(a))[0] = 5;
  onDevice(mirror.output(b))[0] = 6;
  mirror.launchDone();
  mirror.hostReads({&b}, true); // a host op reads b only
  CHECK(mirror.downloads() == 1);
  CHECK(view(0, 1).get(0) == 0); // a is still the device's
  CHECK(view(16, 1).get(0) == 6);
  mirror.input(a);
  CHECK(mirror.uploads() == 0);
  mirror.hostReads({&a}, true);
  CHECK(view(0, 1).get(0) == 5);
  CHECK(mirror.downloads() == 2);
}

TEST_CASE_METHOD(ArenaMirror, "a result replaces the dead results it overlaps; reads of partly newer ranges copy back first",
                 "[mirror]") {
  beginRun();
  Tensor a = view(0, 8), b = view(16, 8);
  onDevice(mirror.output(a))[0] = 5;
  mirror.launchDone();
  onDevice(mirror.output(b))[0] = 7; // overlaps a, which the plan says is dead
  mirror.launchDone();
  Tensor all = view(0, 16);
  mirror.hostReads({&all}, false);
  CHECK(mirror.downloads() == 1); // only b: a stale a must not overwrite it
  CHECK(view(16, 1).get(0) == 7);

  Tensor c = view(0, 4);
  onDevice(mirror.output(c))[1] = 9;
  mirror.launchDone();
  mirror.input(view(4, 2)); // a view into c's bytes: c comes back before the upload
  CHECK(view(4, 1).get(0) == 9);
  CHECK(mirror.downloads() == 2);
}

TEST_CASE_METHOD(ArenaMirror, "buffers forgotten during a launch are not reused in it", "[mirror]") {
  mirror.beginRun({}, {});
  uint64_t first = mirror.output(view(0, 8));
  mirror.launchDone();
  uint64_t second = mirror.output(view(8, 4)); // forgets the first mirror ...
  uint64_t third = mirror.output(view(32, 8));
  CHECK(third != first); // ... but its buffer waits for the launch to finish
  CHECK(second != first);
}

TEST_CASE("a param read whole after a view of its first row replaces the view's mirror", "[mirror]") {
  Heap heap;
  {
    DeviceMirror mirror(heap);
    Tensor param = filled({2, 4}, 3);
    mirror.beginRun({&param}, {});
    mirror.input(Tensor::view(DType::F32, {4}, param.data())); // w[0]
    uint64_t whole = mirror.input(param);
    CHECK(onDevice(whole)[7] == 3);
    CHECK(heap.live == 2); // the view's buffer waits in the pool
  }
  CHECK(heap.live == 0);
}

TEST_CASE_METHOD(ArenaMirror, "an arena that moves while the device holds a result in it is an internal error", "[mirror]") {
  std::vector<uint8_t> moved(128, 0);
  beginRun();
  mirror.output(view(0, 4));
  CHECK_THROWS_WITH(mirror.setArenas({{moved.data(), moved.size()}}), Catch::Contains("arena memory that moved"));
}

} // namespace

TEST_CASE("an empty result at a live value's address leaves that value's mirror alone", "[mirror]") {
  ArenaMirror a;
  a.beginRun();
  Tensor live = a.view(0, 4), empty = a.view(0, 0); // the plan may put an empty value anywhere
  uint64_t r = a.mirror.output(live);
  for (int k = 0; k < 4; ++k)
    onDevice(r)[k] = static_cast<float>(k + 1);
  a.mirror.launchDone();
  uint64_t e = a.mirror.output(empty); // a kernel over nothing
  CHECK(e != r);
  a.mirror.launchDone();
  CHECK(a.mirror.input(live) == r);
  a.mirror.hostReads({&live}, false);
  CHECK(live.get(3) == 4.0f); // once read back as the arena's stale zeros
}

TEST_CASE("resident params and state stay on the device across runs until the host reads them", "[mirror]") {
  Heap heap;
  {
    DeviceMirror mirror(heap);
    Tensor w = filled({2, 4}, 1), m = filled({8}, 0);
    mirror.setResident({{w.data(), w.byteSize()}, {m.data(), m.byteSize()}});
    for (int run = 1; run <= 3; ++run) {
      mirror.beginRun({&w}, {});
      // A layer's row `w[1]` read as a view, then the update kernel: reads w and m and
      // writes both over themselves (w += 1 + m, m += 1).
      uint64_t row = mirror.input(Tensor::view(DType::F32, {4}, w.data() + 16));
      uint64_t wIn = mirror.input(w), mIn = mirror.input(m);
      CHECK(onDevice(row)[0] == static_cast<float>(1 + run * (run - 1) / 2)); // the newest w, not the host's
      uint64_t wOut = mirror.output(w), mOut = mirror.output(m);
      for (int k = 0; k < 8; ++k) {
        float mk = onDevice(mIn)[k];
        onDevice(wOut)[k] = onDevice(wIn)[k] + 1 + mk;
        onDevice(mOut)[k] = mk + 1;
      }
      mirror.launchDone();
      mirror.hostReads({}, true); // a host op: resident memory is not copied back
    }
    // Uploaded once (w, its row in the first run, m); never downloaded until read.
    CHECK(mirror.uploads() == 3);
    CHECK(mirror.residentUploads() == 3);
    CHECK(mirror.downloads() == 0);
    CHECK(w.get(0) == 1.0f);
    mirror.hostReads({&w, &m}, false);
    CHECK(w.get(7) == 1.0f + 3 + (0 + 1 + 2)); // three updates
    CHECK(m.get(0) == 3.0f);
    CHECK(mirror.residentDownloads() == 2);
    mirror.output(m); // newer on the device again, then no longer resident: copied back
    mirror.launchDone();
    mirror.setResident({});
    CHECK(mirror.downloads() == 3);
  }
  CHECK(heap.live == 0);
}
