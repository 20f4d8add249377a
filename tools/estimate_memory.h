// `ember estimate-memory`: before any run, the bytes each process holds for
// parameters, gradients and optimizer state under DDP, zero1, zero2 and zero3,
// at given numbers of processes, as `accelerate estimate-memory` prints for a
// model. The formulas are distributed::estimate_memory's
// (distributed/zero/memory_estimate.h); this file reads the model description
// and prints the table. tools/main.cpp parses the command line into
// EstimateMemoryOptions.
//
//   ember estimate-memory --gpt layers=12,d_model=768,vocab=50257,context=1024,heads=12 --num-processes 2,4
//   ember estimate-memory --params 7B --optimizer sgd-momentum --dtype bf16
//   ember estimate-memory --model checkpoints/model.safetensors
//
// Tests: tests/tools/test_estimate_memory.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::launch {

struct EstimateMemoryOptions {
  std::string params = "";                // --params: "124M", "7B", "1000000"
  std::string gpt = "";                   // --gpt: "layers=12,d_model=768,vocab=50257,context=1024,heads=12"
  std::string model = "";                 // --model: a .safetensors file, or a directory of them
  std::string num_processes = "1,2,4,8";  // --num-processes: a comma-separated list
  std::string optimizer = "adamw";        // --optimizer
  std::string dtype = "f32";              // --dtype: the parameters' dtype
  std::string mixed_precision = "no";     // --mixed-precision: no, fp16, bf16 (adds nothing; see the footnote)
  std::string unit_params = "";           // --unit-params: the largest unit's parameters, for zero3
  bool exact_bytes = false;               // --bytes: integers instead of KiB/MiB/GiB
};

// The model as the table needs it.
struct ModelSize {
  int64_t num_params = 0;
  int64_t largest_unit_params = 0;  // 0: unknown, the whole model counts as one unit
  std::string description = "";     // "GPT (layers=12, ...)", for the title
};

// "124M" -> 124000000, "1.5B" -> 1500000000, "1000" -> 1000 (K, M, B, T: powers of 1000).
// Errors name `flag` and the text.
int64_t parse_parameter_count(const std::string& text, const std::string& flag);

// The parameters of nn::TransformerBlock-based GPT (examples/train_char_gpt.cpp,
// nanoGPT): token and position embeddings, `layers` blocks, a final LayerNorm,
// and a head (tied to the token embedding unless tied=false). Keys: layers,
// d_model, vocab, context (required); heads (1), mlp_ratio (4), bias (true),
// tied (true). The largest unit is the larger of one block and what is left
// outside the blocks (the root unit under the transformer wrap policy).
ModelSize gpt_model_size(const std::string& description);

// The sum of the tensors' elements in a safetensors file, or in a
// directory's model files (model.safetensors, model_<i>.safetensors, the
// shards model-<k>-of-<n>.safetensors; headers only). A save_state
// checkpoint directory, or one with other .safetensors files, is refused.
ModelSize safetensors_model_size(const std::string& path);

// Buffers per parameter of an optimizer: adamw, adam 2; adamw-amsgrad,
// adam-amsgrad 3; sgd 0; sgd-momentum, adagrad, rmsprop, lion 1; rmsprop-momentum 2.
int optimizer_buffers(const std::string& name);

// The table's lines, title and footnotes included. Errors name the flag and value.
std::vector<std::string> memory_table(const EstimateMemoryOptions& options);

}  // namespace ember::launch
