// distributed/environment.h: each job engine's variables read into one
// DistributedEnv, the precedence between engines (Note [Job engines]), Slurm's
// host lists and tasks per node, the derived port, and every partial or
// conflicting environment refused with what was found and what is missing.
// Most cases read a map (read_distributed_env(lookup)); one reads the real
// environment, set and restored by the test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "core/error.h"
#include "distributed/environment.h"

namespace ember::distributed {
namespace {

using Variables = std::map<std::string, std::string>;

DistributedEnv read(const Variables& variables) {
  return read_distributed_env([&](const char* name) -> const char* {
    auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

// The error's text, or "" when there is none.
std::string error_of(const Variables& variables) {
  try {
    read(variables);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string source_of(const DistributedEnv& env, const std::string& field) {
  for (const auto& [name, source] : env.sources)
    if (name == field) return source;
  return "";
}

// --- Each engine ----------------------------------------------------------------

TEST(Environment, NothingIsASingleProcess) {
  const DistributedEnv env = read({});
  EXPECT_EQ(env.engine, JobEngine::none);
  EXPECT_FALSE(env.launched);
  EXPECT_EQ(env.world_size, 1);
}

TEST(Environment, EmberLaunchIsToldByItsJobId) {
  const DistributedEnv env = read({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                   {"GROUP_RANK", "0"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
                                   {"EMBER_JOB_ID", "abc"}, {"EMBER_STORE_TOKEN", "t"}, {"EMBER_STORE_HOSTED", "1"}});
  EXPECT_EQ(env.engine, JobEngine::ember_launch);
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.token, "t");
  EXPECT_TRUE(env.store_hosted);
  EXPECT_EQ(source_of(env, "rank"), "RANK");
}

TEST(Environment, TorchrunIsToldByTorchElasticVariables) {
  const DistributedEnv env = read({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                   {"GROUP_RANK", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"},
                                   {"TORCHELASTIC_RUN_ID", "none"}, {"TORCHELASTIC_RESTART_COUNT", "0"}});
  EXPECT_EQ(env.engine, JobEngine::torchrun);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.local_rank, 1);
}

// Note [Workers under torchrun]: where the agent serves its own store on
// MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True, torchrun's static
// rendezvous), ember's goes beside it, and the start-up line says so and
// that the agent's store has no authentication; with --standalone (False)
// MASTER_PORT is rank 0's.
// Catches: ember's rank 0 binding MASTER_PORT under the agent ("Address
// already in use"), or the others meeting the agent's store.
TEST(Environment, TorchrunAgentStoreKeepsMasterPortAndEmberGoesBesideIt) {
  const Variables torchrun = {{"RANK", "0"},          {"WORLD_SIZE", "2"},           {"LOCAL_RANK", "0"},
                              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "none"}};
  Variables agent = torchrun;
  agent["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  DistributedEnv env = read(agent);
  EXPECT_EQ(env.master_port, 29501);
  EXPECT_TRUE(contains(source_of(env, "master_port"),
                       "MASTER_PORT + 1, beside torchrun's agent store on MASTER_PORT=29500 (PyTorch's, which has no "
                       "authentication"))
      << source_of(env, "master_port");
  agent["EMBER_STORE_PORT"] = "41000";
  env = read(agent);
  EXPECT_EQ(env.master_port, 41000);
  EXPECT_TRUE(contains(source_of(env, "master_port"), "EMBER_STORE_PORT, beside torchrun's agent store"));
  agent["EMBER_STORE_PORT"] = "29500";
  EXPECT_TRUE(contains(error_of(agent), "EMBER_STORE_PORT=29500 is torchrun's MASTER_PORT")) << error_of(agent);
  agent.erase("EMBER_STORE_PORT");
  agent["MASTER_PORT"] = "65535";
  EXPECT_TRUE(contains(error_of(agent), "MASTER_PORT + 1, which does not exist")) << error_of(agent);

  Variables standalone = torchrun;
  standalone["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  env = read(standalone);
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(source_of(env, "master_port"), "MASTER_PORT");
}

// The Kubernetes PyTorchJob contract: one process per pod, no LOCAL_RANK.
// Catches: defaulting LOCAL_RANK to RANK (every pod would pick GPU RANK).
TEST(Environment, PlainVariablesAreOneProcessPerMachine) {
  const DistributedEnv env =
      read({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "job-master-0"}, {"MASTER_PORT", "23456"}});
  EXPECT_EQ(env.engine, JobEngine::plain);
  EXPECT_TRUE(env.launched);
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(source_of(env, "local_rank"), "default: 0");
  EXPECT_EQ(env.master_addr, "job-master-0");
}

TEST(Environment, SlurmTaskOfAStep) {
  const DistributedEnv env = read({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                                   {"SLURM_NODEID", "2"}, {"SLURM_TASKS_PER_NODE", "3(x2),2"},
                                   {"SLURM_JOB_NODELIST", "node[01-03,07],gpu-a[1-2]"}, {"SLURM_JOB_ID", "123456"}});
  EXPECT_EQ(env.engine, JobEngine::slurm);
  EXPECT_TRUE(env.launched);
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);  // node 2 of "3(x2),2"
  EXPECT_EQ(env.node_rank, 2);
  EXPECT_EQ(env.master_addr, "node01");
  EXPECT_EQ(env.master_port, slurm_port(123456, 0));
  EXPECT_EQ(source_of(env, "master_addr"), "first host of SLURM_JOB_NODELIST");
  EXPECT_EQ(source_of(env, "master_port"), "derived from SLURM_JOB_ID=123456");
}

// Catches: SLURM_NTASKS_PER_NODE ignored, MASTER_ADDR/MASTER_PORT losing to the host list and job id.
TEST(Environment, SlurmTakesExportedMasterAndTasksPerNode) {
  const DistributedEnv env = read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"},
                                   {"SLURM_NODEID", "0"}, {"SLURM_NTASKS_PER_NODE", "2"},
                                   {"SLURM_TASKS_PER_NODE", "4"}, {"SLURM_STEP_NODELIST", "a[1-2]"},
                                   {"SLURM_JOB_NODELIST", "b[1-2]"}, {"MASTER_ADDR", "10.1.1.1"},
                                   {"MASTER_PORT", "4000"}, {"SLURM_JOB_ID", "7"}});
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "10.1.1.1");
  EXPECT_EQ(env.master_port, 4000);
}

// The step's node list, where task 0 runs, beats the allocation's.
TEST(Environment, SlurmStepNodeListBeatsTheJobs) {
  const DistributedEnv env = read({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                                   {"SLURM_NODEID", "1"}, {"SLURM_STEP_NODELIST", "c[5-6]"},
                                   {"SLURM_JOB_NODELIST", "c[1-8]"}, {"SLURM_JOB_ID", "42"}, {"SLURM_STEP_ID", "3"}});
  EXPECT_EQ(env.master_addr, "c5");
  EXPECT_EQ(env.master_port, slurm_port(42, 3));
}

TEST(Environment, SlurmStepOfOneTaskIsASingleProcess) {
  const DistributedEnv env = read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_ID", "9"}});
  EXPECT_EQ(env.engine, JobEngine::slurm);
  EXPECT_FALSE(env.launched);
  EXPECT_EQ(env.world_size, 1);
  // An allocation of one task, outside srun, too.
  EXPECT_FALSE(read({{"SLURM_NTASKS", "1"}, {"SLURM_JOB_ID", "9"}}).launched);
}

TEST(Environment, OpenMpi) {
  const DistributedEnv env = read({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                   {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(env.engine, JobEngine::open_mpi);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "n1");
}

// On one host the store can only be on this one: MASTER_ADDR may be left out, not MASTER_PORT.
TEST(Environment, MpiOnOneHostNeedsOnlyAPort) {
  const DistributedEnv env = read({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                   {"MASTER_PORT", "29500"}});
  EXPECT_EQ(env.master_addr, "127.0.0.1");
}

TEST(Environment, MpichAndIntelMpi) {
  const DistributedEnv env = read({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"},
                                   {"MPI_LOCALNRANKS", "1"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(env.engine, JobEngine::mpich);
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 3);
  EXPECT_EQ(env.local_world_size, 1);
}

TEST(Environment, Mvapich) {
  const DistributedEnv env = read({{"MV2_COMM_WORLD_RANK", "1"}, {"MV2_COMM_WORLD_SIZE", "2"},
                                   {"MV2_COMM_WORLD_LOCAL_RANK", "1"}, {"MV2_COMM_WORLD_LOCAL_SIZE", "2"},
                                   {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(env.engine, JobEngine::mvapich);  // MVAPICH's own names beat the PMI ones it may also set
  EXPECT_EQ(env.local_rank, 1);
}

// --- Precedence (Note [Job engines]) ---------------------------------------------

// ember launch (or torchrun) inside a Slurm allocation: SLURM_* describe the
// allocation, RANK/WORLD_SIZE the processes really started.
// Catches: Slurm checked before RANK (this would read rank 0 of 16).
TEST(Environment, LauncherVariablesBeatSlurms) {
  const DistributedEnv env =
      read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_PORT", "5000"}, {"EMBER_JOB_ID", "x"},
            {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}, {"SLURM_JOB_NODELIST", "n[1-4]"}, {"SLURM_JOB_ID", "1"}});
  EXPECT_EQ(env.engine, JobEngine::ember_launch);
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
}

// mpirun inside an sbatch script: the batch step's SLURM_PROCID=0 is
// inherited by every rank; OMPI_* tell them apart.
TEST(Environment, MpiVariablesBeatSlurms) {
  const DistributedEnv env =
      read({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
            {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "5"}});
  EXPECT_EQ(env.engine, JobEngine::open_mpi);
  EXPECT_EQ(env.rank, 1);
}

// --- Partial or conflicting information -------------------------------------------

void expect_error(const Variables& variables, std::initializer_list<std::string> parts) {
  const std::string error = error_of(variables);
  EXPECT_FALSE(error.empty()) << "no error";
  for (const std::string& part : parts) EXPECT_TRUE(contains(error, part)) << "expected '" << part << "' in: " << error;
}

TEST(Environment, PartialOrConflictingInformationIsAnError) {
  // Catches: a task outside srun running as a job of one.
  expect_error({{"SLURM_NTASKS", "4"}}, {"found SLURM_NTASKS=4 but not SLURM_PROCID", "srun -n 4"});
  expect_error({{"SLURM_PROCID", "1"}}, {"found SLURM_PROCID=1 but not SLURM_NTASKS"});
  expect_error({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}, {"SLURM_PROCID=4 is out of range [0, 3]"});
  expect_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "3"}},
               {"not SLURM_LOCALID"});
  expect_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_JOB_ID", "3"}},
               {"has no store address", "SLURM_NTASKS=2", "export MASTER_ADDR"});
  expect_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_JOB_NODELIST", "n1"}},
               {"has no store port", "SLURM_JOB_ID"});
  expect_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "3"},
                {"SLURM_TASKS_PER_NODE", "1(x2)"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
               {"SLURM_TASKS_PER_NODE='1(x2)' names 2 node(s), but SLURM_NODEID=3"});
  // Catches: WORLD_SIZE alone read as a single process.
  expect_error({{"WORLD_SIZE", "2"}}, {"RANK and WORLD_SIZE must be set together (RANK is missing; found WORLD_SIZE=2"});
  expect_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}},
               {"RANK=2 is out of range [0, 1] for WORLD_SIZE=2"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}}, {"MASTER_PORT is not set"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}, {"MASTER_ADDR", ""}},
               {"MASTER_ADDR is set but empty"});
  expect_error({{"LOCAL_RANK", "0"}}, {"found LOCAL_RANK=0 but neither RANK nor WORLD_SIZE"});
  expect_error({{"TORCHELASTIC_RUN_ID", "x"}}, {"found TORCHELASTIC_RUN_ID=x (torchrun's) but neither RANK"});
  // Catches: an MPI rank without its size read as a single process.
  expect_error({{"OMPI_COMM_WORLD_RANK", "1"}}, {"found OMPI_COMM_WORLD_RANK=1 but not OMPI_COMM_WORLD_SIZE"});
  expect_error({{"PMI_SIZE", "2"}}, {"found PMI_SIZE=2 but not PMI_RANK"});
  expect_error({{"MV2_COMM_WORLD_RANK", "2"}, {"MV2_COMM_WORLD_SIZE", "2"}},
               {"MV2_COMM_WORLD_RANK=2 is out of range [0, 1]"});
  expect_error({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}},
               {"but not OMPI_COMM_WORLD_LOCAL_SIZE"});
  // MPI names no store: the error says what to export and how.
  expect_error({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_PORT", "1"}},
               {"Open MPI gives no store address", "no MASTER_ADDR", "-x MASTER_ADDR="});
  expect_error({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
               {"Open MPI gives no store port", "-x MASTER_PORT="});
  expect_error({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "1"},
                {"MASTER_PORT", "1"}},
               {"MPICH or Intel MPI gives no store address", "-genv MASTER_ADDR"});
}

// Layouts no launcher makes (variables left from another job or set by
// hand), and the layouts real launchers make beside them. Catches: each
// impossible one taken, the processes then disagreeing about the job's shape
// (a local world of 4 in a job of 2; GROUP_RANK 7 in a job of two processes;
// rank 2 as the first process of node 0; a Slurm task whose local id exceeds
// its rank), and the allocation's SLURM_NTASKS_PER_NODE taken for a smaller
// step's (4 tasks on a node of a step of 2).
TEST(Environment, ImpossibleLayoutsAreErrors) {
  const Variables base = {{"WORLD_SIZE", "4"}, {"MASTER_PORT", "1234"}};
  auto with = [&](Variables extra) {
    Variables all = base;
    for (const auto& [name, value] : extra) all[name] = value;
    return all;
  };
  // torch.distributed.launch of PyTorch 1.8 and older sets no LOCAL_WORLD_SIZE: 2 nodes of 2.
  EXPECT_EQ(read(with({{"RANK", "2"}, {"LOCAL_RANK", "0"}})).local_rank, 0);
  EXPECT_EQ(read(with({{"RANK", "3"}, {"LOCAL_RANK", "1"}})).local_rank, 1);
  expect_error(with({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}}),
               {"LOCAL_RANK=1 of LOCAL_WORLD_SIZE=4 cannot be RANK=1 of WORLD_SIZE=2"});
  expect_error(with({{"RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"}}), {"LOCAL_RANK=3 is out of range"});
  expect_error(with({{"RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}),
               {"LOCAL_RANK=1 of LOCAL_WORLD_SIZE=2 cannot be RANK=0 of WORLD_SIZE=4"});
  expect_error(with({{"RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}),
               {"this node's processes would be ranks 3 to 4"});
  expect_error(with({{"RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"GROUP_RANK", "7"}}),
               {"GROUP_RANK=7 cannot hold RANK=1 as LOCAL_RANK=1"});
  expect_error(with({{"RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"GROUP_RANK", "0"}}),
               {"GROUP_RANK=0 cannot hold RANK=2 as LOCAL_RANK=0"});
  // What torchrun makes, heterogeneous nodes included, passes.
  EXPECT_EQ(read(with({{"RANK", "3"}, {"LOCAL_WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"GROUP_RANK", "2"}})).node_rank, 2);
  EXPECT_EQ(read(with({{"RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"GROUP_RANK", "1"}})).local_rank, 0);
  expect_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "3"}, {"SLURM_NTASKS_PER_NODE", "4"},
                {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
               {"SLURM_LOCALID=3 is out of range for 2 task(s) on this node"});
  // srun -n 2 inside sbatch --ntasks-per-node=4: the step's count, not the allocation's.
  const Variables step = {{"SLURM_PROCID", "1"},           {"SLURM_NTASKS", "2"},
                          {"SLURM_LOCALID", "1"},          {"SLURM_NTASKS_PER_NODE", "4"},
                          {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"MASTER_ADDR", "h"},
                          {"MASTER_PORT", "1"}};
  EXPECT_EQ(read(step).local_world_size, 2);
  Variables inherited = step;
  inherited.erase("SLURM_STEP_TASKS_PER_NODE");
  EXPECT_EQ(read(inherited).local_world_size, 2);
  expect_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "2"},
                {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
               {"Slurm task 0 of 2 (SLURM_PROCID, SLURM_NTASKS) cannot be local task 1 (SLURM_LOCALID)"});
}

// Catches: parse_env_seconds truncating a positive timeout under a
// millisecond to 0 ms, which init_process_group then refused as "timeout
// must be positive, got 0 ms", naming no variable.
TEST(Environment, TimeoutUnderAMillisecondIsRefusedNamingTheVariable) {
  const Variables base = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1234"}};
  Variables tiny = base;
  tiny["EMBER_TIMEOUT"] = "0.0004";
  EXPECT_TRUE(contains(error_of(tiny), "EMBER_TIMEOUT='0.0004' is under a millisecond")) << error_of(tiny);
  Variables shortest = base;
  shortest["EMBER_TIMEOUT"] = "0.001";
  EXPECT_EQ(read(shortest).timeout, std::chrono::milliseconds(1));
}

TEST(Environment, DescribeNamesTheEngineAndTheSources) {
  const DistributedEnv env = read({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"},
                                   {"SLURM_NODEID", "0"}, {"SLURM_TASKS_PER_NODE", "2"},
                                   {"SLURM_JOB_NODELIST", "localhost"}, {"SLURM_JOB_ID", "1234"}});
  const std::string text = describe(env);
  EXPECT_TRUE(contains(text, fmt::format("Slurm: rank 1 of 2, local rank 1 of 2, node 0, store localhost:{}",
                                         slurm_port(1234, 0))))
      << text;
  EXPECT_TRUE(contains(text, "rank: SLURM_PROCID")) << text;
  EXPECT_TRUE(contains(text, "master_port: derived from SLURM_JOB_ID=1234")) << text;
  EXPECT_EQ(describe(read({})), "no job engine detected: a single process");
}

TEST(Environment, StoreTokenAdvicePerEngine) {
  EXPECT_TRUE(contains(store_token_advice(JobEngine::slurm), "in the batch script before srun"));
  EXPECT_TRUE(contains(store_token_advice(JobEngine::open_mpi), "mpirun -x EMBER_STORE_TOKEN"));
  EXPECT_TRUE(contains(store_token_advice(JobEngine::mpich), "-genvlist EMBER_STORE_TOKEN"));
  EXPECT_TRUE(contains(store_token_advice(JobEngine::plain), "secretKeyRef"));
  EXPECT_TRUE(contains(store_token_advice(JobEngine::ember_launch), "ember launch makes one"));
}

// The real environment, through std::getenv: set here, restored after.
class ProcessEnvironment : public ::testing::Test {
 protected:
  static constexpr const char* kNames[] = {"RANK", "WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR", "EMBER_JOB_ID",
                                           "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"};
  void SetUp() override {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) setenv(name.c_str(), value->c_str(), 1);
      else unsetenv(name.c_str());
    }
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(ProcessEnvironment, ReadsGetenv) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_PORT", "4567", 1);
  const DistributedEnv env = read_distributed_env();
  EXPECT_EQ(env.engine, JobEngine::plain);
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.master_port, 4567);
}

// --- Slurm's compressed lists -------------------------------------------------------

TEST(SlurmHostList, Expands) {
  using Hosts = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_hostlist("node[01-03,07],gpu-a[1-2]"),
            (Hosts{"node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2"}));
  EXPECT_EQ(expand_slurm_hostlist("localhost"), Hosts{"localhost"});
  EXPECT_EQ(expand_slurm_hostlist("a,b,c"), (Hosts{"a", "b", "c"}));
  // Zero padding is the lower bound's width, across a change in digit count.
  EXPECT_EQ(expand_slurm_hostlist("n[098-101]"), (Hosts{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_slurm_hostlist("n[9-10]"), (Hosts{"n9", "n10"}));
  // Several bracket groups multiply, the last varying fastest; text may follow a bracket.
  EXPECT_EQ(expand_slurm_hostlist("rack[1-2]-n[1-2].ib"),
            (Hosts{"rack1-n1.ib", "rack1-n2.ib", "rack2-n1.ib", "rack2-n2.ib"}));
  EXPECT_EQ(expand_slurm_hostlist("[1-2]x"), (Hosts{"1x", "2x"}));
}

TEST(SlurmHostList, FirstHost) {
  EXPECT_EQ(first_slurm_host("node[01-03,07],gpu-a[1-2]"), "node01");
  EXPECT_EQ(first_slurm_host("rack[3,1]-n[08-09]-x"), "rack3-n08-x");
  EXPECT_EQ(first_slurm_host("c5,c[1-2]"), "c5");
  // Without expanding: a million names are no cost.
  EXPECT_EQ(first_slurm_host("big[0000000-0999999]"), "big0000000");
}

TEST(SlurmHostList, MalformedListsAreNamed) {
  for (const char* text : {"", "n[1-3", "n1-3]", "n[3-1]", "n[a-b]", "n[]", "a,,b", "n[1-[2]]", "a b", "n[1,]"}) {
    try {
      expand_slurm_hostlist(text, "SLURM_JOB_NODELIST");
      ADD_FAILURE() << "no error for '" << text << "'";
    } catch (const Error& error) {
      EXPECT_TRUE(contains(error.what(), fmt::format("SLURM_JOB_NODELIST='{}' is not a Slurm host list", text)))
          << error.what();
    }
  }
  EXPECT_THROW(expand_slurm_hostlist("n[1-200001]"), Error);  // past the limit
}

TEST(SlurmTasksPerNode, Expands) {
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_THROW(expand_slurm_tasks_per_node("2(x3"), Error);
  EXPECT_THROW(expand_slurm_tasks_per_node("x"), Error);
}

// The documented formula, its range, and that concurrent steps of one job differ.
TEST(SlurmPort, FormulaAndRange) {
  EXPECT_EQ(slurm_port(123456, 0), 15000 + 456 * 15);
  EXPECT_EQ(slurm_port(123456, 2), 15000 + 456 * 15 + 2);
  EXPECT_NE(slurm_port(77, 0), slurm_port(77, 1));
  for (uint64_t job : {0ull, 999ull, 1000ull, 18446744073709551615ull})
    for (uint64_t step : {0ull, 14ull, 15ull}) {
      EXPECT_GE(slurm_port(job, step), 15000);
      EXPECT_LE(slurm_port(job, step), 29999);
    }
}

}  // namespace
}  // namespace ember::distributed
