// nn::Module and the containers: dotted names and their order, state dicts,
// load_state_dict's error listing, train/eval, to(dtype) keeping identity,
// zero_grad, apply, and the printed tree against PyTorch's repr strings.
#include <sstream>

#include "support/test_support.h"

namespace ember {
namespace {

using testing::all_close;

std::vector<std::string> names_of(const NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& entry : named) out.push_back(entry.first);
  return out;
}

// A user-defined model: submodules registered by name, as one writes in PyTorch.
struct Net : nn::Module {
  Net() {
    embed = register_module("embed", nn::Embedding(10, 4));
    blocks = register_module("blocks", nn::ModuleList(nn::Linear(4, 4), nn::Sequential(nn::Linear(4, 3), nn::ReLU())));
    norm = register_module("norm", nn::BatchNorm1d(3));
    scale = register_parameter("scale", ones({3}));
    register_buffer("step", zeros({}, {.dtype = DType::i64}));
    register_buffer("scratch", zeros({2}), /*persistent=*/false);
  }
  Tensor forward(const Tensor& indices) override {
    Tensor x = embed->forward(indices);
    for (const auto& block : *blocks) x = block->forward(x);
    return norm->forward(x) * scale;
  }
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::BatchNorm1d> norm;
  Tensor scale;
};

TEST(Module, DesignLoopCompilesByValueAndByPointer) {
  // DESIGN.md's line, held by value ...
  auto model = nn::Sequential(nn::Linear(64, 256), nn::ReLU(), nn::Linear(256, 10));
  Tensor inputs = randn({8, 64});
  EXPECT_EQ(model(inputs).shape(), (Shape{8, 10}));
  EXPECT_EQ(model.parameters().size(), 4u);
  // ... or shared, for code that keeps the model (optimizers keep the tensors, not the module).
  auto shared = std::make_shared<nn::Sequential>(nn::Linear(64, 256), nn::ReLU(), nn::Linear(256, 10));
  EXPECT_EQ(shared->forward(inputs).shape(), (Shape{8, 10}));
  EXPECT_EQ((*shared)(inputs).shape(), (Shape{8, 10}));
  EXPECT_EQ(shared->at<nn::Linear>(2)->out_features, 10);
  EXPECT_EMBER_ERROR(shared->at<nn::Linear>(1), "holds a ReLU");
  EXPECT_EMBER_ERROR((*shared)[3], "index 3 is out of range");
  EXPECT_EQ((*shared)[-1].get(), (*shared)[2].get());
}

TEST(Module, DottedNamesInRegistrationOrder) {
  Net net;
  EXPECT_EQ(names_of(net.named_parameters()),
            (std::vector<std::string>{"scale", "embed.weight", "blocks.0.weight", "blocks.0.bias", "blocks.1.0.weight",
                                      "blocks.1.0.bias", "norm.weight", "norm.bias"}));
  EXPECT_EQ(names_of(net.named_parameters(/*recurse=*/false)), (std::vector<std::string>{"scale"}));
  EXPECT_EQ(names_of(net.named_buffers()),
            (std::vector<std::string>{"step", "scratch", "norm.running_mean", "norm.running_var",
                                      "norm.num_batches_tracked"}));
  // state_dict: each module's parameters, then its persistent buffers, then its children (PyTorch's order).
  EXPECT_EQ(names_of(net.state_dict()),
            (std::vector<std::string>{"scale", "step", "embed.weight", "blocks.0.weight", "blocks.0.bias",
                                      "blocks.1.0.weight", "blocks.1.0.bias", "norm.weight", "norm.bias",
                                      "norm.running_mean", "norm.running_var", "norm.num_batches_tracked"}));
  std::vector<std::string> module_names;
  for (const auto& entry : net.named_modules()) module_names.push_back(entry.first);
  EXPECT_EQ(module_names, (std::vector<std::string>{"", "embed", "blocks", "blocks.0", "blocks.1", "blocks.1.0",
                                                    "blocks.1.1", "norm"}));
  EXPECT_EQ(net.children().size(), 3u);
  EXPECT_EQ(net.named_children()[1].first, "blocks");
  EXPECT_EQ(net.parameters()[1].impl(), net.embed->weight.impl());
  EXPECT_TRUE(net.parameters()[0].requires_grad());
  EXPECT_FALSE(net.buffers()[0].requires_grad());
}

TEST(Module, TiedWeightsListedOnceAsParametersButTwiceInStateDict) {
  struct Tied : nn::Module {
    explicit Tied(Tensor shared) {
      register_parameter("a", shared);
      register_parameter("b", shared);
    }
  } tied(ones({2}));
  EXPECT_EQ(names_of(tied.named_parameters()), (std::vector<std::string>{"a"}));
  EXPECT_EQ(names_of(tied.state_dict()), (std::vector<std::string>{"a", "b"}));
}

TEST(Module, RegistrationErrors) {
  nn::Linear linear(2, 3);
  EXPECT_EMBER_ERROR(linear.register_parameter("weight", ones({1})), "attribute \"weight\" already exists");
  EXPECT_EMBER_ERROR(linear.register_buffer("a.b", ones({1})), "can't contain \".\"");
  EXPECT_EMBER_ERROR(linear.register_module("", nn::ReLU()), "name can't be empty");
  EXPECT_EMBER_ERROR(linear.child("missing"), "no submodule named \"missing\"");
  EXPECT_EMBER_ERROR(linear.register_parameter("p", ones({2}, {.requires_grad = true}) * 2), "must be a leaf");
  EXPECT_EMBER_ERROR(nn::ModuleList().forward(ones({1})), "ModuleList: has no single-tensor forward");
  // A cycle (a in b in a) was taken, and state_dict() then recursed until the
  // stack overflowed. Mutation caught: add_child without the walk.
  auto a = std::make_shared<nn::Sequential>(), b = std::make_shared<nn::Sequential>();
  a->push_back(b);
  EXPECT_EMBER_ERROR(b->push_back(a), "registering Sequential as \"0\" would make a cycle: this module is already "
                                      "inside it (at \"0\")");
  EXPECT_EQ(a->state_dict().size(), 0u);
}

// register_module on a container (PyTorch's add_module) registered a child
// that trained and saved while Sequential's forward, ModuleList's iteration,
// size(), [] and printed tree skipped it. PyTorch's containers walk every
// registered child. Mutation caught: IndexedModules iterating a list of its
// own that only push_back fills (output [1, 2], size 1).
TEST(Module, AContainerHoldsAChildAddedWithRegisterModule) {
  nn::Sequential chain(nn::Linear(2, 2));
  chain.register_module("extra", nn::Linear(2, 3));
  EXPECT_EQ(chain(ones({1, 2})).shape(), (Shape{1, 3}));
  EXPECT_EQ(chain.size(), 2u);

  nn::ModuleList list{nn::Tanh()};
  auto extra = list.register_module("extra", nn::ReLU());
  list.push_back(nn::Sigmoid());
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(list[1], extra);
  std::vector<std::string> types;
  for (const std::shared_ptr<nn::Module>& module : list) types.push_back(module->type_name());
  EXPECT_EQ(types, (std::vector<std::string>{"Tanh", "ReLU", "Sigmoid"}));
  EXPECT_EQ(list.named_children()[2].first, "2");
  EXPECT_EQ(list.str(), "ModuleList(\n  (0): Tanh()\n  (1): ReLU()\n  (2): Sigmoid()\n)");
}

// PyTorch 2 fills a BatchNorm's missing num_batches_tracked with the module's
// own count for state dicts without version metadata (safetensors files,
// older checkpoints); strict loading refused them, then loaded 0 (PyTorch
// 1.13's fill: with momentum None the next batch replaced the running
// statistics whole). Mutations caught: load_state_dict without the BatchNorm
// case (missing key), or filling 0 again (0 instead of 5).
TEST(Module, ABatchNormStateWithoutItsCountLoads) {
  nn::Sequential model(nn::Linear(3, 3), nn::BatchNorm1d(3));
  model(randn({4, 3}));
  NamedTensors state = model.state_dict();
  EXPECT_EQ(state.back().first, "1.num_batches_tracked");
  state.pop_back();
  nn::Sequential fresh(nn::Linear(3, 3), nn::BatchNorm1d(3));
  fresh.at<nn::BatchNorm>(1)->num_batches_tracked.fill_(5);
  const nn::LoadStateDictResult result = fresh.load_state_dict(state);
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_EQ(fresh.at<nn::BatchNorm>(1)->num_batches_tracked.item<int64_t>(), 5);
  state.pop_back();  // running_var is missing for real
  EXPECT_EMBER_ERROR(fresh.load_state_dict(state), "Missing key(s) in state_dict: \"1.running_var\"");
}

// requires_grad = false registers a frozen parameter; it was honoured only when the
// tensor did not already require grad, so a trainable tensor stayed trainable.
// Mutation caught: register_parameter setting requires_grad only when asked for true.
TEST(Module, RegisterParameterCanFreezeATrainableTensor) {
  nn::Module module;
  Tensor& frozen = module.register_parameter("frozen", ones({2}, {.requires_grad = true}), /*requires_grad=*/false);
  Tensor& trained = module.register_parameter("trained", ones({2}));
  EXPECT_FALSE(frozen.requires_grad());
  EXPECT_TRUE(trained.requires_grad());
  EXPECT_EQ(module.parameters().size(), 2u);  // still a parameter, as PyTorch lists a frozen one
  sum(frozen * trained).backward();
  EXPECT_FALSE(frozen.grad().defined());
  EXPECT_TRUE(trained.grad().defined());
}

TEST(Module, StateDictRoundTripCopiesInPlace) {
  Net source, target;
  source.norm->running_mean.fill_(0.5);
  Tensor target_weight = target.blocks->at<nn::Linear>(0)->weight;
  EXPECT_FALSE(all_close(target_weight, source.blocks->at<nn::Linear>(0)->weight));
  nn::LoadStateDictResult result = target.load_state_dict(source.state_dict());
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  NamedTensors loaded = target.state_dict(), expected = source.state_dict();
  ASSERT_EQ(loaded.size(), expected.size());
  for (size_t i = 0; i < loaded.size(); ++i) EXPECT_TRUE(all_close(loaded[i].second, expected[i].second)) << loaded[i].first;
  // The same tensors, written in place: an optimizer holding them sees the loaded values.
  EXPECT_EQ(target.blocks->at<nn::Linear>(0)->weight.impl(), target_weight.impl());
  EXPECT_TRUE(target_weight.requires_grad());
  // state_dict values share storage with the parameters but carry no gradient requirement.
  EXPECT_FALSE(loaded[0].second.requires_grad());
  EXPECT_EQ(loaded[0].second.data_ptr(), target.scale.data_ptr());
}

TEST(Module, LoadStateDictListsEveryMissingUnexpectedAndMisShapedKey) {
  nn::Sequential model(nn::Linear(3, 2), nn::ReLU(), nn::Linear(2, 1));
  NamedTensors state = model.state_dict();
  Tensor before = model.at<nn::Linear>(0)->weight.clone();
  NamedTensors broken;
  for (const auto& [name, tensor] : state) {
    if (name == "0.bias") continue;                                    // missing
    if (name == "2.weight") broken.emplace_back(name, zeros({2, 1}));  // mis-shaped
    else broken.emplace_back(name, zeros_like(tensor));
  }
  broken.emplace_back("3.weight", zeros({1}));  // unexpected
  broken.emplace_back("extra", zeros({1}));     // unexpected
  try {
    model.load_state_dict(broken);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("Error(s) in loading state_dict for Sequential"), std::string::npos) << message;
    EXPECT_NE(message.find("Missing key(s) in state_dict: \"0.bias\"."), std::string::npos) << message;
    EXPECT_NE(message.find("Unexpected key(s) in state_dict: \"3.weight\", \"extra\"."), std::string::npos) << message;
    EXPECT_NE(message.find("size mismatch for 2.weight: copying a param with shape [2, 1] from checkpoint, the "
                           "shape in current model is [1, 2]."),
              std::string::npos)
        << message;
  }
  // Nothing was copied: the load is all or nothing.
  EXPECT_TRUE(all_close(model.at<nn::Linear>(0)->weight, before));

  // strict = false reports missing and unexpected keys instead, but a shape mismatch still fails.
  EXPECT_EMBER_ERROR(model.load_state_dict(broken, /*strict=*/false), "size mismatch for 2.weight");
  NamedTensors partial;
  for (const auto& entry : broken)
    if (entry.first != "2.weight") partial.push_back(entry);
  nn::LoadStateDictResult result = model.load_state_dict(partial, /*strict=*/false);
  EXPECT_EQ(result.missing_keys, (std::vector<std::string>{"0.bias", "2.weight"}));
  EXPECT_EQ(result.unexpected_keys, (std::vector<std::string>{"3.weight", "extra"}));
  EXPECT_TRUE(all_close(model.at<nn::Linear>(0)->weight, zeros({2, 3})));
  EXPECT_FALSE(all_close(model.at<nn::Linear>(0)->bias, zeros({2})));
}

// A name given twice: the first value was loaded and the second dropped without a
// word (an appended "override" had no effect). Mutation caught: the emplace's result
// unchecked again.
TEST(Module, LoadStateDictRefusesANameGivenTwice) {
  nn::Linear linear(2, 1);
  Tensor before = linear.weight.clone();
  NamedTensors state = linear.state_dict();
  state.emplace_back("weight", full({1, 2}, 7.0));
  EXPECT_EMBER_ERROR(linear.load_state_dict(state), "Linear.load_state_dict: \"weight\" appears twice in the state dict");
  EXPECT_EMBER_ERROR(linear.load_state_dict(state, /*strict=*/false), "appears twice");
  EXPECT_TRUE(all_close(linear.weight, before, 0, 0));
}

TEST(Module, TrainAndEvalPropagateToEveryDescendant) {
  nn::Sequential model(nn::Linear(4, 4), nn::Dropout(0.5), nn::Sequential(nn::BatchNorm1d(4)));
  for (nn::Module* module : model.modules()) EXPECT_TRUE(module->is_training());
  model.eval();
  for (nn::Module* module : model.modules()) EXPECT_FALSE(module->is_training());
  // Eval: dropout is the identity and batch norm uses its running statistics (0 and 1 here).
  Tensor x = randn({6, 4});
  auto& linear = *model.at<nn::Linear>(0);
  Tensor expected = linear(x) / std::sqrt(1.0 + 1e-5);
  EXPECT_TRUE(all_close(model(x), expected, 1e-5, 1e-6));
  model.train();
  EXPECT_TRUE(model.at<nn::Sequential>(2)->at<nn::BatchNorm1d>(0)->is_training());
  Tensor y = model.at<nn::Dropout>(1)->forward(ones({1000}));
  int64_t zeros_count = sum(eq(y, 0.0)).item<int64_t>();
  EXPECT_GT(zeros_count, 400);
  EXPECT_LT(zeros_count, 600);
}

TEST(Module, ToDtypeChangesTensorsInPlace) {
  nn::Sequential model(nn::Linear(3, 2), nn::BatchNorm1d(2));
  std::vector<Tensor> held = model.parameters();  // what an optimizer would hold
  Tensor weight_f32 = model.at<nn::Linear>(0)->weight.clone();
  sum(model(randn({4, 3}))).backward();
  model.to(DType::f64);
  std::vector<Tensor> after = model.parameters();
  ASSERT_EQ(held.size(), after.size());
  for (size_t i = 0; i < held.size(); ++i) {
    EXPECT_EQ(held[i].impl(), after[i].impl());
    EXPECT_EQ(held[i].dtype(), DType::f64);
    EXPECT_TRUE(held[i].requires_grad());
    EXPECT_EQ(held[i].grad().dtype(), DType::f64);
  }
  EXPECT_TRUE(all_close(held[0], weight_f32.to(DType::f64)));
  auto& norm = *model.at<nn::BatchNorm1d>(1);
  EXPECT_EQ(norm.running_mean.dtype(), DType::f64);
  EXPECT_EQ(norm.num_batches_tracked.dtype(), DType::i64);  // integer buffers keep their dtype, as PyTorch
  // Training still works after the move, and gradients arrive in the new dtype.
  model.zero_grad();
  sum(model(randn({4, 3}, {.dtype = DType::f64}))).backward();
  EXPECT_EQ(held[0].grad().dtype(), DType::f64);
  model.to(kCPU);  // already there: nothing changes
  EXPECT_EQ(held[0].impl(), model.parameters()[0].impl());
  EXPECT_EMBER_ERROR(model.to(DType::i32), "only floating dtypes");
}

// As PyTorch (and nn/README.md): to(dtype) converts floating tensors only.
// Catches: integer parameters converted too (codes 2049 and 70001 became
// 2048 and inf in f16).
TEST(Module, ToDtypeLeavesIntegerParametersAlone) {
  nn::Linear model(2, 2);
  Tensor codes = from_vector<int64_t>({3, 2049, 70001});
  model.register_parameter("codes", codes, /*requires_grad=*/false);
  model.to(DType::f16);
  EXPECT_EQ(codes.dtype(), DType::i64);
  EXPECT_EQ(codes.to_vector<int64_t>(), (std::vector<int64_t>{3, 2049, 70001}));
  EXPECT_EQ(model.weight.dtype(), DType::f16);
}

TEST(Module, ZeroGradAndApply) {
  nn::Sequential model(nn::Linear(3, 2), nn::Tanh(), nn::Linear(2, 1));
  sum(model(randn({5, 3}))).backward();
  Tensor grad = model.parameters()[0].grad();
  ASSERT_TRUE(grad.defined());
  model.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(model.parameters()[0].grad().is_same(grad));
  EXPECT_TRUE(all_close(grad, zeros({2, 3})));
  model.zero_grad();
  for (const Tensor& p : model.parameters()) EXPECT_FALSE(p.grad().defined());
  // A gradient with a graph (create_graph) is cut from it before zeroing, as PyTorch's
  // Module.zero_grad and ember's Optimizer::zero_grad do; it stayed attached.
  // Mutation caught: Module::zero_grad filling the gradient without detaching it.
  Tensor x = randn({5, 3});
  autograd::backward({sum(model(x) * model(x))}, {}, std::nullopt, /*create_graph=*/true);
  ASSERT_TRUE(model.parameters()[0].grad().requires_grad());
  model.zero_grad(/*set_to_none=*/false);
  for (const Tensor& p : model.parameters()) {
    EXPECT_FALSE(p.grad().requires_grad());
    EXPECT_EQ(p.grad().grad_fn(), nullptr);
    EXPECT_TRUE(all_close(p.grad(), zeros_like(p), 0, 0));
  }

  std::vector<std::string> visited;
  model.apply([&](nn::Module& m) { visited.push_back(m.type_name()); });
  EXPECT_EQ(visited, (std::vector<std::string>{"Linear", "Tanh", "Linear", "Sequential"}));
  model.apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) nn::init::zeros_(linear->weight);
  });
  EXPECT_TRUE(all_close(model.at<nn::Linear>(2)->weight, zeros({1, 2})));

  // A child registered under two names is visited once, as PyTorch's apply.
  // Catches: apply walking children_ by name (an in-place scaling ran twice).
  struct Shared : nn::Module {
    Shared() {
      auto linear = std::make_shared<nn::Linear>(2, 2);
      register_module("a", linear);
      register_module("b", linear);
    }
  } shared;
  int linears = 0;
  shared.apply([&](nn::Module& m) { linears += dynamic_cast<nn::Linear*>(&m) != nullptr; });
  EXPECT_EQ(linears, 1);
  // children() and named_children() list it once, under its first name, as
  // PyTorch's do; state_dict keeps both names. Catches: children() walking
  // every registration (two children, an initialiser run twice).
  ASSERT_EQ(shared.children().size(), 1u);
  EXPECT_EQ(shared.named_children()[0].first, "a");
  EXPECT_EQ(shared.state_dict().size(), 4u);
}

TEST(Module, PrintsLikePyTorch) {
  nn::Sequential mlp(nn::Linear(784, 256), nn::ReLU(), nn::Dropout(0.1), nn::Linear(256, 10, {.bias = false}));
  EXPECT_EQ(mlp.str(),
            "Sequential(\n"
            "  (0): Linear(in_features=784, out_features=256, bias=True)\n"
            "  (1): ReLU()\n"
            "  (2): Dropout(p=0.1, inplace=False)\n"
            "  (3): Linear(in_features=256, out_features=10, bias=False)\n"
            ")");
  nn::ModuleDict dict;
  dict.insert("a", nn::Tanh());
  dict.insert("b", nn::Sequential(nn::Sigmoid()));
  EXPECT_EQ(dict.str(),
            "ModuleDict(\n"
            "  (a): Tanh()\n"
            "  (b): Sequential(\n"
            "    (0): Sigmoid()\n"
            "  )\n"
            ")");
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(dict.contains("b"));
  EXPECT_EQ(dict.at<nn::Tanh>("a")->type_name(), "Tanh");
  EXPECT_EMBER_ERROR(dict.insert("a", nn::ReLU()), "already exists");
  // PyTorch 2's ModuleList collapses runs of identical children.
  nn::ModuleList list(nn::Linear(2, 2), nn::Linear(2, 2), nn::Linear(2, 2), nn::ReLU(), nn::Sequential(nn::GELU()));
  EXPECT_EQ(list.str(),
            "ModuleList(\n"
            "  (0-2): 3 x Linear(in_features=2, out_features=2, bias=True)\n"
            "  (3): ReLU()\n"
            "  (4): Sequential(\n"
            "    (0): GELU(approximate='none')\n"
            "  )\n"
            ")");
  EXPECT_EQ(nn::ModuleList().str(), "ModuleList()");
  Net net;
  std::ostringstream stream;
  stream << net;
  EXPECT_EQ(stream.str(),
            "Net(\n"
            "  (embed): Embedding(10, 4)\n"
            "  (blocks): ModuleList(\n"
            "    (0): Linear(in_features=4, out_features=4, bias=True)\n"
            "    (1): Sequential(\n"
            "      (0): Linear(in_features=4, out_features=3, bias=True)\n"
            "      (1): ReLU()\n"
            "    )\n"
            "  )\n"
            "  (norm): BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
            ")");
  EXPECT_EQ(fmt::format("{}", nn::ReLU()), "ReLU()");
}

TEST(Module, PythonReprOfValues) {
  EXPECT_EQ(nn::python_repr(1e-5), "1e-05");
  EXPECT_EQ(nn::python_repr(0.1), "0.1");
  EXPECT_EQ(nn::python_repr(1.0), "1.0");
  EXPECT_EQ(nn::python_repr(0.001), "0.001");
  EXPECT_EQ(nn::python_repr(true), "True");
  std::vector<int64_t> one{256}, two{3, 5};
  EXPECT_EQ(nn::python_tuple(one), "(256,)");
  EXPECT_EQ(nn::python_tuple(two), "(3, 5)");
}

}  // namespace
}  // namespace ember
