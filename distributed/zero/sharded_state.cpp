// ShardedDataParallel's whole and sharded state (see sharded_data_parallel.h):
// the model and optimizer state made whole from the shards for checkpoints
// and save_model (Note [Flat shards]), cut back into shards on load, and
// each rank's pieces for sharded checkpoints (Note [Sharded checkpoints]).
#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/views.h"
#include "distributed/zero/sharded_data_parallel.h"

namespace ember::distributed {

// --- Whole state --------------------------------------------------------------------

NamedTensors ShardedDataParallel::full_state_dict() {
  std::vector<bool> was_gathered;
  for (auto& flat : flats_) {
    was_gathered.push_back(flat->gathered());
    flat->gather();
  }
  // One copy per tensor, shared by the names of a tie (a head sharing the
  // embedding's weight), so that nn::without_aliases still sees the tie and
  // save_model writes it once, as without sharding.
  NamedTensors state;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (a tensor of the module, its copy)
  for (const auto& entry : module_->state_dict()) {
    const Tensor& tensor = entry.second;  // not a structured binding: clang 14 cannot capture one
    auto tie = std::find_if(copies.begin(), copies.end(), [&](const auto& copy) {
      const Tensor& other = copy.first;
      return other.storage() == tensor.storage() && other.offset() == tensor.offset() &&
             other.shape() == tensor.shape() && other.strides() == tensor.strides() && other.dtype() == tensor.dtype();
    });
    if (tie == copies.end()) tie = copies.insert(copies.end(), {tensor, tensor.detach().clone()});
    state.emplace_back(entry.first, tie->second);
  }
  for (size_t f = 0; f < flats_.size(); ++f)
    if (!was_gathered[f]) flats_[f]->release();
  return state;
}

void ShardedDataParallel::load_full_state_dict(const NamedTensors& state) {
  for (auto& flat : flats_) flat->gather();
  module_->load_state_dict(state);
  for (auto& flat : flats_) flat->keep_shard_of_full();
  release_all();
}

optim::OptimizerStateDict ShardedDataParallel::full_optimizer_state_dict() {
  EMBER_CHECK(optimizer_ != nullptr, "ShardedDataParallel::full_optimizer_state_dict: no optimizer is attached");
  optim::OptimizerStateDict local = optimizer_->state_dict();
  const size_t count = optimizer_slots_.size();
  std::unordered_map<std::string, Tensor> mine;
  for (const auto& [name, tensor] : local.tensors) mine.emplace(name, tensor);
  std::vector<std::vector<size_t>> slots_of_flat(flats_.size());
  for (size_t k = 0; k < count; ++k) slots_of_flat[optimizer_slots_[k].first].push_back(k);

  optim::OptimizerStateDict full;
  full.meta = local.meta;
  full.meta["state"] = agreed_optimizer_state_entries(local);
  for (size_t f = 0; f < flats_.size(); ++f) {
    std::set<std::string> buffers;
    for (size_t k : slots_of_flat[f])
      for (const std::string& name : optimizer_->state_buffer_names(slot_groups_[k])) buffers.insert(name);
    for (const std::string& buffer : buffers) {
      FlatParameter& flat = *flats_[f];
      Tensor shard = zeros({flat.shard_numel()}, {.dtype = flat.shard().dtype(), .device = flat.shard().device()});
      for (size_t k : slots_of_flat[f]) {
        auto found = mine.find(fmt::format("state.{}.{}", k, buffer));
        const size_t i = optimizer_slots_[k].second;
        if (found == mine.end() || flat.piece(i).numel() == 0) continue;
        copy_(shard.narrow(0, flat.piece_shard_offset(i), flat.piece(i).numel()), found->second.reshape({-1}));
      }
      Tensor gathered = flat.all_gather_shaped(shard);
      for (size_t k : slots_of_flat[f]) {
        const size_t i = optimizer_slots_[k].second;
        if (!full.meta["state"].contains(std::to_string(k))) continue;
        const std::vector<std::string> names = optimizer_->state_buffer_names(slot_groups_[k]);
        if (std::find(names.begin(), names.end(), buffer) == names.end()) continue;
        const Tensor& parameter = flat.parameters()[i];
        full.tensors.emplace_back(fmt::format("state.{}.{}", k, buffer),
                                  gathered.narrow(0, flat.offset(i), parameter.numel()).view(parameter.shape()).clone());
      }
    }
  }
  return full;
}

void ShardedDataParallel::load_full_optimizer_state_dict(const optim::OptimizerStateDict& state) {
  EMBER_CHECK(optimizer_ != nullptr, "ShardedDataParallel::load_full_optimizer_state_dict: no optimizer is attached");
  optimizer_->load_state_dict(optimizer_pieces(state, /*copy=*/true));
}

void ShardedDataParallel::check_full_optimizer_state_dict(const optim::OptimizerStateDict& state) {
  EMBER_CHECK(optimizer_ != nullptr, "ShardedDataParallel::load_full_optimizer_state_dict: no optimizer is attached");
  optimizer_->check_state_dict(optimizer_pieces(state, /*copy=*/false));
}

optim::OptimizerStateDict ShardedDataParallel::optimizer_pieces(const optim::OptimizerStateDict& state,
                                                                bool copy) const {
  optim::OptimizerStateDict pieces;
  pieces.meta = state.meta;
  for (const auto& [name, tensor] : state.tensors) {
    const size_t dot = name.find('.', 6);
    EMBER_CHECK(name.starts_with("state.") && dot != std::string::npos,
                "ShardedDataParallel: optimizer state tensor '{}' is not named state.<index>.<buffer>", name);
    const size_t k = std::stoul(name.substr(6, dot - 6));
    EMBER_CHECK(k < optimizer_slots_.size(), "ShardedDataParallel: optimizer state '{}' names parameter {}, but the "
                "optimizer has {}", name, k, optimizer_slots_.size());
    const auto [f, i] = optimizer_slots_[k];
    const Tensor& parameter = flats_[f]->parameters()[i];
    EMBER_CHECK(tensor.numel() == parameter.numel(),
                "ShardedDataParallel: optimizer state '{}' has {} elements, its parameter {} has {}", name,
                tensor.numel(), flats_[f]->names()[i], parameter.numel());
    const Tensor& piece = flats_[f]->piece(i);
    // A rank's empty piece of a parameter has no state, as in a run never
    // stopped: kept, the resumed rank's next sharded checkpoint had [0]-shaped
    // tensors for it that the uninterrupted run's did not.
    if (piece.numel() == 0) {
      if (pieces.meta.contains("state")) pieces.meta["state"].erase(std::to_string(k));
      continue;
    }
    Tensor mine = tensor.reshape({-1}).narrow(0, flats_[f]->piece_begin(i), piece.numel());
    pieces.tensors.emplace_back(name, copy ? mine.clone() : mine);
  }
  return pieces;
}

nlohmann::json ShardedDataParallel::agreed_optimizer_state_entries(const optim::OptimizerStateDict& local) {
  const size_t count = optimizer_slots_.size();
  // [has state] * count, [step] * count, [counts steps]: agreed over ranks (a
  // rank whose piece of a parameter is empty has no state for it).
  std::vector<double> known(2 * count + 1, 0.0);
  for (const auto& [key, entry] : local.meta["state"].items()) {
    const size_t k = std::stoul(key);
    known[k] = 1;
    if (entry.contains("step")) {
      known[count + k] = double(entry["step"].get<int64_t>());
      known[2 * count] = 1;
    }
  }
  Tensor agreed = from_vector(known, {int64_t(known.size())});
  if (group_.size() > 1) group_.allreduce(agreed, ReduceOp::max)->wait();
  known = agreed.to_vector<double>();
  nlohmann::json entries = nlohmann::json::object();
  for (size_t k = 0; k < count; ++k) {
    if (known[k] == 0) continue;
    nlohmann::json entry = nlohmann::json::object();
    if (known[2 * count] != 0) entry["step"] = int64_t(known[count + k]);
    entries[std::to_string(k)] = entry;
  }
  return entries;
}

NamedTensors ShardedDataParallel::local_parameter_pieces() const {
  NamedTensors pieces;
  for (const auto& flat : flats_)
    for (size_t i = 0; i < flat->parameters().size(); ++i) pieces.emplace_back(flat->names()[i], flat->piece(i).detach().clone());
  return pieces;
}

bool ShardedDataParallel::holds(const Tensor& tensor) const {
  // By memory, not TensorImpl: state_dict() hands out detached views.
  for (const auto& flat : flats_)
    if (flat->parameters().front().storage() == tensor.storage()) return true;
  return false;
}

nlohmann::json ShardedDataParallel::piece_ranges() const {
  nlohmann::json ranges = nlohmann::json::object();
  for (const auto& flat : flats_)
    for (size_t i = 0; i < flat->parameters().size(); ++i)
      ranges[flat->names()[i]] = {
          {"begin", flat->piece_begin(i)},
          {"shape", std::vector<int64_t>(flat->parameters()[i].shape().begin(), flat->parameters()[i].shape().end())}};
  return ranges;
}

optim::OptimizerStateDict ShardedDataParallel::local_optimizer_state() {
  EMBER_CHECK(optimizer_ != nullptr, "ShardedDataParallel::local_optimizer_state: no optimizer is attached");
  optim::OptimizerStateDict local = optimizer_->state_dict();
  local.meta["state"] = agreed_optimizer_state_entries(local);
  for (auto& [name, tensor] : local.tensors) tensor = tensor.detach().clone();
  return local;
}

}  // namespace ember::distributed
