// `dnnc repl` as a library: one session over a loaded model, fed a line at a time (the
// driver reads lines from the terminal or stdin; the REPL fuzzer feeds its own).
#pragma once

#include "ir/transforms/PassManager.h"

#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace dnnc::tool {

class Repl;

class ReplSession {
public:
  // Results go to `out`, errors and diagnostics to `err`; `interactive` sessions also
  // confirm what they load. `passes`: the pipeline's options for :mem's plan.
  ReplSession(std::vector<std::string> includes, bool interactive, std::ostream &out, std::ostream &err,
              ir::PassOptions passes = {});
  ~ReplSession();
  void load(const std::string &file);
  // Handles one line; false when the session should end (:quit). A user's mistake is a
  // message on `err`; an exception out of here is a bug in dnnc.
  bool handle(const std::string &line);

private:
  std::unique_ptr<Repl> impl_;
};

} // namespace dnnc::tool
