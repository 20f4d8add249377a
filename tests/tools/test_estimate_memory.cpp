// `ember estimate-memory` (tools/estimate_memory.cpp): the model descriptions
// (a count, a GPT counted as nn::TransformerBlock builds it, a safetensors
// file's header), the table with exact bytes, and every bad flag named with
// its value; once as a real process. The formulas themselves are checked in
// tests/distributed/test_memory_estimate.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops/creation.h"
#include "core/safetensors.h"
#include "distributed/process_runner.h"
#include "estimate_memory.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "nn/transformer.h"
#include "tools/tools_test_support.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;
using launch::EstimateMemoryOptions;

int64_t count(const nn::Module& module) {
  int64_t total = 0;
  for (const Tensor& parameter : module.parameters()) total += parameter.numel();
  return total;
}

// The count of examples/train_char_gpt.cpp's model, built from the nn modules:
// wte, wpe, the blocks, ln_f, and lm_head unless tied to wte.
int64_t built_gpt(int64_t layers, int64_t width, int64_t vocab, int64_t context, int64_t heads, bool bias, bool tied) {
  int64_t total = count(nn::Embedding(vocab, width)) + count(nn::Embedding(context, width));
  for (int64_t layer = 0; layer < layers; ++layer) {
    total += count(nn::TransformerBlock({.embed_dim = width, .num_heads = heads, .bias = bias, .num_layers = layers}));
  }
  total += count(nn::LayerNorm(width, {.bias = bias}));
  if (!tied) total += count(nn::Linear(width, vocab, {.bias = false}));
  return total;
}

TEST(EstimateMemory, GptCountsWhatTheModulesHold) {
  for (bool bias : {true, false}) {
    for (bool tied : {true, false}) {
      std::string description = std::string("layers=3,d_model=8,vocab=11,context=5,heads=2,bias=") +
                                (bias ? "true" : "false") + ",tied=" + (tied ? "true" : "false");
      launch::ModelSize size = launch::gpt_model_size(description);
      EXPECT_EQ(size.num_params, built_gpt(3, 8, 11, 5, 2, bias, tied)) << description;
      int64_t block = count(nn::TransformerBlock({.embed_dim = 8, .num_heads = 2, .bias = bias}));
      EXPECT_EQ(size.largest_unit_params, std::max(block, size.num_params - 3 * block)) << description;
    }
  }
  // GPT-2 small: the 124M of its name, with lm_head tied to wte. Its largest
  // unit is what stays outside the blocks (wte, wpe, ln_f), not a block (7,087,872).
  launch::ModelSize gpt2 = launch::gpt_model_size("layers=12,d_model=768,vocab=50257,context=1024,heads=12");
  EXPECT_EQ(gpt2.num_params, 124'439'808);
  EXPECT_EQ(gpt2.largest_unit_params, 50257 * 768 + 1024 * 768 + 2 * 768);
  EXPECT_EQ(launch::gpt_model_size("layers=1,d_model=4,vocab=2,context=2,mlp_ratio=2").num_params,
            built_gpt(1, 4, 2, 2, 1, true, true) - count(nn::TransformerBlock({.embed_dim = 4, .num_heads = 1})) +
                count(nn::TransformerBlock({.embed_dim = 4, .num_heads = 1, .mlp_ratio = 2})));
}

TEST(EstimateMemory, GptErrorsNameTheKey) {
  auto error = [](const std::string& text) { return error_of([&] { launch::gpt_model_size(text); }); };
  EXPECT_EQ(error("layers=12,d_model=768,vocab=50257"),
            "--gpt: context is missing (layers, d_model, vocab and context are needed)");
  EXPECT_EQ(error("layers=12,d_model=768,vocab=50257,context=1024,heads=5"),
            "--gpt: d_model=768 is not divisible by heads=5");
  EXPECT_EQ(error("layers=twelve,d_model=768,vocab=50257,context=1024"), "--gpt: layers=twelve is not an integer of at least 1");
  EXPECT_EQ(error("layers=0,d_model=768,vocab=50257,context=1024"), "--gpt: layers=0 is not an integer of at least 1");
  EXPECT_EQ(error("n_layer=12"), "--gpt: unknown key 'n_layer' (use layers, d_model, vocab, context, heads, mlp_ratio, "
                                 "bias, tied)");
  EXPECT_EQ(error("layers"), "--gpt: 'layers' is not key=value (in 'layers')");
  EXPECT_EQ(error("layers=1,layers=2"), "--gpt: layers is given twice");
  EXPECT_EQ(error("layers=1,d_model=8,vocab=2,context=2,tied=yes"), "--gpt: tied=yes is not true or false");
  EXPECT_EQ(error("layers=1,d_model=4000000000,vocab=4000000000,context=2"),
            "--gpt: the model's parameter count does not fit in 64 bits");
}

TEST(EstimateMemory, ParameterCounts) {
  EXPECT_EQ(launch::parse_parameter_count("124M", "--params"), 124'000'000);
  EXPECT_EQ(launch::parse_parameter_count("1.5B", "--params"), 1'500'000'000);
  EXPECT_EQ(launch::parse_parameter_count("7b", "--params"), 7'000'000'000);
  EXPECT_EQ(launch::parse_parameter_count("2K", "--params"), 2000);
  EXPECT_EQ(launch::parse_parameter_count("1000", "--params"), 1000);
  for (const char* bad : {"", "M", "12X", "-5", "0", "1.5", "0.0001K", "1e3", "nanM"}) {
    EXPECT_EQ(error_of([&] { launch::parse_parameter_count(bad, "--params"); }),
              std::string("--params: '") + bad + "' is not a number of parameters (like 124M, 1.5B or 1000000)")
        << bad;
  }
}

// P = 10 f32 parameters, AdamW, 4 processes, a whole-model unit: the bytes of
// tests/distributed/test_memory_estimate.cpp's hand case, as the table prints them.
TEST(EstimateMemory, TableWithExactBytes) {
  std::vector<std::string> lines =
      launch::memory_table({.params = "10", .num_processes = "1,4", .exact_bytes = true});
  std::vector<std::string> expected = {
      "Memory per process for training 10 parameters: 10 parameters in float32, adamw (2 state values per parameter)",
      "",
      "strategy  processes  parameters  gradients  optimizer state  largest unit  total",
      "ddp       1                  40         40               80             0    160",
      "zero1     1                  40         40               80            40    200",
      "zero2     1                  40         40               80            80    240",
      "zero3     1                  40         40               80             0    160",
      "ddp       4                  40         40               80             0    160",
      "zero1     4                  40         40               24            40    144",
      "zero2     4                  40         12               24            80    156",
      "zero3     4                  12         12               24            80    128",
      "",
      "largest unit: the whole model (give --unit-params for a smaller one); while it runs and its gradients are "
      "reduced, zero1 holds its flat gradient buffer, zero2 its full and flat gradients, zero3 its full parameters and "
      "gradients",
      "mixed precision no: no casts; parameters, gradients and optimizer state are float32",
      "not counted: activations, communication buckets, and under zero3 the prefetched next unit and the root unit "
      "(the parameters outside every wrapped module), gathered all step beside the unit that runs",
  };
  EXPECT_EQ(lines, expected);
  lines = launch::memory_table({.params = "10", .num_processes = "4", .optimizer = "sgd", .dtype = "bf16",
                                .mixed_precision = "bf16", .unit_params = "4", .exact_bytes = true});
  EXPECT_EQ(lines[0], "Memory per process for training 10 parameters: 10 parameters in bfloat16, sgd (0 state values "
                      "per parameter)");
  EXPECT_EQ(lines[6], "zero3     4                   6          6                0            16     28");
  EXPECT_EQ(lines[8], "largest unit: 4 parameters; while it runs and its gradients are reduced, zero1 holds its flat "
                      "gradient buffer, zero2 its full and flat gradients, zero3 its full parameters and gradients");
  EXPECT_EQ(lines[9], "mixed precision bf16: no casts; parameters, gradients and optimizer state are bfloat16");
  // f32 parameters under bf16: autocast's casts get a column, 2 bytes a parameter. Catches: mixed
  // precision accepted and ignored (the footnote said no copies while autocast cached one per weight).
  lines = launch::memory_table({.params = "10", .num_processes = "4", .mixed_precision = "bf16", .unit_params = "4",
                                .exact_bytes = true});
  EXPECT_EQ(lines[2], "strategy  processes  parameters  gradients  optimizer state  autocast casts  largest unit  total");
  EXPECT_EQ(lines[6], "zero3     4                  12         12               24              20            32    100");
  EXPECT_EQ(lines[9], "mixed precision bf16: autocast keeps a bfloat16 copy of each weight from its first use in the "
                      "forward until the backward (autocast casts); parameters, gradients and optimizer state stay "
                      "float32");
  // Without --bytes: binary units.
  lines = launch::memory_table({.gpt = "layers=12,d_model=768,vocab=50257,context=1024,heads=12", .num_processes = "8"});
  EXPECT_EQ(lines[0], "Memory per process for training GPT (layers=12,d_model=768,vocab=50257,context=1024,heads=12): "
                      "124,439,808 parameters in float32, adamw (2 state values per parameter)");
  EXPECT_EQ(lines[3], "ddp       8          474.70 MiB  474.70 MiB       949.40 MiB           0 B    1.85 GiB");
}

TEST(EstimateMemory, BadFlagsAreNamedWithTheirValues) {
  struct Case {
    EstimateMemoryOptions options;
    std::string message;
  };
  std::vector<Case> cases = {
      {{}, "describe the model once: --params, --gpt or --model (got none)"},
      {{.params = "1M", .gpt = "layers=1"}, "describe the model once: --params, --gpt or --model (got --params and --gpt)"},
      {{.params = "1M", .num_processes = "2,x"},
       "--num-processes: '2,x' is not a list of numbers of processes (integers of at least 1, like 2,4,8)"},
      {{.params = "1M", .num_processes = "0"},
       "--num-processes: '0' is not a list of numbers of processes (integers of at least 1, like 2,4,8)"},
      {{.params = "1M", .optimizer = "adafactor"},
       "--optimizer: 'adafactor' is not one of adamw, adam, adamw-amsgrad, adam-amsgrad, sgd, sgd-momentum, adagrad, "
       "rmsprop, rmsprop-momentum, lion"},
      {{.params = "1M", .dtype = "int8"}, "--dtype: 'int8' is not one of f32, bf16, f16, f64"},
      {{.params = "1M", .mixed_precision = "fp8"}, "--mixed-precision: 'fp8' is not one of no, fp16 or bf16"},
      {{.params = "1M", .unit_params = "2M"}, "--unit-params: 2M is more than the model's 1,000,000 parameters"},
      {{.params = "1M", .unit_params = "big"}, "--unit-params: 'big' is not a number of parameters"},
      {{.model = "/nonexistent/model.safetensors"}, "--model: '/nonexistent/model.safetensors' does not exist"},
  };
  for (const Case& c : cases) {
    std::string message = error_of([&] { launch::memory_table(c.options); });
    EXPECT_TRUE(contains(message, c.message)) << "expected '" << c.message << "', got '" << message << "'";
  }
}

// A saved model's size from its header: a file, and a directory of shards.
TEST(EstimateMemory, SafetensorsFilesAndDirectories) {
  std::filesystem::path directory = fresh_temp_dir("estimate_memory");
  save_safetensors(directory / "model-00001-of-00002.safetensors",
                   {{"wte.weight", zeros({11, 8})}, {"ln_f.weight", zeros({8})}});
  save_safetensors(directory / "model-00002-of-00002.safetensors", {{"head.weight", zeros({3, 8}, {.dtype = DType::bf16})}});
  write_text(directory / "config.json", "{}");
  launch::ModelSize file = launch::safetensors_model_size((directory / "model-00001-of-00002.safetensors").string());
  EXPECT_EQ(file.num_params, 96);
  EXPECT_EQ(file.largest_unit_params, 0);
  launch::ModelSize both = launch::safetensors_model_size(directory.string());
  EXPECT_EQ(both.num_params, 120);
  EXPECT_EQ(both.description, directory.string() + " (3 tensors in 2 files)");
  std::filesystem::create_directories(directory / "empty");
  EXPECT_EQ(error_of([&] { launch::safetensors_model_size((directory / "empty").string()); }),
            "--model: the directory '" + (directory / "empty").string() + "' holds no .safetensors file");
  EXPECT_TRUE(contains(error_of([&] { launch::safetensors_model_size((directory / "config.json").string()); }),
                       "--model: "));
  std::filesystem::remove_all(directory);
}

// Only a model's files count: an Accelerator save_state directory is refused
// (its optimizer.safetensors holds AdamW's exp_avg and exp_avg_sq, twice the
// parameters), as are a stray .safetensors file and an incomplete set of
// shards. Mutation: safetensors_model_size summing every *.safetensors of the
// directory -> the checkpoint counts 3 x 28 = 84 parameters (no error), and
// the stray file and the missing shard go unnoticed.
TEST(EstimateMemory, ADirectoryCountsOnlyItsModelFiles) {
  std::filesystem::path directory = fresh_temp_dir("estimate_memory_model_files");
  auto size_error = [](const std::filesystem::path& path) {
    return error_of([&] { launch::safetensors_model_size(path.string()); });
  };
  const std::filesystem::path checkpoint = directory / "checkpoint";
  std::filesystem::create_directories(checkpoint);
  save_safetensors(checkpoint / "model.safetensors", {{"weight", zeros({4, 6})}, {"bias", zeros({4})}});
  save_safetensors(checkpoint / "optimizer.safetensors",
                   {{"state.weight.exp_avg", zeros({4, 6})}, {"state.weight.exp_avg_sq", zeros({4, 6})},
                    {"state.bias.exp_avg", zeros({4})}, {"state.bias.exp_avg_sq", zeros({4})}});
  write_text(checkpoint / "manifest.json", "{}");
  EXPECT_EQ(size_error(checkpoint),
            "--model: '" + checkpoint.string() + "' is an Accelerator save_state checkpoint (manifest.json is in it), "
            "whose optimizer state is not parameters: pass its model file, --model " +
                (checkpoint / "model.safetensors").string());
  std::filesystem::remove(checkpoint / "manifest.json");
  EXPECT_TRUE(contains(size_error(checkpoint), "(optimizer.safetensors is in it)")) << size_error(checkpoint);
  EXPECT_EQ(launch::safetensors_model_size((checkpoint / "model.safetensors").string()).num_params, 28);

  const std::filesystem::path models = directory / "models";  // the Accelerator's two models, unsharded
  std::filesystem::create_directories(models);
  save_safetensors(models / "model.safetensors", {{"weight", zeros({4, 6})}});
  save_safetensors(models / "model_1.safetensors", {{"weight", zeros({2})}});
  EXPECT_EQ(launch::safetensors_model_size(models.string()).num_params, 26);
  save_safetensors(models / "gradients_0.safetensors", {{"weight", zeros({4, 6})}});
  EXPECT_EQ(size_error(models), "--model: gradients_0.safetensors in '" + models.string() +
                                    "' is not a model file (model.safetensors, model_<i>.safetensors or "
                                    "model-<k>-of-<n>.safetensors): pass the file to count, --model " +
                                    (models / "gradients_0.safetensors").string());

  const std::filesystem::path shards = directory / "shards";
  std::filesystem::create_directories(shards);
  save_safetensors(shards / "model-00001-of-00003.safetensors", {{"a", zeros({3})}});
  save_safetensors(shards / "model-00003-of-00003.safetensors", {{"c", zeros({3})}});
  EXPECT_EQ(size_error(shards), "--model: '" + shards.string() + "' holds 2 .safetensors files, but its shards say "
                                "there are 3 (model-<k>-of-<n>): a shard missing, or files of two saves; pass "
                                "the files of one model");
  // One shard under two spellings and another missing: the count alone matched.
  // Catches: only the number of files checked against n (shard 1 counted twice).
  const std::filesystem::path twice = directory / "twice";
  std::filesystem::create_directories(twice);
  save_safetensors(twice / "model-00001-of-00002.safetensors", {{"a", zeros({3})}});
  save_safetensors(twice / "model-1-of-2.safetensors", {{"a", zeros({3})}});
  EXPECT_EQ(size_error(twice), "--model: '" + twice.string() + "' holds shard 1 twice (model-00001-of-00002.safetensors "
                               "and model-1-of-2.safetensors); pass the files of one model");
  const std::filesystem::path beyond = directory / "beyond";
  std::filesystem::create_directories(beyond);
  save_safetensors(beyond / "model-00001-of-00002.safetensors", {{"a", zeros({3})}});
  save_safetensors(beyond / "model-00003-of-00002.safetensors", {{"b", zeros({3})}});
  EXPECT_EQ(size_error(beyond), "--model: '" + beyond.string() + "' holds model-00003-of-00002.safetensors, shard 3 of "
                                "2: a shard number from 1 to 2 is missing; pass the files of one model");
  std::filesystem::remove_all(directory);
}

TEST(EstimateMemory, TheCommand) {
  ProcessResult result = run_process(
      clean_command({}, {EMBER_CLI, "estimate-memory", "--params", "10", "--num-processes", "4", "--bytes"}), 30s);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "zero2     4                  40         12               24            80    156\n"))
      << result.output;
  result = run_process(clean_command({}, {EMBER_CLI, "estimate-memory", "--params", "lots"}), 30s);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.output,
            "ember estimate-memory: --params: 'lots' is not a number of parameters (like 124M, 1.5B or 1000000)\n");
}

}  // namespace
}  // namespace ember::test
