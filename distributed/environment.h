// Where a process learns its place in a job: the one reader of the job
// engines' environment variables (ember launch's and torchrun's RANK,
// WORLD_SIZE, ...; Slurm's SLURM_*; Open MPI's OMPI_COMM_WORLD_*; MPICH's and
// Intel MPI's PMI_*; MVAPICH's MV2_*) and of ember's EMBER_*, mapped onto one
// DistributedEnv (Note [Job engines] in distributed/README.md). What cannot be
// read, or contradicts itself, is an ember::Error saying what was found and
// what is missing: never a silent one-process job.
// Used by init_process_group (distributed/init.cpp), the Accelerator and
// `ember env`. Tests: tests/distributed/test_environment.cpp,
// tests/distributed/test_cluster_environment.cpp (real processes),
// tests/distributed/test_collectives.cpp, tests/distributed/test_accelerator_options.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distributed/store/tcp_store.h"

namespace ember::distributed {

// Who started this process (Note [Job engines]).
enum class JobEngine {
  none,          // nothing: a plain single process
  ember_launch,  // ember launch (RANK, ... and EMBER_JOB_ID)
  torchrun,      // torchrun / torch elastic (RANK, ... and TORCHELASTIC_*)
  plain,         // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT alone (Kubernetes PyTorchJob)
  slurm,         // srun (SLURM_PROCID, SLURM_NTASKS, ...)
  open_mpi,      // mpirun of Open MPI (OMPI_COMM_WORLD_*)
  mpich,         // mpiexec of MPICH or Intel MPI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, ...)
  mvapich,       // mpirun_rsh / mpiexec of MVAPICH (MV2_COMM_WORLD_*)
};
// "ember launch", "torchrun", "Slurm", "Open MPI", ...
std::string_view to_string(JobEngine engine);

// What the launcher (or the engine, or the user) put in the environment.
struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;         // GROUP_RANK, SLURM_NODEID
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string token;          // EMBER_STORE_TOKEN
  bool store_hosted = false;  // EMBER_STORE_HOSTED=1: the launcher serves the store; else rank 0 does
  milliseconds timeout = kDefaultTimeout;  // EMBER_TIMEOUT (seconds)
  bool debug = false;         // EMBER_DISTRIBUTED_DEBUG
  std::string gloo_address;   // EMBER_GLOO_ADDR: the address this rank advertises to Gloo peers
  // EMBER_BACKEND (`ember launch --backend`): the default group's backend when
  // the code leaves it to "auto"; "" when unset (Note [Choosing a backend]).
  std::string backend;
  // Whether this process is one of a job of several, or one started as such
  // (RANK and WORLD_SIZE set, even WORLD_SIZE=1); false: a plain single process.
  bool launched = false;
  JobEngine engine = JobEngine::none;
  // Where each value came from, in the order read: {"rank", "SLURM_PROCID"},
  // {"master_port", "derived from SLURM_JOB_ID=1234"}, {"local_rank", "default"}, ...
  std::vector<std::pair<std::string, std::string>> sources;
};

// Looks a variable up: nullptr when it is not set.
using EnvironmentLookup = std::function<const char*(const char* name)>;

// Reads the process's environment (std::getenv).
DistributedEnv read_distributed_env();
// Reads the variables `lookup` gives: the same rules, for tests and tools.
DistributedEnv read_distributed_env(const EnvironmentLookup& lookup);

// One line for a start-up message and `ember env`: "Slurm: rank 0 of 4, local
// rank 0 of 2, node 0, store node01:18510 (rank: SLURM_PROCID; world_size:
// SLURM_NTASKS; ...; master_addr: first host of SLURM_JOB_NODELIST;
// master_port: derived from SLURM_JOB_ID=1234)".
std::string describe(const DistributedEnv& env);

// How to give every process of a job run by `engine` the same
// EMBER_STORE_TOKEN (Note [Store tokens per engine]).
std::string store_token_advice(JobEngine engine);

// Slurm's compressed host lists (SLURM_JOB_NODELIST): "node[01-03,07],gpu-a[1-2]"
// -> node01 node02 node03 node07 gpu-a1 gpu-a2. Ranges keep the lower bound's
// width ("[08-10]" -> 08 09 10); several bracket groups in one name multiply
// ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2); text may follow a bracket. Errors
// name `variable` and the text. More than `limit` (at least 2) names is an error.
std::vector<std::string> expand_slurm_hostlist(std::string_view text, const char* variable = "host list",
                                               size_t limit = 100000);
// The first name of a host list, without expanding the rest (checked all the same).
std::string first_slurm_host(std::string_view text, const char* variable = "host list");
// SLURM_TASKS_PER_NODE: "2(x3),1" -> 2 2 2 1.
std::vector<int> expand_slurm_tasks_per_node(std::string_view text, const char* variable = "SLURM_TASKS_PER_NODE");
// The store's port when only Slurm's variables name the job (Note [Job engines]):
// 15000 + (job id % 1000) * 15 + (step id % 15), in [15000, 29999].
int slurm_port(uint64_t job_id, uint64_t step_id);

// A decimal integer in [low, high].
int64_t parse_env_integer(const char* name, const char* text, int64_t low, int64_t high);
// 1/true or 0/false; anything else, empty included, is an error.
bool parse_env_flag(const char* name, const char* text);
// The longest timeout (EMBER_TIMEOUT, `ember launch --timeout`) the workers
// accept, in seconds (excluded): ~31 years, far inside every clock's range.
// One constant, so that the launcher refuses what its workers would.
inline constexpr double kMaxTimeoutSeconds = 1e9;

// The process-group backends a program, EMBER_BACKEND or `ember launch
// --backend` may name (Note [Choosing a backend]), and them in words for messages.
bool is_backend_name(std::string_view name);
inline constexpr const char* kBackendNames = "auto, shm, gloo, reference or nccl";

// A positive number of seconds (fractions allowed), below kMaxTimeoutSeconds.
milliseconds parse_env_seconds(const char* name, const char* text);

}  // namespace ember::distributed
