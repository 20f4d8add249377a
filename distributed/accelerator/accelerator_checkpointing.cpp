// Accelerator::save_state / load_state / save_model: which process writes
// which file, the barriers between them, and loading everything back so that
// a resumed run continues bit for bit (Note [Accelerator checkpoints] in
// distributed/README.md). The directory mechanics (staging, commit, latest,
// manifest) are distributed/checkpoint/'s.
//
// A checkpoint directory holds, besides manifest.json (whose metadata carries
// the accumulation counter and how many objects of each kind were saved):
//   model.safetensors, model_1.safetensors, ...      main process, unprepared names
//   optimizer.safetensors + optimizer.json, ...      main process, keyed by parameter name
//   scheduler.json, scheduler_1.json, ...            main process
//   scaler.json                                      main process, with fp16
//   custom_checkpoint_0.json | .safetensors, ...     main process, register_for_checkpointing
//   process_<r>.json                                 every process: its RNG states (the default generator's and
//                                                    the registered ones') and loader positions
//   gradients_<r>.safetensors                        every process, only mid-accumulation
// and with state_dict_type "sharded" under ZeRO (Note [Sharded checkpoints]),
// instead of the sharded parameters in model*.safetensors and the ZeRO
// optimizers' optimizer*.safetensors:
//   model_shard_<r>.safetensors, model_1_shard_<r>... every process, its pieces of each parameter
//   optimizer_shard_<r>.safetensors, ...             every process, its pieces' optimizer state
//   shards_<r>.json                                  every process, where each piece starts
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <span>
#include <unordered_map>
#include <variant>

#include "core/file_io.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/random.h"
#include "core/ops/views.h"
#include "core/profiler/profiler.h"
#include "core/safetensors.h"
#include "core/shown_text.h"
#include "core/strict_json.h"
#include "distributed/accelerator/accelerator.h"
#include "distributed/accelerator/accelerator_state.h"
#include "distributed/checkpoint/checkpoint_dir.h"
#include "distributed/checkpoint/manifest.h"
#include "nn/serialize.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
namespace checkpoint = distributed::checkpoint;
using nlohmann::json;
using detail::AcceleratorState;

constexpr int kCheckpointFormat = 1;

// model.safetensors, model_1.safetensors, ...
std::string numbered(const std::string& stem, size_t index, const std::string& extension) {
  return index == 0 ? stem + extension : fmt::format("{}_{}{}", stem, index, extension);
}

// Where the first NaN or infinity in `value` is (a path of keys and
// indices) and the number: JSON has no such numbers, and nlohmann writes
// them as null, so a registered object's inf (a best loss so far) came back
// null, found only at the resume.
std::optional<std::pair<std::string, double>> non_finite_number(const json& value, const std::string& at) {
  if (value.is_number_float()) {
    const double number = value.get<double>();
    return std::isfinite(number) ? std::nullopt : std::optional(std::pair{at, number});
  }
  if (value.is_object()) {
    for (const auto& [key, item] : value.items())
      if (auto found = non_finite_number(item, at + "/" + key)) return found;
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i)
      if (auto found = non_finite_number(value[i], at + "/" + std::to_string(i))) return found;
  }
  return std::nullopt;
}

// Through a new temporary file, never through a link planted in the staging directory (core/file_io.h).
void write_json(const fs::path& path, const json& value) {
  const auto found = non_finite_number(value, "");
  EMBER_CHECK(!found, "save_state: {} would hold the number {} at '{}', which JSON cannot hold (it would be read "
              "back as null); give the state_dict a string for it (\"inf\", \"nan\") and read it back in "
              "load_state_dict",
              path.filename().string(), found->second, shown_text(found->first));
  write_file_atomically("save_state", path, value.dump(2) + "\n");
}

// load_state reads a file only through these: one the manifest lists, opened
// inside the checkpoint without following links, and the very bytes whose
// checksum matched (checkpoint::read_listed_file). An unlisted file is an
// error, never applied.
json read_json(const fs::path& directory, const checkpoint::Manifest& manifest, const std::string& name) {
  return parse_json_strictly(checkpoint::read_listed_file(directory, manifest, name),
                             fmt::format("load_state: {}", (directory / name).string()));
}

NamedTensors read_tensors(const fs::path& directory, const checkpoint::Manifest& manifest, const std::string& name) {
  // Parsed from memory: nothing of the file stays mapped once load_state returns.
  auto bytes = std::make_shared<std::string>(checkpoint::read_listed_file(directory, manifest, name));
  return parse_safetensors(std::move(bytes), (directory / name).string()).tensors;
}

const json& field(const json& object, const char* key, const fs::path& file) {
  EMBER_CHECK(object.is_object() && object.contains(key), "load_state: {} has no '{}'", file.string(), key);
  return object.at(key);
}

int64_t integer(const json& object, const char* key, const fs::path& file) {
  const json& value = field(object, key, file);
  EMBER_CHECK(value.is_number_integer(), "load_state: '{}' in {} is not an integer: {}", key, file.string(),
              value.dump());
  return value.get<int64_t>();
}

// --- Parameter names ----------------------------------------------------------

// A parameter's name in checkpoints: its own in the first prepared model,
// "model_<m>." before it in model m > 0.
std::string qualified(size_t model, const std::string& name) {
  return model == 0 ? name : fmt::format("model_{}.{}", model, name);
}

// Two parameters may not share a qualified name (model 0's submodule
// "model_1" and model 1's own weight): their states overwrote each other in
// the checkpoint, or the save failed naming neither. One parameter in two
// models under two names is fine.
void check_qualified_names_unique(const AcceleratorState& state) {
  std::unordered_map<std::string, std::pair<const TensorImpl*, std::pair<size_t, std::string>>> owners;
  for (size_t m = 0; m < state.models.size(); ++m)
    for (const auto& [name, parameter] : state.models[m].module->named_parameters()) {
      const auto [entry, added] = owners.try_emplace(qualified(m, name), parameter.impl(), std::pair{m, name});
      const auto& [other_model, other_name] = entry->second.second;
      EMBER_CHECK(added || entry->second.first == parameter.impl(),
                  "save_state: parameter '{}' of prepared model {} and parameter '{}' of prepared model {} are both "
                  "'{}' in checkpoints, where model m > 0's parameters are named 'model_<m>.<name>'; rename the "
                  "submodule of model 0 whose name starts with 'model_'",
                  other_name, other_model, name, m, entry->first);
    }
}

// Optimizer state is keyed by parameter name (the checkpoint survives a change
// of parameter order; a sharded one will address the same names). Parameters
// of the first prepared model keep their names, of model i > 0 "model_<i>."
// before them; a parameter in no prepared model is "param_<its index>".
std::vector<std::string> optimizer_parameter_names(const AcceleratorState& state, const optim::Optimizer& optimizer) {
  // Under ZeRO the optimizer holds pieces; its engine knows whose they are.
  for (size_t m = 0; m < state.models.size(); ++m) {
    const distributed::ShardedDataParallel* zero = state.models[m].zero.get();
    if (zero == nullptr || zero->optimizer() != &optimizer) continue;
    std::vector<std::string> result = zero->optimizer_parameter_names();
    if (m > 0)
      for (std::string& name : result) name = qualified(m, name);
    return result;
  }
  std::unordered_map<const TensorImpl*, std::string> names;
  for (size_t m = 0; m < state.models.size(); ++m)
    for (const auto& [name, parameter] : state.models[m].module->named_parameters())
      names.emplace(parameter.impl(), qualified(m, name));
  std::vector<std::string> result;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const Tensor& parameter : optimizer.params(g)) {
      auto found = names.find(parameter.impl());
      result.push_back(found != names.end() ? found->second : fmt::format("param_{}", result.size()));
    }
  return result;
}

// state.<index>.<buffer> -> state.<name>.<buffer>, and indices to names in the JSON.
optim::OptimizerStateDict name_optimizer_state(optim::OptimizerStateDict dict, const std::vector<std::string>& names) {
  for (auto& [tensor_name, tensor] : dict.tensors) {
    const size_t dot = tensor_name.find('.', 6);
    tensor_name = "state." + names.at(std::stoul(tensor_name.substr(6, dot - 6))) + tensor_name.substr(dot);
  }
  json state = json::object();
  for (const auto& [index, entry] : dict.meta["state"].items()) state[names.at(std::stoul(index))] = entry;
  dict.meta["state"] = state;
  for (json& group : dict.meta["param_groups"])
    for (json& parameter : group["params"]) parameter = names.at(parameter.get<size_t>());
  return dict;
}

// The reverse, for this optimizer's parameters; an unknown name is an error.
optim::OptimizerStateDict index_optimizer_state(optim::OptimizerStateDict dict, const std::vector<std::string>& names,
                                                const fs::path& file) {
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < names.size(); ++i) index.emplace(names[i], i);
  auto index_of = [&](const std::string& name) {
    auto found = index.find(name);
    EMBER_CHECK(found != index.end(),
                "load_state: {} holds state for parameter '{}', which the prepared optimizer does not have",
                file.string(), shown_text(name));
    return found->second;
  };
  for (auto& [tensor_name, tensor] : dict.tensors) {
    const size_t last_dot = tensor_name.rfind('.');
    EMBER_CHECK(tensor_name.starts_with("state.") && last_dot != std::string::npos && last_dot > 6,
                "load_state: {}: tensor '{}' is not named state.<parameter>.<buffer>", file.string(),
                shown_text(tensor_name));
    tensor_name = fmt::format("state.{}{}", index_of(tensor_name.substr(6, last_dot - 6)), tensor_name.substr(last_dot));
  }
  json state = json::object();
  for (const auto& [name, entry] : field(dict.meta, "state", file).items()) state[std::to_string(index_of(name))] = entry;
  dict.meta["state"] = state;
  const json& groups = field(dict.meta, "param_groups", file);
  EMBER_CHECK(groups.is_array(), "load_state: 'param_groups' in {} is not a list", file.string());
  for (json& group : dict.meta["param_groups"]) {
    EMBER_CHECK(field(group, "params", file).is_array(), "load_state: a param group's 'params' in {} is not a list",
                file.string());
    for (json& parameter : group["params"]) {
      EMBER_CHECK(parameter.is_string(), "load_state: {}: a param group lists {}, not a parameter name",
                  file.string(), parameter.dump());
      parameter = index_of(parameter.get<std::string>());
    }
  }
  return dict;
}

// The parameter a checkpoint tensor belongs to, for the manifest.
std::string param_of(const std::string& file, const std::string& tensor) {
  if (file.starts_with("optimizer") && tensor.starts_with("state.")) {
    const size_t last_dot = tensor.rfind('.');
    if (last_dot > 6) return tensor.substr(6, last_dot - 6);
  }
  return tensor;
}

// Every prepared model's gradients under the optimizer-state names.
NamedTensors named_gradients(const AcceleratorState& state) {
  NamedTensors gradients;
  for (size_t m = 0; m < state.models.size(); ++m)
    for (const auto& [name, parameter] : state.models[m].module->named_parameters())
      if (parameter.grad().defined())
        gradients.emplace_back(qualified(m, name), parameter.grad());
  return gradients;
}

// --- Where a checkpoint goes ----------------------------------------------------

fs::path checkpoints_directory(const AcceleratorState& state) { return fs::path(state.options.project_dir) / "checkpoints"; }

fs::path save_directory(AcceleratorState& state, const std::optional<fs::path>& directory) {
  if (!state.options.automatic_checkpoint_naming) {
    EMBER_CHECK(directory.has_value() && !directory->empty(),
                "Accelerator::save_state: give a directory, or turn automatic_checkpoint_naming on");
    return *directory;
  }
  EMBER_CHECK(!directory.has_value(),
              "Accelerator::save_state: automatic_checkpoint_naming is on, so checkpoints go to {}/checkpoint_N; call "
              "save_state() without a directory (got {})",
              checkpoints_directory(state).string(), directory->string());
  // The main process picks N; every process must use the same one.
  int64_t number = 0;
  if (state.process_index == 0) {
    const std::string name = checkpoint::next_checkpoint_path(checkpoints_directory(state)).filename().string();
    number = std::stoll(name.substr(std::string("checkpoint_").size()));
  }
  if (state.group) {
    Tensor shared = scalar_tensor(number, {.dtype = DType::i64});
    state.group->broadcast(shared, 0)->wait();
    number = shared.item<int64_t>();
  }
  return checkpoints_directory(state) / fmt::format("checkpoint_{}", number);
}

// --- Writing ----------------------------------------------------------------------

json counts_of(const AcceleratorState& state) {
  return {{"models", state.models.size()},           {"optimizers", state.optimizers.size()},
          {"schedulers", state.schedulers.size()},   {"dataloaders", state.loaders.size()},
          {"custom_objects", state.checkpointables.size()}, {"scaler", state.scaler != nullptr}};
}

// The class of each optimizer and scheduler: their state dicts do not say it
// (PyTorch's do not either), and classes with the same fields (Adam and
// AdamW, StepLR and ExponentialLR, any scheduler and LambdaLR) would load
// each other's state without a word.
json classes_of(const AcceleratorState& state) {
  json optimizers = json::array(), schedulers = json::array();
  for (const auto& prepared : state.optimizers) optimizers.push_back(prepared->optimizer->name());
  for (const auto& prepared : state.schedulers) schedulers.push_back(prepared->scheduler->name());
  return {{"optimizers", optimizers}, {"schedulers", schedulers}};
}

// What the models and optimizers save: whole state, as one process would
// hold it (under ZeRO every process takes part in gathering it), or, with
// state_dict_type "sharded", each process's pieces (Note [Sharded checkpoints]).
struct SavedState {
  bool sharded = false;
  // The main process's model files: everything, or (sharded) what no engine shards.
  std::vector<NamedTensors> models;
  // Parameter names (prefixed "model_<m>." for m > 0); tensors are whole, or
  // (sharded) this process's pieces, for its own file.
  std::vector<optim::OptimizerStateDict> optimizers;
  std::vector<NamedTensors> model_pieces;  // sharded: per model, this process's pieces
  json ranges = json::object();            // sharded: qualified parameter name -> {begin, shape}
};

SavedState saved_state(const AcceleratorState& state) {
  check_qualified_names_unique(state);
  SavedState saved;
  for (const detail::PreparedModel& model : state.models)
    saved.sharded = saved.sharded || (model.zero && !state.options.sharding.full_state_dict);
  for (size_t m = 0; m < state.models.size(); ++m) {
    const detail::PreparedModel& model = state.models[m];
    NamedTensors pieces;
    if (!model.zero) {
      saved.models.push_back(model.module->state_dict());
    } else if (!saved.sharded) {
      saved.models.push_back(model.zero->full_state_dict());
    } else {
      NamedTensors rest;
      for (const auto& [name, tensor] : model.module->state_dict())
        if (!model.zero->holds(tensor)) rest.emplace_back(name, tensor);
      saved.models.push_back(std::move(rest));
      pieces = model.zero->local_parameter_pieces();
      const json ranges = model.zero->piece_ranges();
      for (const auto& [name, range] : ranges.items()) saved.ranges[qualified(m, name)] = range;
    }
    saved.model_pieces.push_back(std::move(pieces));
  }
  for (const auto& prepared : state.optimizers) {
    const optim::Optimizer& optimizer = *prepared->optimizer;
    optim::OptimizerStateDict dict = optimizer.state_dict();
    if (prepared->zero)
      dict = saved.sharded ? prepared->zero->local_optimizer_state() : prepared->zero->full_optimizer_state_dict();
    saved.optimizers.push_back(name_optimizer_state(std::move(dict), optimizer_parameter_names(state, optimizer)));
  }
  return saved;
}

void write_main_process_files(const AcceleratorState& state, const SavedState& saved, const fs::path& staging) {
  for (size_t i = 0; i < state.models.size(); ++i)
    save_safetensors(staging / numbered("model", i, ".safetensors"), saved.models[i]);
  for (size_t i = 0; i < state.optimizers.size(); ++i) {
    if (!saved.sharded || !state.optimizers[i]->zero)
      save_safetensors(staging / numbered("optimizer", i, ".safetensors"), saved.optimizers[i].tensors);
    write_json(staging / numbered("optimizer", i, ".json"), saved.optimizers[i].meta);
  }
  for (size_t i = 0; i < state.schedulers.size(); ++i)
    write_json(staging / numbered("scheduler", i, ".json"), state.schedulers[i]->scheduler->state_dict());
  if (state.scaler) write_json(staging / "scaler.json", state.scaler->state_dict());
  for (size_t i = 0; i < state.checkpointables.size(); ++i) {
    const detail::Checkpointable& object = state.checkpointables[i];
    if (object.save_tensors)
      save_safetensors(staging / fmt::format("custom_checkpoint_{}.safetensors", i), object.save_tensors());
    else
      write_json(staging / fmt::format("custom_checkpoint_{}.json", i), object.save_json());
  }
}

// model_shard_<r>.safetensors, model_<i>_shard_<r>..., optimizer_shard_<r>...
std::string shard_file(const char* stem, size_t index, int process) {
  return index == 0 ? fmt::format("{}_shard_{}.safetensors", stem, process)
                    : fmt::format("{}_{}_shard_{}.safetensors", stem, index, process);
}

void write_shard_files(const AcceleratorState& state, const SavedState& saved, const fs::path& staging) {
  const int process = state.process_index;
  for (size_t m = 0; m < state.models.size(); ++m)
    if (state.models[m].zero) save_safetensors(staging / shard_file("model", m, process), saved.model_pieces[m]);
  for (size_t i = 0; i < state.optimizers.size(); ++i)
    if (state.optimizers[i]->zero)
      save_safetensors(staging / shard_file("optimizer", i, process), saved.optimizers[i].tensors);
  write_json(staging / fmt::format("shards_{}.json", process), {{"ranges", saved.ranges}});
}

// The seed of a prepared loader's shuffle (none for an order that is not
// random): process 0's on every process, which prepare gave them all.
std::optional<uint64_t> shuffle_seed(const detail::PreparedLoader& prepared) {
  const std::shared_ptr<data::Sampler>& sampler = prepared.original->sampler();
  return sampler ? sampler->seed() : std::nullopt;
}

void write_process_files(const AcceleratorState& state, const fs::path& staging) {
  const GeneratorState random = default_generator().state();
  json loaders = json::array();
  for (const auto& prepared : state.loaders) {
    const data::DataLoaderState position = prepared->loader->state();
    json saved = {{"epoch", position.epoch}, {"batch", position.batch}};
    // A position means nothing without the order it is in: a resumed program
    // that drew one more random number before making its loader drew another
    // seed, and would repeat and skip samples of the epoch without a word.
    if (const std::optional<uint64_t> seed = shuffle_seed(*prepared)) saved["seed"] = *seed;
    // The same for the numbers a dataset draws on the loader's workers.
    saved["worker_seed"] = prepared->loader->worker_seed();
    loaders.push_back(std::move(saved));
  }
  json generators = json::array();
  for (const Generator* generator : state.generators) {
    const GeneratorState saved = generator->state();
    generators.push_back({{"seed", saved.seed}, {"offset", saved.offset}});
  }
  write_json(staging / fmt::format("process_{}.json", state.process_index),
             {{"random_state", {{"seed", random.seed}, {"offset", random.offset}}},
              {"generators", std::move(generators)},
              {"dataloaders", loaders}});
  // Mid-accumulation the gradients are partial sums that the next steps add to.
  if (state.gradient.step != 0)
    save_safetensors(staging / fmt::format("gradients_{}.safetensors", state.process_index), named_gradients(state));
}

// --- Reading -------------------------------------------------------------------

// What load_state applies, all read and checked before anything changes.
// Prepared objects the program has destroyed since (an evaluation loader
// made per evaluation) are no part of the state: their records go, before a
// save or load reads them. A record's `alive` expires with the hooks that
// hold its token, so nothing can reach a record once it is gone.
void forget_destroyed(AcceleratorState& state) {
  const auto destroyed = [](const auto& record) { return record->alive.expired(); };
  std::erase_if(state.loaders, destroyed);
  std::erase_if(state.optimizers, destroyed);
  std::erase_if(state.schedulers, destroyed);
}

// The shuffle seed saved beside a loader's position. A checkpoint written
// before seeds were saved has none: the loader keeps the seed it has, as
// loading it always did.
std::optional<uint64_t> saved_seed(const json& position, const detail::PreparedLoader& prepared, size_t index,
                                   const fs::path& process_file) {
  if (!position.contains("seed")) return std::nullopt;
  const json& seed = field(position, "seed", process_file);
  EMBER_CHECK(seed.is_number_unsigned(), "load_state: the seed of data loader {} in {} is not an unsigned integer: {}",
              index, process_file.string(), shown_text(seed.dump()));
  EMBER_CHECK(shuffle_seed(prepared).has_value(),
              "load_state: {} holds a shuffle seed for data loader {}, but that loader's order is not random (no "
              "shuffle); prepare it as it was when saved",
              process_file.string(), index);
  return seed.get<uint64_t>();
}

// Note [Resuming at another world size]: a process the checkpoint has no
// state for starts from process (r mod W)'s seeds, each moved to a stream of
// its own (seed + stream * the golden ratio's 64 bits, stream = r / W), so
// that no two processes draw the same numbers.
uint64_t seed_of_stream(uint64_t seed, uint64_t stream) { return seed + 0x9E3779B97F4A7C15ull * stream; }

// The worker seed saved beside a loader's position (none in a checkpoint
// written before they were saved), on the process's stream.
std::optional<uint64_t> saved_worker_seed(const json& position, size_t index, const fs::path& process_file,
                                          uint64_t stream) {
  if (!position.contains("worker_seed")) return std::nullopt;
  const json& seed = position["worker_seed"];
  EMBER_CHECK(seed.is_number_unsigned(),
              "load_state: the worker seed of data loader {} in {} is not an unsigned integer: {}", index,
              process_file.string(), shown_text(seed.dump()));
  return seed_of_stream(seed.get<uint64_t>(), stream);
}

struct LoadedCheckpoint {
  int64_t step = 0;
  std::vector<NamedTensors> models;
  std::vector<optim::OptimizerStateDict> optimizers;
  std::vector<json> schedulers;
  std::optional<json> scaler;
  bool saved_scaler = false;  // the checkpoint holds a loss scale (an fp16 job's)
  std::vector<std::variant<json, NamedTensors>> custom;
  GeneratorState random;
  std::vector<GeneratorState> generators;  // the registered ones
  std::vector<data::DataLoaderState> loaders;
  std::vector<std::optional<uint64_t>> loader_seeds;  // none where the checkpoint holds none
  std::vector<std::optional<uint64_t>> worker_seeds;  // the same
  std::optional<NamedTensors> gradients;
};

void check_count(const json& counts, const char* kind, size_t prepared, const fs::path& directory) {
  const int64_t saved = integer(counts, kind, directory / checkpoint::kManifestName);
  EMBER_CHECK(saved == int64_t(prepared), "Accelerator::load_state: {} holds {} {}, but {} were prepared",
              directory.string(), saved, kind, prepared);
}

// Checkpoints written before the classes were recorded have none to compare.
void check_classes(const json& metadata, const AcceleratorState& state, const fs::path& directory) {
  if (!metadata.contains("classes")) return;
  const fs::path manifest_path = directory / checkpoint::kManifestName;
  const json& classes = field(metadata, "classes", manifest_path);
  const json prepared = classes_of(state);
  for (const char* kind : {"optimizers", "schedulers"}) {
    const json& saved = field(classes, kind, manifest_path);
    EMBER_CHECK(saved == prepared[kind],
                "Accelerator::load_state: {} holds the state of {} {}, but {} were prepared; load it into the same "
                "classes, or load the state dicts yourself if the change is meant",
                directory.string(), kind, shown_text(saved.dump()), shown_text(prepared[kind].dump()));
  }
}

// The saved tensors (name -> shape) must be exactly the model's state dict,
// shape for shape; `what` says which saved state, for the error.
void check_model_shapes(std::unordered_map<std::string, Shape> saved, const nn::Module& model, const std::string& what) {
  std::vector<std::string> problems;
  for (const auto& [name, tensor] : model.state_dict()) {
    auto found = saved.find(name);
    if (found == saved.end()) {
      problems.push_back(fmt::format("missing {}", name));
      continue;
    }
    if (found->second != tensor.shape())
      problems.push_back(fmt::format("{} has shape {} in the checkpoint but {} in the model", name, found->second,
                                     tensor.shape()));
    saved.erase(found);
  }
  for (const auto& [name, shape] : saved) problems.push_back(fmt::format("unexpected {}", shown_text(name)));
  EMBER_CHECK(problems.empty(), "Accelerator::load_state: {} does not fit the prepared {}: {}", what, model.type_name(),
              fmt::join(problems, "; "));
}

// The model file's tensors, from the manifest.
void check_model(const checkpoint::Manifest& manifest, const std::string& file, const nn::Module& model,
                 const fs::path& directory) {
  std::unordered_map<std::string, Shape> saved;
  for (const checkpoint::ManifestTensor* tensor : manifest.tensors_of(file)) saved.emplace(tensor->name, tensor->shape);
  check_model_shapes(std::move(saved), model, (directory / file).string());
}

// Note [Sharded checkpoints]: whole tensors put back together from every
// saved process's pieces in the files shard_file(stem, index, r); each
// piece's place comes from shards_<r>.json, under the parameter name that
// `parameter_of` gives for the tensor's name.
NamedTensors assemble_pieces(const fs::path& directory, const checkpoint::Manifest& manifest,
                             const std::vector<json>& ranges, const char* stem, size_t index,
                             const std::function<std::string(const std::string&)>& parameter_of) {
  NamedTensors whole;
  std::unordered_map<std::string, size_t> position;
  NoGradGuard no_grad;
  for (size_t process = 0; process < ranges.size(); ++process) {
    const std::string file = shard_file(stem, index, int(process));
    for (auto& [name, piece] : read_tensors(directory, manifest, file)) {
      const std::string parameter = parameter_of(name);
      const json& range = ranges[process];
      EMBER_CHECK(range.contains(parameter) && range[parameter].contains("begin") && range[parameter].contains("shape"),
                  "load_state: {}: {} has a piece of {}, which shards_{}.json does not place", directory.string(), file,
                  shown_text(parameter), process);
      const json& place = range[parameter];
      const bool well_typed = place["begin"].is_number_integer() && place["shape"].is_array() &&
                              std::all_of(place["shape"].begin(), place["shape"].end(),
                                          [](const json& dim) { return dim.is_number_integer() && dim >= 0; });
      EMBER_CHECK(well_typed,
                  "load_state: {}: shards_{}.json places {} at begin {} with shape {}; expected an integer and a list "
                  "of sizes (not negative)",
                  directory.string(), process, shown_text(parameter), place["begin"].dump(), place["shape"].dump());
      const std::vector<int64_t> dims = place["shape"].get<std::vector<int64_t>>();
      const int64_t begin = place["begin"].get<int64_t>();
      auto [at, fresh] = position.emplace(name, whole.size());
      if (fresh) whole.emplace_back(name, zeros(Shape(std::span<const int64_t>(dims)), {.dtype = piece.dtype()}));
      Tensor flat = whole[at->second].second.reshape({-1});
      EMBER_CHECK(begin >= 0 && begin + piece.numel() <= flat.numel() && piece.dtype() == flat.dtype(),
                  "load_state: {}: the piece of {} in {} ({} elements of {} at {}) does not fit the shape {}",
                  directory.string(), shown_text(name), file, piece.numel(), piece.dtype(), begin, flat.numel());
      copy_(flat.narrow(0, begin, piece.numel()), piece.reshape({-1}));
    }
  }
  return whole;
}

// Each saved process's shards_<r>.json "ranges".
std::vector<json> read_ranges(const fs::path& directory, const checkpoint::Manifest& manifest, int64_t world) {
  std::vector<json> ranges;
  for (int64_t process = 0; process < world; ++process) {
    const std::string name = fmt::format("shards_{}.json", process);
    const json file = read_json(directory, manifest, name);
    ranges.push_back(field(file, "ranges", directory / name));
  }
  return ranges;
}

// A tie's other names get the tensor its first name was saved under.
void fill_ties(NamedTensors& loaded, const nn::Module& model) {
  std::unordered_map<std::string, size_t> position;
  for (size_t i = 0; i < loaded.size(); ++i) position.emplace(loaded[i].first, i);
  const NamedTensors expected = model.state_dict();
  for (const auto& [name, tensor] : expected) {
    if (position.count(name)) continue;
    // state_dict() hands out views: a tie is the same memory at the same
    // place, of the same shape. In a ZeRO flat buffer a parameter of no
    // elements starts where the next one does: taken for a tie, it gave the
    // tied weight its shape [0] and refused the checkpoint.
    for (const auto& [other, other_tensor] : expected)
      if (other_tensor.storage() == tensor.storage() && other_tensor.offset() == tensor.offset() &&
          other_tensor.shape() == tensor.shape() && other_tensor.strides() == tensor.strides() &&
          position.count(other)) {
        loaded.emplace_back(name, loaded[position.at(other)].second);
        break;
      }
  }
}

// The tensors put back together from a sharded checkpoint.
void check_assembled_model(const NamedTensors& loaded, const nn::Module& model, const fs::path& directory) {
  std::unordered_map<std::string, Shape> saved;
  for (const auto& [name, tensor] : loaded) saved.emplace(name, tensor.shape());
  check_model_shapes(std::move(saved), model, "the sharded model state in " + directory.string());
}

// Every file is read once, through read_listed_file, which checks its size
// and SHA-256 against the manifest on the bytes it hands on; hashing the
// whole checkpoint first (verify_checkpoint) would read it twice.
LoadedCheckpoint read_checkpoint(const AcceleratorState& state, const fs::path& directory) {
  const checkpoint::Manifest manifest = checkpoint::read_manifest(directory);
  const fs::path manifest_path = directory / checkpoint::kManifestName;
  const json& metadata = manifest.metadata;
  const int64_t saved_world = manifest.world_size;
  EMBER_CHECK(integer(metadata, "format", manifest_path) == kCheckpointFormat,
              "Accelerator::load_state: {} has checkpoint format {}, this ember reads {}", directory.string(),
              metadata["format"].dump(), kCheckpointFormat);
  const json& counts = field(metadata, "counts", manifest_path);
  check_count(counts, "models", state.models.size(), directory);
  check_count(counts, "optimizers", state.optimizers.size(), directory);
  check_count(counts, "schedulers", state.schedulers.size(), directory);
  check_count(counts, "dataloaders", state.loaders.size(), directory);
  check_count(counts, "custom_objects", state.checkpointables.size(), directory);
  check_classes(metadata, state, directory);
  const bool sharded = metadata.contains("state_dict_type") && metadata["state_dict_type"] == "sharded";
  const std::vector<json> ranges = sharded ? read_ranges(directory, manifest, saved_world) : std::vector<json>{};
  for (size_t i = 0; i < state.models.size(); ++i)
    if (!manifest.find_file(shard_file("model", i, 0)))
      check_model(manifest, numbered("model", i, ".safetensors"), *state.models[i].module, directory);

  LoadedCheckpoint loaded;
  loaded.step = integer(metadata, "step", manifest_path);
  // Note [Resuming at another world size]: whole tensors load at any world
  // size; partial gradients of an accumulation step belong to their processes.
  EMBER_CHECK(saved_world == state.num_processes || loaded.step == 0,
              "checkpoint {}: saved by {} processes in the middle of an accumulation step (batch {} of {}), whose "
              "partial gradients belong to those processes; this job has world size {}: resume it with {} processes, "
              "or save at a step boundary (when sync_gradients() is true) to change the world size",
              directory.string(), saved_world, loaded.step, state.options.gradient_accumulation_steps,
              state.num_processes, saved_world);
  // Note [Resuming mid-accumulation]: the saved partial gradients are sums
  // over `step` micro-batches of losses divided by the saved number of steps
  // (and multiplied by the saved loss scale): only the same settings can add
  // to them.
  if (loaded.step != 0) {
    const int64_t saved_steps = integer(metadata, "gradient_accumulation_steps", manifest_path);
    const json& saved_precision = field(metadata, "mixed_precision", manifest_path);
    const bool saved_scaler = field(counts, "scaler", manifest_path) == true;
    const std::string now = fmt::format("gradient_accumulation_steps {}, mixed_precision {}, {}",
                                        state.options.gradient_accumulation_steps, state.options.mixed_precision,
                                        state.scaler ? "a loss scaler" : "no loss scaler");
    EMBER_CHECK(saved_steps == state.options.gradient_accumulation_steps &&
                    saved_precision == state.options.mixed_precision && saved_scaler == (state.scaler != nullptr),
                "Accelerator::load_state: {} was saved in the middle of an accumulation step (micro-batch {} of {}) "
                "with gradient_accumulation_steps {}, mixed_precision {}, {}; this job has {}, which would add "
                "to its partial gradients with another weighting or loss scale. Resume with the saved settings, or "
                "save at a step boundary (when sync_gradients() is true) to change them",
                directory.string(), loaded.step, saved_steps, saved_steps, saved_precision.dump(),
                saved_scaler ? "a loss scaler" : "no loss scaler", now);
  }
  for (size_t i = 0; i < state.models.size(); ++i) {
    NamedTensors tensors = read_tensors(directory, manifest, numbered("model", i, ".safetensors"));
    if (manifest.find_file(shard_file("model", i, 0))) {
      for (auto& entry : assemble_pieces(directory, manifest, ranges, "model", i,
                                         [i](const std::string& name) { return qualified(i, name); }))
        tensors.push_back(std::move(entry));
      fill_ties(tensors, *state.models[i].module);
      check_assembled_model(tensors, *state.models[i].module, directory);
    }
    loaded.models.push_back(std::move(tensors));
  }
  for (size_t i = 0; i < state.optimizers.size(); ++i) {
    const fs::path meta = directory / numbered("optimizer", i, ".json");
    // state.<parameter>.<buffer>: the parameter whose range places the piece.
    auto parameter_of = [](const std::string& name) {
      const size_t last_dot = name.rfind('.');
      return name.starts_with("state.") && last_dot > 6 ? name.substr(6, last_dot - 6) : name;
    };
    optim::OptimizerStateDict dict{
        manifest.find_file(shard_file("optimizer", i, 0))
            ? assemble_pieces(directory, manifest, ranges, "optimizer", i, parameter_of)
            : read_tensors(directory, manifest, numbered("optimizer", i, ".safetensors")),
        read_json(directory, manifest, meta.filename().string())};
    loaded.optimizers.push_back(
        index_optimizer_state(std::move(dict), optimizer_parameter_names(state, *state.optimizers[i]->optimizer), meta));
  }
  for (size_t i = 0; i < state.schedulers.size(); ++i)
    loaded.schedulers.push_back(read_json(directory, manifest, numbered("scheduler", i, ".json")));
  loaded.saved_scaler = manifest.find_file("scaler.json") != nullptr;
  if (state.scaler && loaded.saved_scaler) loaded.scaler = read_json(directory, manifest, "scaler.json");
  for (size_t i = 0; i < state.checkpointables.size(); ++i) {
    const bool tensors = state.checkpointables[i].save_tensors != nullptr;
    const std::string file = fmt::format("custom_checkpoint_{}.{}", i, tensors ? "safetensors" : "json");
    if (tensors)
      loaded.custom.emplace_back(read_tensors(directory, manifest, file));
    else
      loaded.custom.emplace_back(read_json(directory, manifest, file));
  }

  const fs::path process_file = directory / fmt::format("process_{}.json", state.process_index % saved_world);
  const json process = read_json(directory, manifest, process_file.filename().string());
  const uint64_t stream = uint64_t(state.process_index / saved_world);
  auto generator_state = [&](const json& random, const std::string& what) {
    EMBER_CHECK(field(random, "seed", process_file).is_number_unsigned() &&
                    field(random, "offset", process_file).is_number_unsigned(),
                "load_state: {} in {} is not two unsigned integers", what, process_file.string());
    return GeneratorState{seed_of_stream(random["seed"].get<uint64_t>(), stream), random["offset"].get<uint64_t>()};
  };
  loaded.random = generator_state(field(process, "random_state", process_file), "the random state");
  // Checkpoints written before generators could be registered hold none.
  const json generators = process.contains("generators") ? process["generators"] : json::array();
  EMBER_CHECK(generators.is_array() && generators.size() == state.generators.size(),
              "load_state: {} holds {} registered generators, but {} were registered for checkpointing",
              process_file.string(), generators.is_array() ? generators.size() : 0, state.generators.size());
  for (size_t i = 0; i < generators.size(); ++i)
    loaded.generators.push_back(generator_state(generators[i], fmt::format("registered generator {}", i)));
  const json& loaders = field(process, "dataloaders", process_file);
  EMBER_CHECK(loaders.is_array() && loaders.size() == state.loaders.size(),
              "load_state: {} holds {} data loader positions, but {} loaders were prepared", process_file.string(),
              loaders.is_array() ? loaders.size() : 0, state.loaders.size());
  for (size_t i = 0; i < loaders.size(); ++i) {
    data::DataLoaderState position{integer(loaders[i], "epoch", process_file), integer(loaders[i], "batch", process_file)};
    if (saved_world != state.num_processes && !state.options.split_batches) {
      // Batches go round-robin: b batches on each of the saved processes are
      // the epoch's first b * saved_world, which this world continues from.
      const int64_t global = position.batch * saved_world;
      EMBER_CHECK(global % state.num_processes == 0,
                  "load_state: data loader {} stands at batch {} on each of {} processes ({} batches of its epoch), "
                  "which {} processes cannot continue from evenly; resume with a world size that divides {}",
                  i, position.batch, saved_world, global, state.num_processes, global);
      position.batch = global / state.num_processes;
    }
    const int64_t batches = state.loaders[i]->loader->size();
    EMBER_CHECK(position.epoch >= 0 && position.batch >= 0 && position.batch <= batches,
                "load_state: {} puts data loader {} at batch {} of epoch {}, but its epochs have {} batches",
                process_file.string(), i, position.batch, position.epoch, batches);
    loaded.loaders.push_back(position);
    loaded.loader_seeds.push_back(saved_seed(loaders[i], *state.loaders[i], i, process_file));
    loaded.worker_seeds.push_back(saved_worker_seed(loaders[i], i, process_file, stream));
  }
  const std::string gradients = fmt::format("gradients_{}.safetensors", state.process_index);
  if (manifest.find_file(gradients)) loaded.gradients = read_tensors(directory, manifest, gradients);
  return loaded;
}

// Each saved gradient by the name its parameter has in named_gradients.
std::unordered_map<std::string, Tensor> gradients_by_name(const std::optional<NamedTensors>& saved) {
  std::unordered_map<std::string, Tensor> by_name;
  if (saved)
    for (const auto& [name, tensor] : *saved) by_name.emplace(name, tensor);
  return by_name;
}

// Note [Accelerator checkpoints]: load_state checks every object against
// what it read before it changes any (the models were checked by
// read_checkpoint), so a checkpoint that does not fit (another optimizer or
// scheduler class, a bad field) leaves the training exactly as it was.
void check_objects(AcceleratorState& state, const LoadedCheckpoint& loaded, const fs::path& directory) {
  for (size_t i = 0; i < state.optimizers.size(); ++i) {
    detail::PreparedOptimizer& prepared = *state.optimizers[i];
    if (prepared.zero)
      prepared.zero->check_full_optimizer_state_dict(loaded.optimizers[i]);
    else
      prepared.optimizer->check_state_dict(loaded.optimizers[i]);
  }
  for (size_t i = 0; i < state.schedulers.size(); ++i) state.schedulers[i]->scheduler->check_state_dict(loaded.schedulers[i]);
  if (loaded.scaler) state.scaler->check_state_dict(*loaded.scaler);
  const std::unordered_map<std::string, Tensor> gradients = gradients_by_name(loaded.gradients);
  for (size_t m = 0; m < state.models.size(); ++m)
    for (const auto& [name, parameter] : state.models[m].module->named_parameters()) {
      auto found = gradients.find(qualified(m, name));
      EMBER_CHECK(found == gradients.end() || found->second.shape() == parameter.shape(),
                  "load_state: the gradient of {} in {} has shape {}, the parameter {}", name, directory.string(),
                  found->second.shape(), parameter.shape());
    }
}

// Checked by check_objects.
void apply_gradients(AcceleratorState& state, const std::optional<NamedTensors>& saved) {
  const std::unordered_map<std::string, Tensor> by_name = gradients_by_name(saved);
  NoGradGuard no_grad;
  for (size_t m = 0; m < state.models.size(); ++m)
    for (const auto& [name, parameter] : state.models[m].module->named_parameters()) {
      auto found = by_name.find(qualified(m, name));
      if (found == by_name.end()) {
        parameter.set_grad(Tensor());
        continue;
      }
      // Into the existing .grad when there is one: under DDP it is a bucket view.
      if (Tensor grad = parameter.grad(); grad.defined())
        grad.copy_(found->second);
      else
        parameter.set_grad(found->second.to(parameter.dtype()).clone());
    }
}

// The user's own objects can only be checked by loading them, so they load
// first, on every process, each with its state kept beforehand: when one
// throws (on any process), every one is put back, and load_state has changed
// nothing. Their errors name the object and its file.
void load_custom_objects(AcceleratorState& state, const std::vector<std::variant<json, NamedTensors>>& saved,
                         const fs::path& source) {
  std::vector<detail::Checkpointable>& objects = state.checkpointables;
  std::vector<std::variant<json, NamedTensors>> before;
  for (const detail::Checkpointable& object : objects) {
    if (!object.save_tensors) {
      before.emplace_back(object.save_json());
      continue;
    }
    NamedTensors copies;
    for (const auto& [name, tensor] : object.save_tensors()) copies.emplace_back(name, tensor.clone());
    before.emplace_back(std::move(copies));
  }
  auto load = [&](size_t i, const std::variant<json, NamedTensors>& value) {
    if (auto* tensors = std::get_if<NamedTensors>(&value))
      objects[i].load_tensors(*tensors);
    else
      objects[i].load_json(std::get<json>(value));
  };
  try {
    detail::run_on_every_process(state, "load_state", [&] {
      for (size_t i = 0; i < objects.size(); ++i) {
        try {
          load(i, saved[i]);
        } catch (const std::exception& error) {
          EMBER_CHECK(false, "Accelerator::load_state: registered object {} ({}/custom_checkpoint_{}.{}) did not load: {}",
                      i, source.string(), i, objects[i].save_tensors ? "safetensors" : "json", error.what());
        }
      }
    });
  } catch (const Error&) {
    for (size_t i = 0; i < objects.size(); ++i) load(i, before[i]);
    throw;
  }
}

}  // namespace

fs::path Accelerator::save_state(const std::optional<fs::path>& directory) {
  profiler::Span span(profiler::kRecordSteps, profiler::Category::checkpoint, "Accelerator.save_state");
  AcceleratorState& state = *state_;
  forget_destroyed(state);
  const fs::path named = save_directory(state, directory);
  detail::update_scaler_if_pending(state);  // the saved scale is the one the next iteration would use
  const bool main = state.process_index == 0;
  std::optional<checkpoint::SaveLock> directory_lock;  // an explicit directory's, for this save only
  fs::path final_directory, staging;
  detail::run_on_every_process(state, "save_state", [&] {
    // A directory given as a link saves where it leads; `latest` never names a link.
    final_directory = state.options.automatic_checkpoint_naming ? named : checkpoint::save_target(named);
    staging = checkpoint::staging_path(final_directory);
    if (!main) return;
    checkpoint::check_replaceable("Accelerator::save_state", final_directory);
    // Note [One job saves into a directory]: a second job is refused here, before it writes anything.
    if (state.options.automatic_checkpoint_naming && !state.checkpoint_lock)
      state.checkpoint_lock.emplace(
          checkpoint::SaveLock::acquire(checkpoints_directory(state) / ".lock", "Accelerator::save_state"));
    if (!state.options.automatic_checkpoint_naming)
      directory_lock.emplace(checkpoint::SaveLock::acquire(checkpoint::lock_path(final_directory),
                                                           "Accelerator::save_state"));
    checkpoint::begin_staging(staging);
  });
  const SavedState saved = saved_state(state);
  detail::run_on_every_process(state, "save_state", [&] {
    write_process_files(state, staging);
    if (saved.sharded) write_shard_files(state, saved, staging);
    if (main) write_main_process_files(state, saved, staging);
  });
  detail::run_on_every_process(state, "save_state", [&] {
    if (!main) return;
    json metadata = {{"format", kCheckpointFormat},
                     {"step", state.gradient.step},
                     {"mixed_precision", state.options.mixed_precision},
                     {"gradient_accumulation_steps", state.options.gradient_accumulation_steps},
                     {"state_dict_type", saved.sharded ? "sharded" : "full"},
                     {"counts", counts_of(state)},
                     {"classes", classes_of(state)}};
    checkpoint::write_manifest(staging, state.num_processes, metadata, param_of);
    checkpoint::commit(staging, final_directory);
    if (state.options.automatic_checkpoint_naming) {
      checkpoint::set_latest(checkpoints_directory(state), final_directory.filename().string());
      if (state.options.total_limit)
        checkpoint::enforce_total_limit(checkpoints_directory(state), *state.options.total_limit);
    }
  });
  return named;
}

void Accelerator::load_state(const std::optional<fs::path>& directory) {
  AcceleratorState& state = *state_;
  forget_destroyed(state);
  fs::path source;
  if (directory) {
    source = *directory;
  } else {
    std::optional<fs::path> latest = checkpoint::latest(checkpoints_directory(state));
    EMBER_CHECK(latest.has_value(), "Accelerator::load_state: no directory given and {} names no latest checkpoint",
                checkpoints_directory(state).string());
    source = *latest;
  }
  // Every process reads and checks its own files (process_<r>.json, ...);
  // none applies anything unless all of them could (a process that caught
  // its error and started afresh would train on beside resumed ones).
  LoadedCheckpoint loaded;
  detail::run_on_every_process(state, "load_state", [&] {
    loaded = read_checkpoint(state, source);
    check_objects(state, loaded, source);
  });
  // At a step boundary the precision may change; a loss scale that is not
  // carried over is said, never dropped or started afresh without a word.
  if (state.process_index == 0 && loaded.saved_scaler != (state.scaler != nullptr))
    std::fprintf(stderr, "ember Accelerator: warning: %s\n",
                 loaded.saved_scaler
                     ? fmt::format("load_state: {} holds an fp16 loss scale, which this job (mixed_precision {}) does "
                                   "not use: it is not loaded",
                                   source.string(), state.options.mixed_precision)
                           .c_str()
                     : fmt::format("load_state: {} holds no loss scale (it was saved without fp16): this job's fp16 "
                                   "loss scale starts at its initial value",
                                   source.string())
                           .c_str());

  load_custom_objects(state, loaded.custom, source);
  for (size_t i = 0; i < state.models.size(); ++i) {
    if (state.models[i].zero)
      state.models[i].zero->load_full_state_dict(loaded.models[i]);
    else
      state.models[i].module->load_state_dict(loaded.models[i]);
  }
  for (size_t i = 0; i < state.optimizers.size(); ++i) {
    detail::PreparedOptimizer& prepared = *state.optimizers[i];
    if (prepared.zero)
      prepared.zero->load_full_optimizer_state_dict(loaded.optimizers[i]);
    else
      prepared.optimizer->load_state_dict(loaded.optimizers[i]);
  }
  for (size_t i = 0; i < state.schedulers.size(); ++i) state.schedulers[i]->scheduler->load_state_dict(loaded.schedulers[i]);
  if (loaded.scaler) state.scaler->load_state_dict(*loaded.scaler);
  // The loaded scale replaces the iteration's steps: no update is pending.
  for (const auto& prepared : state.optimizers) prepared->stepped_since_scaler_update = false;
  default_generator().set_state(loaded.random);
  for (size_t i = 0; i < state.generators.size(); ++i) state.generators[i]->set_state(loaded.generators[i]);
  for (size_t i = 0; i < state.loaders.size(); ++i) {
    if (loaded.loader_seeds[i]) state.loaders[i]->original->sampler()->set_seed(*loaded.loader_seeds[i]);
    if (loaded.worker_seeds[i]) state.loaders[i]->loader->set_worker_seed(*loaded.worker_seeds[i]);
    state.loaders[i]->loader->set_state(loaded.loaders[i]);
  }
  apply_gradients(state, loaded.gradients);
  state.gradient = {.sync_gradients = true, .step = loaded.step, .active_loaders = {}};
}

void Accelerator::save_model(const nn::Module& model, const fs::path& directory, std::string_view max_shard_size) {
  const int64_t limit = nn::parse_byte_size(max_shard_size);
  const NamedTensors whole = get_state_dict(model);  // a collective under ZeRO-3
  detail::run_on_every_process(*state_, "save_model", [&] {
    if (is_main_process()) nn::save_sharded(whole, directory, limit);
  });
}

}  // namespace ember
