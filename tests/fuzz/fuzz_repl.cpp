// libFuzzer harness: the REPL's command parser and evaluator. One session over
// examples/transformer.dnn takes each input as lines of commands (`:load` lines are
// skipped: they read files). A message on the error stream is a normal outcome; an
// exception out of the session (dnnc would exit 3) or a crash is a finding.
#include "FuzzCommon.h"
#include "tools/dnnc/Repl.h"

#include <cstdint>
#include <cstdlib>
#include <sstream>

using namespace dnnc;

namespace {
std::ostringstream sink;
std::unique_ptr<tool::ReplSession> session;
size_t inputs = 0;

void fresh() {
  session = std::make_unique<tool::ReplSession>(std::vector<std::string>{}, false, sink, sink);
  session->load(DNNC_FUZZ_EXAMPLES_DIR "/transformer.dnn");
  session->handle(":type tokens"); // fails the harness at once if the model did not load
  if (sink.str().find("error") != std::string::npos)
    fuzz::finding("the REPL harness cannot load its model: " + sink.str());
}
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  setenv("DNNC_STDLIB", DNNC_FUZZ_STDLIB_DIR, 0);
  fresh();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A fresh session now and then: typed expressions accumulate in the session's sources.
  if (++inputs % 2000 == 0)
    fresh();
  std::string text(reinterpret_cast<const char *>(data), size);
  fuzz::guarded(
      [&] {
        session->handle(":model main"); // every input starts with no binding
        std::istringstream in(text);
        std::string line;
        while (std::getline(in, line)) {
          size_t b = line.find_first_not_of(" \t\r");
          if (b != std::string::npos && line.compare(b, 5, ":load") == 0)
            continue;
          if (!session->handle(line))
            break;
        }
      },
      [](const std::exception &) { return false; });
  sink.str("");
  return 0;
}
