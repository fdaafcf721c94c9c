// The compiler as a library, for the programs that drive it (tools/dnnc and the Python
// module in python/): choosing a model of a loaded program, reading and checking dim
// bindings, compiling for a device by name, and a model's named values as `dnnc shapes`
// lists them. Nothing here prints; errors are returned or thrown as DataError.
#pragma once

#include "backend/Compile.h"
#include "frontend/Sema.h"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>

namespace dnnc::api {

using Binding = std::map<std::string, int64_t>;

// Parses "B=4,T=16" (commas or spaces); returns an error message or "".
std::string parseBinding(const std::string &text, Binding &out);
// Checks that every bound dim exists in the model and lies in its range; "" when fine.
std::string checkBinding(const ModelInfo &m, const Binding &b);
// Chooses `name`, or the only/"main" model; null with a message when none fits.
ModelInfo *selectModel(Program &p, const std::string &name, std::string &error);

// The devices a model runs on by name: auto (the GPU when one works, else the CPU), cpu,
// cuda, cuda-sim, and ref (the reference interpreter). "" when `device` is one of them,
// else the error text that lists them.
std::string checkDeviceName(const std::string &device);
// `g` compiled for `device` (checkDeviceName's names): null for ref, after optimizing `g`
// as the compiled devices do (the interpreter runs the optimized graph too). DataError
// when the device asked for by name cannot run here ("--device cuda: no GPU ...", with
// `flag` spelling the choice as the caller takes it: "--device ", "device="). A training
// step's recompute decisions (its versions by shape) go to `recompute` when given.
std::unique_ptr<rt::Executable> compileForDevice(ir::Graph &g, const std::string &device, const backend::CompileOptions &options,
                                                 const std::string &flag = "--device ",
                                                 ir::RecomputeReport *recompute = nullptr);

// Every named value of `m` with its type under `b`, as `dnnc shapes --json` prints it:
// {"model": M, "values": [{"name", "line", "type", "dtype", "dims", "class"}, ...]}.
nlohmann::json shapesJson(const ModelInfo &m, const Binding &b);

} // namespace dnnc::api
