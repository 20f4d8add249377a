// read_idx: validates an IDX header against the bytes present, then decodes the
// big-endian data straight into a tensor of the requested dtype.
#include "data/idx.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/shape.h"
#include "data/file_bytes.h"

namespace ember::data {

namespace {

struct IdxType {
  unsigned code;
  const char* name;
  int64_t element_size;
  DType natural;  // the dtype read_idx picks when none is asked for
};
constexpr IdxType kTypes[] = {
    {0x08, "u8", 1, DType::i32},  {0x09, "i8", 1, DType::i32},  {0x0B, "i16", 2, DType::i32},
    {0x0C, "i32", 4, DType::i32}, {0x0D, "f32", 4, DType::f32}, {0x0E, "f64", 8, DType::f64},
};

const IdxType* find_type(unsigned code) {
  for (const IdxType& type : kTypes)
    if (type.code == code) return &type;
  return nullptr;
}

uint32_t load_u32(const unsigned char* bytes) {
  return (uint32_t(bytes[0]) << 24) | (uint32_t(bytes[1]) << 16) | (uint32_t(bytes[2]) << 8) | uint32_t(bytes[3]);
}

template <class Source>
Source load_big_endian(const unsigned char* bytes) {
  using Bits = std::conditional_t<
      sizeof(Source) == 1, uint8_t,
      std::conditional_t<sizeof(Source) == 2, uint16_t, std::conditional_t<sizeof(Source) == 4, uint32_t, uint64_t>>>;
  Bits bits = 0;
  for (size_t i = 0; i < sizeof(Source); ++i) bits = Bits((bits << 8) | bytes[i]);
  Source value;
  std::memcpy(&value, &bits, sizeof(Source));
  return value;
}

template <class Source, class Dest>
void decode(const unsigned char* bytes, Dest* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    Source value = load_big_endian<Source>(bytes + i * int64_t(sizeof(Source)));
    if constexpr (std::is_same_v<Dest, bool>)
      out[i] = value != Source(0);
    else
      out[i] = Dest(static_cast<ComputeType<Dest>>(value));
  }
}

template <class Dest>
void decode_as(unsigned code, const unsigned char* bytes, Dest* out, int64_t count) {
  switch (code) {
    case 0x08:
      return decode<uint8_t>(bytes, out, count);
    case 0x09:
      return decode<int8_t>(bytes, out, count);
    case 0x0B:
      return decode<int16_t>(bytes, out, count);
    case 0x0C:
      return decode<int32_t>(bytes, out, count);
    case 0x0D:
      return decode<float>(bytes, out, count);
    case 0x0E:
      return decode<double>(bytes, out, count);
  }
  EMBER_ASSERT(false, "type code {:#04x} passed validation", code);
}

// Where an error is: the file, and whether offsets count decompressed bytes.
struct Source {
  const std::string& path;
  bool compressed;
};

[[noreturn]] void fail_at(const Source& source, int64_t offset, const std::string& what) {
  detail::throw_error(fmt::format("read_idx: '{}': at byte {}{}: {}", source.path, offset,
                                  source.compressed ? " of the decompressed data" : "", what));
}

}  // namespace

Tensor read_idx(const std::string& path, IdxOptions options) {
  FileBytes file = read_file_bytes(path, "read_idx");
  const std::string& content = file.bytes;
  const auto* bytes = reinterpret_cast<const unsigned char*>(content.data());
  int64_t length = int64_t(content.size());
  Source source{path, file.compressed};

  if (length < 4)
    fail_at(source, length, fmt::format("truncated: the 4-byte magic number needs {} more bytes", 4 - length));
  if (bytes[0] != 0 || bytes[1] != 0)
    fail_at(source, 0,
            fmt::format("bad magic number {:02x} {:02x} {:02x} {:02x}: an IDX file starts with two zero bytes",
                        bytes[0], bytes[1], bytes[2], bytes[3]));
  const IdxType* type = find_type(bytes[2]);
  if (!type)
    fail_at(source, 2,
            fmt::format("unknown type code {:#04x} (expected 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32 "
                        "or 0x0E f64)",
                        bytes[2]));
  int ndim = bytes[3];
  if (ndim > kMaxDims) fail_at(source, 3, fmt::format("{} dims, ember supports at most {}", ndim, kMaxDims));
  int64_t data_offset = 4 + 4 * int64_t(ndim);
  if (length < data_offset)
    fail_at(source, length,
            fmt::format("truncated: the header of {} dims needs {} bytes, the file has {}", ndim, data_offset, length));

  // Every size fits in 32 bits, but their product may not fit in 64: check
  // each multiplication, then compare with the bytes actually there. A zero
  // size makes the count 0 whatever follows, but the tensor's strides are the
  // products of the later sizes (zeros counted as 1): those must fit too.
  Shape shape;
  int64_t count = 1, stride = 1;
  bool overflow = false;
  for (int d = 0; d < ndim; ++d) {
    int64_t size = int64_t(load_u32(bytes + 4 + 4 * d));
    shape.push_back(size);
    overflow = overflow || __builtin_mul_overflow(count, size, &count);
    if (d > 0) overflow = overflow || __builtin_mul_overflow(stride, std::max<int64_t>(size, 1), &stride);
  }
  int64_t data_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(count, type->element_size, &data_bytes);
  if (overflow)
    fail_at(source, 4,
            fmt::format("sizes {} of {} overflow 64 bits (the file has {} bytes of data)", shape, type->name,
                        length - data_offset));
  int64_t present = length - data_offset;
  if (present < data_bytes)
    fail_at(source, length,
            fmt::format("truncated: shape {} of {} needs {} bytes of data from byte {}, the file has {}", shape,
                        type->name, data_bytes, data_offset, present));
  if (present > data_bytes)
    fail_at(source, data_offset + data_bytes,
            fmt::format("{} bytes after the data of shape {} of {} (expected the end)", present - data_bytes, shape,
                        type->name));

  DType dtype = options.dtype.value_or(type->natural);
  bool floating_source = type->code == 0x0D || type->code == 0x0E;
  EMBER_CHECK(!floating_source || is_floating(dtype),
              "read_idx: '{}' holds {} data, which cannot be read as {}; read it as a floating dtype and convert", path,
              type->name, dtype);
  Tensor result = make_tensor(shape, dtype);
  visit_dtype(dtype, [&]<class T>() { decode_as(type->code, bytes + data_offset, result.data_ptr<T>(), count); });
  return result;
}

}  // namespace ember::data
