// Reading a process's place in its job from the environment of whichever
// engine started it (see environment.h; Note [Job engines] in
// distributed/README.md).
#include "distributed/environment.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/ember_variables.h"
#include "core/error.h"

namespace ember::distributed {
namespace {

// torch elastic's agent sets these for its workers, besides RANK, WORLD_SIZE, ...
constexpr const char* kTorchElasticVariables[] = {"TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                                                  "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
                                                  "TORCHELASTIC_ERROR_FILE"};

// The variables of one reading.
class Variables {
 public:
  explicit Variables(const EnvironmentLookup& lookup) : lookup_(lookup) {}
  const char* get(const char* name) const { return lookup_(name); }
  bool has(const char* name) const { return lookup_(name) != nullptr; }
  // "A=1, B=2" for those of `names` that are set ("none of A, B" when none is), for errors.
  std::string found(std::initializer_list<const char*> names) const {
    std::vector<std::string> set;
    for (const char* name : names)
      if (const char* value = get(name)) set.push_back(fmt::format("{}={}", name, value));
    if (set.empty()) return fmt::format("none of {}", fmt::join(names, ", "));
    return fmt::format("{}", fmt::join(set, ", "));
  }

 private:
  const EnvironmentLookup& lookup_;
};

void note(DistributedEnv& env, const char* field, std::string source) {
  env.sources.emplace_back(field, std::move(source));
}

int integer(const Variables& variables, const char* name, int64_t low, int64_t high = INT_MAX) {
  return int(parse_env_integer(name, variables.get(name), low, high));
}

const char* torch_elastic_variable(const Variables& variables) {
  for (const char* name : kTorchElasticVariables)
    if (variables.has(name)) return name;
  return nullptr;
}

// Note [Job engines]: the variables that describe the processes really
// started (RANK, ...; then MPI's) win over Slurm's, which describe the
// allocation or step they run in.
JobEngine detect_engine(const Variables& variables) {
  if (variables.has("RANK") || variables.has("WORLD_SIZE")) {
    if (variables.has("EMBER_JOB_ID")) return JobEngine::ember_launch;
    if (torch_elastic_variable(variables)) return JobEngine::torchrun;
    return JobEngine::plain;
  }
  if (variables.has("OMPI_COMM_WORLD_RANK") || variables.has("OMPI_COMM_WORLD_SIZE")) return JobEngine::open_mpi;
  if (variables.has("MV2_COMM_WORLD_RANK") || variables.has("MV2_COMM_WORLD_SIZE")) return JobEngine::mvapich;
  if (variables.has("PMI_RANK") || variables.has("PMI_SIZE")) return JobEngine::mpich;
  if (variables.has("SLURM_PROCID") || variables.has("SLURM_NTASKS")) return JobEngine::slurm;
  return JobEngine::none;
}

// MASTER_ADDR and MASTER_PORT when they are set; whether each was.
bool read_master_addr(const Variables& variables, DistributedEnv& env) {
  const char* value = variables.get("MASTER_ADDR");
  if (value == nullptr) return false;
  EMBER_CHECK(*value != '\0', "MASTER_ADDR is set but empty");
  env.master_addr = value;
  note(env, "master_addr", "MASTER_ADDR");
  return true;
}

bool read_master_port(const Variables& variables, DistributedEnv& env) {
  if (!variables.has("MASTER_PORT")) return false;
  env.master_port = integer(variables, "MASTER_PORT", 1, 65535);
  note(env, "master_port", "MASTER_PORT");
  return true;
}

// Note [Workers under torchrun]: where torchrun's agent serves its own
// store (PyTorch's protocol, without authentication) on MASTER_PORT, rank 0
// serves ember's beside it, on EMBER_STORE_PORT or else MASTER_PORT + 1.
void place_store_beside_torchrun(const Variables& variables, DistributedEnv& env) {
  const char* agent_store = variables.get("TORCHELASTIC_USE_AGENT_STORE");
  if (agent_store == nullptr || std::string_view(agent_store) != "True") return;  // MASTER_PORT is free for rank 0
  const int agent_port = env.master_port;
  std::string source;
  if (variables.has("EMBER_STORE_PORT")) {
    env.master_port = integer(variables, "EMBER_STORE_PORT", 1, 65535);
    source = "EMBER_STORE_PORT";
  } else {
    EMBER_CHECK(agent_port < 65535,
                "torchrun's agent serves its store on MASTER_PORT={}, and ember's goes beside it on MASTER_PORT + 1, "
                "which does not exist; give torchrun a lower --master_port, or set EMBER_STORE_PORT",
                agent_port);
    env.master_port = agent_port + 1;
    source = "MASTER_PORT + 1";
  }
  EMBER_CHECK(env.master_port != agent_port,
              "EMBER_STORE_PORT={} is torchrun's MASTER_PORT, where its agent serves its own store; choose another",
              env.master_port);
  for (auto& [field, from] : env.sources)
    if (field == "master_port")
      from = fmt::format("{}, beside torchrun's agent store on MASTER_PORT={} (PyTorch's, which has no "
                         "authentication; ember's checks EMBER_STORE_TOKEN)",
                         source, agent_port);
}

// ember launch, torchrun and the plain contract: torchrun's names.
void read_torch_style(const Variables& variables, DistributedEnv& env) {
  const std::string_view engine = to_string(env.engine);
  EMBER_CHECK(variables.has("RANK") && variables.has("WORLD_SIZE"),
              "RANK and WORLD_SIZE must be set together ({} is missing; found {}, read as {}): every process of "
              "the job needs both",
              variables.has("RANK") ? "WORLD_SIZE" : "RANK", variables.found({"RANK", "WORLD_SIZE"}), engine);
  env.launched = true;
  env.world_size = integer(variables, "WORLD_SIZE", 1);
  env.rank = integer(variables, "RANK", 0);
  EMBER_CHECK(env.rank < env.world_size, "RANK={} is out of range [0, {}] for WORLD_SIZE={} ({})", env.rank,
              env.world_size - 1, env.world_size, engine);
  note(env, "rank", "RANK");
  note(env, "world_size", "WORLD_SIZE");
  // Without LOCAL_RANK a process is alone on its machine: a Kubernetes
  // PyTorchJob starts one per pod, and torchrun (which starts several) sets it.
  const bool local_rank_given = variables.has("LOCAL_RANK");
  env.local_world_size = variables.has("LOCAL_WORLD_SIZE") ? integer(variables, "LOCAL_WORLD_SIZE", 1)
                                                         : (local_rank_given ? env.world_size : 1);
  note(env, "local_world_size",
       variables.has("LOCAL_WORLD_SIZE") ? "LOCAL_WORLD_SIZE" : (local_rank_given ? "default: WORLD_SIZE" : "default: 1"));
  env.local_rank = local_rank_given ? integer(variables, "LOCAL_RANK", 0, env.local_world_size - 1) : 0;
  note(env, "local_rank", local_rank_given ? "LOCAL_RANK" : "default: 0");
  if (variables.has("GROUP_RANK")) {
    env.node_rank = integer(variables, "GROUP_RANK", 0);
    note(env, "node_rank", "GROUP_RANK");
  }
  // torchrun numbers each node's processes contiguously, nodes in GROUP_RANK
  // order, each node at least one: what breaks that is a variable inherited
  // from another job or set by hand, and the processes would disagree about
  // the job's shape.
  // (A LOCAL_WORLD_SIZE not given is WORLD_SIZE, which is not this node's
  // count: torch.distributed.launch of PyTorch 1.8 and older sets none.)
  const int64_t first_on_node = env.rank - env.local_rank;
  EMBER_CHECK(env.local_rank <= env.rank &&
                  (!variables.has("LOCAL_WORLD_SIZE") ||
                   (env.local_world_size <= env.world_size && first_on_node + env.local_world_size <= env.world_size)),
              "LOCAL_RANK={} of LOCAL_WORLD_SIZE={} cannot be RANK={} of WORLD_SIZE={}: this node's processes would be "
              "ranks {} to {} ({}); check for variables left from another job",
              env.local_rank, env.local_world_size, env.rank, env.world_size, first_on_node,
              first_on_node + env.local_world_size - 1, engine);
  EMBER_CHECK(!variables.has("GROUP_RANK") ||
                  (env.node_rank <= first_on_node && (env.node_rank == 0) == (first_on_node == 0)),
              "GROUP_RANK={} cannot hold RANK={} as LOCAL_RANK={}: node 0 holds rank 0, and every node before this "
              "one at least one rank ({}); check for variables left from another job",
              env.node_rank, env.rank, env.local_rank, engine);
  if (!read_master_addr(variables, env)) note(env, "master_addr", "default: 127.0.0.1");
  const bool port = read_master_port(variables, env);
  EMBER_CHECK(port || env.world_size == 1,
              "MASTER_PORT is not set (RANK={}, WORLD_SIZE={}, {}): the ranks need the store's port", env.rank,
              env.world_size, engine);
  if (env.engine == JobEngine::torchrun && port) place_store_beside_torchrun(variables, env);
}

// srun's variables (Note [Job engines]).
void read_slurm(const Variables& variables, DistributedEnv& env) {
  if (!variables.has("SLURM_PROCID")) {
    const int tasks = integer(variables, "SLURM_NTASKS", 1);
    EMBER_CHECK(tasks == 1,
                "found SLURM_NTASKS={} but not SLURM_PROCID: this process is not one task of a Slurm job step, and "
                "running it alone would train as a job of one. Start every task with srun (srun -n {} program), "
                "or start ember launch inside the allocation",
                tasks, tasks);
    note(env, "world_size", "SLURM_NTASKS");
    return;  // one task: a plain single process
  }
  EMBER_CHECK(variables.has("SLURM_NTASKS"),
              "found SLURM_PROCID={} but not SLURM_NTASKS: cannot tell how many tasks the Slurm job step has "
              "(srun sets both)",
              variables.get("SLURM_PROCID"));
  env.world_size = integer(variables, "SLURM_NTASKS", 1);
  env.rank = integer(variables, "SLURM_PROCID", 0);
  EMBER_CHECK(env.rank < env.world_size, "SLURM_PROCID={} is out of range [0, {}] for SLURM_NTASKS={}", env.rank,
              env.world_size - 1, env.world_size);
  note(env, "rank", "SLURM_PROCID");
  note(env, "world_size", "SLURM_NTASKS");
  if (env.world_size == 1) return;  // a step of one task: a plain single process
  env.launched = true;

  if (variables.has("SLURM_NODEID")) {
    env.node_rank = integer(variables, "SLURM_NODEID", 0);
    note(env, "node_rank", "SLURM_NODEID");
  }
  // The step's own count first (srun sets it); SLURM_NTASKS_PER_NODE may be
  // the allocation's (sbatch --ntasks-per-node=4), inherited by a smaller
  // step (srun -n 2), so it counts for at most the step's tasks.
  const auto per_node_of = [&](const char* variable) {
    const char* per_node = variables.get(variable);
    const std::vector<int> counts = expand_slurm_tasks_per_node(per_node);
    EMBER_CHECK(size_t(env.node_rank) < counts.size(), "{}='{}' names {} node(s), but SLURM_NODEID={}", variable,
                per_node, counts.size(), env.node_rank);
    env.local_world_size = counts[size_t(env.node_rank)];
    note(env, "local_world_size", variable);
  };
  if (variables.has("SLURM_STEP_TASKS_PER_NODE")) {
    per_node_of("SLURM_STEP_TASKS_PER_NODE");
  } else if (variables.has("SLURM_NTASKS_PER_NODE")) {
    env.local_world_size = std::min(integer(variables, "SLURM_NTASKS_PER_NODE", 1), env.world_size);
    note(env, "local_world_size", "SLURM_NTASKS_PER_NODE, at most SLURM_NTASKS");
  } else if (variables.has("SLURM_TASKS_PER_NODE")) {
    per_node_of("SLURM_TASKS_PER_NODE");
  } else {
    env.local_world_size = env.world_size;
    note(env, "local_world_size", "default: SLURM_NTASKS (no SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE)");
  }
  EMBER_CHECK(variables.has("SLURM_LOCALID"), "found SLURM_PROCID={} and SLURM_NTASKS={} but not SLURM_LOCALID (srun sets all three)",
              env.rank, env.world_size);
  env.local_rank = integer(variables, "SLURM_LOCALID", 0);
  EMBER_CHECK(env.local_rank < env.local_world_size, "SLURM_LOCALID={} is out of range for {} task(s) on this node",
              env.local_rank, env.local_world_size);
  // srun gives a node's tasks local ids in task order: no task's local id
  // exceeds its rank.
  EMBER_CHECK(env.local_rank <= env.rank,
              "Slurm task {} of {} (SLURM_PROCID, SLURM_NTASKS) cannot be local task {} (SLURM_LOCALID) on its node: "
              "check for variables left from the allocation or another step",
              env.rank, env.world_size, env.local_rank);
  note(env, "local_rank", "SLURM_LOCALID");

  // Task 0 runs on the step's first node, so that is where its store is.
  if (!read_master_addr(variables, env)) {
    const char* list_variable = nullptr;
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
      if (!list_variable && variables.has(name)) list_variable = name;
    EMBER_CHECK(list_variable != nullptr,
                "Slurm task {} of {} has no store address: found {} but no MASTER_ADDR and no host list "
                "(SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST); export MASTER_ADDR (the host of task 0) "
                "in the batch script",
                env.rank, env.world_size, variables.found({"SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"}));
    env.master_addr = first_slurm_host(variables.get(list_variable), list_variable);
    note(env, "master_addr", fmt::format("first host of {}", list_variable));
  }
  if (!read_master_port(variables, env)) {
    EMBER_CHECK(variables.has("SLURM_JOB_ID"),
                "Slurm task {} of {} has no store port: neither MASTER_PORT nor SLURM_JOB_ID (to derive one from) "
                "is set; export MASTER_PORT in the batch script",
                env.rank, env.world_size);
    const char* step_name = variables.has("SLURM_STEP_ID") ? "SLURM_STEP_ID" : "SLURM_STEPID";
    const uint64_t job = uint64_t(parse_env_integer("SLURM_JOB_ID", variables.get("SLURM_JOB_ID"), 0, INT64_MAX));
    const uint64_t step =
        variables.has(step_name) ? uint64_t(parse_env_integer(step_name, variables.get(step_name), 0, INT64_MAX)) : 0;
    env.master_port = slurm_port(job, step);
    note(env, "master_port", fmt::format("derived from SLURM_JOB_ID={}{}", job,
                                         variables.has(step_name) ? fmt::format(" and {}={}", step_name, step) : ""));
  }
}

// One MPI implementation's names, and how its launcher passes a variable on.
struct MpiNames {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  const char* export_hint;  // how to give every process MASTER_ADDR and MASTER_PORT
};

MpiNames mpi_names(JobEngine engine) {
  switch (engine) {
    case JobEngine::open_mpi:
      return {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
              "OMPI_COMM_WORLD_LOCAL_SIZE",
              "export them in the mpirun line: mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=<free port> "
              "-x EMBER_STORE_TOKEN ..."};
    case JobEngine::mvapich:
      return {"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE",
              "export them to every process: mpiexec -genv MASTER_ADDR <host of rank 0> -genv MASTER_PORT <free port> "
              "-genvlist EMBER_STORE_TOKEN ..."};
    default:
      return {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
              "export them to every process: mpiexec -genv MASTER_ADDR <host of rank 0> -genv MASTER_PORT <free port> "
              "-genvlist EMBER_STORE_TOKEN ..."};
  }
}

void read_mpi(const Variables& variables, DistributedEnv& env) {
  const MpiNames names = mpi_names(env.engine);
  const std::string_view engine = to_string(env.engine);
  EMBER_CHECK(variables.has(names.rank) && variables.has(names.size),
              "found {} but not {}: {} sets both for every process",
              variables.found({names.rank, names.size}), variables.has(names.rank) ? names.size : names.rank, engine);
  env.world_size = integer(variables, names.size, 1);
  env.rank = integer(variables, names.rank, 0);
  EMBER_CHECK(env.rank < env.world_size, "{}={} is out of range [0, {}] for {}={}", names.rank, env.rank,
              env.world_size - 1, names.size, env.world_size);
  note(env, "rank", names.rank);
  note(env, "world_size", names.size);
  if (env.world_size == 1) return;  // one process: a plain single process
  env.launched = true;

  EMBER_CHECK(variables.has(names.local_rank) == variables.has(names.local_size), "found {} but not {}",
              variables.found({names.local_rank, names.local_size}),
              variables.has(names.local_rank) ? names.local_size : names.local_rank);
  if (variables.has(names.local_size)) {
    env.local_world_size = integer(variables, names.local_size, 1);
    env.local_rank = integer(variables, names.local_rank, 0, env.local_world_size - 1);
    note(env, "local_world_size", names.local_size);
    note(env, "local_rank", names.local_rank);
  } else {
    note(env, "local_world_size", "default: 1");
    note(env, "local_rank", "default: 0");
  }
  // MPI names no store. On one host it can only be this one; otherwise the
  // user must say where rank 0 is.
  const bool one_host = env.local_world_size == env.world_size;
  if (!read_master_addr(variables, env)) {
    EMBER_CHECK(one_host,
                "{} gives no store address: found {}, {}, but no MASTER_ADDR (the host of rank 0) while the ranks "
                "span several hosts; {}",
                engine, variables.found({names.rank, names.size}), variables.found({names.local_size}),
                names.export_hint);
    note(env, "master_addr", fmt::format("default: 127.0.0.1 (every rank on this host, {}={})", names.local_size,
                                         env.local_world_size));
  }
  EMBER_CHECK(read_master_port(variables, env), "{} gives no store port: found {}, but no MASTER_PORT; {}", engine,
              variables.found({names.rank, names.size}), names.export_hint);
}

// Nothing says this is one of several processes: then nothing may say half of it.
void check_single_process(const Variables& variables) {
  if (const char* name = torch_elastic_variable(variables)) {
    EMBER_CHECK(false, "found {}={} (torchrun's) but neither RANK nor WORLD_SIZE: torchrun sets all of them", name,
                variables.get(name));
  }
  for (const char* name : {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"}) {
    EMBER_CHECK(!variables.has(name), "found {}={} but neither RANK nor WORLD_SIZE: a process of a job needs both",
                name, variables.get(name));
  }
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK"}) {
    EMBER_CHECK(!variables.has(name), "found {}={} but no world rank and size of the same MPI", name,
                variables.get(name));
  }
}

// ember's own variables, whatever the engine.
void read_ember_variables(const Variables& variables, DistributedEnv& env) {
  if (const char* value = variables.get("EMBER_STORE_TOKEN")) env.token = value;
  if (const char* value = variables.get("EMBER_STORE_HOSTED"))
    env.store_hosted = parse_env_flag("EMBER_STORE_HOSTED", value);
  if (const char* value = variables.get("EMBER_TIMEOUT")) env.timeout = parse_env_seconds("EMBER_TIMEOUT", value);
  if (const char* value = variables.get("EMBER_DISTRIBUTED_DEBUG"))
    env.debug = parse_env_flag("EMBER_DISTRIBUTED_DEBUG", value);
  if (const char* value = variables.get("EMBER_GLOO_ADDR")) env.gloo_address = value;
  if (const char* value = variables.get("EMBER_BACKEND"); value && *value) {
    EMBER_CHECK(is_backend_name(value), "EMBER_BACKEND is '{}': use {} (ember launch --backend sets it)", value,
                kBackendNames);
    env.backend = value;
  }
}

}  // namespace

bool is_backend_name(std::string_view name) {
  return name == "auto" || name == "shm" || name == "gloo" || name == "reference" || name == "nccl";
}

std::string_view to_string(JobEngine engine) {
  switch (engine) {
    case JobEngine::none: return "none";
    case JobEngine::ember_launch: return "ember launch";
    case JobEngine::torchrun: return "torchrun";
    case JobEngine::plain: return "plain environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)";
    case JobEngine::slurm: return "Slurm";
    case JobEngine::open_mpi: return "Open MPI";
    case JobEngine::mpich: return "MPICH or Intel MPI";
    case JobEngine::mvapich: return "MVAPICH";
  }
  return "unknown";
}

DistributedEnv read_distributed_env() {
  return read_distributed_env([](const char* name) -> const char* { return std::getenv(name); });
}

DistributedEnv read_distributed_env(const EnvironmentLookup& lookup) {
  const Variables variables(lookup);
  DistributedEnv env;
  env.engine = detect_engine(variables);
  switch (env.engine) {
    case JobEngine::none: check_single_process(variables); break;
    case JobEngine::ember_launch:
    case JobEngine::torchrun:
    case JobEngine::plain: read_torch_style(variables, env); break;
    case JobEngine::slurm: read_slurm(variables, env); break;
    case JobEngine::open_mpi:
    case JobEngine::mpich:
    case JobEngine::mvapich: read_mpi(variables, env); break;
  }
  read_ember_variables(variables, env);
  return env;
}

std::string describe(const DistributedEnv& env) {
  if (env.engine == JobEngine::none) return "no job engine detected: a single process";
  std::string text = fmt::format("{}: rank {} of {}", to_string(env.engine), env.rank, env.world_size);
  if (env.world_size > 1) {
    text += fmt::format(", local rank {} of {}, node {}, store {}:{}", env.local_rank, env.local_world_size,
                        env.node_rank, env.master_addr, env.master_port);
  }
  std::vector<std::string> sources;
  for (const auto& [field, source] : env.sources) sources.push_back(fmt::format("{}: {}", field, source));
  if (!sources.empty()) text += fmt::format(" ({})", fmt::join(sources, "; "));
  return text;
}

std::string store_token_advice(JobEngine engine) {
  constexpr const char* kMake = "EMBER_STORE_TOKEN=$(openssl rand -hex 32)";
  switch (engine) {
    case JobEngine::none:
    case JobEngine::ember_launch:
      return fmt::format("ember launch makes one for a single node; for --nnodes > 1 export the same {} in every "
                         "node's environment before ember launch",
                         kMake);
    case JobEngine::torchrun:
      return fmt::format("export the same {} on every node before torchrun", kMake);
    case JobEngine::plain:
      return "give every process the same one from a secret, e.g. on Kubernetes `kubectl create secret generic "
             "ember-job --from-literal=token=$(openssl rand -hex 32)` and in each replica's container `env: [{name: "
             "EMBER_STORE_TOKEN, valueFrom: {secretKeyRef: {name: ember-job, key: token}}}]`";
    case JobEngine::slurm:
      return fmt::format("export {} in the batch script before srun (srun passes the environment to every task)",
                         kMake);
    case JobEngine::open_mpi:
      return fmt::format("export {} and pass it on with mpirun -x EMBER_STORE_TOKEN (the name alone, so the value "
                         "stays off the command line)",
                         kMake);
    case JobEngine::mpich:
    case JobEngine::mvapich:
      return fmt::format("export {} and pass it on with mpiexec -genvlist EMBER_STORE_TOKEN", kMake);
  }
  return "";
}

// --- Slurm's compressed lists -------------------------------------------------

namespace {

// One name of a host list: literal text and bracket groups, each a list of
// the numbers it stands for (already padded).
using HostPattern = std::vector<std::vector<std::string>>;

// "01-03,07" -> 01 02 03 07; with `limit` 1, the first alone (the rest checked, not expanded).
std::vector<std::string> expand_bracket(std::string_view group, std::string_view text, const char* variable,
                                        size_t limit) {
  std::vector<std::string> numbers;
  auto bad = [&](std::string_view why) {
    EMBER_CHECK(false, "{}='{}' is not a Slurm host list: {} in [{}]", variable, text, why, group);
  };
  size_t start = 0;
  while (start <= group.size()) {
    const size_t end = std::min(group.find(',', start), group.size());
    const std::string_view item = group.substr(start, end - start);
    const size_t dash = item.find('-');
    const std::string_view low = item.substr(0, dash);
    const std::string_view high = dash == std::string_view::npos ? low : item.substr(dash + 1);
    auto is_number = [](std::string_view digits) {
      return !digits.empty() && digits.size() <= 18 &&
             digits.find_first_not_of("0123456789") == std::string_view::npos;
    };
    if (!is_number(low) || !is_number(high)) bad(fmt::format("'{}' is not a number or a range", item));
    const uint64_t first = std::stoull(std::string(low)), last = std::stoull(std::string(high));
    if (first > last) bad(fmt::format("the range '{}' runs backwards", item));
    if (limit == 1) {
      if (numbers.empty()) numbers.push_back(fmt::format("{:0{}}", first, low.size()));
    } else {
      if (last - first >= limit || numbers.size() + (last - first) >= limit)
        bad(fmt::format("more than {} names", limit));
      for (uint64_t number = first; number <= last; ++number)
        numbers.push_back(fmt::format("{:0{}}", number, low.size()));
    }
    start = end + 1;
  }
  return numbers;
}

// The list's entries (split at commas outside brackets), each as a pattern.
std::vector<HostPattern> parse_hostlist(std::string_view text, const char* variable, size_t limit) {
  std::vector<HostPattern> entries;
  HostPattern current;
  std::string literal;
  auto finish = [&] {
    EMBER_CHECK(!current.empty() || !literal.empty(), "{}='{}' is not a Slurm host list: an empty name", variable,
                text);
    if (!literal.empty()) current.push_back({literal});
    entries.push_back(std::move(current));
    current.clear();
    literal.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ',') {
      finish();
    } else if (c == '[') {
      const size_t close = text.find(']', i);
      EMBER_CHECK(close != std::string_view::npos, "{}='{}' is not a Slurm host list: '[' without ']'", variable, text);
      const std::string_view group = text.substr(i + 1, close - i - 1);
      EMBER_CHECK(group.find('[') == std::string_view::npos, "{}='{}' is not a Slurm host list: nested '['", variable,
                  text);
      if (!literal.empty()) current.push_back({literal});
      literal.clear();
      current.push_back(expand_bracket(group, text, variable, limit));
      i = close;
    } else {
      EMBER_CHECK(c != ']', "{}='{}' is not a Slurm host list: ']' without '['", variable, text);
      EMBER_CHECK(c > ' ' && c != 0x7f, "{}='{}' is not a Slurm host list: a space or control character", variable,
                  text);
      literal.push_back(c);
    }
  }
  finish();
  return entries;
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(std::string_view text, const char* variable, size_t limit) {
  EMBER_ASSERT(limit >= 2, "expand_slurm_hostlist: limit {} (1 means the first name alone)", limit);
  std::vector<std::string> hosts;
  for (const HostPattern& pattern : parse_hostlist(text, variable, limit)) {
    // Every combination, the last group varying fastest: r[1-2]n[1-2] -> r1n1 r1n2 r2n1 r2n2.
    std::vector<std::string> names = {""};
    for (const std::vector<std::string>& part : pattern) {
      EMBER_CHECK(names.size() * part.size() + hosts.size() <= limit,
                  "{}='{}' is not a Slurm host list: more than {} names", variable, text, limit);
      std::vector<std::string> longer;
      for (const std::string& prefix : names)
        for (const std::string& piece : part) longer.push_back(prefix + piece);
      names = std::move(longer);
    }
    hosts.insert(hosts.end(), names.begin(), names.end());
  }
  return hosts;
}

std::string first_slurm_host(std::string_view text, const char* variable) {
  const std::vector<HostPattern> entries = parse_hostlist(text, variable, /*limit=*/1);
  std::string host;
  for (const std::vector<std::string>& part : entries.front()) host += part.front();
  return host;
}

std::vector<int> expand_slurm_tasks_per_node(std::string_view text, const char* variable) {
  std::vector<int> counts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item(text.substr(start, end - start));
    const size_t open = item.find("(x");
    const std::string count = item.substr(0, open);
    int repeat = 1;
    if (open != std::string::npos) {
      EMBER_CHECK(item.back() == ')', "{}='{}': '{}' is not N or N(xM)", variable, text, item);
      const std::string times = item.substr(open + 2, item.size() - open - 3);
      repeat = int(parse_env_integer(variable, times.c_str(), 1, 100000));
    }
    const int tasks = int(parse_env_integer(variable, count.c_str(), 0, INT_MAX));
    EMBER_CHECK(counts.size() + size_t(repeat) <= 100000, "{}='{}' names more than 100000 nodes", variable, text);
    counts.insert(counts.end(), size_t(repeat), tasks);
    start = end + 1;
  }
  return counts;
}

int slurm_port(uint64_t job_id, uint64_t step_id) { return 15000 + int(job_id % 1000) * 15 + int(step_id % 15); }

// --- Single values ------------------------------------------------------------

int64_t parse_env_integer(const char* name, const char* text, int64_t low, int64_t high) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  EMBER_CHECK(*text != '\0' && *end == '\0' && errno == 0, "{}='{}' is not an integer", name, text);
  EMBER_CHECK(value >= low && value <= high, "{}={} is out of range [{}, {}]", name, value, low, high);
  return value;
}

// Empty is refused, as Accelerate's str_to_bool: read as false, an unset
// shell variable (EMBER_EVEN_BATCHES=$UNSET) turned a default-on option off.
bool parse_env_flag(const char* name, const char* text) { return parse_flag(name, text); }

milliseconds parse_env_seconds(const char* name, const char* text) {
  errno = 0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  EMBER_CHECK(*text != '\0' && *end == '\0' && errno == 0 && seconds > 0 && seconds < kMaxTimeoutSeconds,
              "{}='{}' is not a positive number of seconds below {:g}", name, text, kMaxTimeoutSeconds);
  // Timeouts are counted in whole milliseconds: a shorter one would become 0
  // and fail later, far from the variable that set it.
  EMBER_CHECK(seconds >= 0.001, "{}='{}' is under a millisecond, the shortest timeout", name, text);
  return milliseconds(int64_t(seconds * 1000));
}

}  // namespace ember::distributed
