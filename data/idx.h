// The IDX format of MNIST and Fashion-MNIST: bytes 0-1 zero, byte 2 the type
// code (0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64), byte 3 the
// number of dims, then each dim as a big-endian u32, then the data, big-endian
// and row-major. Gzipped files are read transparently. Tests:
// tests/data/test_idx.cpp.
#pragma once

#include <optional>
#include <string>

#include "core/tensor.h"

namespace ember::data {

struct IdxOptions {
  // The tensor's dtype. None: the file's own, widened to i32 for the 8- and
  // 16-bit integer codes (ember has no narrower integers). Integer data may be
  // read as any dtype; floating data as floating dtypes only.
  std::optional<DType> dtype = std::nullopt;
};

// A tensor of the file's shape. A malformed file (bad magic or type code,
// truncated, sizes that overflow or disagree with the data, trailing bytes)
// throws ember::Error naming the path and the byte offset; sizes are checked
// against the bytes present before anything is allocated for them.
Tensor read_idx(const std::string& path, IdxOptions options = {});

}  // namespace ember::data
