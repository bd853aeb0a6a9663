#include "moe/npy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include "moe/file_io.h"

namespace moe {
namespace {

// Data goes to disk straight from host memory, and '<' promises little-endian.
static_assert(std::endian::native == std::endian::little, "the npy writer assumes a little-endian host");

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kPrefixLen = 10;  // magic (6), version (1, 0), uint16 header length
constexpr size_t kAlign = 64;
// numpy leaves room for shape[0] to grow to this many digits so a file can be appended in place.
constexpr size_t kGrowthAxisMaxDigits = 21;

std::string shape_repr(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);  // Python's 1-tuple
  return fmt::format("({})", fmt::join(shape, ", "));
}

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Magic, version, length and dict text, laid out as numpy's _write_array_header + _wrap_header do.
std::string npy_header(std::string_view descr, const std::vector<int64_t>& shape) {
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape_repr(shape));
  if (!shape.empty()) dict.append(kGrowthAxisMaxDigits - std::to_string(shape[0]).size(), ' ');
  // numpy pads by 1..64 spaces, never 0, even when the text is already aligned.
  dict.append(kAlign - (kPrefixLen + dict.size() + 1) % kAlign, ' ');
  dict.push_back('\n');
  MOE_CHECK(dict.size() <= 0xffff, "npy header too long for format 1.0");
  std::string out(kMagic);
  out += {'\x01', '\x00', char(dict.size() & 0xff), char(dict.size() >> 8)};
  return out + dict;
}

template <typename T>
Status write_vector(const std::string& path, std::string_view descr, const std::vector<T>& data,
                    const std::vector<int64_t>& shape) {
  MOE_CHECK(shape_numel(shape) == int64_t(data.size()),
            fmt::format("npy '{}': {} values for shape {}", path, data.size(), shape_repr(shape)));
  AtomicFileWriter w(path);
  MOE_RETURN_IF_ERROR(w.open());
  std::string header = npy_header(descr, shape);
  MOE_RETURN_IF_ERROR(w.write(header.data(), header.size()));
  MOE_RETURN_IF_ERROR(w.write(data.data(), data.size() * sizeof(T)));
  return w.commit();
}

using File = std::unique_ptr<FILE, int (*)(FILE*)>;

Status unreadable(const std::string& path, std::string_view why) {
  return Status::error(fmt::format("cannot read npy file '{}': {}", path, why));
}

// The text after `key` in the header dict, or npos.
size_t value_at(std::string_view dict, std::string_view key) {
  size_t at = dict.find(key);
  return at == std::string_view::npos ? at : at + key.size();
}

// Parses the header of an open file (positioned at 0) and leaves it at the first data byte.
Status parse_header(const std::string& path, FILE* f, std::string& descr, std::vector<int64_t>& shape) {
  char prefix[kPrefixLen];
  if (std::fread(prefix, 1, kPrefixLen, f) != kPrefixLen || std::string_view(prefix, 6) != kMagic)
    return unreadable(path, "not an .npy file (bad magic)");
  if (prefix[6] != 1 || prefix[7] != 0)
    return unreadable(
        path, fmt::format("format version {}.{} (only 1.0 is supported)", int(prefix[6]), int(prefix[7])));
  size_t len = size_t(uint8_t(prefix[8])) | size_t(uint8_t(prefix[9])) << 8;
  std::string dict(len, '\0');
  if (std::fread(dict.data(), 1, len, f) != len) return unreadable(path, "truncated header");

  size_t d = value_at(dict, "'descr': '");
  size_t d_end = d == std::string::npos ? d : dict.find('\'', d);
  if (d_end == std::string::npos) return unreadable(path, "header has no 'descr'");
  descr = dict.substr(d, d_end - d);

  size_t fo = value_at(dict, "'fortran_order': ");
  if (fo == std::string::npos || dict.compare(fo, 5, "False") != 0)
    return unreadable(path, "Fortran order or missing 'fortran_order' (only C order is supported)");

  size_t s = value_at(dict, "'shape': (");
  size_t s_end = s == std::string::npos ? s : dict.find(')', s);
  if (s_end == std::string::npos) return unreadable(path, "header has no 'shape'");
  shape.clear();
  std::string_view dims(dict.data() + s, s_end - s);
  while (!dims.empty()) {
    size_t comma = std::min(dims.find(','), dims.size());
    std::string_view item = dims.substr(0, comma);
    dims.remove_prefix(std::min(comma + 1, dims.size()));
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    if (item.empty()) continue;  // the 1-tuple's trailing comma
    int64_t v = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size() || v < 0)
      return unreadable(path, fmt::format("bad shape entry '{}'", item));
    shape.push_back(v);
  }
  return Status::ok();
}

File open_for_read(const std::string& path) {
  return File(std::fopen(path.c_str(), "rb"), &std::fclose);
}

template <typename T>
Status read_data(const std::string& path, std::string_view want_descr, std::vector<T>& data,
                 std::vector<int64_t>& shape) {
  File f = open_for_read(path);
  if (!f) return unreadable(path, std::strerror(errno));
  std::string descr;
  MOE_RETURN_IF_ERROR(parse_header(path, f.get(), descr, shape));
  if (descr != want_descr)
    return unreadable(path, fmt::format("dtype '{}', expected '{}'", descr, want_descr));

  long data_start = std::ftell(f.get());
  if (data_start < 0 || std::fseek(f.get(), 0, SEEK_END) != 0) return unreadable(path, std::strerror(errno));
  const uint64_t have = uint64_t(std::ftell(f.get()) - data_start);
  uint64_t bytes = sizeof(T);
  for (int64_t dim : shape)
    if (__builtin_mul_overflow(bytes, uint64_t(dim), &bytes)) return unreadable(path, "shape too large");
  if (bytes != have)
    return unreadable(path,
                      fmt::format("{} data bytes, but shape {} needs {}", have, shape_repr(shape), bytes));
  const size_t numel = bytes / sizeof(T);
  data.resize(numel);
  std::fseek(f.get(), data_start, SEEK_SET);
  if (numel > 0 && std::fread(data.data(), sizeof(T), numel, f.get()) != numel)
    return unreadable(path, "short read");
  return Status::ok();
}

}  // namespace

const char* npy_descr(Dtype dt) {
  switch (dt) {
    case Dtype::f32:
    case Dtype::bf16:
      return "<f4";
    case Dtype::f16:
      return "<f2";
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false,
            std::string("write_npy: dumps hold float32, bfloat16 or float16 tensors, not ") + dtype_name(dt));
}

Status write_npy(const std::string& path, const Tensor& t) {
  // A default-constructed Tensor has shape () but no element: writing it would make a corrupt scalar.
  MOE_CHECK(shape_numel(t.shape()) == t.numel(), "write_npy: unallocated tensor for '" + path + "'");
  const char* descr = npy_descr(t.dtype());
  AtomicFileWriter w(path);
  MOE_RETURN_IF_ERROR(w.open());
  std::string header = npy_header(descr, t.shape());
  MOE_RETURN_IF_ERROR(w.write(header.data(), header.size()));
  if (t.dtype() != Dtype::bf16) {  // float32 and float16 are numpy dtypes: their bytes as they are
    MOE_RETURN_IF_ERROR(w.write(t.raw(), t.bytes()));
    return w.commit();
  }
  // Widen block by block: weights run to gigabytes, and a whole f32 copy would triple what is held.
  constexpr int64_t kBlock = int64_t(1) << 16;
  std::vector<float> block(size_t(std::min(kBlock, t.numel())));
  const bf16_t* src = t.data<bf16_t>();
  for (int64_t i = 0; i < t.numel(); i += kBlock) {
    int64_t n = std::min(kBlock, t.numel() - i);
    for (int64_t j = 0; j < n; ++j) block[size_t(j)] = bf16_to_f32(src[i + j]);
    MOE_RETURN_IF_ERROR(w.write(block.data(), size_t(n) * sizeof(float)));
  }
  return w.commit();
}

Status write_npy(const std::string& path, const std::vector<int32_t>& data,
                 const std::vector<int64_t>& shape) {
  return write_vector(path, "<i4", data, shape);
}
Status write_npy(const std::string& path, const std::vector<float>& data, const std::vector<int64_t>& shape) {
  return write_vector(path, "<f4", data, shape);
}
Status write_npy(const std::string& path, const std::vector<double>& data,
                 const std::vector<int64_t>& shape) {
  return write_vector(path, "<f8", data, shape);
}

Status read_npy_header(const std::string& path, std::string& descr, std::vector<int64_t>& shape) {
  File f = open_for_read(path);
  if (!f) return unreadable(path, std::strerror(errno));
  return parse_header(path, f.get(), descr, shape);
}

Status read_npy_f32(const std::string& path, std::vector<float>& data, std::vector<int64_t>& shape) {
  return read_data(path, "<f4", data, shape);
}
Status read_npy_f16(const std::string& path, std::vector<f16_t>& data, std::vector<int64_t>& shape) {
  return read_data(path, "<f2", data, shape);
}
Status read_npy_i32(const std::string& path, std::vector<int32_t>& data, std::vector<int64_t>& shape) {
  return read_data(path, "<i4", data, shape);
}
Status read_npy_f64(const std::string& path, std::vector<double>& data, std::vector<int64_t>& shape) {
  return read_data(path, "<f8", data, shape);
}

}  // namespace moe
