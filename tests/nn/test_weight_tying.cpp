// Weight tying as PyTorch users write it (Note [Parameter slots]):
// `lm_head->weight = wte->weight` re-points the registered parameter, so the
// tensor is listed once, gets one gradient (the sum of both uses), is saved
// once, and a file without the tied name (as Hugging Face writes it) loads
// with the tie restored. Assigning a non-leaf or a plain tensor is refused by
// name; nn::Parameter makes one to assign.
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
  moved.weight = nn::Parameter(zeros({2, 3}));
  EXPECT_TRUE(moved.named_parameters()[0].second.is_same(moved.weight));
}

// A plain tensor in a parameter slot is refused by name, in a listing and at
// the module's next call, as PyTorch's setattr refuses one (mutations: the
// listing checking leaves only, as it did: `lin.weight = zeros(...)` was
// listed frozen and never trained; call() not checking the slots: an
// assignment after the optimizer was built trained on a constant).
TEST(WeightTying, AssigningAPlainTensorIsRefusedByName) {
  TinyLm model;
  model.lm_head->weight = zeros({5, 4});
  EXPECT_EMBER_ERROR(model.named_parameters(),
                     "parameter \"lm_head.weight\" holds a plain tensor (float32, [5, 4], requires_grad=False)");
  EXPECT_EMBER_ERROR(model(from_vector<int64_t>({1, 2})), "parameter \"weight\" holds a plain tensor");
  model.lm_head->weight = ones({5, 4}, {.requires_grad = true});  // PyTorch refuses it too: not a Parameter
  EXPECT_EMBER_ERROR(model.named_parameters(), "assign nn::Parameter(tensor)");
}

// nn::Parameter is PyTorch's: a leaf sharing the data's storage, trainable
// unless told otherwise; the assigned slot trains (mutation: the Parameter
// constructor not marking the tensor: its slot was refused).
TEST(WeightTying, AParameterAssignedToASlotTrains) {
  nn::Linear linear(3, 2);
  Tensor data = ones({2, 3});
  linear.weight = nn::Parameter(data);
  NamedTensors parameters = linear.named_parameters();
  ASSERT_EQ(parameters.size(), 2u);
  EXPECT_TRUE(parameters[0].second.is_same(linear.weight));
  EXPECT_TRUE(linear.weight.requires_grad());
  EXPECT_EQ(linear.weight.data_ptr(), data.data_ptr());
  sum(linear(ones({4, 3}))).backward();
  EXPECT_TRUE(linear.weight.grad().defined());
  EXPECT_FALSE(nn::Parameter(data, false).requires_grad());
  EXPECT_TRUE(nn::Parameter(linear(ones({1, 3}))).is_leaf());  // a computed tensor is detached, as PyTorch's
}

// register_parameter of a tensor that is a parameter already keeps its
// requires_grad unless told (mutation: applying the default true, which
// unfroze the weight in the module that had frozen it).
TEST(WeightTying, RegisteringAFrozenParameterAgainKeepsItFrozen) {
  nn::Linear frozen(3, 2);
  frozen.weight.requires_grad_(false);
  nn::Module other;
  other.register_parameter("shared", frozen.weight);
  EXPECT_FALSE(frozen.weight.requires_grad());
  other.register_parameter("trained", frozen.bias, false);
  EXPECT_FALSE(frozen.bias.requires_grad());
  other.register_parameter("fresh", ones({2}));
  EXPECT_TRUE(other.named_parameters().back().second.requires_grad());
}

}  // namespace
}  // namespace ember
