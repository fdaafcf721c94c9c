// libFuzzer harness: a .dnn source through the whole frontend (parser, imports, sema,
// graph construction with RDP, the verifier) and the diagnostics renderer. Failing with
// diagnostics is fine; an internal error, a failure without a diagnostic or a crash is a
// finding.
#include "FuzzCommon.h"
#include "frontend/Sema.h"
#include "ir/graph/Graph.h"
#include "ir/transforms/RankDimPropagation.h"

#include <cstdint>
#include <cstdlib>
#include <sstream>

using namespace dnnc;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  setenv("DNNC_STDLIB", DNNC_FUZZ_STDLIB_DIR, 0); // `import nn;` works from any directory
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  fuzz::guarded(
      [&] {
        Program p;
        DiagnosticEngine diags(p.sources());
        bool ok = p.loadText("fuzz.dnn", text, diags);
        std::ostringstream rendered;
        diags.render(rendered);
        if (!ok && !diags.hasErrors())
          fuzz::finding("loading failed without a diagnostic");
        if (ok && diags.hasErrors())
          fuzz::finding("loading succeeded with errors");
        if (!ok)
          return;
        for (ModelInfo &m : p.models()) {
          ir::verify(*m.graph, m.analyzer);              // InternalError: a finding (RDP agrees with the graph)
        }
      },
      [](const std::exception &) { return false; }); // the frontend reports user errors as diagnostics
  return 0;
}
