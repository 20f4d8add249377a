// Fuzzes nn::load_sharded's index reader (nn/serialize_sharded.cpp): the
// input is model.safetensors.index.json in a directory of two fixed shards
// (fixtures.h), loaded strictly and not. A hostile weight_map must be refused;
// an accepted index may only have named plain files of the directory, and the
// module may only have received the shards' values, never those of the valid
// shards outside the directory or in its subdirectory.
// Seeds: corpus/sharded_index/ (make_seeds.cpp).
#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fixtures.h"

using namespace ember;

namespace {

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), size_t(a.nbytes())) == 0;
}

// The files an index may name: the regular files of the directory itself.
const std::set<std::string> kNameable = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                         "notes.txt", "model.safetensors.index.json"};

void check_accepted(const fuzz::ShardedFixture& fixture, std::string_view index, const nn::Module& module,
                    const nn::LoadStateDictResult& result) {
  const auto parsed = nlohmann::json::parse(index);  // accepted, so it is JSON
  for (const auto& [tensor, file] : parsed.at("weight_map").items())
    FUZZ_REQUIRE(kNameable.count(file.get<std::string>()), "load_sharded accepted the weight_map entry '{}': '{}'",
                 tensor, file.dump());
  for (const auto& [name, tensor] : module.state_dict()) {
    if (std::find(result.missing_keys.begin(), result.missing_keys.end(), name) != result.missing_keys.end()) continue;
    const Tensor* expected = nullptr;
    for (const auto& named : fixture.state)
      if (named.first == name) expected = &named.second;
    FUZZ_REQUIRE(expected && same_values(tensor, *expected), "'{}' was loaded with values that are not the shards'",
                 name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fuzz::ShardedFixture fixture = fuzz::write_sharded_fixture(fuzz::scratch_directory());
  const std::string_view index = fuzz::as_text(data, size);
  fuzz::write_file(fixture.index, index);
  for (const bool strict : {true, false}) {
    nn::Linear module(3, 2);
    try {
      const nn::LoadStateDictResult result = nn::load_sharded(module, fixture.directory, strict);
      check_accepted(fixture, index, module, result);
    } catch (const Error& error) {
      fuzz::rejected(error);
    }
  }
  return 0;
}
