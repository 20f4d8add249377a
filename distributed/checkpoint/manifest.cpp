// The checkpoint manifest: writing, strict reading, verification
// (manifest.h). The manifest comes from a file that may be damaged or hostile
// (a later issue fuzzes this reader), so every field is type-checked, every
// count and size bounded, and every file name confined to the checkpoint
// directory before anything uses it: Note [Atomic checkpoints] in
// distributed/README.md says why the checksums and ranges are there.
#include "distributed/checkpoint/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string_view>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/file_io.h"
#include "core/safetensors.h"
#include "core/strict_json.h"

namespace ember::distributed::checkpoint {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kFormat = "ember-checkpoint";
constexpr int64_t kVersion = 1;
// Far above any real manifest (~150 bytes a tensor: 400k tensors), and small
// enough that parsing a hostile one costs a bounded amount of memory.
constexpr int64_t kMaxManifestBytes = int64_t(64) << 20;
constexpr size_t kMaxPathBytes = 4096;  // PATH_MAX
constexpr size_t kHashChunkBytes = size_t(1) << 20;

// A relative path of non-empty components, none of them "." or "..": it names
// something inside the directory it is relative to.
bool is_confined_path(std::string_view name) {
  if (name.empty() || name.size() > kMaxPathBytes || name.find('\0') != std::string_view::npos) return false;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(name.find('/', begin), name.size());
    const std::string_view component = name.substr(begin, end - begin);
    if (component.empty() || component == "." || component == "..") return false;
    if (end == name.size()) return true;
    begin = end + 1;
  }
}

// Opens `relative` (a confined path) under `directory` one component at a
// time with O_NOFOLLOW, so that no symbolic link inside the checkpoint can
// lead outside it; O_NONBLOCK so that a FIFO in its place cannot hang the
// open. On failure the descriptor is -1 and `error` the errno.
struct OpenResult {
  FileDescriptor file{-1};
  int error = 0;
};
OpenResult open_beneath(const fs::path& directory, std::string_view relative) {
  OpenResult result;
  result.file = FileDescriptor(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  size_t begin = 0;
  while (result.file.get() >= 0) {
    const size_t end = std::min(relative.find('/', begin), relative.size());
    const std::string component(relative.substr(begin, end - begin));
    const bool last = end == relative.size();
    const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (last ? 0 : O_DIRECTORY);
    result.file = FileDescriptor(::openat(result.file.get(), component.c_str(), flags));
    if (last) break;
    begin = end + 1;
  }
  if (result.file.get() < 0) result.error = errno;
  return result;
}

std::string hex(const unsigned char* bytes, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  text.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    text.push_back(kDigits[bytes[i] >> 4]);
    text.push_back(kDigits[bytes[i] & 15]);
  }
  return text;
}

bool is_sha256_hex(std::string_view text) {
  return text.size() == 64 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

struct Digest {
  uint64_t size = 0;
  std::string sha256;
};

// The size and SHA-256 of everything `fd` reads to its end, in one pass.
Digest digest(int fd, const std::string& path) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EMBER_CHECK(context && EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) == 1,
              "checkpoint manifest: cannot start a SHA-256 hash");
  std::vector<unsigned char> buffer(kHashChunkBytes);
  Digest result;
  while (true) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    EMBER_CHECK(got >= 0, "checkpoint manifest: cannot read '{}': {}", path, errno_text());
    if (got == 0) break;
    EMBER_CHECK(EVP_DigestUpdate(context.get(), buffer.data(), size_t(got)) == 1,
                "checkpoint manifest: SHA-256 of '{}' failed", path);
    result.size += uint64_t(got);
  }
  unsigned char hash[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EMBER_CHECK(EVP_DigestFinal_ex(context.get(), hash, &length) == 1, "checkpoint manifest: SHA-256 of '{}' failed",
              path);
  result.sha256 = hex(hash, length);
  return result;
}

// ---------------------------------------------------------------------------
// Reading: the JSON's shape, field by field. Every error names the manifest
// and the field ("files['a.json'].size").

class ManifestParser {
 public:
  explicit ManifestParser(const fs::path& directory) : path_((directory / kManifestName).string()) {}

  Manifest parse(const std::string& text) {
    const Json root = parse_json_strictly(text, fmt::format("checkpoint manifest '{}'", path_));
    check(root.is_object(), "the manifest is {}, not a JSON object", root.type_name());
    check_keys(root, "the manifest", {"format", "version", "world_size", "metadata", "files", "tensors"});
    const Json& format = field(root, "format", "the manifest");
    check(format.is_string() && format.get<std::string>() == kFormat, "'format' is {}, not \"{}\"",
          shown_text(format.dump()), kFormat);
    const uint64_t version = unsigned_field(root, "version", "the manifest");
    check(version == uint64_t(kVersion), "version {} is not the version this ember reads ({})", version, kVersion);
    Manifest manifest;
    manifest.world_size = int64_t(unsigned_field(root, "world_size", "the manifest"));
    check(manifest.world_size >= 1, "world_size is 0; a checkpoint comes from at least one process");
    manifest.metadata = field(root, "metadata", "the manifest");
    check(manifest.metadata.is_object(), "'metadata' is {}, not an object", manifest.metadata.type_name());
    parse_files(field(root, "files", "the manifest"), manifest);
    parse_tensors(field(root, "tensors", "the manifest"), manifest);
    return manifest;
  }

 private:
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    ::ember::detail::throw_error(
        fmt::format("checkpoint manifest '{}': {}", path_, fmt::format(format, std::forward<Args>(args)...)));
  }
  template <class... Args>
  void check(bool condition, fmt::format_string<Args...> format, Args&&... args) const {
    if (!condition) [[unlikely]]
      fail(format, std::forward<Args>(args)...);
  }

  void check_keys(const Json& object, std::string_view where, std::initializer_list<std::string_view> known) const {
    for (const auto& [key, value] : object.items())
      check(std::find(known.begin(), known.end(), key) != known.end(), "{} has the unknown field '{}'", where,
            shown_text(key));
  }

  const Json& field(const Json& object, const char* key, std::string_view where) const {
    const auto found = object.find(key);
    check(found != object.end(), "{} has no '{}'", where, key);
    return *found;
  }

  uint64_t unsigned_field(const Json& object, const char* key, std::string_view where) const {
    const Json& value = field(object, key, where);
    check(!value.is_number_integer() || value.is_number_unsigned(), "{}.{} is {}, which is negative", where, key,
          shown_text(value.dump()));
    check(value.is_number_unsigned(), "{}.{} is {}, not a non-negative integer", where, key, shown_text(value.dump()));
    const uint64_t number = value.get<uint64_t>();
    check(number <= uint64_t(std::numeric_limits<int64_t>::max()), "{}.{} is {}, which is too large", where, key,
          number);
    return number;
  }

  std::string string_field(const Json& object, const char* key, std::string_view where) const {
    const Json& value = field(object, key, where);
    check(value.is_string(), "{}.{} is {}, not a string", where, key, value.type_name());
    return value.get<std::string>();
  }

  void parse_files(const Json& files, Manifest& manifest) const {
    check(files.is_object(), "'files' is {}, not an object of file names", files.type_name());
    for (const auto& [name, entry] : files.items()) {
      const std::string where = fmt::format("files['{}']", shown_text(name));
      check(is_confined_path(name),
            "{}: the name must be a relative path inside the checkpoint (no empty, '.' or '..' components, no "
            "leading '/')",
            where);
      check(name != kManifestName, "{}: the manifest cannot list itself", where);
      check(entry.is_object(), "{} is {}, not an object with size and sha256", where, entry.type_name());
      check_keys(entry, where, {"size", "sha256"});
      ManifestFile file{.name = name,
                        .size = unsigned_field(entry, "size", where),
                        .sha256 = string_field(entry, "sha256", where)};
      check(is_sha256_hex(file.sha256), "{}.sha256 is '{}', not 64 lowercase hexadecimal digits", where,
            shown_text(file.sha256));
      manifest.files.push_back(std::move(file));
    }
  }

  void parse_tensors(const Json& tensors, Manifest& manifest) const {
    check(tensors.is_array(), "'tensors' is {}, not an array", tensors.type_name());
    std::set<std::pair<std::string, std::string>> seen;
    manifest.tensors.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Json& entry = tensors[i];
      const std::string where = fmt::format("tensors[{}]", i);
      check(entry.is_object(), "{} is {}, not an object", where, entry.type_name());
      check_keys(entry, where, {"file", "name", "dtype", "shape", "param", "offset", "numel"});
      ManifestTensor tensor;
      tensor.file = string_field(entry, "file", where);
      check(manifest.find_file(tensor.file) != nullptr, "{}: file '{}' is not among the manifest's files", where,
            shown_text(tensor.file));
      tensor.name = string_field(entry, "name", where);
      check(seen.emplace(tensor.file, tensor.name).second, "{}: tensor '{}' of '{}' is listed twice", where,
            shown_text(tensor.name), shown_text(tensor.file));
      tensor.dtype = string_field(entry, "dtype", where);
      check(safetensors_dtype_from_name(tensor.dtype).has_value(), "{}.dtype '{}' is not a safetensors dtype ember reads",
            where, shown_text(tensor.dtype));
      tensor.shape = parse_shape(field(entry, "shape", where), where);
      tensor.param = string_field(entry, "param", where);
      check(!tensor.param.empty(), "{}.param is empty", where);
      tensor.offset = int64_t(unsigned_field(entry, "offset", where));
      tensor.numel = int64_t(unsigned_field(entry, "numel", where));
      // A tensor holds its range's elements, whole parameter or slice of one.
      check(tensor.numel == tensor.shape.numel(), "{}: numel {} but shape {} holds {} elements", where, tensor.numel,
            tensor.shape, tensor.shape.numel());
      check(tensor.numel <= std::numeric_limits<int64_t>::max() - tensor.offset,
            "{}: offset {} + numel {} overflows", where, tensor.offset, tensor.numel);
      manifest.tensors.push_back(std::move(tensor));
    }
  }

  // The shape, checked to have a product that fits in int64.
  Shape parse_shape(const Json& value, const std::string& where) const {
    check(value.is_array(), "{}.shape is {}, not an array", where, value.type_name());
    check(value.size() <= size_t(kMaxDims), "{}.shape has {} dims, more than ember's {}", where, value.size(),
          kMaxDims);
    Shape shape;
    for (const Json& size : value) {
      check(size.is_number_unsigned() && size.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
            "{}.shape holds {}, not a non-negative 64-bit integer", where, shown_text(size.dump()));
      shape.push_back(size.get<int64_t>());
    }
    int64_t numel = 1;
    for (int64_t size : shape) {
      check(size == 0 || numel <= std::numeric_limits<int64_t>::max() / size, "{}.shape {} overflows", where, shape);
      numel *= size;
    }
    return shape;
  }

  std::string path_;
};

// Every file under `directory` but the manifest, as sorted relative paths.
std::vector<std::string> checkpoint_files(const fs::path& directory) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::recursive_directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const fs::file_type type = it->symlink_status().type();
    if (type == fs::file_type::directory) continue;
    EMBER_CHECK(type == fs::file_type::regular, "write_manifest: '{}' is not a regular file; a checkpoint holds only "
                "files and directories", it->path().string());
    const std::string name = it->path().lexically_relative(directory).generic_string();
    if (name != kManifestName) names.push_back(name);
  }
  EMBER_CHECK(!error, "write_manifest: cannot list '{}': {}", directory.string(), error.message());
  std::sort(names.begin(), names.end());
  return names;
}

Json to_json(const Manifest& manifest) {
  Json files = Json::object();
  for (const ManifestFile& file : manifest.files) files[file.name] = {{"size", file.size}, {"sha256", file.sha256}};
  Json tensors = Json::array();
  for (const ManifestTensor& tensor : manifest.tensors)
    tensors.push_back({{"file", tensor.file},
                       {"name", tensor.name},
                       {"dtype", tensor.dtype},
                       {"shape", std::vector<int64_t>(tensor.shape.begin(), tensor.shape.end())},
                       {"param", tensor.param},
                       {"offset", tensor.offset},
                       {"numel", tensor.numel}});
  return {{"format", kFormat},   {"version", kVersion}, {"world_size", manifest.world_size},
          {"metadata", manifest.metadata}, {"files", std::move(files)}, {"tensors", std::move(tensors)}};
}

}  // namespace

const ManifestFile* Manifest::find_file(const std::string& name) const {
  for (const ManifestFile& file : files)
    if (file.name == name) return &file;
  return nullptr;
}

std::vector<const ManifestTensor*> Manifest::tensors_of(const std::string& file) const {
  std::vector<const ManifestTensor*> found;
  for (const ManifestTensor& tensor : tensors)
    if (tensor.file == file) found.push_back(&tensor);
  return found;
}

Manifest write_manifest(const fs::path& directory, int64_t world_size, const Json& metadata, const ParamOf& param_of) {
  EMBER_CHECK(world_size >= 1, "write_manifest: world_size must be at least 1, got {}", world_size);
  EMBER_CHECK(metadata.is_object(), "write_manifest: metadata must be a JSON object, got {}", metadata.type_name());
  Manifest manifest;
  manifest.world_size = world_size;
  manifest.metadata = metadata;
  for (const std::string& name : checkpoint_files(directory)) {
    const std::string path = (directory / name).string();
    FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    EMBER_CHECK(file.get() >= 0, "write_manifest: cannot open '{}': {}", path, errno_text());
    const Digest file_digest = digest(file.get(), path);
    manifest.files.push_back({.name = name, .size = file_digest.size, .sha256 = file_digest.sha256});
    if (!name.ends_with(".safetensors")) continue;
    for (const SafetensorsTensorInfo& info : read_safetensors_header(path).tensors)
      manifest.tensors.push_back({.file = name,
                                  .name = info.name,
                                  .dtype = std::string(safetensors_dtype_name(info.dtype)),
                                  .shape = info.shape,
                                  .param = param_of ? param_of(name, info.name) : info.name,
                                  .offset = 0,
                                  .numel = info.shape.numel()});
  }
  write_file_atomically("write_manifest", directory / kManifestName, to_json(manifest).dump(2) + "\n");
  return manifest;
}

Manifest read_manifest(const fs::path& directory) {
  const fs::path path = directory / kManifestName;
  std::error_code error;
  EMBER_CHECK(fs::exists(fs::symlink_status(path, error)),
              "checkpoint {}: there is no {} (the checkpoint is incomplete, or was not written by ember)",
              directory.string(), kManifestName);
  // Links::refuse: a manifest that is a link could vouch for a checkpoint from elsewhere.
  return ManifestParser(directory).parse(read_small_file("checkpoint manifest", path, kMaxManifestBytes, Links::refuse));
}

namespace {

// `expected` opened beneath `directory` as verify_checkpoint and
// read_listed_file open it, checked to be a regular file of the listed size.
FileDescriptor open_listed(const fs::path& directory, const ManifestFile& expected) {
  const std::string checkpoint = directory.string();
  const std::string shown_name = shown_text(expected.name, kMaxPathBytes);
  OpenResult opened = open_beneath(directory, expected.name);
  const int error = opened.error;
  EMBER_CHECK(error != ENOENT, "checkpoint {}: {} is missing (the manifest lists it with {} bytes)", checkpoint,
              shown_name, expected.size);
  EMBER_CHECK(error != ELOOP && error != ENOTDIR,
              "checkpoint {}: {} leads through a symbolic link or a non-directory; a checkpoint's files must be "
              "inside it",
              checkpoint, shown_name);
  EMBER_CHECK(error == 0, "checkpoint {}: cannot open {}: {}", checkpoint, shown_name, std::strerror(error));
  // A FIFO or device opened (O_NONBLOCK did not wait) and is refused here, naming what it is.
  const int64_t size = check_regular_file("checkpoint", opened.file.get(), (directory / expected.name).string());
  EMBER_CHECK(uint64_t(size) == expected.size, "checkpoint {}: {} has {} bytes but the manifest says {}", checkpoint,
              shown_name, size, expected.size);
  return std::move(opened.file);
}

}  // namespace

Manifest verify_checkpoint(const fs::path& directory, std::optional<int64_t> world_size) {
  Manifest manifest = read_manifest(directory);
  const std::string checkpoint = directory.string();
  EMBER_CHECK(!world_size || manifest.world_size == *world_size,
              "checkpoint {}: saved by {} processes, but this job has {}; resume it with the same world size",
              checkpoint, manifest.world_size, world_size.value_or(0));
  for (const ManifestFile& expected : manifest.files) {
    const std::string shown_name = shown_text(expected.name, kMaxPathBytes);
    const FileDescriptor file = open_listed(directory, expected);
    const Digest found = digest(file.get(), (directory / expected.name).string());
    EMBER_CHECK(found.size == expected.size, "checkpoint {}: {} has {} bytes but the manifest says {}", checkpoint,
                shown_name, found.size, expected.size);
    EMBER_CHECK(found.sha256 == expected.sha256, "checkpoint {}: {} has SHA-256 {} but the manifest says {}",
                checkpoint, shown_name, found.sha256, expected.sha256);
  }
  return manifest;
}

std::string read_listed_file(const fs::path& directory, const Manifest& manifest, const std::string& name) {
  const std::string checkpoint = directory.string();
  const ManifestFile* expected = manifest.find_file(name);
  EMBER_CHECK(expected != nullptr,
              "checkpoint {}: {} is not among the files its manifest lists and checks, so it is not read (a file "
              "added after the save, or a checkpoint of another kind)",
              checkpoint, shown_text(name, kMaxPathBytes));
  const FileDescriptor file = open_listed(directory, *expected);
  const std::string path = (directory / name).string();
  std::string bytes = read_whole_file("checkpoint", file.get(), int64_t(expected->size), path);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  unsigned char hash[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EMBER_CHECK(context && EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) == 1 &&
                  EVP_DigestUpdate(context.get(), bytes.data(), bytes.size()) == 1 &&
                  EVP_DigestFinal_ex(context.get(), hash, &length) == 1,
              "checkpoint {}: SHA-256 of {} failed", checkpoint, path);
  // The bytes handed on are the bytes checked: a file rewritten after verify_checkpoint cannot slip through.
  const std::string found = hex(hash, length);
  EMBER_CHECK(found == expected->sha256, "checkpoint {}: {} has SHA-256 {} but the manifest says {}", checkpoint,
              shown_text(name, kMaxPathBytes), found, expected->sha256);
  return bytes;
}

}  // namespace ember::distributed::checkpoint
