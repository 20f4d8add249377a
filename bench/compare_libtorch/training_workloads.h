// The training-step rows of the comparison: train_mlp_sgd, train_mlp_adamw,
// train_cnn_sgd and train_gpt_adamw (models in training_spec.h), each in f32
// and under bf16 autocast (the same name with _bf16). Each worker
// links one definition: training_ember.cpp or training_libtorch.cpp.
#pragma once

#include <vector>

#include "worker.h"

namespace ember::compare {

std::vector<TrainingWorkload> training_workloads();

}  // namespace ember::compare
