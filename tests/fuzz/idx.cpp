// Fuzzes the IDX reader (data/idx.h), gzip included: the input's first byte
// picks the dtype to read as (the file's own, or one of ember's seven), the
// rest is the file. An accepted plain file must be exactly its header and its
// data. Seeds: corpus/idx/ (make_seeds.cpp).
#include "data/idx.h"
#include "fuzz/fuzz_support.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  data::IdxOptions options;
  if (data[0] % (kNumDTypes + 1) != 0) options.dtype = kAllDTypes[data[0] % (kNumDTypes + 1) - 1];
  const uint8_t* file_bytes = data + 1;
  const size_t file_size = size - 1;
  const fuzz::MemoryFile file(file_bytes, file_size);
  Tensor tensor;
  try {
    tensor = data::read_idx(file.path(), options);
  } catch (const Error& error) {
    fuzz::rejected(error);
    return 0;
  }
  FUZZ_REQUIRE(!options.dtype || tensor.dtype() == *options.dtype, "read as {}, asked for {}", tensor.dtype(),
               *options.dtype);
  const bool gzipped = file_size >= 2 && file_bytes[0] == 0x1f && file_bytes[1] == 0x8b;
  if (!gzipped) {
    constexpr int64_t kElementBytes[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 2, 4, 4, 8, 0};
    const int64_t expected = 4 + 4 * tensor.dim() + tensor.numel() * kElementBytes[file_bytes[2] & 15];
    FUZZ_REQUIRE(tensor.dim() == file_bytes[3] && expected == int64_t(file_size),
                 "accepted {} bytes as a tensor of shape {} (type code {:#04x})", file_size, tensor.shape(),
                 file_bytes[2]);
  }
  return 0;
}
