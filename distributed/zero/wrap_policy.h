// Which modules of a model become ZeRO/FSDP units: the parameters of one
// unit are gathered, released and reduced together (FSDP's auto-wrap
// policies). Units never nest: a module inside a chosen one is part of it.
// Used by sharded_data_parallel.cpp; tests: tests/distributed/test_zero.cpp.
#pragma once

#include <string>
#include <vector>

#include "distributed/zero/sharding_options.h"
#include "nn/module.h"

namespace ember::distributed {

struct WrappedUnit {
  std::string name;  // the module's path in the model ("layers.3")
  nn::Module* module = nullptr;
};

// In the order of model.named_modules(); never the model itself (the root
// unit holds every parameter no unit holds).
//   transformer: the modules whose type_name() is in wrap_module_types; when
//                the model has none, the size policy instead. A listed type
//                no module has is an error (a typo fell back to size without a
//                word), but for the default, TransformerBlock;
//   size:        the smallest subtrees with at least min_num_params parameter
//                elements (a subtree holding a unit leaves its rest to the root);
//   none:        no unit: the whole model is the root unit.
std::vector<WrappedUnit> choose_units(nn::Module& model, const ResolvedShardingOptions& options);

}  // namespace ember::distributed
