// .npy (format 1.0-3.0, little-endian, C order) and .safetensors readers and writers.
#include "runtime/TensorIO.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

namespace dnnc::rt {
namespace {

constexpr size_t kMaxHeader = 100 * 1024 * 1024;

// The element count of a shape, or a DataError when it overflows.
size_t checkedNumel(const std::vector<int64_t> &shape, const std::string &what) {
  size_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      throw DataError(fmt::format("{}: negative dim {}", what, d));
    if (d != 0 && n > std::numeric_limits<size_t>::max() / 16 / static_cast<size_t>(d))
      throw DataError(fmt::format("{}: the shape is too large", what));
    n *= static_cast<size_t>(d);
  }
  return n;
}

const std::map<std::string, DType> kNpyDescr = {{"<f4", DType::F32}, {"<f2", DType::F16}, {"<i4", DType::I32},
                                                {"<i8", DType::I64}, {"|b1", DType::Bool}};
const std::map<std::string, DType> kSafeDType = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
                                                 {"I32", DType::I32}, {"I64", DType::I64}, {"BOOL", DType::Bool}};

std::string npyDescr(DType d) {
  for (auto &[k, v] : kNpyDescr)
    if (v == d)
      return k;
  throw DataError(std::string("the .npy format has no ") + dtypeName(d) + " type");
}

} // namespace

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (!in || std::filesystem::is_directory(path, ec))
    throw DataError(fmt::format("cannot read '{}'", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeFileAtomically(const std::string &path, const std::string &bytes) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::remove(tmp.c_str());
      throw DataError(fmt::format("cannot write '{}'", path));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw DataError(fmt::format("cannot write '{}': {}", path, ec.message()));
  }
}


std::string encodeValues(const Tensor &t) { return std::string(reinterpret_cast<const char *>(t.data()), t.byteSize()); }

void decodeValues(Tensor &t, const char *data, size_t bytes) {
  size_t n = t.numel(), w = dtypeBytes(t.dtype);
  if (bytes != n * w)
    throw DataError(fmt::format("{} needs {} bytes, not {}", t.typeText(), n * w, bytes));
  t.bytes.assign(data, data + bytes);
  if (t.dtype == DType::Bool)
    for (size_t k = 0; k < n; ++k)
      if (t.bytes[k] > 1)
        throw DataError(fmt::format("a bool holds the byte {}", static_cast<int>(t.bytes[k])));
}

Tensor readNpy(const std::string &path) {
  std::string bytes = readFile(path);
  auto bad = [&](const std::string &why) { return DataError(fmt::format("'{}' is not a valid .npy file: {}", path, why)); };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    throw bad("it does not start with the .npy magic bytes");
  int major = static_cast<unsigned char>(bytes[6]);
  size_t headerLen = 0, start = 0;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      throw bad("the header is truncated");
    for (int k = 3; k >= 0; --k)
      headerLen = (headerLen << 8) | static_cast<unsigned char>(bytes[8 + k]);
    start = 12;
  } else {
    throw bad(fmt::format("unknown format version {}", major));
  }
  if (headerLen > kMaxHeader || start + headerLen > bytes.size())
    throw bad("the header is truncated");
  std::string header = bytes.substr(start, headerLen);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    throw bad("the header has no 'descr'");
  auto dt = kNpyDescr.find(m[1].str());
  if (dt == kNpyDescr.end())
    throw DataError(fmt::format("'{}' holds dtype '{}', which dnnc does not read (it reads float32, float16, int32, "
                                "int64 and bool, little-endian)", path, m[1].str()));
  if (std::regex_search(header, m, std::regex(R"('fortran_order'\s*:\s*True)")))
    throw DataError(fmt::format("'{}' is in Fortran order; save it with C order (np.ascontiguousarray)", path));
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    throw bad("the header has no 'shape'");
  Tensor t;
  t.dtype = dt->second;
  std::string dims = m[1];
  static const std::regex digits(R"(\d+)");
  std::sregex_iterator it(dims.begin(), dims.end(), digits), end;
  for (; it != end; ++it) {
    if (it->str().size() > 15)
      throw bad("a dim is too large");
    t.shape.push_back(std::stoll(it->str()));
  }
  if (std::regex_search(dims, std::regex(R"([^\d,\sL])")))
    throw bad("the shape is not a tuple of integers");
  size_t n = checkedNumel(t.shape, path);
  size_t need = n * dtypeBytes(t.dtype), have = bytes.size() - start - headerLen;
  if (have != need)
    throw DataError(fmt::format("'{}' is truncated or padded: {} needs {} bytes of data, the file has {}", path,
                                t.typeText(), need, have));
  decodeValues(t, bytes.data() + start + headerLen, have);
  return t;
}

void writeNpy(const std::string &path, const Tensor &t) {
  std::string shape;
  for (int64_t d : t.shape)
    shape += std::to_string(d) + ", ";
  if (t.shape.size() > 1)
    shape.erase(shape.size() - 2, 1); // "(2, 3)" but "(4,)"
  if (!shape.empty() && shape.back() == ' ')
    shape.pop_back();
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", npyDescr(t.dtype), shape);
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out += encodeValues(t);
  writeFileAtomically(path, out);
}

std::map<std::string, Tensor> readSafetensors(const std::string &path) {
  std::string bytes = readFile(path);
  auto bad = [&](const std::string &why) {
    return DataError(fmt::format("'{}' is not a valid .safetensors file: {}", path, why));
  };
  if (bytes.size() < 8)
    throw bad("it is shorter than its 8-byte header size");
  uint64_t headerLen = 0;
  for (int k = 7; k >= 0; --k)
    headerLen = (headerLen << 8) | static_cast<unsigned char>(bytes[k]);
  if (headerLen > kMaxHeader || headerLen > bytes.size() - 8)
    throw bad(fmt::format("the header claims {} bytes but the file has {}", headerLen, bytes.size() - 8));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(headerLen));
  } catch (const nlohmann::json::exception &e) {
    throw bad(std::string("its JSON header does not parse: ") + e.what());
  }
  if (!header.is_object())
    throw bad("its header is not a JSON object");
  size_t dataSize = bytes.size() - 8 - headerLen;
  const char *data = bytes.data() + 8 + headerLen;
  std::map<std::string, Tensor> out;
  for (auto &[name, entry] : header.items()) {
    if (name == "__metadata__")
      continue;
    auto badEntry = [&](const std::string &why) { return bad(fmt::format("tensor '{}': {}", name, why)); };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      throw badEntry("it needs dtype, shape and data_offsets");
    if (!entry["dtype"].is_string())
      throw badEntry("dtype is not a string");
    auto dt = kSafeDType.find(entry["dtype"].get<std::string>());
    if (dt == kSafeDType.end())
      throw badEntry(fmt::format("dtype {} is not supported (F32, F16, BF16, I32, I64, BOOL are)", entry["dtype"].dump()));
    Tensor t;
    t.dtype = dt->second;
    if (!entry["shape"].is_array())
      throw badEntry("shape is not a list");
    for (auto &d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw badEntry("shape holds something other than non-negative integers");
      t.shape.push_back(d.get<int64_t>());
    }
    auto &off = entry["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw badEntry("data_offsets is not a pair of non-negative integers");
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > dataSize)
      throw badEntry(fmt::format("its data [{}, {}) lies outside the {} data bytes", begin, end, dataSize));
    size_t n = checkedNumel(t.shape, fmt::format("'{}': tensor '{}'", path, name));
    if (end - begin != n * dtypeBytes(t.dtype))
      throw badEntry(fmt::format("{} needs {} bytes but data_offsets give {}", t.typeText(), n * dtypeBytes(t.dtype), end - begin));
    decodeValues(t, data + begin, end - begin);
    out.emplace(name, std::move(t));
  }
  return out;
}

void writeSafetensors(const std::string &path, const std::map<std::string, Tensor> &tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (auto &[name, t] : tensors) {
    static const std::map<DType, std::string> names = {{DType::F32, "F32"}, {DType::F16, "F16"}, {DType::BF16, "BF16"},
                                                       {DType::I32, "I32"}, {DType::I64, "I64"}, {DType::Bool, "BOOL"}};
    std::string bytes = encodeValues(t);
    header[name] = {{"dtype", names.at(t.dtype)}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t len = h.size();
  for (int k = 0; k < 8; ++k)
    out[k] = static_cast<char>((len >> (8 * k)) & 0xff);
  writeFileAtomically(path, out + h + data);
}

} // namespace dnnc::rt
