// A .dnn text lowered (unfused) for a target, and its kernels by name, for the unit tests
// of schedules (GpuMappingTest, CpuParallelTest).
#pragma once

#include "backend/Compile.h"
#include "frontend/Sema.h"

#include <catch2/catch.hpp>

#include <memory>
#include <string>

namespace dnnc::test {

struct LoweredProgram {
  Program program; // owns the graph the kernels were lowered from
  lower::LoweredGraph kernels;
};

inline std::unique_ptr<LoweredProgram> lowerUnfused(const char *text, const std::string &target) {
  auto l = std::make_unique<LoweredProgram>();
  DiagnosticEngine diags(l->program.sources());
  REQUIRE(l->program.loadText("test.dnn", text, diags));
  backend::CompileOptions unfused;
  unfused.passes.fuse = false;
  l->kernels = backend::lowerFor(*l->program.models().at(0).graph, *backend::findTarget(target), unfused).kernels;
  return l;
}

// The kernel whose name ends in `suffix` ("_softmax").
inline const kir::Kernel &kernelOf(const lower::LoweredGraph &l, const std::string &suffix) {
  for (const kir::Kernel &k : l.kernels)
    if (k.name.size() >= suffix.size() && k.name.compare(k.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return k;
  FAIL("no kernel named *" << suffix);
  throw 0;
}

} // namespace dnnc::test
