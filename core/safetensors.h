// safetensors files: the format of Hugging Face weights and of ember's
// checkpoints (nn::save/nn::load and the distributed checkpoints build on it).
// Layout: an 8-byte little-endian header length N, N bytes of JSON
// ({"__metadata__": {...}, "<name>": {"dtype", "shape", "data_offsets"}, ...},
// space-padded to a multiple of 8), then the data section that the tensors'
// [begin, end) byte offsets tile exactly. core/safetensors.cpp says what is
// written and what loading checks, and where each rule comes from.
// Tests: tests/core/test_safetensors.cpp, against fixtures from the reference
// Python package (tests/data/make_safetensors_fixture.py).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/named_tensors.h"

namespace ember {

struct SafetensorsContents {
  NamedTensors tensors;                         // in file order (by data offset)
  std::map<std::string, std::string> metadata;  // __metadata__
};

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  int64_t data_begin = 0;  // [begin, end) in bytes, relative to the data section
  int64_t data_end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensorInfo> tensors;  // in file order (by data offset)
  std::map<std::string, std::string> metadata;
  int64_t header_size = 0;  // N: the JSON text with its padding
  int64_t data_size = 0;    // bytes in the data section
  int64_t data_start() const { return 8 + header_size; }  // file offset of the data section
};

// Writes `tensors` (any layout, any device; written contiguous, in the
// reference writer's order) with {"format": "pt"} added to `metadata` unless it
// has a "format". Atomic and safe (write_file_atomically in core/file_io.h):
// written to a new temporary file beside `path`, flushed to disk, renamed.
// Names must be unique, valid UTF-8 and not "__metadata__".
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsLoadOptions {
  // true: the tensors view a private (copy-on-write) mapping of the file, no
  // copy made. The mapping lives as long as any tensor from it, and so does a
  // hazard: if another program truncates the file in place meanwhile, reading
  // a tensor kills the process with SIGBUS; if it rewrites the file in place,
  // pages not yet read show the new bytes. (Replacing the file by rename, as
  // ember's writers do, is safe.) false: the file is read into memory once and
  // the tensors view that memory; nothing of the file stays mapped or open.
  bool mmap = true;
};

// Returns CPU tensors for the file at `path` (see SafetensorsLoadOptions for
// whether they view a mapping of it or a copy); a tensor whose data is
// misaligned for its dtype is copied. Writing to a tensor never writes to the
// file. A FIFO, device or directory at `path` is refused at once (a link is
// followed). Every malformed file is an ember::Error. nn::load and
// Accelerator::load_state copy, and keep nothing of the file once they return.
SafetensorsContents load_safetensors(const std::filesystem::path& path, const SafetensorsLoadOptions& options = {});

// The tensors of a whole safetensors file already in memory, checked as
// load_safetensors checks a file; they view `bytes` and keep it alive. `name`
// is for messages. For readers that check the bytes first (load_state
// verifies their checksum and parses the very bytes it checked).
SafetensorsContents parse_safetensors(std::shared_ptr<std::string> bytes, const std::string& name);

// The validated header (names, dtypes, shapes, offsets, metadata) without
// reading the data section: for checkpoint manifests.
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

// A dtype's spelling in safetensors headers ("F32", "BF16", "I64", ...), and
// back: none for a spelling ember does not read. For checkpoint manifests.
std::string_view safetensors_dtype_name(DType dtype);
std::optional<DType> safetensors_dtype_from_name(std::string_view name);

}  // namespace ember
