// safetensors reading and writing (core/safetensors.h).
//
// Writing follows the reference writer (huggingface/safetensors, `prepare` in
// safetensors/src/tensor.rs) byte for byte, so that our files equal the ones
// `safetensors.torch.save_file` writes:
// - tensors sorted by dtype, largest alignment first (the order of the
//   reference's Dtype enum: I64, F64, F32, I32, BF16, F16, BOOL for ours), then
//   by name, byte-wise; data packed in that order with no gaps;
// - compact JSON, `__metadata__` first, then each tensor as
//   {"dtype":..,"shape":[..],"data_offsets":[begin,end]}; strings escaped as
//   serde_json does (which nlohmann's dump matches: \" \\ \b \f \n \r \t and
//   \u00xx for other control characters, UTF-8 left as is);
// - the JSON padded with spaces to a multiple of 8 bytes, so the data section
//   starts 8-aligned and every tensor in it is aligned for its dtype.
// The reference keeps metadata in a hash map, so with more than one key its
// order varies from run to run; ours is sorted (std::map).
//
// Loading validates what the reference's `read_metadata` and `validate` do:
// 8-byte length at most 100,000,000 and within the file, UTF-8 JSON object,
// each entry's dtype/shape/data_offsets, shape products without overflow
// (and ember's strides, which count a zero dim as 1, too),
// end - begin = numel * element size, and the tensors, sorted by offset,
// tiling the data section from 0 to the end of the file. It is stricter in
// that the header must start with '{' (the reference plans this check),
// duplicate keys are errors (serde keeps the last), and `__metadata__` must be
// an object of strings (or null, which is none). The JSON is read with a SAX handler, so a hostile
// header cannot make us build deep or large structures: memory is bounded by
// the number of tensors, and nothing is allocated from a size in the file
// before that size is checked against the file's real size.
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/ops/creation.h"

namespace ember {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian, as is every host ember runs on");

constexpr uint64_t kMaxHeaderSize = 100'000'000;  // the reference's MAX_HEADER_SIZE
constexpr size_t kShownErrorLength = 300;         // a JSON error quotes the token, which may be long

struct DTypeCode {
  DType dtype;
  std::string_view code;
  int alignment_rank;  // position in the reference's Dtype enum, which the writer sorts by
};
constexpr DTypeCode kDTypeCodes[] = {
    {DType::boolean, "BOOL", 0}, {DType::f16, "F16", 7}, {DType::bf16, "BF16", 8}, {DType::i32, "I32", 9},
    {DType::f32, "F32", 11},     {DType::f64, "F64", 12}, {DType::i64, "I64", 13},
};

const DTypeCode& code_of(DType dtype) {
  for (const DTypeCode& entry : kDTypeCodes)
    if (entry.dtype == dtype) return entry;
  EMBER_ASSERT(false, "safetensors: no code for dtype {}", dtype);
}

// A name from the file as a message shows it: cut, escaped (core/shown_text.h).
std::string shown(std::string_view name, size_t length = 80) { return shown_text(name, length); }

// ---------------------------------------------------------------------------
// Header parsing: a SAX handler that accepts exactly the header's grammar
//   { "__metadata__": {string: string, ...}, name: {"dtype": string,
//     "shape": [uint, ...], "data_offsets": [uint, uint], other: any}, ... }
// and throws on anything else. Unknown fields in a tensor entry are skipped,
// as serde does.

struct RawEntry {
  SafetensorsTensorInfo info;
  bool has_dtype = false, has_shape = false, has_offsets = false;
  uint64_t begin = 0, end = 0;
  int offsets_seen = 0;
};

class HeaderParser final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit HeaderParser(const std::string& path) : path_(path) {}

  std::vector<RawEntry> entries;
  std::map<std::string, std::string> metadata;

  // `"__metadata__": null` is no metadata: the reference reads the field as
  // Option<HashMap<String, String>>, and Python writers emit it.
  bool null() override { return (state_ == State::top && top_key_ == "__metadata__") || scalar("null"); }
  bool boolean(bool) override { return scalar("a boolean"); }
  bool number_integer(number_integer_t value) override {
    if (state_ == State::shape || state_ == State::offsets)
      fail("tensor '{}': {} holds the negative number {}", shown(entry().info.name), field_, value);
    return scalar("a number");
  }
  bool number_unsigned(number_unsigned_t value) override {
    if (state_ == State::shape) {
      RawEntry& e = entry();
      check(e.info.shape.ndim() < kMaxDims, "tensor '{}' has more than {} dims, which ember does not support",
            shown(e.info.name), kMaxDims);
      check(value <= uint64_t(std::numeric_limits<int64_t>::max()), "tensor '{}': shape dimension {} is too large",
            shown(e.info.name), value);
      e.info.shape.push_back(int64_t(value));
      return true;
    }
    if (state_ == State::offsets) {
      RawEntry& e = entry();
      check(e.offsets_seen < 2, "tensor '{}': data_offsets must be [begin, end], it has more than 2 numbers",
            shown(e.info.name));
      (e.offsets_seen++ == 0 ? e.begin : e.end) = value;
      return true;
    }
    return scalar("a number");
  }
  bool number_float(number_float_t, const string_t& text) override {
    if (state_ == State::shape || state_ == State::offsets)
      fail("tensor '{}': {} holds {}, which is not an unsigned 64-bit integer", shown(entry().info.name), field_,
           shown(text));
    return scalar("a number");
  }
  bool binary(binary_t&) override { return scalar("binary data"); }

  bool string(string_t& value) override {
    if (state_ == State::metadata) {
      check(metadata.emplace(metadata_key_, value).second, "__metadata__ has the key '{}' twice", shown(metadata_key_));
      return true;
    }
    if (state_ == State::entry && field_ == "dtype") {
      RawEntry& e = entry();
      for (const DTypeCode& code : kDTypeCodes)
        if (value == code.code) {
          e.info.dtype = code.dtype;
          e.has_dtype = true;
          return true;
        }
      fail("tensor '{}' has dtype {}, which ember does not support (it reads F32, F64, F16, BF16, I32, I64, BOOL)",
           shown(e.info.name), shown(value));
    }
    return scalar("a string");
  }

  bool start_object(std::size_t) override {
    switch (state_) {
      case State::start: state_ = State::top; return true;
      case State::top:
        if (top_key_ == "__metadata__") {
          state_ = State::metadata;
        } else {
          entries.push_back({});
          entries.back().info.name = top_key_;
          state_ = State::entry;
        }
        return true;
      case State::skip: ++skip_depth_; return true;
      default: return composite("an object");
    }
  }
  bool end_object() override {
    switch (state_) {
      case State::top: state_ = State::done; return true;
      case State::metadata: state_ = State::top; return true;
      case State::entry: {
        const RawEntry& e = entry();
        for (auto [present, field] : {std::pair{e.has_dtype, "dtype"}, std::pair{e.has_shape, "shape"},
                                      std::pair{e.has_offsets, "data_offsets"}})
          check(present, "tensor '{}' has no '{}'", shown(e.info.name), field);
        state_ = State::top;
        return true;
      }
      case State::skip: return end_skipped();
      default: EMBER_ASSERT(false, "safetensors: end_object in state {}", int(state_));
    }
  }
  bool start_array(std::size_t) override {
    if (state_ == State::entry && (field_ == "shape" || field_ == "data_offsets")) {
      RawEntry& e = entry();
      (field_ == "shape" ? e.has_shape : e.has_offsets) = true;
      state_ = field_ == "shape" ? State::shape : State::offsets;
      return true;
    }
    if (state_ == State::skip) {
      ++skip_depth_;
      return true;
    }
    return composite("an array");
  }
  bool end_array() override {
    if (state_ == State::offsets)
      check(entry().offsets_seen == 2, "tensor '{}': data_offsets must be [begin, end], it has {} number(s)",
            shown(entry().info.name), entry().offsets_seen);
    if (state_ == State::shape || state_ == State::offsets) {
      state_ = State::entry;
      return true;
    }
    EMBER_ASSERT(state_ == State::skip, "safetensors: end_array in state {}", int(state_));
    return end_skipped();
  }

  bool key(string_t& value) override {
    if (state_ == State::top) {
      check(names_.insert(value).second, "the header has the key '{}' twice", shown(value));
      top_key_ = value;
    } else if (state_ == State::metadata) {
      metadata_key_ = value;
    } else if (state_ == State::entry) {
      const RawEntry& e = entry();
      // Only the known fields can repeat: unknown ones are ignored, repeats included, as serde does.
      const bool repeated = (value == "dtype" && e.has_dtype) || (value == "shape" && e.has_shape) ||
                            (value == "data_offsets" && e.has_offsets);
      check(!repeated, "tensor '{}' has the field '{}' twice", shown(e.info.name), value);
      field_ = value;
    }
    return true;  // keys inside skipped values need no checks
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) override {
    fail("header is not valid JSON: {}", shown(error.what(), kShownErrorLength));
  }

 private:
  enum class State { start, top, metadata, entry, shape, offsets, skip, done };

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    ::ember::detail::throw_error(
        fmt::format("safetensors: '{}': {}", path_, fmt::format(format, std::forward<Args>(args)...)));
  }
  template <class... Args>
  void check(bool condition, fmt::format_string<Args...> format, Args&&... args) const {
    if (!condition) [[unlikely]]
      fail(format, std::forward<Args>(args)...);
  }

  RawEntry& entry() { return entries.back(); }

  bool known_field() const { return field_ == "dtype" || field_ == "shape" || field_ == "data_offsets"; }

  // A scalar value: fine as an unknown field of an entry, an error elsewhere.
  bool scalar(std::string_view what) {
    if (state_ == State::skip || (state_ == State::entry && !known_field())) return true;
    mismatch(what);
  }
  // An object or array value where the grammar has none: an unknown field's value is skipped.
  bool composite(std::string_view what) {
    if (state_ == State::entry && !known_field()) {
      state_ = State::skip;
      skip_depth_ = 1;
      return true;
    }
    mismatch(what);
  }
  [[noreturn]] void mismatch(std::string_view what) const {
    switch (state_) {
      case State::entry:
        fail("tensor '{}': '{}' is {}, not {}", shown(entries.back().info.name), field_, what,
             field_ == "dtype" ? "a string" : "an array of unsigned integers");
      case State::start: fail("header is not a JSON object (it is {})", what);
      case State::top:
        if (top_key_ == "__metadata__") fail("__metadata__ is {}, not an object of strings", what);
        fail("entry '{}' is {}, not an object with dtype, shape and data_offsets", shown(top_key_), what);
      case State::metadata: fail("__metadata__ value for '{}' is {}, not a string", shown(metadata_key_), what);
      case State::shape:
      case State::offsets:
        fail("tensor '{}': {} holds {}, not an unsigned integer", shown(entries.back().info.name), field_, what);
      default: EMBER_ASSERT(false, "safetensors: unexpected {} in state {}", what, int(state_));
    }
  }
  bool end_skipped() {
    if (--skip_depth_ == 0) state_ = State::entry;
    return true;
  }

  const std::string& path_;
  State state_ = State::start;
  std::string top_key_, metadata_key_, field_;
  std::set<std::string> names_;
  int skip_depth_ = 0;
};

// Checks each entry against its dtype and shape and the data section, then that
// the entries tile the section; returns them in offset order.
SafetensorsHeader validate(const std::string& path, std::vector<RawEntry> entries,
                           std::map<std::string, std::string> metadata, int64_t header_size, int64_t data_size) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (RawEntry& e : entries) {
    SafetensorsTensorInfo& info = e.info;
    const std::string_view code = code_of(info.dtype).code;
    int64_t numel = 1;  // multiplied in order with overflow checks, as the reference does
    for (int64_t size : info.shape) {
      EMBER_CHECK(size == 0 || numel <= kMax / size, "safetensors: '{}': tensor '{}': the product of shape {} overflows",
                  path, shown(info.name), info.shape);
      numel *= size;
    }
    // A zero dim makes numel 0 whatever follows, but ember's strides are the
    // products of the later dims (zeros counted as 1): those must fit too.
    int64_t stride = 1;
    for (int d = info.shape.ndim() - 1; d >= 1; --d)
      EMBER_CHECK(!__builtin_mul_overflow(stride, std::max<int64_t>(info.shape[d], 1), &stride),
                  "safetensors: '{}': tensor '{}': shape {} is too large for ember: its strides overflow 64 bits", path,
                  shown(info.name), info.shape);
    const int64_t element_bytes = element_size(info.dtype);
    EMBER_CHECK(numel <= kMax / element_bytes, "safetensors: '{}': tensor '{}': shape {} of {} overflows in bytes", path,
                shown(info.name), info.shape, code);
    EMBER_CHECK(e.begin <= e.end, "safetensors: '{}': tensor '{}': data_offsets [{}, {}] begin after they end", path,
                shown(info.name), e.begin, e.end);
    EMBER_CHECK(e.end <= uint64_t(data_size),
                "safetensors: '{}': tensor '{}': data_offsets [{}, {}] run past the end of the data section ({} bytes)",
                path, shown(info.name), e.begin, e.end, data_size);
    info.data_begin = int64_t(e.begin);
    info.data_end = int64_t(e.end);
    EMBER_CHECK(info.data_end - info.data_begin == numel * element_bytes,
                "safetensors: '{}': tensor '{}': shape {} of {} needs {} bytes, but data_offsets [{}, {}] hold {}", path,
                shown(info.name), info.shape, code, numel * element_bytes, e.begin, e.end, e.end - e.begin);
  }
  // Header order among equal offsets (empty tensors) is kept: that is the order the writer chose.
  std::stable_sort(entries.begin(), entries.end(), [](const RawEntry& a, const RawEntry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  SafetensorsHeader header;
  header.metadata = std::move(metadata);
  header.header_size = header_size;
  header.data_size = data_size;
  header.tensors.reserve(entries.size());
  int64_t covered = 0;
  for (RawEntry& e : entries) {
    const SafetensorsTensorInfo& info = e.info;
    EMBER_CHECK(info.data_begin <= covered,
                "safetensors: '{}': data bytes [{}, {}) belong to no tensor (a gap before tensor '{}')", path, covered,
                info.data_begin, shown(info.name));
    EMBER_CHECK(info.data_begin >= covered,
                "safetensors: '{}': tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}', which ends at {}", path,
                shown(info.name), info.data_begin, info.data_end, shown(header.tensors.back().name), covered);
    covered = info.data_end;
    header.tensors.push_back(std::move(e.info));
  }
  EMBER_CHECK(covered == data_size,
              "safetensors: '{}': the tensors cover {} of the data section's {} bytes, leaving {} trailing bytes "
              "(the whole file must be covered)",
              path, covered, data_size, data_size - covered);
  return header;
}

// The 8-byte length: checked against the reference's bound and the file size.
int64_t header_size_of(const std::string& path, const unsigned char* first8, int64_t file_size) {
  uint64_t size = 0;
  std::memcpy(&size, first8, 8);
  EMBER_CHECK(size <= kMaxHeaderSize, "safetensors: '{}': header length {} exceeds the limit of {} bytes", path, size,
              kMaxHeaderSize);
  EMBER_CHECK(size <= uint64_t(file_size - 8),
              "safetensors: '{}': header length {} runs past the end of the file ({} bytes)", path, size, file_size);
  return int64_t(size);
}

SafetensorsHeader parse_header(const std::string& path, std::string_view text, int64_t file_size) {
  EMBER_CHECK(!text.empty(), "safetensors: '{}': the header length is 0 (an empty header)", path);
  EMBER_CHECK(text.front() == '{', "safetensors: '{}': the header does not start with '{{' (it starts with byte {:#04x})",
              path, static_cast<unsigned char>(text.front()));
  // nlohmann's lexer takes a NUL byte for the end of input; JSON allows none anywhere.
  const size_t nul = text.find('\0');
  EMBER_CHECK(nul == std::string_view::npos, "safetensors: '{}': the header has a NUL byte at offset {}, which JSON "
              "does not allow", path, nul);
  HeaderParser parser(path);
  bool parsed = nlohmann::json::sax_parse(text.begin(), text.end(), &parser);
  EMBER_ASSERT(parsed, "safetensors: the header parser stopped without an error");
  int64_t header_size = int64_t(text.size());
  return validate(path, std::move(parser.entries), std::move(parser.metadata), header_size,
                  file_size - 8 - header_size);
}

// ---------------------------------------------------------------------------
// Files.

void check_file_size(const std::string& path, int64_t file_size) {
  EMBER_CHECK(file_size >= 8, "safetensors: '{}': the file has {} bytes, fewer than the 8-byte header length", path,
              file_size);
}

// A bool is the byte 0 or 1; any other (a uint8 buffer written as BOOL, as
// numpy's view(bool) allows) would be read as a value that is neither: 255.0
// when converted, a logical_not that is not false.
void check_bool_bytes(const std::string& name, const std::string& tensor, const char* data, size_t nbytes) {
  const auto* first = reinterpret_cast<const unsigned char*>(data);
  const auto* bad = std::find_if(first, first + nbytes, [](unsigned char byte) { return byte > 1; });
  EMBER_CHECK(bad == first + nbytes,
              "safetensors: '{}': tensor '{}' is BOOL but element {} is the byte {}; a BOOL element must be 0 or 1",
              name, shown_text(tensor), bad - first, int(*bad));
}

// The tensors of a whole file at `bytes` (`file_size` of them), which `owner`
// keeps alive: each tensor views the bytes and holds `owner`, unless its data
// is misaligned for its dtype, when it gets a copy.
SafetensorsContents contents_of(const std::string& name, char* bytes, int64_t file_size,
                                const std::shared_ptr<void>& owner) {
  const int64_t header_size = header_size_of(name, reinterpret_cast<const unsigned char*>(bytes), file_size);
  SafetensorsHeader header = parse_header(name, std::string_view(bytes + 8, size_t(header_size)), file_size);

  SafetensorsContents contents;
  contents.metadata = std::move(header.metadata);
  contents.tensors.reserve(header.tensors.size());
  for (const SafetensorsTensorInfo& info : header.tensors) {
    const int64_t file_offset = header.data_start() + info.data_begin;
    const size_t nbytes = size_t(info.data_end - info.data_begin);
    char* data = bytes + file_offset;
    if (info.dtype == DType::boolean) check_bool_bytes(name, info.name, data, nbytes);
    Tensor tensor;
    if (nbytes > 0 && reinterpret_cast<uintptr_t>(data) % uintptr_t(element_size(info.dtype)) == 0) {
      // One storage per tensor (its own version counter), each holding the bytes alive.
      auto storage = std::make_shared<Storage>(data, nbytes, kCPU, [owner](void*) {});
      tensor = Tensor::make(std::move(storage), info.dtype, info.shape, contiguous_strides(info.shape, "safetensors"), 0);
    } else {
      tensor = make_tensor(info.shape, info.dtype);
      if (nbytes > 0) std::memcpy(tensor.data_ptr(), data, nbytes);
    }
    contents.tensors.emplace_back(info.name, std::move(tensor));
  }
  return contents;
}

// Opens `path` for reading and returns its size, which must hold the 8-byte
// length. A FIFO, device or directory is refused at once (open_regular_file);
// a link the user gives is followed (model files are often links into a cache).
FileDescriptor open_for_reading(const std::string& path, int64_t& file_size) {
  FileDescriptor file = open_regular_file("safetensors", path, Links::follow, &file_size);
  check_file_size(path, file_size);
  return file;
}

// A private, writable mapping of a whole file: pages are shared with the page
// cache until a tensor writes to one, which then gets its own copy (MAP_PRIVATE
// is copy-on-write), so the file never changes. Another program truncating or
// rewriting the file in place while tensors view it makes reading them
// SIGBUS or changes them (Note [Mapped loads] in core/README.md); ember's own
// writer replaces files by rename, which leaves mapped inodes intact.
class FileMapping {
 public:
  FileMapping(int fd, size_t size, const std::string& path) : size_(size) {
    address_ = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    EMBER_CHECK(address_ != MAP_FAILED, "safetensors: cannot map '{}' ({} bytes): {}", path, size, errno_text());
  }
  ~FileMapping() { ::munmap(address_, size_); }
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  char* data() const { return static_cast<char*>(address_); }

 private:
  void* address_ = nullptr;
  size_t size_ = 0;
};

// The file order of the reference writer: largest alignment first, then by name.
std::vector<const std::pair<std::string, Tensor>*> writer_order(const NamedTensors& tensors) {
  std::vector<const std::pair<std::string, Tensor>*> order;
  order.reserve(tensors.size());
  for (const auto& named : tensors) order.push_back(&named);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    int rank_a = code_of(a->second.dtype()).alignment_rank, rank_b = code_of(b->second.dtype()).alignment_rank;
    if (rank_a != rank_b) return rank_a > rank_b;
    return a->first < b->first;  // std::string compares bytes as unsigned, as Rust's str does
  });
  return order;
}

void check_utf8(const std::string& text, std::string_view what, const std::string& path) {
  try {
    (void)nlohmann::json(text).dump();
  } catch (const nlohmann::json::exception&) {
    EMBER_CHECK(false, "safetensors: '{}': {} '{}' is not valid UTF-8", path, what, shown(text));
  }
}

// The header text for `order`, padded with spaces to a multiple of 8.
std::string header_text(const std::vector<const std::pair<std::string, Tensor>*>& order,
                        const std::map<std::string, std::string>& metadata, const std::string& path) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json values = nlohmann::ordered_json::object();
    for (const auto& entry : metadata) {
      check_utf8(entry.first, "metadata key", path);
      check_utf8(entry.second, "metadata value", path);
      values[entry.first] = entry.second;
    }
    header["__metadata__"] = std::move(values);
  }
  uint64_t offset = 0;
  for (const auto* named : order) {
    const Tensor& tensor = named->second;
    check_utf8(named->first, "tensor name", path);
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = code_of(tensor.dtype()).code;
    entry["shape"] = std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end());
    uint64_t end = offset + uint64_t(tensor.nbytes());
    entry["data_offsets"] = nlohmann::ordered_json::array({offset, end});
    header[named->first] = std::move(entry);
    offset = end;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the reference's 8-byte alignment of the data section
  EMBER_CHECK(text.size() <= kMaxHeaderSize, "safetensors: '{}': the header would take {} bytes, over the limit of {}",
              path, text.size(), kMaxHeaderSize);
  return text;
}

}  // namespace

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string target = path.string();
  std::set<std::string_view> names;
  for (const auto& named : tensors) {
    EMBER_CHECK(named.second.defined(), "save_safetensors: '{}': tensor '{}' is undefined", target, shown(named.first));
    EMBER_CHECK(named.first != "__metadata__", "save_safetensors: '{}': '__metadata__' is reserved, not a tensor name",
                target);
    EMBER_CHECK(names.insert(named.first).second, "save_safetensors: '{}': the name '{}' is given twice", target,
                shown(named.first));
  }
  std::map<std::string, std::string> all_metadata = metadata;
  all_metadata.emplace("format", "pt");  // Hugging Face loaders want it; a given "format" wins
  const auto order = writer_order(tensors);
  const std::string header = header_text(order, all_metadata, target);

  write_file_atomically("save_safetensors", path, [&](int fd, const std::string& temporary) {
    uint64_t header_size = header.size();
    unsigned char length[8];
    std::memcpy(length, &header_size, 8);
    write_exactly("save_safetensors", fd, length, 8, temporary);
    write_exactly("save_safetensors", fd, header.data(), header.size(), temporary);
    for (const auto* named : order) {
      Tensor data = named->second.device().is_cpu() ? named->second : named->second.to(kCPU);
      if (!data.is_contiguous()) data = data.contiguous();
      write_exactly("save_safetensors", fd, data.data_ptr(), size_t(data.nbytes()), temporary);
    }
  });
}

std::string_view safetensors_dtype_name(DType dtype) { return code_of(dtype).code; }

std::optional<DType> safetensors_dtype_from_name(std::string_view name) {
  for (const DTypeCode& entry : kDTypeCodes)
    if (entry.code == name) return entry.dtype;
  return std::nullopt;
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path) {
  const std::string name = path.string();
  int64_t file_size = 0;
  FileDescriptor file = open_for_reading(name, file_size);
  unsigned char length[8];
  read_exactly("safetensors", file.get(), length, 8, 0, name);
  const int64_t header_size = header_size_of(name, length, file_size);
  std::string text(size_t(header_size), '\0');  // bounded by the limit and by the file's size
  read_exactly("safetensors", file.get(), text.data(), text.size(), 8, name);
  return parse_header(name, text, file_size);
}

SafetensorsContents load_safetensors(const std::filesystem::path& path, const SafetensorsLoadOptions& options) {
  const std::string name = path.string();
  int64_t file_size = 0;
  FileDescriptor file = open_for_reading(name, file_size);
  if (!options.mmap) {
    auto bytes = std::make_shared<std::string>(read_whole_file("safetensors", file.get(), file_size, name));
    return contents_of(name, bytes->data(), file_size, bytes);
  }
  // The mapping outlives the descriptor.
  auto mapping = std::make_shared<FileMapping>(file.get(), size_t(file_size), name);
  return contents_of(name, mapping->data(), file_size, mapping);
}

SafetensorsContents parse_safetensors(std::shared_ptr<std::string> bytes, const std::string& name) {
  EMBER_CHECK(bytes != nullptr, "parse_safetensors: '{}': no bytes given", name);
  check_file_size(name, int64_t(bytes->size()));
  char* data = bytes->data();
  const int64_t size = int64_t(bytes->size());  // read before `bytes` is moved into the owner
  return contents_of(name, data, size, std::move(bytes));
}

}  // namespace ember
