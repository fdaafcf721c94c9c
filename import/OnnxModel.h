// An ONNX model as plain data: what the importer reads, with no protobuf in sight. The
// reader (OnnxReader.cpp, the only file that sees the ONNX protobuf headers) fills it;
// the translator (OnnxImport.cpp) reads it.
#pragma once

#include "base/Error.h"
#include "base/Tensor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dnnc::onnx {

struct Graph;

// ONNX TensorProto element types the importer names (the numbers are ONNX's).
enum ElemType : int {
  kFloat = 1, kUint8 = 2, kInt8 = 3, kUint16 = 4, kInt16 = 5, kInt32 = 6, kInt64 = 7, kString = 8, kBool = 9,
  kFloat16 = 10, kDouble = 11, kUint32 = 12, kUint64 = 13, kBFloat16 = 16
};
// "float", "int64", ... for messages.
const char *elemTypeName(int t);
// The dnnc dtype of an ONNX element type, or nullopt where dnnc has none.
std::optional<DType> dtypeOf(int elemType);

struct Attribute {
  enum class Kind { Int, Float, String, Ints, Floats, Strings, Tensor, Graph, Other };
  Kind kind = Kind::Other;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::shared_ptr<rt::Tensor> tensor;
  std::shared_ptr<Graph> graph;
};

struct Dim {
  std::optional<int64_t> value; // dim_value
  std::string param;            // dim_param ("" when not symbolic)
};

struct ValueInfo {
  std::string name;
  int elemType = 0;                      // 0: not given
  std::optional<std::vector<Dim>> shape; // nullopt: rank unknown
};

// A node's attribute of the wrong kind, thrown by Node's getters.
struct AttributeError : DataError {
  using DataError::DataError;
};

struct Node {
  std::string op, domain, name;
  std::vector<std::string> inputs, outputs; // "" marks an omitted optional input
  std::map<std::string, Attribute> attrs;
  std::vector<std::string> attrOrder; // the attributes' names as the file lists them

  const Attribute *attr(const std::string &n) const {
    auto it = attrs.find(n);
    return it == attrs.end() ? nullptr : &it->second;
  }
  int64_t intAttr(const std::string &n, int64_t dflt) const;
  double floatAttr(const std::string &n, double dflt) const;
  std::string stringAttr(const std::string &n, const std::string &dflt) const;
  std::vector<int64_t> intsAttr(const std::string &n) const; // empty when absent
  // "Add 'layer0/add'" or "Add (node 3)": how messages name the node.
  std::string where(size_t index) const;
};

struct Initializer {
  std::string name;
  int elemType = 0;
  rt::Tensor value; // double tensors arrive as f32
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs, outputs, valueInfo;
  std::vector<Initializer> initializers;
};

struct Model {
  int64_t opset = 0; // of the default domain
  std::string producer;
  Graph graph;
};

// Parses an ONNX model file's bytes. Malformed or truncated bytes, tensors kept in
// external files and element types dnnc has no dtype for (in initializers) are a
// DataError naming `path` and what is wrong.
Model readModel(const std::string &bytes, const std::string &path);

} // namespace dnnc::onnx
