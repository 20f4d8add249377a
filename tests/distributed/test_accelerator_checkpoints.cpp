// Accelerator checkpoints. On real processes (workers/accelerator_resume_scenarios.cpp):
// exact resume after kill -9 on 1 and 3 processes (dropout, shuffling,
// accumulation, two loader workers; final parameters bit for bit), resuming
// with another world size refused, and a process killed while writing a
// checkpoint leaving the previous one loadable. In this process: what a
// checkpoint holds, automatic naming and total_limit, registered objects,
// corrupted, truncated and mismatched checkpoints refused before anything
// changes, and save_model's files loading strictly into a fresh model.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <type_traits>

#include "core/file_io.h"
#include "distributed/accelerator/accelerator.h"
#include "distributed/checkpoint/manifest.h"
#include "distributed/process_runner.h"
#include "nn/serialize.h"
#include "support/test_support.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
namespace F = nn::functional;
using std::chrono::seconds;
using test::launch;
using test::ProcessResult;
using test::read_bytes;

void expect_nothing_left() {
  EXPECT_TRUE(test::leftover_workers().empty());
  EXPECT_TRUE(test::leftover_segments().empty());
}

// 2N batches straight equal N batches, kill -9, a new process, load_state, N
// more; the cut falls mid-epoch and mid-accumulation.
// Mutation caught (run once on 1 process, failed as expected: "the resumed
// run's parameters differ"): load_state not restoring the RNG state
// (default_generator().set_state), so dropout draws other masks.
void check_exact_resume(int processes, int64_t before, int64_t total, const std::vector<std::string>& env = {}) {
  testing::ScratchDirectory directory;
  const std::vector<std::string> launch_args{"--nproc-per-node", std::to_string(processes)};
  auto run = [&](const std::string& mode) {
    return launch(launch_args, "accelerator_resume",
                  {mode, directory.path().string(), std::to_string(before), std::to_string(total)}, seconds(120),
                  env);
  };
  ProcessResult straight = run("straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  ProcessResult interrupted = run("interrupted");
  EXPECT_EQ(interrupted.exit_code, 128 + 9) << interrupted.output;
  EXPECT_NE(interrupted.output.find("accumulation step partial"), std::string::npos) << interrupted.output;
  expect_nothing_left();
  ProcessResult resumed = run("resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  for (int rank = 0; rank < processes; ++rank) {
    const std::string expected = read_bytes(directory.path() / fmt::format("straight_{}.safetensors", rank));
    ASSERT_FALSE(expected.empty());
    EXPECT_TRUE(expected == read_bytes(directory.path() / fmt::format("resume_{}.safetensors", rank)))
        << "process " << rank << ": the resumed run's parameters differ from the uninterrupted run's";
  }
  if (processes > 1) {
    ProcessResult other_world =
        launch({"--nproc-per-node", "1"}, "accelerator_resume",
               {"resume", directory.path().string(), std::to_string(before), std::to_string(total)}, seconds(60), env);
    EXPECT_EQ(other_world.exit_code, 2) << other_world.output;
    EXPECT_NE(other_world.output.find("world size"), std::string::npos) << other_world.output;
  }
  expect_nothing_left();
}

TEST(AcceleratorCheckpoints, ExactResumeAfterKillOnOneProcess) { check_exact_resume(1, 63, 70); }

TEST(AcceleratorCheckpoints, ExactResumeAfterKillOnThreeProcesses) { check_exact_resume(3, 26, 30); }

// Under ZeRO-3 with both Linear layers as units (min_num_params 100): the
// checkpoint holds whole tensors gathered from the shards, and loading cuts
// them into the new processes' shards again. Mutation caught: loading into
// the parameters without keeping each rank's shard of them
// (FlatParameter::keep_shard_of_full) resumes from the initial weights.
TEST(AcceleratorCheckpoints, ExactResumeAfterKillUnderZero3) {
  check_exact_resume(3, 26, 30, {"EMBER_STRATEGY=zero3", "EMBER_WRAP_MIN_NUM_PARAMS=100"});
}

// Note [Resuming at another world size]: 4 processes train 12 batches each
// (48 of the epoch) under ZeRO-3 and, separately, under DDP, and save. The
// two checkpoints must hold the same bytes in their model and optimizer
// files (ZeRO's whole state is DDP's). Each is then resumed on 1, 2 and 3
// processes under the other strategy for 6 more batches each: the ZeRO-3
// checkpoint under DDP and the DDP one under ZeRO-3 must end at the same
// parameters, bit for bit, and so must a sharded checkpoint (each process's
// pieces, Note [Sharded checkpoints]) resumed under DDP. Mutations caught: cutting the optimizer state
// into pieces at the wrong offset (load_full_optimizer_state_dict), or not
// moving the data loaders to the global batch the saved processes reached,
// or placing every sharded piece at the start of its parameter
// (assemble_pieces).
// A larger world: each new process draws its own random numbers. Catches:
// process 1 given a copy of saved process 0's state (the same dropout
// masks on both).
TEST(AcceleratorCheckpoints, ALargerWorldGivesEveryProcessItsOwnRandomStream) {
  testing::ScratchDirectory directory;
  const std::string dir = directory.path().string();
  ProcessResult saved = launch({"--nproc-per-node", "1"}, "accelerator_reshard", {"save", dir, "one", "4"}, seconds(120));
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  ProcessResult resumed =
      launch({"--nproc-per-node", "2"}, "accelerator_reshard", {"resume", dir, "one", "2", "two"}, seconds(120));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  std::vector<std::string> states;
  const std::regex line("rank [01]: random state (\\d+ \\d+)");
  for (std::sregex_iterator match(resumed.output.begin(), resumed.output.end(), line), end; match != end; ++match)
    states.push_back((*match)[1].str());
  ASSERT_EQ(states.size(), 2u) << resumed.output;
  EXPECT_NE(states[0], states[1]) << resumed.output;
}

TEST(AcceleratorCheckpoints, ReshardsWhenTheWorldSizeChanges) {
  testing::ScratchDirectory directory;
  const std::string dir = directory.path().string();
  const std::vector<std::string> zero3{"EMBER_STRATEGY=zero3", "EMBER_WRAP_MIN_NUM_PARAMS=100"};
  const std::vector<std::string> ddp{"EMBER_STRATEGY=ddp"};
  auto run = [&](int processes, const std::vector<std::string>& args, const std::vector<std::string>& env) {
    ProcessResult result =
        launch({"--nproc-per-node", std::to_string(processes)}, "accelerator_reshard", args, seconds(120), env);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return result;
  };
  run(4, {"save", dir, "zero3_checkpoint", "12"}, zero3);
  run(4, {"save", dir, "ddp_checkpoint", "12"}, ddp);
  std::vector<std::string> sharded = zero3;
  sharded.push_back("EMBER_STATE_DICT_TYPE=sharded");
  run(4, {"save", dir, "sharded_checkpoint", "12"}, sharded);
  // Note [Sharded checkpoints]: every process wrote its pieces, nothing whole.
  for (int process = 0; process < 4; ++process)
    EXPECT_TRUE(fs::exists(directory.path() / "sharded_checkpoint" / fmt::format("model_shard_{}.safetensors", process)));
  EXPECT_FALSE(fs::exists(directory.path() / "sharded_checkpoint" / "optimizer.safetensors"));
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "optimizer.json"})
    EXPECT_TRUE(read_bytes(directory.path() / "zero3_checkpoint" / file) ==
                read_bytes(directory.path() / "ddp_checkpoint" / file))
        << file << " differs between the ZeRO-3 and the DDP checkpoint";
  for (int processes : {1, 2, 3}) {
    const std::string zero_tag = fmt::format("from_zero3_{}", processes);
    const std::string ddp_tag = fmt::format("from_ddp_{}", processes);
    run(processes, {"resume", dir, "zero3_checkpoint", "6", zero_tag}, ddp);
    ProcessResult resumed = run(processes, {"resume", dir, "ddp_checkpoint", "6", ddp_tag}, zero3);
    EXPECT_NE(resumed.output.find(fmt::format("resumed at batch {}", 48 / processes)), std::string::npos)
        << resumed.output;
    const std::string sharded_tag = fmt::format("from_sharded_{}", processes);
    run(processes, {"resume", dir, "sharded_checkpoint", "6", sharded_tag}, ddp);
    const std::string expected = read_bytes(directory.path() / (zero_tag + "_0.safetensors"));
    ASSERT_FALSE(expected.empty());
    EXPECT_TRUE(expected == read_bytes(directory.path() / (ddp_tag + "_0.safetensors")))
        << processes << " processes: resuming the ZeRO-3 checkpoint under DDP and the DDP one under ZeRO-3 differ";
    EXPECT_TRUE(expected == read_bytes(directory.path() / (sharded_tag + "_0.safetensors")))
        << processes << " processes: resuming the sharded checkpoint differs from resuming the whole one";
  }
  expect_nothing_left();
}

// A sharded checkpoint whose shards_<r>.json places a piece with a
// mistyped begin or shape (a file edited and its manifest rewritten) got
// past load_state's checks and threw nlohmann's type_error, not an
// ember::Error naming the file. Mutation caught: assemble_pieces without its
// type check (the resume dies on "type must be number").
TEST(AcceleratorCheckpoints, AMistypedShardPlacementIsRefusedNamingTheFile) {
  testing::ScratchDirectory directory;
  const std::string dir = directory.path().string();
  const std::vector<std::string> sharded{"EMBER_STRATEGY=zero3", "EMBER_WRAP_MIN_NUM_PARAMS=100",
                                         "EMBER_STATE_DICT_TYPE=sharded"};
  ProcessResult saved =
      launch({"--nproc-per-node", "2"}, "accelerator_reshard", {"save", dir, "sharded", "4"}, seconds(120), sharded);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const fs::path saved_dir = directory.path() / "sharded", shards = saved_dir / "shards_0.json";
  nlohmann::json placed = nlohmann::json::parse(read_bytes(shards));
  ASSERT_FALSE(placed["ranges"].empty());
  const std::string parameter = placed["ranges"].begin().key();
  placed["ranges"][parameter]["begin"] = "0";
  std::ofstream(shards) << placed.dump();
  const distributed::checkpoint::Manifest manifest = distributed::checkpoint::read_manifest(saved_dir);
  distributed::checkpoint::write_manifest(saved_dir, manifest.world_size, manifest.metadata,
                                          [&](const std::string& file, const std::string& tensor) {
                                            for (const auto& entry : manifest.tensors)
                                              if (entry.file == file && entry.name == tensor) return entry.param;
                                            return tensor;
                                          });
  ProcessResult resumed = launch({"--nproc-per-node", "2"}, "accelerator_reshard",
                                 {"resume", dir, "sharded", "1", "resumed"}, seconds(120), sharded);
  EXPECT_NE(resumed.exit_code, 0);
  EXPECT_NE(resumed.output.find("shards_0.json places " + parameter + " at begin \"0\""), std::string::npos)
      << resumed.output;
  expect_nothing_left();
}

TEST(AcceleratorCheckpoints, AKillWhileSavingLeavesThePreviousCheckpointLoadable) {
  testing::ScratchDirectory directory;
  ProcessResult killed =
      launch({"--nproc-per-node", "2"}, "accelerator_kill_during_save", {directory.path().string()}, seconds(60));
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.output;
  expect_nothing_left();
  EXPECT_TRUE(fs::exists(directory.path() / "checkpoints" / "checkpoint_0"));
  EXPECT_FALSE(fs::exists(directory.path() / "checkpoints" / "checkpoint_1"));
  ProcessResult loaded =
      launch({"--nproc-per-node", "2"}, "accelerator_load_latest", {directory.path().string()}, seconds(60));
  EXPECT_EQ(loaded.exit_code, 0) << loaded.output;
  expect_nothing_left();
}

// Catches: load_state read and checked on each process alone (process 0
// loaded while process 1 refused; a program catching the error went on with
// one process resumed and one afresh).
TEST(AcceleratorCheckpoints, LoadStateIsAgreedByEveryProcess) {
  testing::ScratchDirectory directory;
  ProcessResult result =
      launch({"--nproc-per-node", "2"}, "accelerator_load_agreed", {directory.path().string()}, seconds(60));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  expect_nothing_left();
}

// --- One process ----------------------------------------------------------------

std::shared_ptr<nn::Sequential> make_model(int64_t hidden = 16) {
  manual_seed(1);
  return std::make_shared<nn::Sequential>(nn::Linear(6, hidden), nn::ReLU(), nn::Linear(hidden, 3));
}

template <class Scheduler>
Scheduler make_scheduler(optim::Optimizer& optimizer) {
  if constexpr (std::is_same_v<Scheduler, optim::StepLR>)
    return Scheduler(optimizer, 2, 0.5);
  else if constexpr (std::is_same_v<Scheduler, optim::ExponentialLR>)
    return Scheduler(optimizer, 0.5);
  else
    return Scheduler(optimizer, /*T_max=*/10);
}

// A prepared model, optimizer, scheduler and loader that train a few batches.
template <class Optimizer = optim::AdamW, class Scheduler = optim::StepLR>
struct TrainingWith {
  Accelerator accelerator;
  data::TensorDataset dataset;
  std::shared_ptr<nn::Sequential> model;
  Optimizer optimizer{model->parameters(), {.lr = 1e-2}};
  Scheduler scheduler = make_scheduler<Scheduler>(optimizer);
  data::DataLoader loader;

  explicit TrainingWith(AcceleratorOptions options = {}, int64_t hidden = 16)
      : accelerator(std::move(options)),
        dataset(randn({24, 6}), randint(0, 3, {24})),
        model(make_model(hidden)),
        loader(dataset, {.batch_size = 4, .shuffle = true, .seed = 2}) {
    accelerator.prepare(model, optimizer, loader, scheduler);
  }
  void train(int batches) {
    auto it = loader.begin();
    for (int b = 0; b < batches; ++b, ++it) {
      if (it == loader.end()) it = loader.begin();
      auto& [inputs, targets] = *it;
      auto step = accelerator.accumulate(model);
      accelerator.backward(F::cross_entropy((*model)(inputs), targets));
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
    }
  }
};
using Training = TrainingWith<>;

std::vector<Tensor> clones(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> copies;
  for (const Tensor& t : tensors) copies.push_back(t.clone());
  return copies;
}

void expect_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(testing::all_close(a[i], b[i], 0, 0)) << "tensor " << i;
}

TEST(AcceleratorCheckpoints, SaveThenLoadRestoresEveryObject) {
  testing::ScratchDirectory directory;
  Training training;
  training.train(3);
  const fs::path saved = training.accelerator.save_state(directory.path() / "state");
  EXPECT_EQ(saved, directory.path() / "state");
  for (const char* file : {"manifest.json", "model.safetensors", "optimizer.safetensors", "optimizer.json",
                           "scheduler.json", "process_0.json"})
    EXPECT_TRUE(fs::exists(saved / file)) << file;
  const std::vector<Tensor> parameters = clones(training.model->parameters());
  const double lr = training.optimizer.lr(0);
  const data::DataLoaderState position = training.loader.state();
  const GeneratorState random = default_generator().state();
  training.train(5);
  training.accelerator.load_state(saved);
  expect_equal(training.model->parameters(), parameters);
  EXPECT_EQ(training.optimizer.lr(0), lr);
  EXPECT_EQ(training.loader.state(), position);
  EXPECT_EQ(default_generator().state().offset, random.offset);
  // Saving again over the same directory replaces it whole.
  training.train(1);
  training.accelerator.save_state(saved);
  EXPECT_FALSE(fs::exists(directory.path() / ".state.staging"));
}

// save_state replaces its directory whole: a directory of the user's files that is
// not a checkpoint was deleted with it (and "outer/inner/.." named all of outer/).
// Now refused before anything is written; an empty directory is fine. Mutation
// caught: save_state and commit without check_replaceable.
TEST(AcceleratorCheckpoints, SaveStateRefusesToReplaceADirectoryThatIsNotACheckpoint) {
  testing::ScratchDirectory directory;
  Training training;
  training.train(1);
  const fs::path user = directory.path() / "user";
  fs::create_directories(user / "inner");
  std::ofstream(user / "notes.txt") << "precious";
  EXPECT_EMBER_ERROR(training.accelerator.save_state(user), "Accelerator::save_state: '" + user.string() +
                                                                "' holds files but is not a checkpoint (no manifest.json)");
  EXPECT_EMBER_ERROR(training.accelerator.save_state(user / "inner" / ".."), "holds files but is not a checkpoint");
  EXPECT_TRUE(fs::exists(user / "notes.txt"));
  EXPECT_FALSE(fs::exists(directory.path() / ".user.staging"));
  fs::create_directories(directory.path() / "empty");
  training.accelerator.save_state(directory.path() / "empty");
  EXPECT_TRUE(fs::exists(directory.path() / "empty" / "manifest.json"));
}

// Accelerate's save_state writes into a directory given as a link to one
// (os.makedirs follows it); ember refused it as "exists and is not a
// directory". Mutation caught: save_state without checkpoint::save_target
// (refused), or a dangling link taken as a new directory (the link replaced).
TEST(AcceleratorCheckpoints, SaveStateIntoALinkToADirectorySavesWhereItLeads) {
  testing::ScratchDirectory directory;
  Training training;
  training.train(2);
  const fs::path target = directory.path() / "disk" / "run";
  fs::create_directories(target);
  const fs::path link = directory.path() / "checkpoint";
  fs::create_directory_symlink(target, link);
  EXPECT_EQ(training.accelerator.save_state(link), link);
  EXPECT_EQ(fs::symlink_status(link).type(), fs::file_type::symlink);
  EXPECT_TRUE(fs::exists(target / "manifest.json"));
  training.train(1);
  training.accelerator.save_state(link);  // replaces the checkpoint it leads to
  EXPECT_EQ(fs::symlink_status(link).type(), fs::file_type::symlink);
  EXPECT_FALSE(fs::exists(directory.path() / "disk" / ".run.staging"));
  const std::vector<Tensor> parameters = clones(training.model->parameters());
  training.train(2);
  training.accelerator.load_state(link);
  expect_equal(training.model->parameters(), parameters);
  // A link to nothing, or to a file, is refused naming both ends.
  const fs::path dangling = directory.path() / "dangling", file = directory.path() / "file";
  fs::create_directory_symlink(directory.path() / "missing", dangling);
  EXPECT_EMBER_ERROR(training.accelerator.save_state(dangling),
                     "'" + dangling.string() + "' is a symbolic link to '" + (directory.path() / "missing").string() +
                         "', which does not exist");
  EXPECT_EQ(fs::symlink_status(dangling).type(), fs::file_type::symlink);
  std::ofstream(file) << "precious";
  fs::create_symlink(file, directory.path() / "to_file");
  EXPECT_EMBER_ERROR(training.accelerator.save_state(directory.path() / "to_file"), "which is not a directory");
  EXPECT_EQ(read_bytes(file), "precious");
}

TEST(AcceleratorCheckpoints, AutomaticNamingKeepsTotalLimitAndLoadsTheLatest) {
  testing::ScratchDirectory directory;
  Training training({.project_dir = directory.path().string(), .automatic_checkpoint_naming = true, .total_limit = 2});
  std::vector<std::vector<Tensor>> states;
  for (int i = 0; i < 3; ++i) {
    training.train(1);
    EXPECT_EQ(training.accelerator.save_state(), directory.path() / "checkpoints" / fmt::format("checkpoint_{}", i));
    states.push_back(clones(training.model->parameters()));
  }
  EXPECT_FALSE(fs::exists(directory.path() / "checkpoints" / "checkpoint_0"));  // beyond total_limit
  EXPECT_TRUE(fs::exists(directory.path() / "checkpoints" / "checkpoint_1"));
  training.train(2);
  training.accelerator.load_state();  // the latest: checkpoint_2
  expect_equal(training.model->parameters(), states[2]);
  EXPECT_EMBER_ERROR(training.accelerator.save_state(directory.path() / "elsewhere"), "automatic_checkpoint_naming is on");
}

TEST(AcceleratorCheckpoints, RegisteredObjectsTravelWithTheCheckpoint) {
  testing::ScratchDirectory directory;
  struct Counter {
    int64_t value = 0;
    nlohmann::json state_dict() const { return {{"value", value}}; }
    void load_state_dict(const nlohmann::json& state) { value = state.at("value").get<int64_t>(); }
  } counter;
  Training training;
  auto extra = make_model(4);  // an unprepared module: its tensors travel as safetensors
  training.accelerator.register_for_checkpointing(counter);
  training.accelerator.register_for_checkpointing(*extra);
  counter.value = 41;
  const std::vector<Tensor> extra_parameters = clones(extra->parameters());
  training.accelerator.save_state(directory.path() / "state");
  EXPECT_TRUE(fs::exists(directory.path() / "state" / "custom_checkpoint_0.json"));
  EXPECT_TRUE(fs::exists(directory.path() / "state" / "custom_checkpoint_1.safetensors"));
  counter.value = 0;
  for (Tensor p : extra->parameters()) {
    NoGradGuard no_grad;
    p.fill_(0);
  }
  training.accelerator.load_state(directory.path() / "state");
  EXPECT_EQ(counter.value, 41);
  expect_equal(extra->parameters(), extra_parameters);

  // A registered object that does not fit (another width) is named with its
  // file, and the objects loaded before it are put back. Catches: loading
  // them one after the other (the counter kept the checkpoint's 41).
  Training other;
  auto wider = make_model(5);
  other.accelerator.register_for_checkpointing(counter);
  other.accelerator.register_for_checkpointing(*wider);
  counter.value = 7;
  EXPECT_EMBER_ERROR(other.accelerator.load_state(directory.path() / "state"),
                     "registered object 1 (" + (directory.path() / "state").string() +
                         "/custom_checkpoint_1.safetensors) did not load");
  EXPECT_EQ(counter.value, 7);
}

// A module's own generator (nn::Dropout(p, &generator)) was in no
// checkpoint: a resumed run's dropout drew other masks, without a word.
// Registered, it is saved by each process and restored. Mutation caught:
// load_state not setting the registered generators (other masks).
TEST(AcceleratorCheckpoints, ARegisteredGeneratorResumesItsStream) {
  testing::ScratchDirectory directory;
  Generator generator(11);
  nn::Dropout dropout(0.5, &generator);
  Training training;
  training.accelerator.register_for_checkpointing(generator);
  (void)dropout(ones({64}));
  training.accelerator.save_state(directory.path() / "state");
  const Tensor expected = dropout(ones({64}));
  (void)dropout(ones({64}));
  training.accelerator.load_state(directory.path() / "state");
  EXPECT_TRUE(testing::bitwise_equal(dropout(ones({64})), expected));
  EXPECT_EMBER_ERROR(training.accelerator.register_for_checkpointing(generator), "this generator is registered already");

  Training other;  // registers none: the checkpoint's one generator has no place
  EXPECT_EMBER_ERROR(other.accelerator.load_state(directory.path() / "state"),
                     "holds 1 registered generators, but 0 were registered for checkpointing");
}

// The model's parameters and every other byte a refused load_state must not touch.
std::vector<std::string> parameter_bytes(const nn::Module& model) {
  std::vector<std::string> bytes;
  for (const Tensor& parameter : model.parameters()) {
    const std::vector<float> values = parameter.to_vector<float>();
    bytes.emplace_back(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  return bytes;
}

// A checkpoint of AdamW + StepLR loaded where SGD or CosineAnnealingLR was
// prepared is refused, and the model's parameters are the same bytes after:
// by the recorded classes, and, in a checkpoint that records none (written
// before they were), by the state dicts' own checks, which load_state makes
// before it changes anything. A checkpoint loaded where Adam or
// ExponentialLR was, whose state dicts have the same fields as AdamW's and
// StepLR's, is refused by the classes alone.
// Mutations caught (run once each, failed as expected): checking the
// optimizers and schedulers only after the models were applied (as
// load_state did before check_objects) overwrites the parameters, then
// throws; without check_classes, Adam and ExponentialLR load silently.
TEST(AcceleratorCheckpoints, AnotherOptimizerOrSchedulerClassIsRefusedBeforeAnythingChanges) {
  testing::ScratchDirectory directory;
  const fs::path saved = [&] {
    Training training;
    training.train(3);
    return training.accelerator.save_state(directory.path() / "adamw");
  }();
  {
    TrainingWith<optim::SGD> sgd;
    EXPECT_EMBER_ERROR(sgd.accelerator.load_state(saved),
                       "holds the state of optimizers [\"AdamW\"], but [\"SGD\"] were prepared");
    TrainingWith<optim::AdamW, optim::CosineAnnealingLR> cosine;
    EXPECT_EMBER_ERROR(cosine.accelerator.load_state(saved),
                       "holds the state of schedulers [\"StepLR\"], but [\"CosineAnnealingLR\"] were prepared");
  }
  const fs::path unrecorded = directory.path() / "unrecorded";
  fs::copy(saved, unrecorded, fs::copy_options::recursive);
  nlohmann::json manifest = nlohmann::json::parse(read_bytes(unrecorded / "manifest.json"));
  manifest["metadata"].erase("classes");
  std::ofstream(unrecorded / "manifest.json") << manifest.dump();
  {
    TrainingWith<optim::SGD> sgd;
    sgd.train(1);  // other parameters than the checkpoint's
    const std::vector<std::string> before = parameter_bytes(*sgd.model);
    const double lr = sgd.optimizer.lr(0);
    EXPECT_EMBER_ERROR(sgd.accelerator.load_state(unrecorded), "SGD.load_state_dict");
    EXPECT_TRUE(parameter_bytes(*sgd.model) == before) << "the refused load changed the parameters";
    EXPECT_EQ(sgd.optimizer.lr(0), lr);
    EXPECT_EQ(sgd.scheduler.last_epoch(), 1);
  }
  {
    TrainingWith<optim::AdamW, optim::CosineAnnealingLR> cosine;
    cosine.train(1);
    const std::vector<std::string> before = parameter_bytes(*cosine.model);
    const optim::OptimizerStateDict optimizer_before = cosine.optimizer.state_dict();
    const std::vector<float> exp_avg = optimizer_before.tensors.at(0).second.to_vector<float>();
    EXPECT_EMBER_ERROR(cosine.accelerator.load_state(unrecorded), "CosineAnnealingLR.load_state_dict has no 'T_max'");
    EXPECT_TRUE(parameter_bytes(*cosine.model) == before) << "the refused load changed the parameters";
    EXPECT_EQ(cosine.optimizer.state_dict().tensors.at(0).second.to_vector<float>(), exp_avg);
    EXPECT_EQ(cosine.scheduler.last_epoch(), 1);
  }
  {
    TrainingWith<optim::Adam> adam;
    adam.train(1);
    const std::vector<std::string> before = parameter_bytes(*adam.model);
    EXPECT_EMBER_ERROR(adam.accelerator.load_state(saved),
                       "holds the state of optimizers [\"AdamW\"], but [\"Adam\"] were prepared");
    EXPECT_TRUE(parameter_bytes(*adam.model) == before) << "the refused load changed the parameters";
  }
  {
    TrainingWith<optim::AdamW, optim::ExponentialLR> exponential;
    exponential.train(1);
    const std::vector<std::string> before = parameter_bytes(*exponential.model);
    EXPECT_EMBER_ERROR(exponential.accelerator.load_state(saved),
                       "holds the state of schedulers [\"StepLR\"], but [\"ExponentialLR\"] were prepared");
    EXPECT_TRUE(parameter_bytes(*exponential.model) == before) << "the refused load changed the parameters";
    EXPECT_EQ(exponential.scheduler.last_epoch(), 1);
  }
}

// Note [Resuming mid-accumulation]: a checkpoint saved after micro-batch 1
// of 2 resumes only with the same gradient_accumulation_steps, mixed
// precision and scaler; at a step boundary any of them may change.
// Mutation caught (run once, failed as expected): without the check the
// 3-step and bf16 jobs load and go on training on the half-weighted sums.
TEST(AcceleratorCheckpoints, MidAccumulationResumeNeedsTheSavedSettings) {
  testing::ScratchDirectory directory;
  const auto save_after = [&](int batches, const std::string& name) {
    Training training({.mixed_precision = "fp16", .gradient_accumulation_steps = 2});
    training.train(batches);
    return training.accelerator.save_state(directory.path() / name);
  };
  const fs::path middle = save_after(3, "middle"), boundary = save_after(4, "boundary");
  for (const AcceleratorOptions& options :
       {AcceleratorOptions{.mixed_precision = "fp16", .gradient_accumulation_steps = 3},
        AcceleratorOptions{.mixed_precision = "bf16", .gradient_accumulation_steps = 2},
        AcceleratorOptions{.mixed_precision = "no", .gradient_accumulation_steps = 2}}) {
    Training training(options);
    const std::vector<std::string> before = parameter_bytes(*training.model);
    EXPECT_EMBER_ERROR(training.accelerator.load_state(middle),
                       "in the middle of an accumulation step (micro-batch 1 of 2) with gradient_accumulation_steps "
                       "2, mixed_precision \"fp16\", a loss scaler");
    EXPECT_TRUE(parameter_bytes(*training.model) == before) << "the refused load changed the parameters";
    training.accelerator.load_state(boundary);  // no partial gradients: fine
  }
  Training same({.mixed_precision = "fp16", .gradient_accumulation_steps = 2});
  same.accelerator.load_state(middle);
}

// A change of precision at a step boundary resumes, and the loss scale it
// does not carry over is said. Catches: an fp16 checkpoint's scale dropped,
// or an fp16 job's scale started afresh, without a word.
TEST(AcceleratorCheckpoints, ALossScaleNotCarriedOverIsSaid) {
  testing::ScratchDirectory directory;
  auto saved_by = [&](const AcceleratorOptions& options, const std::string& name) {
    Training training(options);
    training.train(2);
    return training.accelerator.save_state(directory.path() / name);
  };
  auto warnings_loading = [](const AcceleratorOptions& options, const fs::path& checkpoint) {
    Training training(options);
    ::testing::internal::CaptureStderr();
    training.accelerator.load_state(checkpoint);
    return ::testing::internal::GetCapturedStderr();
  };
  const std::string dropped = warnings_loading({.mixed_precision = "bf16"}, saved_by({.mixed_precision = "fp16"}, "fp16"));
  EXPECT_NE(dropped.find("holds an fp16 loss scale, which this job (mixed_precision bf16) does not use"),
            std::string::npos)
      << dropped;
  const std::string fresh = warnings_loading({.mixed_precision = "fp16"}, saved_by({}, "plain"));
  EXPECT_NE(fresh.find("holds no loss scale (it was saved without fp16)"), std::string::npos) << fresh;
}

// A damaged checkpoint is refused with the file and the reason, and the
// objects keep their state.
TEST(AcceleratorCheckpoints, DamagedCheckpointsAreRefusedBeforeAnythingChanges) {
  testing::ScratchDirectory directory;
  Training training;
  training.train(2);
  const fs::path saved = training.accelerator.save_state(directory.path() / "good");
  training.train(2);
  const std::vector<Tensor> parameters = clones(training.model->parameters());
  auto damaged = [&](const std::string& name, auto&& damage) {
    const fs::path copy = directory.path() / name;
    fs::copy(saved, copy, fs::copy_options::recursive);
    damage(copy);
    return copy;
  };
  const fs::path flipped = damaged("flipped", [](const fs::path& d) {
    std::fstream file(d / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-3, std::ios::end);
    file.put('\x7f');
  });
  EXPECT_EMBER_ERROR(training.accelerator.load_state(flipped), "model.safetensors");
  const fs::path truncated =
      damaged("truncated", [](const fs::path& d) { fs::resize_file(d / "optimizer.safetensors", 40); });
  EXPECT_EMBER_ERROR(training.accelerator.load_state(truncated), "optimizer.safetensors");
  const fs::path missing = damaged("missing", [](const fs::path& d) { fs::remove(d / "scheduler.json"); });
  EXPECT_EMBER_ERROR(training.accelerator.load_state(missing), "scheduler.json");
  const fs::path no_manifest = damaged("no-manifest", [](const fs::path& d) { fs::remove(d / "manifest.json"); });
  EXPECT_EMBER_ERROR(training.accelerator.load_state(no_manifest), "manifest.json");
  EXPECT_EMBER_ERROR(training.accelerator.load_state(directory.path() / "absent"), "absent");
  expect_equal(training.model->parameters(), parameters);

  // A checkpoint of another model shape, or of other objects, is refused by name.
  Training wider({}, 32);
  EXPECT_EMBER_ERROR(wider.accelerator.load_state(saved),
                     "0.weight has shape [16, 6] in the checkpoint but [32, 6] in the model");
  Accelerator fewer;
  auto same = make_model();
  fewer.prepare(same);
  EXPECT_EMBER_ERROR(fewer.load_state(saved), "holds 1 optimizers, but 0 were prepared");
  EXPECT_EMBER_ERROR(fewer.load_state(), "names no latest checkpoint");
}

// load_state reads only what the manifest lists and verifies, never through a
// link, never blocking on a FIFO; nothing changes when it refuses.
// Mutations caught: reading scheduler.json by its path (the old read_json,
// an std::ifstream) applies the unlisted file; dropping O_NOFOLLOW in
// open_beneath reads the link to the identical copy outside; dropping
// O_NONBLOCK hangs on the FIFO (ctest's timeout fails the test).
TEST(AcceleratorCheckpoints, LoadStateReadsOnlyListedFilesInsideTheCheckpoint) {
  testing::ScratchDirectory directory;
  Training training;
  training.train(2);
  const fs::path saved = training.accelerator.save_state(directory.path() / "good");
  training.train(3);
  const std::vector<Tensor> parameters = clones(training.model->parameters());
  const double lr = training.optimizer.lr(0);
  auto copy_of = [&](const std::string& name) {
    const fs::path copy = directory.path() / name;
    fs::copy(saved, copy, fs::copy_options::recursive);
    return copy;
  };
  // The manifest no longer lists scheduler.json, and a scheduler file with another state lies there.
  const fs::path unlisted = copy_of("unlisted");
  nlohmann::json manifest = nlohmann::json::parse(read_bytes(unlisted / "manifest.json"));
  manifest["files"].erase("scheduler.json");
  std::ofstream(unlisted / "manifest.json") << manifest.dump();
  nlohmann::json scheduler = nlohmann::json::parse(read_bytes(unlisted / "scheduler.json"));
  std::ofstream(unlisted / "scheduler.json") << scheduler.dump();
  EXPECT_EMBER_ERROR(training.accelerator.load_state(unlisted), "scheduler.json is not among the files its manifest lists");
  // A listed file that is a link to an identical copy outside.
  const fs::path linked = copy_of("linked");
  fs::copy_file(linked / "scheduler.json", directory.path() / "outside.json");
  fs::remove(linked / "scheduler.json");
  fs::create_symlink(directory.path() / "outside.json", linked / "scheduler.json");
  EXPECT_EMBER_ERROR(training.accelerator.load_state(linked), "scheduler.json leads through a symbolic link");
  // A FIFO in place of this process's file.
  const fs::path fifo = copy_of("fifo");
  fs::remove(fifo / "process_0.json");
  ASSERT_EQ(::mkfifo((fifo / "process_0.json").c_str(), 0600), 0);
  EXPECT_EMBER_ERROR(training.accelerator.load_state(fifo), "it is a FIFO");
  expect_equal(training.model->parameters(), parameters);
  EXPECT_EQ(training.optimizer.lr(0), lr);
  // And the good one still loads, keeping nothing of its files mapped.
  training.accelerator.load_state(saved);
  const std::string maps = read_bytes("/proc/self/maps");
  EXPECT_EQ(maps.find(fs::canonical(saved).string()), std::string::npos) << "a checkpoint file is still mapped";
}

// Mutation caught: without the lock (save_state not taking
// checkpoint::SaveLock), the second accelerator saves checkpoint_1 into the
// first's directory and moves its `latest`.
TEST(AcceleratorCheckpoints, ASecondJobSavingIntoTheSameProjectIsRefusedNamingTheFirst) {
  testing::ScratchDirectory directory;
  const AcceleratorOptions options{.project_dir = directory.path().string(), .automatic_checkpoint_naming = true};
  auto first = std::make_unique<Training>(options);
  first->train(1);
  first->accelerator.save_state();
  const fs::path checkpoints = directory.path() / "checkpoints";
  const std::string before = read_bytes(checkpoints / "latest");
  {
    Training second(options);
    second.train(1);
    EXPECT_EMBER_ERROR(second.accelerator.save_state(),
                       fmt::format("another job is saving checkpoints into '{}'", checkpoints.string()));
    EXPECT_EMBER_ERROR(second.accelerator.save_state(), fmt::format("locked by process {} on host", ::getpid()));
    EXPECT_FALSE(fs::exists(checkpoints / "checkpoint_1"));
    EXPECT_FALSE(fs::exists(checkpoints / ".checkpoint_1.staging")) << "nothing half-written";
    EXPECT_EQ(read_bytes(checkpoints / "latest"), before);
  }
  first->train(1);
  EXPECT_EQ(first->accelerator.save_state(), checkpoints / "checkpoint_1");  // the holder carries on
  first.reset();  // the lock goes with the accelerator
  Training third(options);
  EXPECT_EQ(third.accelerator.save_state(), checkpoints / "checkpoint_2");
}

// Mutation caught: set_latest's temporary opened with O_TRUNC and no
// O_EXCL | O_NOFOLLOW (the old fixed `latest.tmp`) overwrites the planted
// link's target outside the project.
TEST(AcceleratorCheckpoints, SaveStateNeverWritesThroughAPlantedTemporaryLink) {
  testing::ScratchDirectory directory;
  Training training({.project_dir = (directory.path() / "project").string(), .automatic_checkpoint_naming = true});
  const fs::path outside = directory.path() / "outside";
  std::ofstream(outside) << "precious";
  fs::create_directories(directory.path() / "project" / "checkpoints");
  fs::create_symlink(outside, directory.path() / "project" / "checkpoints" / "latest.tmp");
  detail::set_temporary_names_for_testing(
      [](const std::string& target, int attempt) { return target + (attempt == 0 ? ".tmp" : ".tmp2"); });
  training.accelerator.save_state();
  detail::set_temporary_names_for_testing(nullptr);
  EXPECT_EQ(read_bytes(outside), "precious");
  EXPECT_EQ(read_bytes(directory.path() / "project" / "checkpoints" / "latest"), "checkpoint_0");
  training.accelerator.load_state();
}

// Accelerate's documented call, save_state("my_checkpoint"), names a directory
// beside the program: its lock ".my_checkpoint.lock" has an empty parent_path(),
// which create_directories refused ("cannot create '': Invalid argument").
// Mutation caught: SaveLock::acquire creating lock_file.parent_path() as it is
// -> save_state("ckpt") throws "cannot create ''".
TEST(AcceleratorCheckpoints, SaveAndLoadStateTakeABareRelativeDirectoryName) {
  testing::ScratchDirectory directory;
  const fs::path before = fs::current_path();
  fs::current_path(directory.path());
  struct Restore {
    fs::path path;
    ~Restore() { fs::current_path(path); }
  } restore{before};
  Training training;
  training.train(2);
  const std::vector<Tensor> parameters = clones(training.model->parameters());
  EXPECT_EQ(training.accelerator.save_state("ckpt"), fs::path("ckpt"));
  EXPECT_TRUE(fs::exists(directory.path() / "ckpt" / "manifest.json"));
  EXPECT_FALSE(fs::exists(directory.path() / ".ckpt.staging"));
  training.train(2);
  training.accelerator.load_state("ckpt");
  expect_equal(training.model->parameters(), parameters);
  training.accelerator.save_state("./ckpt");  // replaces it, through the same lock
  training.accelerator.load_state("./ckpt");
  expect_equal(training.model->parameters(), parameters);
}

// A prepared shuffling loader over 11 samples (batches of 2, 6 an epoch) whose
// seed is drawn from the generator, as DataLoader({.shuffle = true}) draws it;
// `extra_draw` is one more random number before the loader is made.
struct ShufflingJob {
  Accelerator accelerator{{.seed = 7}};
  data::TensorDataset dataset{arange(0, 11, 1, {.dtype = DType::i64}), zeros({11}, {.dtype = DType::i64})};
  std::optional<data::DataLoader> loader;
  explicit ShufflingJob(bool extra_draw) {
    if (extra_draw) (void)randn({1});
    loader.emplace(dataset, data::DataLoaderOptions{.batch_size = 2, .shuffle = true});
    accelerator.prepare(*loader);
  }
  // The batches to the end of the loader's current epoch (or of the one it resumes).
  std::vector<std::vector<int64_t>> rest_of_epoch(int64_t stop_after = -1) {
    std::vector<std::vector<int64_t>> batches;
    for (auto& [inputs, targets] : *loader) {
      batches.push_back(inputs.to_vector<int64_t>());
      if (int64_t(batches.size()) == stop_after) break;
    }
    return batches;
  }
};

// The saved position is a batch of one shuffle: a resumed program that drew
// one more random number before making its loader drew another seed, and its
// resumed epoch repeated some samples and skipped others without a word.
// Mutation caught: write_process_files not saving "seed" (or load_state not
// calling set_seed) -> the resumed batches differ from the uninterrupted run's.
TEST(AcceleratorCheckpoints, AResumedLoaderRunsTheSavedShuffleAfterAnExtraRandomDraw) {
  testing::ScratchDirectory directory;
  std::vector<std::vector<int64_t>> straight;
  {
    ShufflingJob job(/*extra_draw=*/false);
    for (int epoch = 0; epoch < 2; ++epoch)
      for (std::vector<int64_t>& batch : job.rest_of_epoch()) straight.push_back(std::move(batch));
  }
  ASSERT_EQ(straight.size(), 12u);
  {
    ShufflingJob job(/*extra_draw=*/false);
    EXPECT_EQ(job.rest_of_epoch(/*stop_after=*/2).size(), 2u);
    job.accelerator.save_state(directory.path() / "state");
  }
  ShufflingJob resumed(/*extra_draw=*/true);
  resumed.accelerator.load_state(directory.path() / "state");
  std::vector<std::vector<int64_t>> rest = resumed.rest_of_epoch();
  for (std::vector<int64_t>& batch : resumed.rest_of_epoch()) rest.push_back(std::move(batch));
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(straight.begin() + 2, straight.end()));
}

// A checkpoint saved before the seeds were saved has no "seed" or
// "worker_seed" beside a position: it loads as it always did, the loader
// keeping its own seeds.
// Mutation caught: saved_seed requiring the key (field(position, "seed", ...))
// -> load_state refuses the older checkpoint ("has no 'seed'").
TEST(AcceleratorCheckpoints, ACheckpointWithoutLoaderSeedsStillLoads) {
  testing::ScratchDirectory directory;
  const fs::path saved = directory.path() / "state";
  {
    ShufflingJob job(/*extra_draw=*/false);
    job.rest_of_epoch(/*stop_after=*/2);
    job.accelerator.save_state(saved);
  }
  nlohmann::json process = nlohmann::json::parse(read_bytes(saved / "process_0.json"));
  ASSERT_TRUE(process["dataloaders"][0].contains("seed"));
  process["dataloaders"][0].erase("seed");
  ASSERT_TRUE(process["dataloaders"][0].contains("worker_seed"));
  process["dataloaders"][0].erase("worker_seed");
  std::ofstream(saved / "process_0.json") << process.dump();
  distributed::checkpoint::write_manifest(saved, 1, distributed::checkpoint::read_manifest(saved).metadata);
  ShufflingJob job(/*extra_draw=*/false);  // the same seed drawn again: the old way to resume
  job.accelerator.load_state(saved);
  EXPECT_EQ(job.loader->state(), (data::DataLoaderState{0, 2}));
  EXPECT_EQ(job.rest_of_epoch().size(), 4u);
}

// A dataset that augments: each example draws a random number, which a
// loader with workers draws under its worker seed (Note [Random numbers in
// workers]), read from the generator's state when the loader is made.
struct AugmentingJob {
  class Noisy : public data::Dataset {
   public:
    int64_t size() const override { return 8; }
    data::Example get(int64_t index) const override {
      return {rand({1}), scalar_tensor(index, {.dtype = DType::i64}), {}};
    }
  };
  Accelerator accelerator{{.seed = 7}};
  Noisy dataset;
  std::optional<data::DataLoader> loader;
  explicit AugmentingJob(bool extra_draw) {
    if (extra_draw) (void)randn({1});
    loader.emplace(dataset, data::DataLoaderOptions{.batch_size = 2, .num_workers = 2});
    accelerator.prepare(*loader);
  }
  std::vector<float> rest_of_epoch(int64_t stop_after = -1) {
    std::vector<float> values;
    int64_t batches = 0;
    for (auto& [inputs, targets] : *loader) {
      for (float value : inputs.to_vector<float>()) values.push_back(value);
      if (++batches == stop_after) break;
    }
    return values;
  }
};

// The numbers a resumed loader's workers draw are the interrupted run's: a
// program that drew one more random number before making its loader read
// another worker seed, and its resumed epochs got other augmentations.
// Mutation caught: write_process_files not saving "worker_seed" (or load_state
// not calling set_worker_seed) -> the resumed values differ from the straight run's.
TEST(AcceleratorCheckpoints, AResumedLoadersWorkersDrawTheSavedRunsNumbersAfterAnExtraRandomDraw) {
  testing::ScratchDirectory directory;
  std::vector<float> straight;
  {
    AugmentingJob job(/*extra_draw=*/false);
    for (int epoch = 0; epoch < 2; ++epoch)
      for (float value : job.rest_of_epoch()) straight.push_back(value);
  }
  ASSERT_EQ(straight.size(), 16u);
  {
    AugmentingJob job(/*extra_draw=*/false);
    EXPECT_EQ(job.rest_of_epoch(/*stop_after=*/1).size(), 2u);
    job.accelerator.save_state(directory.path() / "state");
  }
  AugmentingJob resumed(/*extra_draw=*/true);
  resumed.accelerator.load_state(directory.path() / "state");
  std::vector<float> rest = resumed.rest_of_epoch();
  for (float value : resumed.rest_of_epoch()) rest.push_back(value);
  EXPECT_EQ(rest, std::vector<float>(straight.begin() + 2, straight.end()));
}

// JSON has no NaN or infinity: nlohmann wrote a registered object's inf as
// null, the save succeeded, and the value was lost (the resume then failed,
// or a lenient load_state_dict read null). Mutation caught: write_json
// without the check -> save_state succeeds.
TEST(AcceleratorCheckpoints, ANonFiniteNumberInJsonStateIsRefusedAtTheSave) {
  testing::ScratchDirectory directory;
  struct Best {
    double loss = INFINITY;
    nlohmann::json state_dict() const { return {{"history", {1.5, loss}}}; }
    void load_state_dict(const nlohmann::json& state) { loss = state.at("history").at(1).get<double>(); }
  } best;
  Accelerator accelerator;
  accelerator.register_for_checkpointing(best);
  EXPECT_EMBER_ERROR(accelerator.save_state(directory.path() / "state"),
                     "save_state: custom_checkpoint_0.json would hold the number inf at '/history/1', which JSON "
                     "cannot hold");
  EXPECT_FALSE(fs::exists(directory.path() / "state"));
  best.loss = 0.25;
  accelerator.save_state(directory.path() / "state");
  best.loss = 1;
  accelerator.load_state(directory.path() / "state");
  EXPECT_EQ(best.loss, 0.25);
}

// Model m > 0's parameters are "model_<m>.<name>" in checkpoints, so model
// 0's submodule "model_1" met model 1's own weight: with SGD the optimizer
// state of one overwrote the other's at the save and the load failed; with
// Adam the save failed naming a tensor twice. Now the save says which two.
// Mutation caught: the check_qualified_names_unique call removed from
// saved_state -> "the name 'state.model_1.weight.exp_avg' is given twice".
TEST(AcceleratorCheckpoints, ParametersOfTwoModelsWithOneCheckpointNameAreRefused) {
  testing::ScratchDirectory directory;
  struct Outer : nn::Module {
    Outer() { inner = register_module("model_1", nn::Linear(3, 3)); }
    Tensor forward(const Tensor& x) override { return (*inner)(x); }
    std::shared_ptr<nn::Linear> inner;
  };
  Accelerator accelerator;
  std::shared_ptr<nn::Module> a = std::make_shared<Outer>(), b = std::make_shared<nn::Linear>(3, 3);
  std::vector<Tensor> parameters = a->parameters();
  for (const Tensor& parameter : b->parameters()) parameters.push_back(parameter);
  optim::Adam optimizer(parameters, {.lr = 0.1});
  accelerator.prepare(a, b, optimizer);
  accelerator.backward(sum((*b)((*a)(ones({1, 3})))));
  optimizer.step();
  EXPECT_EMBER_ERROR(accelerator.save_state(directory.path() / "state"),
                     "save_state: parameter 'model_1.weight' of prepared model 0 and parameter 'weight' of prepared "
                     "model 1 are both 'model_1.weight' in checkpoints");
}

TEST(AcceleratorCheckpoints, SaveModelWritesShardsThatLoadStrictlyIntoAFreshModel) {
  testing::ScratchDirectory directory;
  Accelerator accelerator({.mixed_precision = "bf16"});
  auto model = make_model(64);
  accelerator.prepare(model);
  accelerator.save_model(*model, directory.path() / "sharded", "2KB");
  EXPECT_TRUE(fs::exists(directory.path() / "sharded" / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(directory.path() / "sharded" / "model-00001-of-00002.safetensors"));
  accelerator.save_model(*model, directory.path() / "whole");
  EXPECT_TRUE(fs::exists(directory.path() / "whole" / "model.safetensors"));
  for (const char* layout : {"sharded", "whole"}) {
    manual_seed(99);
    auto fresh = std::make_shared<nn::Sequential>(nn::Linear(6, 64), nn::ReLU(), nn::Linear(64, 3));
    nn::load_sharded(*fresh, directory.path() / layout, /*strict=*/true);
    expect_equal(fresh->parameters(), model->parameters());
  }
  EXPECT_EMBER_ERROR(accelerator.save_model(*model, directory.path() / "bad", "ten gigabytes"), "ten gigabytes");
}

}  // namespace
}  // namespace ember
