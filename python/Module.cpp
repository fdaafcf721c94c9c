// The Python module's native part, dnnc._dnnc (python/dnnc/__init__.py wraps it; see
// docs/python.md): a model loaded from .dnn source or a built artifact, run on NumPy
// arrays, and queried for its inputs, outputs, dims, shapes and memory; and training.
//
// Contract: inputs whose memory already has the model's layout (C-contiguous, the
// input's dtype, native byte order) are read in place, others are copied once (counted in
// Model.input_copies); outputs are handed to NumPy without a copy (each array owns the
// runtime's buffer). The GIL is released while a model runs or trains; runs take turns,
// one at a time in the process (the CPU device's thread pool serves one caller at a time,
// and an executable keeps per-call state), so a second thread's run waits. Every error dnnc
// reports is a dnnc.Error carrying dnnc's text: a source's diagnostics rendered with
// file:line:col, a bad input named with the type the model wants.
#include "api/Memory.h"
#include "api/Models.h"
#include "api/Training.h"
#include "ir/graph/Serialize.h"
#include "ir/interp/Interpreter.h"
#include "ir/transforms/Recompute.h"
#include "runtime/Artifact.h"
#include "runtime/ModelIO.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

namespace py = pybind11;
using namespace dnnc;
using rt::Tensor;

namespace {

std::string trimEnd(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.pop_back();
  return s;
}

// A dnnc error on its way to Python as dnnc.Error.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The NumPy dtype of a tensor dtype (bf16 has none: such values travel as float32).
py::dtype numpyDType(DType d) {
  switch (d) {
  case DType::F16: return py::dtype("float16");
  case DType::I32: return py::dtype::of<int32_t>();
  case DType::I64: return py::dtype::of<int64_t>();
  case DType::Bool: return py::dtype("bool");
  default: return py::dtype::of<float>();
  }
}

// The tensor dtype of a NumPy dtype, if dnnc has one.
std::optional<DType> dtypeOf(const py::dtype &dt) {
  for (DType d : {DType::F32, DType::F16, DType::I32, DType::I64, DType::Bool})
    if (dt.equal(numpyDType(d)))
      return d;
  return std::nullopt;
}

// The model as loaded, with what its queries and runs keep between calls.
struct Model {
  std::string path;
  std::unique_ptr<Program> program; // from source: owns the graph
  ModelInfo *info = nullptr;        // from source: its named values and dims
  std::unique_ptr<ir::Graph> written; // the model before compiling, for memory plans
  std::unique_ptr<rt::Executable> exe; // compiled (null: the reference interpreter)
  std::unique_ptr<interp::Interpreter> oracle;
  const ir::Graph *graph = nullptr; // what runs
  std::string device;
  rt::WeightsSource weights;
  std::set<std::string> paramDims;  // the dims params' shapes use: params load again when these change
  std::optional<std::map<std::string, int64_t>> paramsAt;
  std::map<std::string, Tensor> params;
  std::optional<api::PlannedMemory> plan; // made on the first memory query
  backend::CompileOptions options;
  size_t inputCopies = 0;
};

// Held while a model runs or trains, with the GIL released (see the contract above).
std::mutex running;

void requireSource(const Model &m, const char *what) {
  if (!m.info)
    throw Failure(fmt::format("{}() needs the model's .dnn source: '{}' is a built artifact", what, m.path));
}

// **dims as a binding checked against the model's dims.
std::map<std::string, int64_t> bindingOf(const Model &m, const py::dict &dims) {
  std::map<std::string, int64_t> b;
  for (auto [k, v] : dims) {
    std::string name = py::str(k);
    if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v))
      throw Failure(fmt::format("the value of dim '{}' must be an int, not {}", name, std::string(py::str(v.get_type().attr("__name__")))));
    try {
      b[name] = v.cast<int64_t>();
    } catch (const py::cast_error &) { // past 64 bits either way
      throw Failure(fmt::format("the value of dim '{}' does not fit in 64 bits: {}", name, std::string(py::str(v))));
    }
  }
  if (std::string err = api::checkBinding(*m.info, b); !err.empty())
    throw Failure(err);
  return b;
}

// The params for a run under `b`, loaded again only when a dim their shapes use changed
// (params are constants: most models load them once). Returns the loader's notes.
std::vector<std::string> loadParams(Model &m, const ir::Binding &b) {
  std::map<std::string, int64_t> at;
  for (const std::string &d : m.paramDims)
    if (b.count(d))
      at[d] = b.at(d);
  if (m.paramsAt && *m.paramsAt == at)
    return {};
  rt::Weights loaded = rt::loadWeights(*m.graph, m.weights, b);
  m.params = std::move(loaded.params);
  m.paramsAt = at;
  if (m.exe)
    m.exe->paramsChanged(); // loaded afresh: their memory may be a freed param's
  return std::move(loaded.notes);
}

// The loader's notes as UserWarnings: a param filled from its initializer is never silent
// (interop.md §15).
void warn(const std::vector<std::string> &notes) {
  for (const std::string &note : notes)
    if (PyErr_WarnEx(PyExc_UserWarning, ("dnnc: " + note).c_str(), 2) < 0)
      throw py::error_already_set();
}

std::unique_ptr<Model> load(const std::string &path, const std::string &model, const std::string &device,
                            const std::vector<std::string> &weights, const std::vector<std::string> &includes, bool strict,
                            bool randomParams, uint64_t seed) {
  if (std::string err = api::checkDeviceName(device); !err.empty())
    throw Failure(err);
  auto m = std::make_unique<Model>();
  m->path = path;
  m->device = device;
  if (rt::isArtifact(path)) {
    if (device == "cuda-sim" || device == "ref")
      throw Failure(fmt::format("device='{}' compiles the model: give it the .dnn file, not an artifact", device));
    rt::ArtifactInfo info;
    m->exe = rt::loadArtifact(path, &info);
    if (device != "auto" && device != info.target)
      throw Failure(fmt::format("'{}' was built for {}, not for device='{}' (rebuild it with --target {})", path, info.target,
                                device, device));
    if (!model.empty() && model != m->exe->graph().name)
      throw Failure(fmt::format("'{}' holds model '{}', not '{}'", path, m->exe->graph().name, model));
    m->graph = &m->exe->graph();
  } else {
    m->program = std::make_unique<Program>();
    for (const std::string &i : includes)
      m->program->addIncludePath(i);
    DiagnosticEngine diags(m->program->sources());
    bool ok = m->program->load(path, diags);
    if (!ok) {
      std::ostringstream text;
      diags.render(text);
      throw Failure(trimEnd(text.str()));
    }
    std::string err;
    m->info = api::selectModel(*m->program, model, err);
    if (!m->info)
      throw Failure(err);
    m->written = ir::cloneGraph(*m->info->graph);
    {
      // Compiling takes a while and needs no Python; it may use the CPU pool a run uses.
      py::gil_scoped_release released;
      std::lock_guard<std::mutex> lock(running);
      m->exe = api::compileForDevice(*m->info->graph, device, m->options, "device=");
    }
    if (!m->exe)
      m->oracle = std::make_unique<interp::Interpreter>(*m->info->graph);
    m->graph = m->info->graph.get();
  }
  m->weights = {weights, randomParams || weights.empty(), true, strict, seed,
                "pass weights=[...] with each file that holds them, or random_params=True to fill them from their initializers"};
  for (const ir::Op *op : m->graph->body.ops)
    if (op->kind == ir::OpKind::Param)
      for (sym::ExprRef d : op->results[0]->type.dims)
        for (const std::string &n : sym::freeVars(d))
          m->paramDims.insert(n);
  if (m->paramDims.empty()) // their shapes are known: a missing or mistyped param is an error of the load
    warn(loadParams(*m, {}));
  return m;
}

// One input as a tensor over the array's memory; `keep` holds that array (a contiguous
// copy when the given layout is not the model's) until the run is over.
Tensor inputTensor(Model &m, const ir::Value &arg, py::handle given, py::array &keep) {
  keep = py::array::ensure(given);
  if (!keep)
    throw Failure(fmt::format("input '{}' must be an array ({}), not {}", arg.name, arg.type.str(),
                              std::string(py::str(given.get_type().attr("__name__")))));
  DType want = arg.type.dtype;
  py::dtype dt = numpyDType(want);
  std::vector<int64_t> shape(keep.shape(), keep.shape() + keep.ndim());
  if (!keep.dtype().equal(dt)) {
    std::string got = py::str(keep.dtype());
    std::string np = py::str(dt);
    throw Failure(fmt::format("input '{}' must be {} (numpy.{}) but is a {} array{}: convert it with .astype(numpy.{})", arg.name,
                              arg.type.str(), np, got, fmt::format(" of shape ({})", fmt::join(shape, ", ")), np));
  }
  bool inPlace = (keep.flags() & py::array::c_style) && want != DType::BF16;
  if (!inPlace) {
    keep = py::array(py::module_::import("numpy").attr("ascontiguousarray")(keep));
    ++m.inputCopies;
  }
  if (want == DType::BF16) { // float32 values rounded to bf16
    Tensor t = Tensor::zeros(DType::BF16, shape);
    const float *src = static_cast<const float *>(keep.data());
    for (size_t k = 0; k < t.numel(); ++k)
      t.set(k, src[k]);
    return t;
  }
  return Tensor::view(want, shape, static_cast<uint8_t *>(const_cast<void *>(keep.data())));
}

py::array outputArray(Tensor t) {
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
  if (t.dtype == DType::BF16) {
    py::array_t<float> a(shape);
    float *dst = a.mutable_data();
    for (size_t k = 0; k < t.numel(); ++k)
      dst[k] = static_cast<float>(t.get(k));
    return a;
  }
  if (t.isView()) // outputs own their memory (Executable::run copies them out); a view would not outlive its arena
    t = Tensor(t);
  auto *owned = new Tensor(std::move(t));
  py::capsule base(owned, [](void *p) { delete static_cast<Tensor *>(p); });
  return py::array(numpyDType(owned->dtype), shape, owned->data(), base);
}

py::object run(Model &m, const py::args &positional, const py::kwargs &named) {
  const ir::Graph &g = *m.graph;
  const auto &args = g.body.args;
  std::vector<py::object> given(args.size());
  if (positional.size() > args.size())
    throw Failure(fmt::format("model '{}' takes {} inputs, but {} were given", g.name, args.size(), positional.size()));
  for (size_t k = 0; k < positional.size(); ++k)
    given[k] = positional[k];
  for (auto [key, value] : named) {
    std::string name = py::str(key);
    auto it = std::find_if(args.begin(), args.end(), [&](const ir::Value *a) { return a->name == name; });
    if (it == args.end()) {
      std::vector<std::string> names;
      for (const ir::Value *a : args)
        names.push_back(a->name);
      throw Failure(fmt::format("model '{}' has no input '{}' (its inputs: {})", g.name, name, fmt::join(names, ", ")));
    }
    size_t k = static_cast<size_t>(it - args.begin());
    if (given[k])
      throw Failure(fmt::format("input '{}' is given twice", name));
    given[k] = py::reinterpret_borrow<py::object>(value);
  }
  std::vector<std::string> missing;
  for (size_t k = 0; k < args.size(); ++k)
    if (!given[k])
      missing.push_back(fmt::format("'{}' ({})", args[k]->name, args[k]->type.str()));
  if (!missing.empty())
    throw Failure(fmt::format("no value for {} of model '{}': {}",
                              missing.size() == 1 ? "an input" : fmt::format("{} inputs", missing.size()), g.name,
                              fmt::join(missing, ", ")));
  std::vector<py::array> keep(args.size());
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < args.size(); ++k)
    inputs.push_back(inputTensor(m, *args[k], given[k], keep[k]));
  std::vector<Tensor> outputs;
  std::vector<std::string> notes;
  {
    py::gil_scoped_release released;
    std::lock_guard<std::mutex> lock(running);
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : inputs)
      ptrs.push_back(&t);
    ir::Binding b = ir::bindInputs(g, ptrs, {});
    notes = loadParams(m, b);
    outputs = m.exe ? m.exe->run(inputs, m.params) : m.oracle->run(inputs, m.params);
  }
  warn(notes);
  if (outputs.size() == 1)
    return outputArray(std::move(outputs[0]));
  py::tuple result(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k)
    result[k] = outputArray(std::move(outputs[k]));
  return result;
}

// {name: type} of `values` (inputs or outputs) in order.
py::dict types(const ir::Graph &g, bool outputs) {
  py::dict d;
  if (outputs) {
    for (size_t k = 0; k < g.body.yields.size(); ++k)
      d[py::str(ir::outputName(g, k))] = g.body.yields[k]->type.str();
  } else {
    for (const ir::Value *a : g.body.args)
      d[py::str(a->name)] = a->type.str();
  }
  return d;
}

py::dict dims(const Model &m) {
  py::dict d;
  for (auto &[name, range] : m.graph->dimRanges)
    d[py::str(name)] = py::make_tuple(range.first, range.second >= sym::Interval::kInf ? py::object(py::none()) : py::int_(range.second));
  return d;
}

py::object shapes(const Model &m, const py::kwargs &dims) {
  requireSource(m, "shapes");
  nlohmann::json j = api::shapesJson(*m.info, bindingOf(m, dims));
  return py::module_::import("json").attr("loads")(j.dump());
}

const ir::MemoryPlan &planOf(Model &m) {
  if (!m.plan)
    m.plan = api::planMemory(*m.written, m.options);
  return m.plan->plan;
}

// A byte count under `b`: an int when every dim it uses is bound, else its formula.
py::object bytesValue(Model &m, sym::ExprRef e, const std::map<std::string, int64_t> &b) {
  if (auto v = sym::evaluate(e, b))
    return py::int_(*v);
  return py::str(api::bytesText(e, b, m.info->analyzer));
}

py::dict memory(Model &m, const py::kwargs &dims) {
  requireSource(m, "memory");
  std::map<std::string, int64_t> b = bindingOf(m, dims);
  api::MemorySummary s = api::summarizeMemory(*m.written, planOf(m));
  py::dict d;
  d["arena"] = bytesValue(m, s.arena, b);
  d["late_arena"] = s.lateArena ? bytesValue(m, s.lateArena, b) : py::object(py::none());
  d["params"] = bytesValue(m, s.params, b);
  d["param_tensors"] = s.paramCount;
  d["inputs"] = bytesValue(m, s.inputs, b);
  d["outputs"] = bytesValue(m, s.outputs, b);
  return d;
}

py::object solveMemory(Model &m, py::object limit, const std::string &dim, const py::kwargs &bound) {
  requireSource(m, "solve_memory");
  double bytes = 0;
  if (py::isinstance<py::str>(limit)) {
    std::string text = limit.cast<std::string>();
    std::optional<int64_t> parsed = ir::parseByteSize(text);
    if (!parsed)
      throw Failure(ir::badMemoryBudget(text));
    bytes = static_cast<double>(*parsed);
  } else if (py::isinstance<py::int_>(limit) || py::isinstance<py::float_>(limit)) {
    bytes = limit.cast<double>();
    if (!std::isfinite(bytes) || bytes < 0)
      throw Failure(fmt::format("the limit must be a non-negative number of bytes, not {}", bytes));
  } else {
    throw Failure("the limit is a number of bytes or a size such as \"16GiB\"");
  }
  std::map<std::string, int64_t> b = bindingOf(m, bound);
  auto range = m.written->dimRanges.find(dim);
  if (range == m.written->dimRanges.end())
    throw Failure(fmt::format("model '{}' has no dim '{}'", m.info->name, dim));
  api::SolveResult r = api::solveLargest(planOf(m).arena, dim, range->second, b, bytes);
  switch (r.kind) {
  case api::SolveResult::Unbound:
    throw Failure(fmt::format("the arena also depends on {}: pass it, e.g. solve_memory(..., '{}', {}=...)", r.unbound, dim, r.unbound));
  case api::SolveResult::None: return py::none();
  default: return py::int_(r.value);
  }
}

py::dict train(const std::string &path, const py::dict &data, const std::string &model, const std::string &optimizer, double lr,
               int64_t batch, int64_t epochs, int64_t steps, const std::vector<std::string> &weights, const std::string &save,
               int64_t saveEvery, const std::string &resume, uint64_t seed, const std::string &device, double weightDecay,
               std::optional<double> momentum, const std::vector<std::string> &includes, bool strict) {
  api::TrainConfig c;
  std::optional<ir::Optimizer> kind = ir::parseOptimizer(optimizer);
  if (!kind)
    throw Failure(ir::unknownOptimizer(optimizer));
  c.optimizer = *kind;
  c.optimizer.weightDecay = weightDecay;
  if (momentum)
    c.optimizer.momentum = *momentum;
  c.optimizerName = optimizer;
  if (batch < 1 || epochs < 1 || steps < 0 || saveEvery < 0)
    throw Failure("batch and epochs take positive counts, steps and save_every counts");
  if (!std::isfinite(lr) || lr <= 0 || !std::isfinite(weightDecay) || weightDecay < 0)
    throw Failure("lr takes a positive number, weight_decay a non-negative one");
  if (!resume.empty() && !weights.empty())
    throw Failure("resume continues from the params in its checkpoint: it takes no weights");
  if (saveEvery > 0 && save.empty())
    throw Failure("save_every needs save (where the checkpoints go)");
  if (std::string err = api::checkDeviceName(device); !err.empty())
    throw Failure(err);
  c.batch = batch, c.epochs = epochs, c.steps = steps, c.lr = lr, c.weights = weights, c.save = save, c.saveEvery = saveEvery;
  c.resume = resume, c.seed = seed, c.device = device, c.strict = strict;
  c.dataOption = "data";
  for (auto [key, value] : data) {
    std::string name = py::str(key);
    py::array a = py::array::ensure(value);
    if (!a)
      throw Failure(fmt::format("the data for input '{}' must be an array", name));
    a = py::array(py::module_::import("numpy").attr("ascontiguousarray")(a));
    std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
    std::optional<DType> d = dtypeOf(a.dtype());
    if (!d)
      throw Failure(fmt::format("the data for input '{}' are {}: dnnc takes float32, float16, int32, int64 or bool", name,
                                std::string(py::str(a.dtype()))));
    Tensor t = Tensor::zeros(*d, shape);
    std::memcpy(t.data(), a.data(), t.byteSize());
    c.arrays.emplace_back(name, std::move(t));
  }
  Program program;
  for (const std::string &i : includes)
    program.addIncludePath(i);
  DiagnosticEngine diags(program.sources());
  if (!program.load(path, diags)) {
    std::ostringstream text;
    diags.render(text);
    throw Failure(trimEnd(text.str()));
  }
  std::string err;
  ModelInfo *info = api::selectModel(program, model, err);
  if (!info)
    throw Failure(err);
  std::vector<double> losses;
  std::vector<std::map<std::string, double>> metrics;
  std::vector<std::string> notes;
  api::TrainHooks hooks;
  hooks.note = [&](const std::string &n) { notes.push_back(n); };
  hooks.step = [&](const api::StepReport &r) {
    losses.push_back(r.loss);
    metrics.emplace_back(r.metrics.begin(), r.metrics.end());
  };
  api::TrainResult result;
  {
    py::gil_scoped_release released;
    std::lock_guard<std::mutex> lock(running);
    result = api::train(*info->graph, c, hooks);
  }
  warn(notes);
  py::dict params;
  for (auto &[name, t] : result.params)
    params[py::str(name)] = outputArray(std::move(t));
  py::dict out;
  out["losses"] = losses;
  out["metrics"] = metrics;
  out["params"] = params;
  out["steps"] = result.steps;
  return out;
}

} // namespace

PYBIND11_MODULE(_dnnc, mod) {
  mod.doc() = "dnnc's native module (use the dnnc package: import dnnc)";
  static py::exception<Failure> error(mod, "Error");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const Failure &e) {
      error(e.what());
    } catch (const DataError &e) {
      error(e.what());
    } catch (const InternalError &e) {
      error((std::string("internal error (a bug in dnnc): ") + e.what()).c_str());
    } catch (const CompileError &e) {
      error(e.what());
    }
  });
  py::class_<Model>(mod, "Model")
      .def("__call__", &run)
      .def_property_readonly("inputs", [](const Model &m) { return types(*m.graph, false); })
      .def_property_readonly("outputs", [](const Model &m) { return types(*m.graph, true); })
      .def_property_readonly("dims", &dims)
      .def_property_readonly("name", [](const Model &m) { return m.graph->name; })
      .def_property_readonly("device", [](const Model &m) { return m.exe ? m.exe->device().name() : std::string("ref"); })
      .def_property_readonly("input_copies", [](const Model &m) { return m.inputCopies; })
      .def("shapes", &shapes)
      .def("memory", &memory)
      .def("solve_memory", &solveMemory);
  mod.def("load", &load, py::arg("path"), py::arg("model") = "", py::arg("device") = "auto",
          py::arg("weights") = std::vector<std::string>{}, py::arg("include") = std::vector<std::string>{}, py::arg("strict") = false,
          py::arg("random_params") = false, py::arg("seed") = 0);
  mod.def("train", &train, py::arg("path"), py::arg("data"), py::arg("model") = "", py::arg("optimizer") = "sgd",
          py::arg("lr") = 1e-3, py::arg("batch") = 32, py::arg("epochs") = 1, py::arg("steps") = 0,
          py::arg("weights") = std::vector<std::string>{}, py::arg("save") = "", py::arg("save_every") = 0, py::arg("resume") = "",
          py::arg("seed") = 0, py::arg("device") = "auto", py::arg("weight_decay") = 0.0, py::arg("momentum") = py::none(),
          py::arg("include") = std::vector<std::string>{}, py::arg("strict") = false);
}
