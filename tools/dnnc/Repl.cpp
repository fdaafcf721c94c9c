// `dnnc repl`: shape queries on a loaded model; nothing runs.
#include "tools/dnnc/Driver.h"

#include <editline/readline.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>

namespace dnnc::tool {
namespace {

const char *kHelp = R"(commands:
  :load FILE            load a .dnn file
  :model M              focus on model M
  :type NAME            the type of a named value
  EXPR                  the inferred type of an expression (nothing runs)
  :bind B=8 T=128       bind dims (range-checked); types then print with numbers
  :unbind T             remove a binding
  :dims                 each dim: range, binding, where it was introduced
  :class NAME           the shape class of the op behind NAME, and why
  :help                 this text
  :quit                 leave
)";

class Repl {
public:
  Repl(std::vector<std::string> includes, bool interactive) : includes_(std::move(includes)), interactive_(interactive) {}

  void load(const std::string &file) {
    auto p = std::make_unique<Program>();
    for (const std::string &i : includes_)
      p->addIncludePath(i);
    DiagnosticEngine diags(p->sources());
    bool ok = p->load(file, diags);
    diags.render(std::cerr);
    if (!ok)
      return;
    program_ = std::move(p);
    binding_.clear();
    std::string err;
    model_ = selectModel(*program_, "", err);
    if (!model_)
      std::cerr << "error: " << err << "\n";
    else if (interactive_) // scripted sessions print results only
      out(fmt::format("loaded {} (model {})", file, model_->name));
  }

  // Handles one line; false when the session should end.
  bool handle(const std::string &raw) {
    std::string line = trim(raw);
    if (line.empty() || line[0] == '#')
      return true;
    std::istringstream in(line);
    std::string cmd, arg;
    in >> cmd;
    std::getline(in, arg);
    arg = trim(arg);
    if (cmd == ":quit" || cmd == ":q" || cmd == ":exit")
      return false;
    if (cmd == ":help")
      std::cout << kHelp;
    else if (cmd == ":load")
      arg.empty() ? error(":load needs a file") : load(arg);
    else if (line[0] != ':')
      typeExpr(line);
    else if (!model_)
      error("no model is loaded; use :load FILE");
    else if (cmd == ":model")
      focus(arg);
    else if (cmd == ":type")
      typeName(arg);
    else if (cmd == ":bind")
      bind(arg);
    else if (cmd == ":unbind")
      unbind(arg);
    else if (cmd == ":dims")
      dims();
    else if (cmd == ":class")
      shapeClass(arg);
    else if (cmd == ":mem" || cmd == ":solve")
      error(fmt::format("{} needs the memory planner, which this build of dnnc does not include yet", cmd));
    else
      error(fmt::format("unknown command '{}'; :help lists them", cmd));
    return true;
  }

private:
  static std::string trim(const std::string &s) {
    size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
  }
  void out(const std::string &s) { std::cout << s << "\n" << std::flush; }
  void error(const std::string &s) { std::cerr << "error: " << s << "\n" << std::flush; }

  const NamedValue *find(const std::string &name) {
    const NamedValue *found = nullptr;
    for (const NamedValue &v : model_->values)
      if (v.name == name)
        found = &v; // the last assignment wins
    if (!found)
      error(fmt::format("model '{}' has no value named '{}'", model_->name, name));
    return found;
  }

  void focus(const std::string &name) {
    if (ModelInfo *m = program_->model(name)) {
      model_ = m;
      binding_.clear();
      out("model " + name);
    } else {
      error(fmt::format("no model named '{}'", name));
    }
  }

  void typeName(const std::string &name) {
    if (const NamedValue *v = find(name))
      out(fmt::format("{}: {}", name, v->type.str(&binding_)));
  }

  void typeExpr(const std::string &text) {
    if (!model_) {
      error("no model is loaded; use :load FILE");
      return;
    }
    DiagnosticEngine diags(program_->sources());
    auto t = program_->typeExpression(*model_, text, diags);
    diags.render(std::cerr);
    if (!t)
      return;
    if (t->tensor)
      out(t->tensor->str(&binding_));
    else if (t->dim)
      out(fmt::format("dim {}", ir::dimText(*t->dim, &binding_)));
    else
      out(t->text);
  }

  void bind(const std::string &arg) {
    Binding b = binding_;
    std::string err = parseBinding(arg, b);
    if (err.empty())
      err = checkBinding(*model_, b);
    if (!err.empty())
      return error(err);
    binding_ = b;
    std::string text;
    for (auto &[k, v] : binding_)
      text += (text.empty() ? "" : ", ") + fmt::format("{} = {}", k, v);
    out("bound " + text);
  }

  void unbind(const std::string &arg) {
    std::istringstream in(arg);
    std::string name;
    while (in >> name)
      if (!binding_.erase(name))
        error(fmt::format("'{}' is not bound", name));
  }

  void dims() {
    for (const DimInfo &d : model_->dims) {
      sym::Interval r = model_->analyzer.range(d.name);
      std::string range = fmt::format("{}..{}", r.lo, r.hi >= sym::Interval::kInf ? std::string("inf") : std::to_string(r.hi));
      auto it = binding_.find(d.name);
      std::string bound = it == binding_.end() ? "unbound" : fmt::format("= {}", it->second);
      std::string where = d.loc.valid() ? fmt::format("{}:{}:{}", program_->sources().path(d.loc.begin.file),
                                                      d.loc.begin.line, d.loc.begin.col)
                                        : "";
      out(fmt::format("{}  in {}  {}  {} {}", d.name, range, bound, d.origin, where));
    }
  }

  void shapeClass(const std::string &name) {
    if (const NamedValue *v = find(name))
      out(fmt::format("{}: {} ({}): {}", name, ir::shapeClassName(v->shapeClass), v->op, ir::shapeClassMeaning(v->shapeClass)));
  }

  std::vector<std::string> includes_;
  bool interactive_;
  std::unique_ptr<Program> program_;
  ModelInfo *model_ = nullptr;
  Binding binding_;
};

} // namespace

int runRepl(const std::string &file, const std::vector<std::string> &includes) {
  bool interactive = isatty(STDIN_FILENO);
  Repl repl(includes, interactive);
  if (!file.empty())
    repl.load(file);
  std::string history;
  if (interactive) {
    if (const char *home = std::getenv("HOME"))
      history = std::string(home) + "/.dnnc_history";
    using_history();
    if (!history.empty())
      read_history(history.c_str());
    while (char *line = readline("dnnc> ")) {
      std::unique_ptr<char, decltype(&free)> owned(line, &free);
      if (*line)
        add_history(line);
      if (!repl.handle(line))
        break;
    }
    if (!history.empty())
      write_history(history.c_str());
    return kOk;
  }
  std::string line;
  while (std::getline(std::cin, line))
    if (!repl.handle(line))
      break;
  return kOk;
}

} // namespace dnnc::tool
