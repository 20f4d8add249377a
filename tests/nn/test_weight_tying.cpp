// Weight tying as PyTorch users write it (Note [Parameter slots]):
// `lm_head->weight = wte->weight` re-points the registered parameter, so the
// tensor is listed once, gets one gradient (the sum of both uses), is saved
// once, and a file without the tied name (as Hugging Face writes it) loads
// with the tie restored. Assigning a non-leaf is refused by name.
#include <filesystem>
#include <unistd.h>

#include "support/test_support.h"

namespace ember {
namespace {

using testing::all_close;

struct TinyLm : nn::Module {
  TinyLm() {
    wte = register_module("wte", nn::Embedding(5, 4));
    lm_head = register_module("lm_head", nn::Linear(4, 5, {.bias = false}));
    lm_head->weight = wte->weight;  // [5, 4] both: the tie
  }
  Tensor forward(const Tensor& tokens) override { return (*lm_head)(tanh((*wte)(tokens))); }
  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::Linear> lm_head;
};

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".safetensors");
}

// Mutation caught: registering the member's old value (a copy of the handle)
// instead of binding to the slot -> two parameters listed, lm_head trains a
// stale tensor that the forward no longer uses.
TEST(WeightTying, AssignmentTiesTheRegisteredParameter) {
  TinyLm model;
  NamedTensors parameters = model.named_parameters();
  ASSERT_EQ(parameters.size(), 1u);
  EXPECT_EQ(parameters[0].first, "wte.weight");  // the first name that reaches it
  EXPECT_TRUE(parameters[0].second.is_same(model.lm_head->weight));
  NamedTensors state = model.state_dict();  // PyTorch's state_dict lists both names
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[1].first, "lm_head.weight");
}

TEST(WeightTying, TheTiedTensorGetsTheSumOfBothGradients) {
  TinyLm model;
  Tensor tokens = from_vector(std::vector<int64_t>{0, 3, 3, 1}, {4});
  sum(model(tokens) * model(tokens)).backward();
  Tensor tied_grad = model.wte->weight.grad().clone();

  // The same computation with two independent copies: the tied gradient is their sum.
  nn::Embedding wte(5, 4);
  nn::Linear head(4, 5, {.bias = false});
  {
    NoGradGuard no_grad;
    copy_(wte.weight, model.wte->weight);
    copy_(head.weight, model.wte->weight);
  }
  Tensor logits = head(tanh(wte(tokens)));
  sum(logits * logits).backward();
  EXPECT_TRUE(all_close(tied_grad, wte.weight.grad() + head.weight.grad(), 1e-5, 1e-6));
}

TEST(WeightTying, SavedOnceAndRestoredOnLoad) {
  TinyLm model;
  auto path = temp_file("ember-tied");
  nn::save(model, path);
  SafetensorsContents contents = load_safetensors(path);
  ASSERT_EQ(contents.tensors.size(), 1u);  // what safetensors.torch.save_model writes
  EXPECT_EQ(contents.tensors[0].first, "wte.weight");

  TinyLm other;
  nn::LoadStateDictResult result = nn::load(other, path);  // strict: lm_head.weight comes through the tie
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(all_close(other.lm_head->weight, model.wte->weight, 0, 0));
  EXPECT_TRUE(other.lm_head->weight.is_same(other.wte->weight));  // still tied
  std::filesystem::remove(path);
}

// Hugging Face's save_model keeps the other name (it drops lm_head.weight or
// wte.weight by the model's own list): either name alone loads the tie.
TEST(WeightTying, LoadsAFileHoldingOnlyTheOtherName) {
  TinyLm model;
  Tensor values = randn({5, 4});
  TinyLm loaded;
  nn::LoadStateDictResult result = loaded.load_state_dict({{"lm_head.weight", values}});
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(all_close(loaded.wte->weight, values, 0, 0));
  // An untied model still reports the missing name.
  nn::Linear untied(4, 5);
  EXPECT_EMBER_ERROR(untied.load_state_dict({{"weight", randn({5, 4})}}), "Missing key(s) in state_dict: \"bias\"");
}

TEST(WeightTying, ShardedSaveWritesTheTensorOnce) {
  TinyLm model;
  auto directory = std::filesystem::temp_directory_path() / ("ember-tied-dir-" + std::to_string(::getpid()));
  nn::save_sharded(model.state_dict(), directory, int64_t(1) << 30);
  EXPECT_EQ(load_safetensors(directory / "model.safetensors").tensors.size(), 1u);
  TinyLm other;
  EXPECT_TRUE(nn::load_sharded(other, directory).missing_keys.empty());
  EXPECT_TRUE(all_close(other.wte->weight, model.wte->weight, 0, 0));
  std::filesystem::remove_all(directory);
}

TEST(WeightTying, AssigningANonLeafIsRefusedByName) {
  TinyLm model;
  model.lm_head->weight = model.wte->weight * 2;
  EXPECT_EMBER_ERROR(model.named_parameters(), "parameter \"lm_head.weight\" holds a tensor computed by");
}

// Slots stay put when a module is moved into a container, so the members
// bound to them stay valid (mutation: a vector instead of a deque would
// reallocate on the second registration and leave `weight` dangling).
TEST(WeightTying, MembersStayBoundAfterAModuleIsMoved) {
  nn::Linear linear(3, 2);
  Tensor weight = linear.weight;
  nn::Sequential sequential(std::move(linear));
  auto& moved = static_cast<nn::Linear&>(*sequential[0]);
  EXPECT_TRUE(moved.weight.is_same(weight));
  EXPECT_TRUE(moved.named_parameters()[0].second.is_same(weight));
  moved.weight = zeros({2, 3}, {.requires_grad = true});
  EXPECT_TRUE(moved.named_parameters()[0].second.is_same(moved.weight));
}

}  // namespace
}  // namespace ember
