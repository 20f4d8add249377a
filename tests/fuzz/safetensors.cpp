// Fuzzes the safetensors reader (core/safetensors.h) with the input as the
// whole file. Both entry points must agree on what they accept; an accepted
// file's tensors must hold exactly their bytes of the input, read whole (so an
// offset past the data would show here as a mismatch or a sanitizer report).
// Seeds: corpus/safetensors/ (make_seeds.cpp).
#include <cstring>
#include <optional>

#include "core/safetensors.h"
#include "fuzz/fuzz_support.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::MemoryFile file(data, size);
  std::optional<SafetensorsHeader> header;
  std::optional<SafetensorsContents> contents;
  try {
    header = read_safetensors_header(file.path());
  } catch (const Error& error) {
    fuzz::rejected(error);
  }
  try {
    contents = load_safetensors(file.path());
  } catch (const Error& error) {
    fuzz::rejected(error);
  }
  FUZZ_REQUIRE(header.has_value() == contents.has_value(),
                "read_safetensors_header and load_safetensors disagree on whether the file is valid");
  if (!contents) return 0;

  FUZZ_REQUIRE(contents->metadata == header->metadata, "the two readers return different metadata");
  FUZZ_REQUIRE(contents->tensors.size() == header->tensors.size(), "the two readers return different tensors");
  FUZZ_REQUIRE(8 + size_t(header->header_size) + size_t(header->data_size) == size,
                "the header and data sections do not add up to the file");
  for (size_t i = 0; i < header->tensors.size(); ++i) {
    const SafetensorsTensorInfo& info = header->tensors[i];
    const auto& [name, tensor] = contents->tensors[i];
    FUZZ_REQUIRE(name == info.name && tensor.dtype() == info.dtype && tensor.shape() == info.shape,
                  "tensor {}: the two readers disagree on '{}'", i, info.name);
    const size_t nbytes = size_t(info.data_end - info.data_begin);
    FUZZ_REQUIRE(size_t(tensor.nbytes()) == nbytes && tensor.is_contiguous(),
                  "tensor '{}' has {} bytes, its offsets span {}", name, tensor.nbytes(), nbytes);
    const uint8_t* expected = data + header->data_start() + info.data_begin;
    FUZZ_REQUIRE(nbytes == 0 || std::memcmp(tensor.data_ptr(), expected, nbytes) == 0,
                  "tensor '{}' does not hold its bytes of the file", name);
  }
  return 0;
}
