// See estimate_memory.h. The model description becomes a number of parameters
// and a largest unit; distributed::estimate_memory does the arithmetic.
#include "estimate_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "config_keys.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "distributed/zero/memory_estimate.h"

namespace ember::launch {
namespace {

using distributed::ShardingStrategy;

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

// a * b + c, or an error naming `flag` when it does not fit in 64 bits.
int64_t multiply_add(int64_t a, int64_t b, int64_t c, const std::string& flag) {
  int64_t product = 0;
  int64_t sum = 0;
  EMBER_CHECK(!__builtin_mul_overflow(a, b, &product) && !__builtin_add_overflow(product, c, &sum),
              "{}: the model's parameter count does not fit in 64 bits", flag);
  return sum;
}

// "1,234,567" for titles.
std::string with_commas(int64_t value) {
  std::string digits = std::to_string(value);
  size_t first = digits[0] == '-' ? 1 : 0;
  std::string grouped = digits.substr(0, first);
  for (size_t i = first; i < digits.size(); ++i) {
    if (i > first && (digits.size() - i) % 3 == 0) grouped.push_back(',');
    grouped.push_back(digits[i]);
  }
  return grouped;
}

std::string human_bytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = double(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

std::vector<int> process_counts(const std::string& text) {
  std::vector<int> counts;
  for (const std::string& part : split(text, ',')) {
    std::optional<long long> count = parse_integer(part);
    EMBER_CHECK(count && *count >= 1 && *count <= (1 << 20),
                "--num-processes: '{}' is not a list of numbers of processes (integers of at least 1, like 2,4,8)", text);
    counts.push_back(int(*count));
  }
  return counts;
}

DType parameter_dtype(const std::string& name) {
  static const std::map<std::string, DType> kNames = {
      {"f32", DType::f32},  {"float32", DType::f32}, {"bf16", DType::bf16}, {"bfloat16", DType::bf16},
      {"f16", DType::f16},  {"fp16", DType::f16},    {"float16", DType::f16}, {"f64", DType::f64},
      {"float64", DType::f64},
  };
  auto found = kNames.find(name);
  EMBER_CHECK(found != kNames.end(), "--dtype: '{}' is not one of f32, bf16, f16, f64", name);
  return found->second;
}

ModelSize model_size(const EstimateMemoryOptions& options) {
  std::vector<std::string> given;
  if (!options.params.empty()) given.push_back("--params");
  if (!options.gpt.empty()) given.push_back("--gpt");
  if (!options.model.empty()) given.push_back("--model");
  EMBER_CHECK(given.size() == 1, "describe the model once: --params, --gpt or --model (got {})",
              given.empty() ? std::string("none") : fmt::format("{}", fmt::join(given, " and ")));
  if (!options.gpt.empty()) return gpt_model_size(options.gpt);
  if (!options.model.empty()) return safetensors_model_size(options.model);
  int64_t params = parse_parameter_count(options.params, "--params");
  return {.num_params = params, .largest_unit_params = 0, .description = options.params + " parameters"};
}

// One row's cells: strategy, processes, parameters, gradients, optimizer state,
// autocast casts (with mixed precision), unit, total.
std::vector<std::string> row(ShardingStrategy strategy, int processes, const distributed::MemoryEstimate& estimate,
                             bool exact, bool casts) {
  auto cell = [exact](int64_t bytes) { return exact ? std::to_string(bytes) : human_bytes(bytes); };
  std::vector<std::string> cells = {std::string(distributed::to_string(strategy)), std::to_string(processes),
                                    cell(estimate.parameters), cell(estimate.gradients), cell(estimate.optimizer_state)};
  if (casts) cells.push_back(cell(estimate.autocast_casts));
  cells.push_back(cell(estimate.transient));
  cells.push_back(cell(estimate.total()));
  return cells;
}

// The cells as lines: the first two columns left-aligned, the numbers right-aligned.
std::vector<std::string> format_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(rows.front().size(), 0);
  for (const auto& cells : rows) {
    for (size_t column = 0; column < cells.size(); ++column) widths[column] = std::max(widths[column], cells[column].size());
  }
  std::vector<std::string> lines;
  for (const auto& cells : rows) {
    std::string line;
    for (size_t column = 0; column < cells.size(); ++column) {
      if (column > 0) line += "  ";
      line += column < 2 ? fmt::format("{:<{}}", cells[column], widths[column])
                         : fmt::format("{:>{}}", cells[column], widths[column]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

// The files of a model in `directory`: model.safetensors, model_<i>.safetensors
// (the Accelerator's further models) and Hugging Face's shards
// model-<k>-of-<n>.safetensors (all n of them). An Accelerator save_state
// directory is refused: its optimizer*.safetensors hold optimizer state (AdamW's
// exp_avg and exp_avg_sq, twice the parameters), not parameters. Any other
// .safetensors file is refused too: which of them the model is, only the user knows.
std::vector<std::filesystem::path> model_files(const std::filesystem::path& directory) {
  namespace fs = std::filesystem;
  static const std::regex kModel(R"(model(_\d+)?\.safetensors)");
  static const std::regex kShard(R"(model-(\d+)-of-(\d+)\.safetensors)");
  std::error_code error;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory, error)) names.push_back(entry.path().filename().string());
  EMBER_CHECK(!error, "--model: cannot list '{}': {}", directory.string(), error.message());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names)
    EMBER_CHECK(name != "manifest.json" && !(name.starts_with("optimizer") && name.ends_with(".safetensors")),
                "--model: '{}' is an Accelerator save_state checkpoint ({} is in it), whose optimizer state is not "
                "parameters: pass its model file, --model {}",
                directory.string(), name, (directory / "model.safetensors").string());
  std::vector<fs::path> files;
  std::set<long long> shard_totals;            // the n of each model-<k>-of-<n> (-1: too large to read)
  std::map<long long, std::string> shard_names;  // each k's file: model-1-of-2 and model-00001-of-00002 are one shard
  for (const std::string& name : names) {
    if (!name.ends_with(".safetensors")) continue;
    std::smatch shard;
    if (std::regex_match(name, shard, kShard)) {
      shard_totals.insert(parse_integer(shard[2].str()).value_or(-1));
      const auto [first, fresh] = shard_names.emplace(parse_integer(shard[1].str()).value_or(-1), name);
      EMBER_CHECK(fresh, "--model: '{}' holds shard {} twice ({} and {}); pass the files of one model",
                  directory.string(), first->first, first->second, name);
    } else
      EMBER_CHECK(std::regex_match(name, kModel),
                  "--model: {} in '{}' is not a model file (model.safetensors, model_<i>.safetensors or "
                  "model-<k>-of-<n>.safetensors): pass the file to count, --model {}",
                  name, directory.string(), (directory / name).string());
    files.push_back(directory / name);
  }
  EMBER_CHECK(!files.empty(), "--model: the directory '{}' holds no .safetensors file", directory.string());
  // All n shards of one set, or the count would be part of a model (or parts of two).
  EMBER_CHECK(shard_totals.empty() || (shard_totals.size() == 1 && *shard_totals.begin() == (long long)(files.size())),
              "--model: '{}' holds {} .safetensors files, but its shards say there are {} (model-<k>-of-<n>): a "
              "shard missing, or files of two saves; pass the files of one model",
              directory.string(), files.size(), fmt::join(shard_totals, " and "));
  for (const auto& [number, name] : shard_names)
    EMBER_CHECK(number >= 1 && number <= (long long)(files.size()),
                "--model: '{}' holds {}, shard {} of {}: a shard number from 1 to {} is missing; pass the files of "
                "one model",
                directory.string(), name, number, files.size(), files.size());
  return files;
}

}  // namespace

int64_t parse_parameter_count(const std::string& text, const std::string& flag) {
  auto fail = [&] {
    EMBER_CHECK(false, "{}: '{}' is not a number of parameters (like 124M, 1.5B or 1000000)", flag, text);
    return int64_t(0);
  };
  if (text.empty()) return fail();
  double scale = 1;
  std::string digits = text;
  switch (digits.back()) {
    case 'K': case 'k': scale = 1e3; break;
    case 'M': case 'm': scale = 1e6; break;
    case 'B': case 'b': case 'G': case 'g': scale = 1e9; break;
    case 'T': case 't': scale = 1e12; break;
    default: break;
  }
  if (scale != 1) digits.pop_back();
  if (scale == 1) {
    std::optional<long long> value = parse_integer(digits);
    return value && *value >= 1 ? int64_t(*value) : fail();
  }
  double value = 0;
  auto [stop, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc() || stop != digits.data() + digits.size()) return fail();
  double count = value * scale;
  if (!(count >= 1 && count < 9.2e18) || std::abs(count - std::round(count)) > 1e-6 * count) return fail();
  return int64_t(std::llround(count));
}

ModelSize gpt_model_size(const std::string& description) {
  const std::string flag = "--gpt";
  std::map<std::string, std::string> values;
  for (const std::string& entry : split(description, ',')) {
    size_t equals = entry.find('=');
    EMBER_CHECK(equals != std::string::npos, "{}: '{}' is not key=value (in '{}')", flag, entry, description);
    std::string key = entry.substr(0, equals);
    static const std::vector<std::string> kKeys = {"layers", "d_model", "vocab", "context",
                                                   "heads",  "mlp_ratio", "bias", "tied"};
    EMBER_CHECK(std::find(kKeys.begin(), kKeys.end(), key) != kKeys.end(),
                "{}: unknown key '{}' (use layers, d_model, vocab, context, heads, mlp_ratio, bias, tied)", flag, key);
    EMBER_CHECK(values.emplace(key, entry.substr(equals + 1)).second, "{}: {} is given twice", flag, key);
  }
  auto integer = [&](const std::string& key, std::optional<int64_t> fallback) {
    auto found = values.find(key);
    EMBER_CHECK(found != values.end() || fallback, "{}: {} is missing (layers, d_model, vocab and context are needed)",
                flag, key);
    if (found == values.end()) return *fallback;
    std::optional<long long> value = parse_integer(found->second);
    EMBER_CHECK(value && *value >= 1, "{}: {}={} is not an integer of at least 1", flag, key, found->second);
    return int64_t(*value);
  };
  auto boolean = [&](const std::string& key) {
    auto found = values.find(key);
    if (found == values.end()) return true;
    EMBER_CHECK(found->second == "true" || found->second == "false", "{}: {}={} is not true or false", flag, key,
                found->second);
    return found->second == "true";
  };
  const int64_t layers = integer("layers", std::nullopt);
  const int64_t width = integer("d_model", std::nullopt);  // C
  const int64_t vocab = integer("vocab", std::nullopt);
  const int64_t context = integer("context", std::nullopt);
  const int64_t heads = integer("heads", 1);
  const int64_t ratio = integer("mlp_ratio", 4);
  const bool bias = boolean("bias");
  const bool tied = boolean("tied");
  EMBER_CHECK(width % heads == 0, "{}: d_model={} is not divisible by heads={}", flag, width, heads);

  // As nn::TransformerBlock builds it: ln_1, attn (c_attn [C] -> [3C], c_proj [C] -> [C]),
  // ln_2, mlp (c_fc [C] -> [rC], c_proj [rC] -> [C]); biases and LayerNorm shifts when bias.
  const int64_t norm = bias ? 2 * width : width;
  const int64_t hidden = multiply_add(ratio, width, 0, flag);
  int64_t block = 2 * norm;
  block = multiply_add(3 * width, width, block + (bias ? 3 * width : 0), flag);  // c_attn
  block = multiply_add(width, width, block + (bias ? width : 0), flag);          // attn.c_proj
  block = multiply_add(hidden, width, block + (bias ? hidden : 0), flag);        // c_fc
  block = multiply_add(hidden, width, block + (bias ? width : 0), flag);         // mlp.c_proj
  // Outside the blocks: wte [V, C], wpe [T, C], ln_f, and lm_head [C] -> [V] without bias unless tied to wte.
  int64_t outside = multiply_add(vocab, width, 0, flag);
  outside = multiply_add(context, width, outside + norm, flag);
  if (!tied) outside = multiply_add(vocab, width, outside, flag);
  const int64_t total = multiply_add(layers, block, outside, flag);
  return {.num_params = total,
          .largest_unit_params = std::max(block, outside),
          .description = fmt::format("GPT ({})", description)};
}

ModelSize safetensors_model_size(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  EMBER_CHECK(fs::exists(path, error), "--model: '{}' does not exist", path);
  const std::vector<fs::path> files = fs::is_directory(path, error) ? model_files(path) : std::vector<fs::path>{path};
  int64_t total = 0;
  int64_t largest = 0;
  size_t tensors = 0;
  for (const fs::path& file : files) {
    SafetensorsHeader header;
    try {
      header = read_safetensors_header(file);
    } catch (const Error& failure) {
      EMBER_CHECK(false, "--model: {}", failure.what());
    }
    for (const SafetensorsTensorInfo& tensor : header.tensors) {
      int64_t elements = 1;
      for (int64_t size : tensor.shape) elements = multiply_add(elements, size, 0, "--model");
      total = multiply_add(1, total, elements, "--model");
      largest = std::max(largest, elements);
    }
    tensors += header.tensors.size();
  }
  EMBER_CHECK(total > 0, "--model: '{}' holds no parameters", path);
  return {.num_params = total,
          .largest_unit_params = 0,
          .description = fmt::format("{} ({} tensors in {} file{})", path, tensors, files.size(),
                                     files.size() == 1 ? "" : "s")};
}

int optimizer_buffers(const std::string& name) {
  static const std::map<std::string, int> kBuffers = {
      {"adamw", 2},         {"adam", 2},    {"adamw-amsgrad", 3}, {"adam-amsgrad", 3},     {"sgd", 0},
      {"sgd-momentum", 1},  {"adagrad", 1}, {"rmsprop", 1},       {"rmsprop-momentum", 2}, {"lion", 1},
  };
  auto found = kBuffers.find(name);
  EMBER_CHECK(found != kBuffers.end(),
              "--optimizer: '{}' is not one of adamw, adam, adamw-amsgrad, adam-amsgrad, sgd, sgd-momentum, adagrad, "
              "rmsprop, rmsprop-momentum, lion",
              name);
  return found->second;
}

std::vector<std::string> memory_table(const EstimateMemoryOptions& options) {
  ModelSize model = model_size(options);
  std::vector<int> counts = process_counts(options.num_processes);
  const int buffers = optimizer_buffers(options.optimizer);
  const DType dtype = parameter_dtype(options.dtype);
  EMBER_CHECK(options.mixed_precision == "no" || options.mixed_precision == "fp16" || options.mixed_precision == "bf16",
              "--mixed-precision: '{}' is not one of no, fp16 or bf16", options.mixed_precision);
  int64_t unit = model.largest_unit_params;
  if (!options.unit_params.empty()) {
    unit = parse_parameter_count(options.unit_params, "--unit-params");
    EMBER_CHECK(unit <= model.num_params, "--unit-params: {} is more than the model's {} parameters", options.unit_params,
                with_commas(model.num_params));
  }

  // Mixed precision's lower dtype: autocast keeps a cast of each weight from the forward to the backward.
  std::optional<DType> autocast_dtype;
  if (options.mixed_precision != "no") autocast_dtype = options.mixed_precision == "bf16" ? DType::bf16 : DType::f16;
  const bool casts = autocast_dtype && *autocast_dtype != dtype;
  std::vector<std::string> header = {"strategy", "processes", "parameters", "gradients", "optimizer state"};
  if (casts) header.push_back("autocast casts");
  header.push_back("largest unit");
  header.push_back("total");
  std::vector<std::vector<std::string>> rows = {header};
  for (int processes : counts) {
    for (ShardingStrategy strategy :
         {ShardingStrategy::ddp, ShardingStrategy::zero1, ShardingStrategy::zero2, ShardingStrategy::zero3}) {
      distributed::MemoryEstimate estimate = distributed::estimate_memory({.num_params = model.num_params,
                                                                           .largest_unit_params = unit,
                                                                           .dtype = dtype,
                                                                           .autocast_dtype = autocast_dtype,
                                                                           .optimizer_buffers = buffers,
                                                                           .strategy = strategy,
                                                                           .world_size = processes});
      rows.push_back(row(strategy, processes, estimate, options.exact_bytes, casts));
    }
  }
  std::vector<std::string> lines = {
      fmt::format("Memory per process for training {}: {} parameters in {}, {} ({} state value{} per parameter)",
                  model.description, with_commas(model.num_params), dtype_name(dtype), options.optimizer, buffers,
                  buffers == 1 ? "" : "s"),
      ""};
  for (std::string& line : format_table(rows)) lines.push_back(std::move(line));
  lines.push_back("");
  const std::string which = unit == 0 ? std::string("the whole model (give --unit-params for a smaller one)")
                                      : fmt::format("{} parameters", with_commas(unit));
  lines.push_back(fmt::format("largest unit: {}; while it runs and its gradients are reduced, zero1 holds its flat "
                              "gradient buffer, zero2 its full and flat gradients, zero3 its full parameters and "
                              "gradients",
                              which));
  if (casts) {
    lines.push_back(fmt::format("mixed precision {}: autocast keeps a {} copy of each weight from its first use in the "
                                "forward until the backward (autocast casts); parameters, gradients and optimizer "
                                "state stay {}",
                                options.mixed_precision, dtype_name(*autocast_dtype), dtype_name(dtype)));
  } else {
    lines.push_back(fmt::format("mixed precision {}: no casts; parameters, gradients and optimizer state are {}",
                                options.mixed_precision, dtype_name(dtype)));
  }
  lines.push_back("not counted: activations, communication buckets, and under zero3 the prefetched next unit and the "
                  "root unit (the parameters outside every wrapped module), gathered all step beside the unit that "
                  "runs");
  return lines;
}

}  // namespace ember::launch
