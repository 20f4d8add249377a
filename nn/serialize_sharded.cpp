// parse_byte_size, save_sharded, load_sharded (nn/serialize.h): a state dict
// as a directory in Hugging Face's layout, as Accelerator::save_model writes
// it and transformers' from_pretrained reads it. What is Hugging Face's and
// what the index reader refuses: Note [Sharded model files] in nn/README.md.
#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <system_error>

#include "core/error.h"
#include "core/file_io.h"
#include "core/safetensors.h"
#include "core/strict_json.h"
#include "nn/serialize.h"

namespace ember::nn {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr int64_t kMaxIndexBytes = 100'000'000;  // the safetensors header's own limit, for a list of the same names
constexpr int kMaxFractionDigits = 6;            // keeps fraction * unit inside int64 for every unit

struct ByteUnit {
  std::string_view name;  // upper case
  int64_t bytes;
};
constexpr ByteUnit kByteUnits[] = {
    {"", 1},
    {"KB", 1'000},       {"MB", 1'000'000},   {"GB", 1'000'000'000},   {"TB", 1'000'000'000'000},
    {"KIB", int64_t(1) << 10}, {"MIB", int64_t(1) << 20}, {"GIB", int64_t(1) << 30}, {"TIB", int64_t(1) << 40},
};

std::string_view trimmed(std::string_view text) {
  const auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

std::string shard_name(size_t index, size_t count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

// `model-<digits>-of-<digits>.safetensors`, at least 5 digits each: what an
// earlier save_sharded (or save_pretrained) may have left.
bool is_shard_name(std::string_view name) {
  const auto take_digits = [&name] {
    size_t count = 0;
    while (count < name.size() && std::isdigit(static_cast<unsigned char>(name[count]))) ++count;
    name.remove_prefix(count);
    return count >= 5;
  };
  const auto take = [&name](std::string_view prefix) {
    if (!name.starts_with(prefix)) return false;
    name.remove_prefix(prefix.size());
    return true;
  };
  return take("model-") && take_digits() && take("-of-") && take_digits() && name == ".safetensors";
}

// Hugging Face's split (huggingface_hub's split_state_dict_into_shards_factory,
// which transformers' save_pretrained and Accelerate's save_model call):
// tensors in order; one larger than the limit gets a shard of its own at once
// (ahead of the shard being filled); otherwise a new shard starts when the
// next tensor would overflow the current one.
std::vector<std::vector<size_t>> split_into_shards(const NamedTensors& state, int64_t max_shard_size) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  int64_t current_size = 0;
  for (size_t i = 0; i < state.size(); ++i) {
    const int64_t size = state[i].second.nbytes();
    if (size > max_shard_size) {
      shards.push_back({i});
      continue;
    }
    if (current_size + size > max_shard_size) {
      shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(i);
    current_size += size;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  return shards;
}

// Files an earlier save into `directory` left that this one did not write.
void remove_stale_files(const fs::path& directory, const std::set<std::string>& written) {
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const bool ours = name == kSingleFile || name == kIndexFile || is_shard_name(name);
    if (!ours || written.count(name) || it->symlink_status().type() != fs::file_type::regular) continue;
    fs::remove(it->path(), error);
    EMBER_CHECK(!error, "save_sharded: cannot remove the stale '{}': {}", it->path().string(), error.message());
  }
  EMBER_CHECK(!error, "save_sharded: cannot list '{}': {}", directory.string(), error.message());
}

// A save renames its shards over the previous save's one by one, so a save
// that fails or is killed between two renames would leave shards of both,
// under an index that lists them all alike. The entry points go first (and
// the removal is made durable before any shard is written): a torn directory
// then has no index and no model.safetensors, and load_sharded refuses it.
// An entry point that is not a regular file (a link, a directory) is refused
// here, before any shard is written: the save could not replace it at the
// end (write_file_atomically replaces only regular files), and would leave it
// pointing over half-replaced shards.
void remove_entry_points(const fs::path& directory) {
  for (const char* name : {kIndexFile, kSingleFile}) {
    const fs::path path = directory / name;
    std::error_code error;
    const fs::file_type type = fs::symlink_status(path, error).type();
    if (type == fs::file_type::not_found) continue;
    EMBER_CHECK(type == fs::file_type::regular,
                "save_sharded: '{}' is not a regular file (a link, a directory, ...); a save replaces only regular "
                "files: remove it, or save elsewhere",
                path.string());
    fs::remove(path, error);
    EMBER_CHECK(!error, "save_sharded: cannot remove the previous save's '{}': {}", path.string(), error.message());
  }
  sync_directory("save_sharded", directory);
}

// The validated weight_map of an index: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const fs::path& directory) {
  const fs::path path = directory / kIndexFile;
  const std::string context = fmt::format("load_sharded: '{}'", path.string());
  const nlohmann::json index = parse_json_strictly(read_small_file("load_sharded", path, kMaxIndexBytes), context);
  EMBER_CHECK(index.is_object(), "{}: the index is {}, not a JSON object", context, index.type_name());
  if (const auto metadata = index.find("metadata"); metadata != index.end()) {
    // metadata.total_size is not read: transformers and Accelerate ignore it
    // too, so a writer's 60.0 there must not refuse the whole load.
    EMBER_CHECK(metadata->is_object(), "{}: 'metadata' is {}, not an object", context, metadata->type_name());
  }
  const auto weight_map = index.find("weight_map");
  EMBER_CHECK(weight_map != index.end(), "{}: the index has no 'weight_map'", context);
  EMBER_CHECK(weight_map->is_object(), "{}: 'weight_map' is {}, not an object", context, weight_map->type_name());
  std::map<std::string, std::string> files;
  for (const auto& [tensor, file] : weight_map->items()) {
    EMBER_CHECK(file.is_string(), "{}: weight_map entry '{}' is {}, not a file name", context, shown_text(tensor),
                file.type_name());
    // "./model-00001-of-00002.safetensors" is the plain name that os.path.join,
    // which Hugging Face's loaders use, resolves it to.
    std::string_view name = file.get_ref<const std::string&>();
    while (name.starts_with("./")) name.remove_prefix(2);
    // A backslash is Windows' separator: an index that has one names a path
    // elsewhere, never one of the shards Hugging Face's writers name.
    EMBER_CHECK(is_plain_name(name) && name.find('\\') == std::string::npos,
                "{}: weight_map entry '{}' names the file '{}', which is not a plain file name in the directory "
                "(no '/', '\\', '..', NUL, absolute or empty names)",
                context, shown_text(tensor), shown_text(name));
    std::error_code error;  // e.g. a name too long for the file system: not a file there either
    EMBER_CHECK(fs::is_regular_file(directory / name, error), "{}: weight_map entry '{}' names the shard '{}', which "
                "is not a file in '{}'", context, shown_text(tensor), shown_text(name), directory.string());
    files.emplace(tensor, name);
  }
  return files;
}

// Every shard the weight map names, each checked to hold exactly the tensors
// the map puts in it, as one state dict (views of the mapped files).
NamedTensors read_shards(const fs::path& directory, const std::map<std::string, std::string>& weight_map) {
  std::map<std::string, std::set<std::string>> expected;  // shard -> its tensors, by the index
  for (const auto& [tensor, shard] : weight_map) expected[shard].insert(tensor);
  NamedTensors state;
  for (const auto& [shard, tensors] : expected) {
    const std::string context = fmt::format("load_sharded: '{}': shard '{}'", directory.string(), shard);
    SafetensorsContents contents = load_safetensors(directory / shard, {.mmap = false});  // as nn::load
    for (const auto& [name, tensor] : contents.tensors) {
      const auto listed = weight_map.find(name);
      EMBER_CHECK(listed != weight_map.end(), "{} holds tensor '{}', which the index does not list", context,
                  shown_text(name));
      EMBER_CHECK(listed->second == shard, "{} holds tensor '{}', which the index puts in '{}'", context,
                  shown_text(name), shown_text(listed->second));
    }
    // Every tensor of the shard is one the index puts there, so fewer than the index lists means some are missing.
    if (contents.tensors.size() != tensors.size()) {
      std::set<std::string_view> held;
      for (const auto& named : contents.tensors) held.insert(named.first);
      for (const std::string& tensor : tensors)
        EMBER_CHECK(held.count(tensor), "{} does not hold tensor '{}', which the index puts there", context,
                    shown_text(tensor));
    }
    for (auto& named : contents.tensors) state.push_back(std::move(named));
  }
  return state;
}

}  // namespace

int64_t parse_byte_size(std::string_view text) {
  const std::string_view size = trimmed(text);
  size_t digits = 0;
  while (digits < size.size() && std::isdigit(static_cast<unsigned char>(size[digits]))) ++digits;
  EMBER_CHECK(digits > 0, "parse_byte_size: '{}' does not start with a number (e.g. \"5GB\", \"500MB\", \"1024\")", text);
  std::string_view rest = size.substr(digits);
  std::string_view fraction;
  if (rest.starts_with('.')) {
    rest.remove_prefix(1);
    size_t fraction_digits = 0;
    while (fraction_digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[fraction_digits])))
      ++fraction_digits;
    fraction = rest.substr(0, fraction_digits);
    rest.remove_prefix(fraction_digits);
    EMBER_CHECK(!fraction.empty() && fraction.size() <= size_t(kMaxFractionDigits),
                "parse_byte_size: '{}' needs 1 to {} digits after the point", text, kMaxFractionDigits);
  }
  std::string unit(trimmed(rest));
  std::transform(unit.begin(), unit.end(), unit.begin(), [](char c) { return char(std::toupper(static_cast<unsigned char>(c))); });
  const auto* found = std::find_if(std::begin(kByteUnits), std::end(kByteUnits),
                                   [&](const ByteUnit& candidate) { return candidate.name == unit; });
  EMBER_CHECK(found != std::end(kByteUnits),
              "parse_byte_size: '{}' has the unit '{}'; known are KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB "
              "(powers of 1024), or none for bytes", text, unit);
  EMBER_CHECK(fraction.empty() || found->bytes > 1, "parse_byte_size: '{}' is a fraction of a byte", text);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t whole = 0;
  for (char c : size.substr(0, digits)) {
    EMBER_CHECK(whole <= (kMax - (c - '0')) / 10, "parse_byte_size: '{}' is too large", text);
    whole = whole * 10 + (c - '0');
  }
  EMBER_CHECK(whole <= kMax / found->bytes, "parse_byte_size: '{}' is more bytes than 64 bits hold", text);
  int64_t numerator = 0, denominator = 1;
  for (char c : fraction) {
    numerator = numerator * 10 + (c - '0');
    denominator *= 10;
  }
  const int64_t fraction_bytes = numerator * found->bytes / denominator;  // truncated, as int(float) is in Python
  EMBER_CHECK(whole * found->bytes <= kMax - fraction_bytes, "parse_byte_size: '{}' is more bytes than 64 bits hold",
              text);
  return whole * found->bytes + fraction_bytes;
}

std::vector<fs::path> save_sharded(const NamedTensors& given, const fs::path& directory, int64_t max_shard_size,
                                   const std::map<std::string, std::string>& metadata) {
  EMBER_CHECK(max_shard_size > 0, "save_sharded: max_shard_size must be positive, got {}", max_shard_size);
  std::set<std::string_view> names;
  for (const auto& [name, tensor] : given)
    EMBER_CHECK(names.insert(name).second, "save_sharded: the tensor name '{}' is given twice", shown_text(name));
  const NamedTensors state = without_aliases(given);  // tied weights are written once
  std::error_code error;
  fs::create_directories(directory, error);
  EMBER_CHECK(!error, "save_sharded: cannot create '{}': {}", directory.string(), error.message());

  const std::vector<std::vector<size_t>> shards = split_into_shards(state, max_shard_size);
  remove_entry_points(directory);
  std::vector<fs::path> written;
  if (shards.size() == 1) {
    written.push_back(directory / kSingleFile);
    save_safetensors(written.back(), state, metadata);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    int64_t total_size = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      NamedTensors shard;
      for (size_t index : shards[i]) {
        shard.push_back(state[index]);
        weight_map[state[index].first] = shard_name(i, shards.size());
        total_size += state[index].second.nbytes();
      }
      written.push_back(directory / shard_name(i, shards.size()));
      save_safetensors(written.back(), shard, metadata);
    }
    // As transformers writes it: json.dumps(index, indent=2, sort_keys=True) + "\n". nlohmann's objects are
    // sorted by key, and ensure_ascii escapes as Python's json does.
    const nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", std::move(weight_map)}};
    written.push_back(directory / kIndexFile);
    write_file_atomically("save_sharded", written.back(), index.dump(2, ' ', true) + "\n");
  }
  std::set<std::string> written_names;
  for (const fs::path& path : written) written_names.insert(path.filename().string());
  remove_stale_files(directory, written_names);
  return written;
}

LoadStateDictResult load_sharded(Module& module, const fs::path& directory, bool strict) {
  std::error_code error;
  EMBER_CHECK(fs::is_directory(directory, error), "load_sharded: '{}' is not a directory", directory.string());
  const bool single = fs::exists(directory / kSingleFile, error);
  const bool indexed = fs::exists(directory / kIndexFile, error);
  EMBER_CHECK(!(single && indexed),
              "load_sharded: '{}' holds both {} and {}; one save cannot leave both, so which is current is unknown",
              directory.string(), kSingleFile, kIndexFile);
  EMBER_CHECK(single || indexed, "load_sharded: '{}' holds neither {} nor {}", directory.string(), kSingleFile,
              kIndexFile);
  if (single) return load(module, directory / kSingleFile, strict);
  const NamedTensors state = read_shards(directory, read_weight_map(directory));
  try {
    return module.load_state_dict(state, strict);
  } catch (const Error& load_error) {
    throw Error(fmt::format("nn::load_sharded: {}: {}", directory.string(), load_error.what()));
  }
}

}  // namespace ember::nn
