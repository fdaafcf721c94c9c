// .npy (format 1.0-3.0, little-endian, C order) and .safetensors readers and writers.
#include "base/TensorIO.h"

#include "base/Size.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

namespace dnnc::rt {
namespace {

constexpr size_t kMaxHeader = 100000000; // as the safetensors crate bounds its header

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

namespace {
std::mutex readMutex;
std::vector<std::string> readPaths; // each file readFile read, once
} // namespace

std::string readFile(const std::string &path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec)
    throw DataError(fmt::format("cannot read '{}': {}", path, ec.message()));
  if (fs::is_directory(status))
    throw DataError(fmt::format("cannot read '{}': it is a directory", path));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw DataError(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  {
    std::lock_guard lock(readMutex);
    if (std::find(readPaths.begin(), readPaths.end(), path) == readPaths.end())
      readPaths.push_back(path);
  }
  // A device has no end (/dev/zero was read until memory ran out); a pipe ends, but only
  // reading tells its size, so it is read no further than memory allows.
  if (fs::is_character_file(status) || fs::is_block_file(status) || fs::is_socket(status))
    throw DataError(fmt::format("cannot read '{}': it is a device, not a file", path));
  const int64_t most = fs::is_regular_file(status) ? std::numeric_limits<int64_t>::max() : memoryLimit();
  std::string bytes;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    bytes.append(chunk, static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(bytes.size()) > most)
      throw DataError(fmt::format("cannot read '{}': it is larger than the {} bytes of memory available", path, most));
  }
  return bytes;
}

std::string besidePath(const std::string &path, const char *what) {
  // Unique per process and call, so that two writers of one path never share a file.
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}.{}.{}-{}", path, what, static_cast<long>(::getpid()), counter++);
}

std::optional<std::string> readEarlier(const std::string &path) {
  namespace fs = std::filesystem;
  std::lock_guard lock(readMutex);
  std::error_code ec;
  for (const std::string &read : readPaths)
    if (fs::exists(path, ec) && fs::exists(read, ec) ? fs::equivalent(path, read, ec)
                                                    : fs::weakly_canonical(path, ec) == fs::weakly_canonical(read, ec))
      return read;
  return std::nullopt;
}

void moveAllIntoPlace(const std::vector<std::pair<std::string, std::string>> &moves) {
  namespace fs = std::filesystem;
  // Each file a move replaces is set aside first, and put back if a later move fails, so
  // that the places end all new or all as they were.
  const size_t n = moves.size();
  std::vector<std::string> asides(n);
  std::vector<bool> moved(n, false);
  std::error_code ec;
  std::string why;
  size_t at = 0;
  for (; at < n && why.empty(); ++at) {
    const auto &[from, to] = moves[at];
    if (fs::is_regular_file(to, ec)) {
      std::string aside = besidePath(to, "dnnc-old");
      fs::rename(to, aside, ec);
      if (ec) {
        why = ec.message();
        break;
      }
      asides[at] = aside;
    }
    fs::rename(from, to, ec);
    if (ec) {
      why = ec.message();
      break;
    }
    moved[at] = true;
  }
  if (why.empty()) {
    for (size_t k = 0; k < n; ++k)
      if (!asides[k].empty())
        fs::remove(asides[k], ec);
    return;
  }
  for (size_t k = 0; k <= at && k < n; ++k) { // undo: the new files back where they came from, the old ones in place
    if (moved[k])
      fs::rename(moves[k].second, moves[k].first, ec);
    if (!asides[k].empty())
      fs::rename(asides[k], moves[k].second, ec);
  }
  throw DataError(fmt::format("cannot write '{}': {}", moves[at].second, why));
}

namespace {
// Writes `bytes` to a new file `path` (which must not exist); the reason it could not.
std::optional<std::string> writeNewFile(const std::string &path, const std::string &bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0)
    return std::strerror(errno);
  // Every write and the close checked: a full disk shows in one of them (a buffered
  // stream's bytes reached the file only when it was destroyed, unchecked).
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      std::string why = n < 0 ? std::strerror(errno) : "no space left";
      ::close(fd);
      return why;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0)
    return std::strerror(errno);
  return std::nullopt;
}
} // namespace

void writeFilesAtomically(const std::vector<std::pair<std::string, std::string>> &files) {
  // Every file is written in full beside its place before any is moved there, so that a
  // failure (a full disk, a folder that cannot be written) changes none of them.
  std::vector<std::pair<std::string, std::string>> moves;
  auto removeTemps = [&] {
    for (const auto &m : moves)
      std::remove(m.first.c_str());
  };
  for (const auto &[path, bytes] : files) {
    moves.push_back({besidePath(path, "tmp"), path});
    if (std::optional<std::string> why = writeNewFile(moves.back().first, bytes)) {
      removeTemps();
      throw DataError(fmt::format("cannot write '{}': {}", path, *why));
    }
  }
  try {
    moveAllIntoPlace(moves);
  } catch (const DataError &) {
    removeTemps();
    throw;
  }
}

void writeFileAtomically(const std::string &path, const std::string &bytes) { writeFilesAtomically({{path, bytes}}); }

std::string encodeValues(const Tensor &t) { return std::string(reinterpret_cast<const char *>(t.data()), t.byteSize()); }

void decodeValues(Tensor &t, const char *data, size_t bytes) {
  size_t n = t.numel(), w = dtypeBytes(t.dtype);
  if (bytes != n * w)
    throw DataError(fmt::format("{} needs {} bytes, not {}", t.typeText(), n * w, bytes));
  t.bytes = bytesOf(reinterpret_cast<const uint8_t *>(data), bytes);
  if (t.dtype == DType::Bool)
    for (size_t k = 0; k < n; ++k)
      if (t.bytes[k] > 1)
        throw DataError(fmt::format("bool element {} holds the byte {}, not 0 or 1", k, static_cast<int>(t.bytes[k])));
}

namespace {

// The header dict of a .npy file, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }:
// a Python literal with exactly these three keys. Parsed by hand, byte by byte (no
// recursion, no regex), so any header the format allows is read in linear time.
// Text from a file, safe to print: at most 40 characters, bytes outside printable ASCII
// as \xNN.
std::string printable(const std::string &text) {
  std::string out;
  for (char c : text.substr(0, 40))
    out += c >= 0x20 && c < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
  return text.size() > 40 ? out + "..." : out;
}

struct NpyHeader {
  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
};

class NpyHeaderParser {
public:
  explicit NpyHeaderParser(const std::string &text) : s_(text) {}

  // Throws the reason (a std::string) when the header is malformed.
  NpyHeader parse() {
    NpyHeader h;
    bool haveDescr = false, haveFortran = false, haveShape = false;
    skipSpace();
    if (!at('{'))
      throw std::string("the header is not a Python dict");
    ++i_;
    skipSpace();
    while (!at('}')) {
      std::string key = quoted("a key of the header dict");
      skipSpace();
      expect(':', fmt::format("':' after '{}'", printable(key)));
      skipSpace();
      if (key == "descr") {
        once(haveDescr, key);
        h.descr = quoted("'descr' to be a string");
      } else if (key == "fortran_order") {
        once(haveFortran, key);
        if (word("True"))
          h.fortran = true;
        else if (word("False"))
          h.fortran = false;
        else
          throw std::string("'fortran_order' is neither True nor False");
      } else if (key == "shape") {
        once(haveShape, key);
        h.shape = tuple();
      } else {
        throw fmt::format("the header has an unknown key '{}'", printable(key));
      }
      skipSpace();
      if (at(','))
        ++i_, skipSpace();
      else if (!at('}'))
        throw fmt::format("expected ',' or '}}' at byte {} of the header", i_);
    }
    ++i_; // '}'
    skipSpace();
    if (i_ != s_.size())
      throw fmt::format("the header has bytes after its dict (at byte {})", i_);
    if (!haveDescr)
      throw std::string("the header has no 'descr'");
    if (!haveFortran)
      throw std::string("the header has no 'fortran_order'");
    if (!haveShape)
      throw std::string("the header has no 'shape'");
    return h;
  }

private:
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void skipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  void expect(char c, const std::string &what) {
    if (!at(c))
      throw fmt::format("expected {} at byte {} of the header", what, i_);
    ++i_;
  }
  bool word(const char *w) {
    size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) != 0)
      return false;
    i_ += n;
    return true;
  }
  static void once(bool &seen, const std::string &key) {
    if (seen)
      throw fmt::format("the header has '{}' twice", key);
    seen = true;
  }
  std::string quoted(const std::string &what) {
    if (!at('\'') && !at('"'))
      throw fmt::format("expected {} at byte {} of the header", what, i_);
    char q = s_[i_++];
    size_t end = s_.find(q, i_);
    if (end == std::string::npos)
      throw fmt::format("a string at byte {} of the header is not closed", i_ - 1);
    std::string out = s_.substr(i_, end - i_);
    i_ = end + 1;
    return out;
  }
  // "(2, 3)", "(4,)", "()"; Python 2 wrote longs as "3L".
  std::vector<int64_t> tuple() {
    if (!at('('))
      throw std::string("'shape' is not a tuple of integers");
    ++i_;
    std::vector<int64_t> dims;
    skipSpace();
    while (!at(')')) {
      if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9')
        throw std::string("'shape' is not a tuple of non-negative integers");
      int64_t v = 0;
      size_t begin = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (__builtin_mul_overflow(v, int64_t{10}, &v) || __builtin_add_overflow(v, int64_t{s_[i_] - '0'}, &v))
          throw fmt::format("dim {} of 'shape' ({}...) does not fit in 64 bits", dims.size(),
                            s_.substr(begin, 20));
        ++i_;
      }
      if (at('L'))
        ++i_;
      dims.push_back(v);
      skipSpace();
      if (at(','))
        ++i_, skipSpace();
      else if (!at(')'))
        throw std::string("'shape' is not a tuple of non-negative integers");
    }
    ++i_; // ')'
    return dims;
  }

  const std::string &s_;
  size_t i_ = 0;
};

} // namespace

Tensor readNpy(const std::string &path) { return readNpyBytes(readFile(path), path); }

Tensor readNpyBytes(const std::string &bytes, const std::string &path) {
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
  if (headerLen > kMaxHeader)
    throw bad(fmt::format("the header claims {} bytes, more than the {} a .npy header may have", headerLen, kMaxHeader));
  if (headerLen > bytes.size() - start)
    throw bad(fmt::format("the header is truncated: it claims {} bytes but the file has {} after the prefix", headerLen,
                          bytes.size() - start));
  NpyHeader h;
  try {
    h = NpyHeaderParser(bytes.substr(start, headerLen)).parse();
  } catch (const std::string &why) {
    throw bad(why);
  }
  auto dt = kNpyDescr.find(h.descr);
  if (dt == kNpyDescr.end())
    throw DataError(fmt::format("'{}' holds dtype '{}', which dnnc does not read (it reads float32, float16, int32, "
                                "int64 and bool, little-endian)", path, printable(h.descr)));
  if (h.fortran)
    throw DataError(fmt::format("'{}' is in Fortran order; save it with C order (np.ascontiguousarray)", path));
  Tensor t;
  t.dtype = dt->second;
  uint64_t have = bytes.size() - start - headerLen;
  auto need = static_cast<uint64_t>(checkedBytes(t.dtype, h.shape, fmt::format("the tensor in '{}'", path)));
  t.shape = std::move(h.shape);
  if (have != need)
    throw DataError(fmt::format("'{}' is truncated or padded: {} needs {} bytes of data, the file has {}", path,
                                t.typeText(), need, have));
  try {
    decodeValues(t, bytes.data() + start + headerLen, have);
  } catch (const DataError &e) {
    throw bad(e.what());
  }
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

std::map<std::string, Tensor> readSafetensors(const std::string &path) { return readSafetensorsBytes(readFile(path), path); }

std::map<std::string, Tensor> readSafetensorsBytes(const std::string &bytes, const std::string &path) {
  SafetensorsFile file = parseSafetensors(bytes, path);
  std::map<std::string, Tensor> out;
  for (const auto &[name, e] : file.entries) {
    if (e.f64) // no DType holds it: only the weights loader converts it (to a param's float dtype)
      throw DataError(fmt::format("'{}' is not a valid .safetensors file: tensor '{}': dtype \"F64\" is not supported (F32, F16, "
                                  "BF16, I32, I64, BOOL are)", path, printable(name)));
    out.emplace(name, file.tensor(name));
  }
  return out;
}

SafetensorsFile openSafetensors(const std::string &path) { return parseSafetensors(readFile(path), path); }

// Validated as the safetensors crate does: a bounded header inside the file, a JSON
// object, known dtypes, non-negative shapes, and data_offsets that tile the data buffer
// exactly (in order, no gap, no overlap, nothing past its end), each tensor's bytes
// equal to numel * itemsize with every product overflow-checked.
SafetensorsFile parseSafetensors(std::string bytes, const std::string &path) {
  auto bad = [&](const std::string &why) {
    return DataError(fmt::format("'{}' is not a valid .safetensors file: {}", path, why));
  };
  if (bytes.size() < 8)
    throw bad("it is shorter than its 8-byte header size");
  uint64_t headerLen = 0;
  for (int k = 7; k >= 0; --k)
    headerLen = (headerLen << 8) | static_cast<unsigned char>(bytes[k]);
  if (headerLen > kMaxHeader)
    throw bad(fmt::format("the header claims {} bytes, more than the {} a header may have", headerLen, kMaxHeader));
  if (headerLen > bytes.size() - 8)
    throw bad(fmt::format("the header claims {} bytes but the file has {}", headerLen, bytes.size() - 8));
  if (headerLen == 0 || bytes[8] != '{')
    throw bad("its header does not start with '{'");
  if (std::find(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(headerLen), '\0') != bytes.begin() + 8 + static_cast<long>(headerLen))
    throw bad("its JSON header holds a NUL byte"); // which the parser took for the end of the text
  nlohmann::json header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(headerLen),
                                                nullptr, false);
  if (header.is_discarded())
    throw bad("its JSON header does not parse");
  if (!header.is_object())
    throw bad("its header is not a JSON object");
  SafetensorsFile file;
  file.path = path;
  uint64_t dataSize = bytes.size() - 8 - headerLen;
  file.dataStart_ = 8 + headerLen;
  std::vector<std::pair<std::string, SafetensorsFile::Entry>> entries;
  for (auto &[name, entry] : header.items()) {
    std::string shown = printable(name);
    if (name == "__metadata__") {
      if (!entry.is_object())
        throw bad("__metadata__ is not a JSON object");
      for (auto &[key, value] : entry.items())
        if (!value.is_string())
          throw bad(fmt::format("__metadata__ entry '{}' is not a string", printable(key)));
      continue;
    }
    auto badEntry = [&](const std::string &why) { return bad(fmt::format("tensor '{}': {}", shown, why)); };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      throw badEntry("it needs dtype, shape and data_offsets");
    if (entry.size() != 3)
      throw badEntry("it has keys other than dtype, shape and data_offsets");
    if (!entry["dtype"].is_string())
      throw badEntry("dtype is not a string");
    std::string dtype = entry["dtype"].get<std::string>();
    auto dt = kSafeDType.find(dtype);
    SafetensorsFile::Entry e;
    e.f64 = dtype == "F64";
    if (dt == kSafeDType.end() && !e.f64)
      throw badEntry(fmt::format("dtype \"{}\" is not supported (F64, F32, F16, BF16, I32, I64, BOOL are)", printable(dtype)));
    e.dtype = e.f64 ? DType::F32 : dt->second;
    if (!entry["shape"].is_array())
      throw badEntry("shape is not a list");
    for (auto &d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw badEntry("shape holds something other than non-negative 64-bit integers");
      e.shape.push_back(d.get<int64_t>());
    }
    auto &off = entry["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw badEntry("data_offsets is not a pair of non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end)
      throw badEntry(fmt::format("its data_offsets [{}, {}) end before they begin", e.begin, e.end));
    if (e.end > dataSize)
      throw badEntry(fmt::format("its data [{}, {}) lies outside the {} data bytes", e.begin, e.end, dataSize));
    // An F64 tensor is sized as twice its F32 count (no DType has 8-byte floats).
    auto need = static_cast<uint64_t>(checkedBytes(e.dtype, e.shape, fmt::format("tensor '{}' in '{}'", shown, path)));
    if (e.f64 && need > std::numeric_limits<uint64_t>::max() / 2)
      throw badEntry(fmt::format("{}: its byte count overflows 64 bits", file.typeText(e)));
    need *= e.f64 ? 2 : 1;
    if (e.end - e.begin != need)
      throw badEntry(fmt::format("{} needs {} bytes but data_offsets give {}", file.typeText(e), need, e.end - e.begin));
    entries.emplace_back(name, std::move(e));
  }
  // The tensors must tile the data buffer: sorted by offset, each starts where the last ended.
  std::vector<const std::pair<std::string, SafetensorsFile::Entry> *> order;
  for (const auto &e : entries)
    order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const auto *a, const auto *b) {
    return a->second.begin != b->second.begin ? a->second.begin < b->second.begin : a->second.end < b->second.end;
  });
  uint64_t at = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const SafetensorsFile::Entry &e = order[k]->second;
    if (e.begin < at)
      throw bad(fmt::format("tensors '{}' and '{}' overlap: [{}, {}) and [{}, {})", printable(order[k - 1]->first),
                            printable(order[k]->first), order[k - 1]->second.begin, order[k - 1]->second.end, e.begin, e.end));
    if (e.begin > at)
      throw bad(fmt::format("the data bytes [{}, {}) belong to no tensor", at, e.begin));
    at = e.end;
  }
  if (at != dataSize)
    throw bad(fmt::format("the data bytes [{}, {}) belong to no tensor", at, dataSize));
  for (auto &[name, e] : entries)
    file.entries.emplace(name, std::move(e));
  file.bytes_ = std::move(bytes);
  return file;
}

std::string SafetensorsFile::typeText(const Entry &e) const {
  std::string text = shapeText(e.dtype, e.shape);
  return e.f64 ? "f64" + text.substr(text.find('[')) : text;
}

bool SafetensorsFile::isFloat(const Entry &e) const { return e.f64 || dnnc::isFloat(e.dtype); }

Tensor SafetensorsFile::tensor(const std::string &name) const {
  const Entry &e = entries.at(name);
  if (e.f64)
    throw InternalError("an F64 tensor is only read converted");
  Tensor t;
  t.dtype = e.dtype;
  t.shape = e.shape;
  try {
    decodeValues(t, bytes_.data() + dataStart_ + e.begin, e.end - e.begin);
  } catch (const DataError &err) {
    throw DataError(fmt::format("'{}' is not a valid .safetensors file: tensor '{}': {}", path, printable(name), err.what()));
  }
  return t;
}

namespace {
// v as a float rounded to odd (toward zero, then the last bit set if that was inexact): a
// float so made rounds to f16 or bf16 (fewer than 23 bits) as v itself would, where
// rounding v to nearest float first could round twice (1 + 2^-11 + 2^-40 became 1.0 in f16).
float roundToOddFloat(double v) {
  float f = static_cast<float>(v);
  if (static_cast<double>(f) == v || !std::isfinite(f))
    return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v))
    f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1;
  std::memcpy(&f, &bits, 4);
  return f;
}
} // namespace

Tensor SafetensorsFile::tensorAs(const std::string &name, DType as) const {
  const Entry &e = entries.at(name);
  if (!e.f64 && e.dtype == as)
    return tensor(name);
  if (!isFloat(e) || !dnnc::isFloat(as))
    throw InternalError("only float tensors convert");
  Tensor out = Tensor::zeros(as, e.shape);
  const char *data = bytes_.data() + dataStart_ + e.begin;
  if (e.f64) {
    for (size_t k = 0; k < out.numel(); ++k) {
      double v;
      std::memcpy(&v, data + 8 * k, 8);
      out.set(k, as == DType::F32 ? v : static_cast<double>(roundToOddFloat(v)));
    }
    return out;
  }
  Tensor in = tensor(name);
  for (size_t k = 0; k < out.numel(); ++k)
    out.set(k, in.get(k));
  return out;
}

std::string encodeSafetensors(const std::map<std::string, Tensor> &tensors) {
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
  return out + h + data;
}

void writeSafetensors(const std::string &path, const std::map<std::string, Tensor> &tensors) {
  writeFileAtomically(path, encodeSafetensors(tensors));
}

} // namespace dnnc::rt
