// Reads an ONNX ModelProto (protobuf) into the importer's plain data (OnnxModel.h). The
// only file that includes the ONNX and protobuf headers: everything after it sees plain
// structs. Assumes nothing of the bytes: a malformed, truncated or unsupported file is a
// DataError naming the file, never a crash.
#include "import/OnnxModel.h"

#include "base/Error.h"

#include <onnx/onnx_pb.h>

#include <fmt/format.h>

#include <cstring>

namespace dnnc::onnx {

const char *elemTypeName(int t) {
  switch (t) {
  case kFloat: return "float";
  case kUint8: return "uint8";
  case kInt8: return "int8";
  case kUint16: return "uint16";
  case kInt16: return "int16";
  case kInt32: return "int32";
  case kInt64: return "int64";
  case kString: return "string";
  case kBool: return "bool";
  case kFloat16: return "float16";
  case kDouble: return "double";
  case kUint32: return "uint32";
  case kUint64: return "uint64";
  case kBFloat16: return "bfloat16";
  default: return "an unknown element type";
  }
}

std::optional<DType> dtypeOf(int t) {
  switch (t) {
  case kFloat: return DType::F32;
  case kFloat16: return DType::F16;
  case kBFloat16: return DType::BF16;
  case kInt32: return DType::I32;
  case kInt64: return DType::I64;
  case kBool: return DType::Bool;
  default: return std::nullopt;
  }
}

namespace {
// An attribute given with another kind than its op's (Softmax's axis as a string): a
// malformed model, not the default. (The importer names the file and the node.)
[[noreturn]] void wrongKind(const std::string &n, const char *want) {
  throw AttributeError(fmt::format("its attribute '{}' must be {}", n, want));
}
} // namespace

int64_t Node::intAttr(const std::string &n, int64_t dflt) const {
  const Attribute *a = attr(n);
  if (a && a->kind != Attribute::Kind::Int)
    wrongKind(n, "an int");
  return a ? a->i : dflt;
}
double Node::floatAttr(const std::string &n, double dflt) const {
  const Attribute *a = attr(n);
  if (a && a->kind != Attribute::Kind::Float && a->kind != Attribute::Kind::Int)
    wrongKind(n, "a float");
  return !a ? dflt : a->kind == Attribute::Kind::Float ? a->f : double(a->i);
}
std::string Node::stringAttr(const std::string &n, const std::string &dflt) const {
  const Attribute *a = attr(n);
  if (a && a->kind != Attribute::Kind::String)
    wrongKind(n, "a string");
  return a ? a->s : dflt;
}
std::vector<int64_t> Node::intsAttr(const std::string &n) const {
  const Attribute *a = attr(n);
  if (!a)
    return {};
  if (a->kind == Attribute::Kind::Int)
    return {a->i};
  if (a->kind != Attribute::Kind::Ints)
    wrongKind(n, "a list of ints");
  return a->ints;
}
std::string Node::where(size_t index) const {
  return name.empty() ? fmt::format("{} (node {})", op, index) : fmt::format("{} '{}'", op, name);
}

namespace {

struct Reader {
  std::string path;

  [[noreturn]] void fail(const std::string &what) const {
    throw DataError(fmt::format("{}: {}", path, what));
  }

  rt::Tensor tensor(const ::onnx::TensorProto &t, int &elemType) {
    elemType = t.data_type();
    std::string name = t.name().empty() ? "a constant" : "'" + t.name() + "'";
    if (t.data_location() == ::onnx::TensorProto::EXTERNAL)
      fail(fmt::format("tensor {} is stored in an external file, which dnnc import does not read (save the model "
                       "with its tensors inside: onnx.save(model, path, save_as_external_data=False))",
                       name));
    std::optional<DType> dt = elemType == kDouble ? std::optional<DType>(DType::F32) : dtypeOf(elemType);
    if (!dt)
      fail(fmt::format("tensor {} is {}, for which dnnc has no dtype (f32, f16, bf16, i32, i64, bool)", name,
                       elemTypeName(elemType)));
    std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
    uint64_t n = 1;
    for (int64_t d : shape) {
      if (d < 0 || (d > 0 && n > (uint64_t(1) << 40) / uint64_t(d)))
        fail(fmt::format("tensor {} has a bad shape", name));
      n *= uint64_t(d);
    }
    rt::Tensor out = rt::Tensor::zeros(*dt, shape);
    size_t elemBytes = elemType == kDouble ? 8 : dtypeBytes(*dt);
    if (t.has_raw_data()) {
      const std::string &raw = t.raw_data();
      if (raw.size() != n * elemBytes)
        fail(fmt::format("tensor {} holds {} bytes of data for {} elements of {}", name, raw.size(), n,
                         elemTypeName(elemType)));
      if (elemType == kDouble) {
        for (size_t k = 0; k < n; ++k) {
          double v;
          std::memcpy(&v, raw.data() + 8 * k, 8);
          out.set(k, v);
        }
      } else {
        std::memcpy(out.data(), raw.data(), raw.size());
      }
      return boolsAsZeroOrOne(std::move(out));
    }
    auto count = [&](size_t have) {
      if (have != n)
        fail(fmt::format("tensor {} holds {} values for shape with {} elements", name, have, n));
    };
    switch (elemType) {
    case kFloat:
      count(t.float_data_size());
      for (size_t k = 0; k < n; ++k)
        out.set(k, t.float_data(int(k)));
      break;
    case kDouble:
      count(t.double_data_size());
      for (size_t k = 0; k < n; ++k)
        out.set(k, t.double_data(int(k)));
      break;
    case kInt64:
      count(t.int64_data_size());
      for (size_t k = 0; k < n; ++k)
        out.setInt(k, t.int64_data(int(k)));
      break;
    case kFloat16:
    case kBFloat16:
      // ONNX keeps the 16 bits of each value in int32_data.
      count(t.int32_data_size());
      for (size_t k = 0; k < n; ++k) {
        uint16_t bits = uint16_t(t.int32_data(int(k)));
        std::memcpy(out.data() + 2 * k, &bits, 2);
      }
      break;
    default: // int32, bool
      count(t.int32_data_size());
      for (size_t k = 0; k < n; ++k)
        out.setInt(k, t.int32_data(int(k)));
      break;
    }
    return boolsAsZeroOrOne(std::move(out));
  }

  // A bool tensor's bytes as 0 or 1 (any nonzero byte is true): the weights file dnnc
  // writes from it holds bools as safetensors does, and its reader refuses other bytes.
  static rt::Tensor boolsAsZeroOrOne(rt::Tensor t) {
    if (t.dtype == DType::Bool)
      for (size_t k = 0; k < t.numel(); ++k)
        t.data()[k] = t.data()[k] != 0;
    return t;
  }

  ValueInfo valueInfo(const ::onnx::ValueInfoProto &v) {
    ValueInfo out;
    out.name = v.name();
    if (v.has_type() && v.type().has_tensor_type()) {
      const auto &tt = v.type().tensor_type();
      out.elemType = tt.elem_type();
      if (tt.has_shape()) {
        std::vector<Dim> dims;
        for (const auto &d : tt.shape().dim()) {
          Dim dim;
          if (d.has_dim_value())
            dim.value = d.dim_value();
          else if (d.has_dim_param())
            dim.param = d.dim_param();
          dims.push_back(dim);
        }
        out.shape = dims;
      }
    } else if (v.has_type()) {
      out.elemType = -1; // a sequence, map or optional: no tensor
    }
    return out;
  }

  Graph graph(const ::onnx::GraphProto &g) {
    Graph out;
    out.name = g.name();
    for (const auto &t : g.initializer()) {
      Initializer init;
      init.name = t.name();
      init.value = tensor(t, init.elemType);
      out.initializers.push_back(std::move(init));
    }
    if (g.sparse_initializer_size() > 0)
      fail("sparse initializers are not supported");
    for (const auto &v : g.input())
      out.inputs.push_back(valueInfo(v));
    for (const auto &v : g.output())
      out.outputs.push_back(valueInfo(v));
    for (const auto &v : g.value_info())
      out.valueInfo.push_back(valueInfo(v));
    for (const auto &n : g.node()) {
      Node node;
      node.op = n.op_type();
      node.domain = n.domain();
      node.name = n.name();
      node.inputs.assign(n.input().begin(), n.input().end());
      node.outputs.assign(n.output().begin(), n.output().end());
      for (const auto &a : n.attribute()) {
        Attribute attr;
        using AP = ::onnx::AttributeProto;
        switch (a.type()) {
        case AP::INT: attr.kind = Attribute::Kind::Int; attr.i = a.i(); break;
        case AP::FLOAT: attr.kind = Attribute::Kind::Float; attr.f = a.f(); break;
        case AP::STRING: attr.kind = Attribute::Kind::String; attr.s = a.s(); break;
        case AP::INTS: attr.kind = Attribute::Kind::Ints; attr.ints.assign(a.ints().begin(), a.ints().end()); break;
        case AP::FLOATS: attr.kind = Attribute::Kind::Floats; attr.floats.assign(a.floats().begin(), a.floats().end()); break;
        case AP::STRINGS:
          attr.kind = Attribute::Kind::Strings;
          attr.strings.assign(a.strings().begin(), a.strings().end());
          break;
        case AP::TENSOR: {
          attr.kind = Attribute::Kind::Tensor;
          int et = 0;
          attr.tensor = std::make_shared<rt::Tensor>(tensor(a.t(), et));
          break;
        }
        case AP::GRAPH:
          attr.kind = Attribute::Kind::Graph;
          attr.graph = std::make_shared<Graph>(graph(a.g()));
          break;
        default: attr.kind = Attribute::Kind::Other; break;
        }
        node.attrOrder.push_back(a.name());
        node.attrs[a.name()] = std::move(attr);
      }
      out.nodes.push_back(std::move(node));
    }
    return out;
  }
};

} // namespace

Model readModel(const std::string &bytes, const std::string &path) {
  Reader r{path};
  ::onnx::ModelProto proto;
  // ParseFromString rejects truncated and malformed wire data; an empty or foreign file
  // can still parse as an empty message, which the graph check below catches.
  if (bytes.empty() || !proto.ParseFromString(bytes))
    r.fail("not an ONNX model: the file is not a valid ModelProto (truncated or not ONNX)");
  if (!proto.has_graph() || proto.graph().node_size() == 0)
    r.fail("not an ONNX model: it has no graph or its graph has no nodes");
  Model m;
  m.producer = proto.producer_name();
  for (const auto &o : proto.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx")
      m.opset = o.version();
  m.graph = r.graph(proto.graph());
  return m;
}

} // namespace dnnc::onnx
