// The process-wide registry of process groups (process_group.h):
// init_process_group reads the environment the launcher set, connects the
// store (serving it from rank 0 when the launcher does not) and makes the
// default group that DDP and the Accelerator use; new_group makes subgroups;
// destroy_process_group tears it all down so that init may run again.
// Tests: tests/distributed/test_collectives.cpp, tests/distributed/test_reference_collectives.cpp
// (backend "reference"), tests/cuda/test_cuda_nccl.cpp.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <set>

#include "core/cuda_backend.h"
#include "core/error.h"
#include "core/profiler/process_profile.h"
#include "core/version.h"
#include "distributed/backends/nccl_backend.h"
#include "distributed/backends/reference/reference_collectives.h"
#include "distributed/environment.h"
#include "distributed/process_group.h"
#include "distributed/profiler_clock.h"

namespace ember::distributed {

namespace {
// backends/nccl_backend.cpp, in the CUDA plugin (loaded by the first call);
// nullptr in a build without CUDA.
const NcclEntryPoints* nccl_entry_points() {
  if (!built_with_cuda()) return nullptr;
  using EntryPoints = const NcclEntryPoints* (*)();
  return reinterpret_cast<EntryPoints>(cuda::backend_symbol("ember_nccl_entry_points"))();
}
}  // namespace

bool nccl_built() { return built_with_cuda(); }

std::unique_ptr<Backend> make_nccl_backend(const BackendContext& context, Device device) {
  const NcclEntryPoints* entry = nccl_entry_points();
  EMBER_CHECK(entry != nullptr, "backend nccl needs ember built with CUDA (this build has EMBER_CUDA off)");
  return entry->make_backend(context, device);
}

std::string nccl_library_description() {
  const NcclEntryPoints* entry = nccl_entry_points();
  return entry ? entry->library_description() : "";
}

namespace {

// The backends of a group (Note [Choosing a backend]): `host` for CPU
// tensors ("" for none), nccl for CUDA tensors or not; for host "reference",
// the backend whose send/recv it runs on ("shm" or "gloo").
struct BackendChoice {
  std::string host;
  bool nccl = false;
  std::string transport;
};

// --- The registry -----------------------------------------------------------

// Everything init_process_group made. One per process, guarded by `mutex`;
// deliberately never destroyed, so a process that exits without
// destroy_process_group does not tear groups down during static destruction
// (their threads and sockets simply end with the process).
struct Registry {
  std::mutex mutex;
  DistributedEnv env;
  StoreOptions store_options;  // for each new group's own connection
  ProcessGroupOptions group_options;
  // When this process serves the store. Rank 0's server for a launched job
  // outlives destroy_process_group (Note [Store lifetime across re-init]).
  std::unique_ptr<TcpStoreServer> server;
  std::string server_address;  // "host:port:token" it was started for
  std::shared_ptr<TcpStore> store;         // the default group's connection
  std::shared_ptr<ProcessGroup> world;
  BackendChoice world_backends;  // what new_group keeps unless told otherwise
  std::vector<std::shared_ptr<ProcessGroup>> groups;  // from new_group, members only
  std::vector<std::shared_ptr<ProcessGroup>> closed;  // by destroy_process_group, kept alive
  // Counts groups across init/destroy cycles, so a re-initialised job never
  // reads the keys of an earlier incarnation from a store that outlived it.
  int next_group_id = 0;
};

Registry& registry() {
  static Registry* instance = new Registry;
  return *instance;
}

// Note [Choosing a backend]: ranks that share a host (and node rank) can use
// shared memory; any other mix needs TCP. Every rank's "hostname/node rank",
// by group rank, exchanged through the store.
std::vector<std::string> host_identities(const BackendContext& context, int node_rank) {
  char host[HOST_NAME_MAX + 1] = {};
  EMBER_CHECK(gethostname(host, sizeof(host) - 1) == 0, "init_process_group: gethostname failed");
  const std::string identity = fmt::format("{}/{}", host, node_rank);
  if (context.size == 1) return {identity};
  const std::string key = context.store_prefix + "host/";
  context.store->set(key + std::to_string(context.rank), identity);
  std::vector<std::string> identities;
  for (int r = 0; r < context.size; ++r) {
    if (r == context.rank) {
      identities.push_back(identity);
      continue;
    }
    const Bytes other = context.store->get(key + std::to_string(r), context.timeout);
    identities.emplace_back(other.begin(), other.end());
  }
  return identities;
}

bool on_one_host(const std::vector<std::string>& identities) {
  return std::all_of(identities.begin(), identities.end(), [&](const std::string& id) { return id == identities[0]; });
}

std::string choose_host_backend(const BackendContext& context, int node_rank) {
  return on_one_host(host_identities(context, node_rank)) ? "shm" : "gloo";
}

// `source` says where the name came from ("init_process_group", "EMBER_BACKEND", ...).
void check_backend_name(const std::string& source, const std::string& name) {
  EMBER_CHECK(is_backend_name(name), "{}: unknown backend '{}' (use {})", source, name, kBackendNames);
  if (name != "nccl") return;
  EMBER_CHECK(nccl_built(), "{}: backend nccl needs ember built with CUDA (this build has EMBER_CUDA off)", source);
  EMBER_CHECK(cuda::is_available(),
              "{}: backend nccl needs a CUDA GPU, and this machine has none (use gloo, shm or auto)", source);
}

// Shared memory reaches only the ranks of one host: asked for across hosts
// (or node ranks), it would wait for attachments that can never come.
void check_shm_reaches_every_rank(const BackendContext& context, int node_rank) {
  const std::vector<std::string> identities = host_identities(context, node_rank);
  if (on_one_host(identities)) return;
  std::vector<std::string> where;
  for (size_t r = 0; r < identities.size(); ++r)  // global ranks: a subgroup's own numbers mean little to the user
    where.push_back(fmt::format("rank {}: {}", context.global_ranks.at(r), identities[r]));
  EMBER_CHECK(false,
              "backend shm needs every rank of the group on one host (hostname/node rank), but they are on several "
              "({}): use gloo, or auto, which picks gloo across hosts",
              fmt::join(where, ", "));
}

// "auto": shared memory or TCP for CPU tensors, and nccl for CUDA tensors
// when this build has it (a CPU-only job never makes a communicator: the
// device backend is made at the first operation on a CUDA tensor).
BackendChoice choose_backends(const std::string& option, const BackendContext& context, int node_rank) {
  if (option == "nccl") return {.host = "", .nccl = true, .transport = ""};
  // The reference collectives run on whichever transport "auto" would pick.
  if (option == "reference")
    return {.host = "reference", .nccl = false, .transport = choose_host_backend(context, node_rank)};
  if (option == "shm") check_shm_reaches_every_rank(context, node_rank);
  if (option != "auto") return {.host = option, .nccl = false, .transport = ""};
  return {.host = choose_host_backend(context, node_rank), .nccl = nccl_built(), .transport = ""};
}

// Note [Choosing a backend]: EMBER_BACKEND (`ember launch --backend`) takes
// the place of "auto"; a backend named in the code and another one in the
// environment is an error naming both, never a silent pick.
std::string resolve_backend(const std::string& in_code, const DistributedEnv& env) {
  if (env.backend.empty() || env.backend == "auto" || env.backend == in_code) return in_code;
  EMBER_CHECK(in_code == "auto",
              "init_process_group: the program asks for backend '{}' but EMBER_BACKEND (ember launch --backend) is "
              "'{}': drop one of them, or make them agree",
              in_code, env.backend);
  return env.backend;
}

std::shared_ptr<ProcessGroup> make_group(const BackendContext& context, const BackendChoice& backends,
                                         const ProcessGroupOptions& options) {
  std::unique_ptr<Backend> host;
  if (backends.host == "gloo") host = make_gloo_backend(context);
  if (backends.host == "shm") host = make_shm_backend(context);
  if (backends.host == "reference")
    host = reference::make_reference_backend(context, [&] {
      return backends.transport == "gloo" ? make_gloo_backend(context) : make_shm_backend(context);
    });
  EMBER_ASSERT(host != nullptr || backends.host.empty(), "backend {} was not validated", backends.host);
  DeviceBackendFactory device;
  if (backends.nccl) device = {.name = "nccl", .make = make_nccl_backend};
  return std::make_shared<ProcessGroup>(context, std::move(host), options, std::move(device));
}

// What a job of several processes needs beyond its ranks, said on every rank
// (each reads its own environment): the token (Note [Store tokens per
// engine]).
void check_store_settings(DistributedEnv& env) {
  if (!env.launched) return;
  if (!env.token.empty()) return;
  // A job of one shares its store with nobody: any fresh secret does.
  if (env.world_size == 1) {
    env.token = make_job_token();
    return;
  }
  EMBER_CHECK(false,
              "init_process_group: EMBER_STORE_TOKEN is not set (rank {} of {}, started by {}): every process of the "
              "job needs the same secret to reach the store. {}",
              env.rank, env.world_size, to_string(env.engine), store_token_advice(env.engine));
}

}  // namespace

ProcessGroup& init_process_group(InitOptions options) {
  Registry& state = registry();
  std::lock_guard lock(state.mutex);
  EMBER_CHECK(state.world == nullptr,
              "init_process_group: already initialised (rank {} of {}, {} backend); call destroy_process_group first",
              state.world->rank(), state.world->size(), state.world->backend_name());
  check_backend_name("init_process_group", options.backend);
  DistributedEnv env = read_distributed_env();
  options.backend = resolve_backend(options.backend, env);
  if (options.backend == env.backend) check_backend_name("init_process_group (EMBER_BACKEND)", options.backend);
  check_store_settings(env);
  // A longer timeout (milliseconds::max() for "never") is kMaxTimeoutSeconds,
  // which every deadline computed from it fits in.
  const milliseconds timeout = std::min(options.timeout.value_or(env.timeout),
                                        milliseconds(int64_t(kMaxTimeoutSeconds) * 1000));
  EMBER_CHECK(timeout.count() > 0, "init_process_group: timeout must be positive, got {} ms", timeout.count());

  StoreOptions store_options;
  store_options.timeout = timeout;
  store_options.rank = env.rank;
  std::unique_ptr<TcpStoreServer> private_server;
  if (!env.launched) {
    // A group of one still gets a store (backends and callers may use it):
    // a private one on a free loopback port, with a fresh token.
    store_options.token = make_job_token();
    private_server = std::make_unique<TcpStoreServer>(
        StoreServerOptions{.host = "127.0.0.1", .port = 0, .token = store_options.token, .backlog = 128});
    store_options.host = "127.0.0.1";
    store_options.port = private_server->port();
  } else {
    store_options.host = env.master_addr;
    store_options.port = env.master_port;
    store_options.token = env.token;
    const std::string address = fmt::format("{}:{}:{}", env.master_addr, env.master_port, env.token);
    if (env.rank == 0 && !env.store_hosted && (!state.server || state.server_address != address)) {
      state.server.reset();
      try {
        state.server = std::make_unique<TcpStoreServer>(
            StoreServerOptions{.host = env.master_addr, .port = env.master_port, .token = env.token, .backlog = 128});
      } catch (const Error& error) {
        // The description says where the address and port came from (torchrun's MASTER_PORT + 1, Slurm's job id, ...).
        EMBER_CHECK(false, "init_process_group: rank 0 cannot serve the job's store ({}): {}", describe(env),
                    error.what());
      }
      state.server_address = address;
    }
    if (state.server && store_options.port == 0) store_options.port = state.server->port();
  }
  auto store = std::make_shared<TcpStore>(store_options);

  BackendContext context{.rank = env.rank,
                         .size = env.world_size,
                         .global_ranks = {},
                         .store = store,
                         .store_prefix = fmt::format("pg/{}/", state.next_group_id++),
                         .timeout = timeout,
                         .advertise_address = env.gloo_address};
  for (int r = 0; r < env.world_size; ++r) context.global_ranks.push_back(r);
  const BackendChoice backends = choose_backends(options.backend, context, env.node_rank);
  const ProcessGroupOptions group_options{.timeout = timeout, .debug = options.debug || env.debug};
  auto world = make_group(context, backends, group_options);
  // The profiler names this process's trace after its rank, and every rank
  // measures its clock against rank 0's (Note [One clock for every rank]).
  profiler::set_process_rank(env.rank);
  profiler::start_environment_profile();
  if (env.world_size > 1) measure_clock_offset(*store, context.store_prefix, env.rank, env.world_size, timeout);

  state.env = env;
  state.store_options = store_options;
  state.group_options = group_options;
  if (private_server) state.server = std::move(private_server);
  state.store = std::move(store);
  state.world = std::move(world);
  state.world_backends = backends;
  return *state.world;
}

bool is_initialized() {
  Registry& state = registry();
  std::lock_guard lock(state.mutex);
  return state.world != nullptr;
}

ProcessGroup& default_group() {
  Registry& state = registry();
  std::lock_guard lock(state.mutex);
  EMBER_CHECK(state.world != nullptr, "default_group: no default process group; call init_process_group first");
  return *state.world;
}

std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks, const std::string& backend) {
  Registry& state = registry();
  std::lock_guard lock(state.mutex);
  EMBER_CHECK(state.world != nullptr, "new_group: call init_process_group first");
  if (!backend.empty()) check_backend_name("new_group", backend);
  const int world_size = state.world->size();
  EMBER_CHECK(!ranks.empty(), "new_group: the list of ranks is empty");
  std::set<int> seen;
  for (int r : ranks) {
    EMBER_CHECK(r >= 0 && r < world_size, "new_group: rank {} is out of range for world size {} (ranks {})", r,
                world_size, fmt::join(ranks, ", "));
    EMBER_CHECK(seen.insert(r).second, "new_group: rank {} is listed twice (ranks {})", r, fmt::join(ranks, ", "));
  }
  // Group ranks follow the global ones, as torch.distributed.new_group sorts
  // its list: ranks passing the same set in different orders each took group
  // rank 0, and the group waited out its timeout naming neither list.
  std::sort(ranks.begin(), ranks.end());
  // Every rank takes the id, members or not, so ids agree across the job.
  const int id = state.next_group_id++;
  const int me = state.world->rank();
  int group_rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == me) group_rank = int(i);
  if (group_rank < 0) return nullptr;

  // Its own store connection: a blocking call of one group's thread then
  // never waits behind another group's (TcpStore serialises its calls).
  BackendContext context{.rank = group_rank,
                         .size = int(ranks.size()),
                         .global_ranks = ranks,
                         .store = std::make_shared<TcpStore>(state.store_options),
                         .store_prefix = fmt::format("pg/{}/", id),
                         .timeout = state.group_options.timeout,
                         .advertise_address = state.env.gloo_address};
  const BackendChoice backends =
      backend.empty() ? state.world_backends : choose_backends(backend, context, state.env.node_rank);
  auto group = make_group(context, backends, state.group_options);
  state.groups.push_back(group);
  return group;
}

void destroy_process_group() {
  Registry& state = registry();
  std::lock_guard lock(state.mutex);
  if (state.world == nullptr) return;
  for (auto& group : state.groups) group->flush();
  state.world->flush();
  const std::string prefix = state.world->store_prefix();
  const int rank = state.world->rank(), size = state.world->size();
  const milliseconds timeout = state.group_options.timeout;
  const bool failed = state.world->failed();
  // Groups go first: a backend's teardown may still use the store. Closed
  // groups stay alive (an ended job's few bytes each), so that a
  // `ProcessGroup&` from init_process_group or default_group kept past here
  // refuses its next call instead of dangling.
  for (auto& group : state.groups) group->close();
  state.world->close();
  state.closed.insert(state.closed.end(), state.groups.begin(), state.groups.end());
  state.closed.push_back(std::move(state.world));
  state.groups.clear();

  // Note [Store lifetime across re-init]: when rank 0 serves the store, it
  // waits here until every rank is done with it, and keeps serving it (for a
  // later init_process_group) until the process ends. After a failure some
  // rank may be dead and never say so: rank 0 does not wait then.
  if (size > 1 && state.env.launched && !state.env.store_hosted) {
    std::vector<std::string> done;
    for (int r = 0; r < size; ++r) done.push_back(fmt::format("{}shutdown/{}", prefix, r));
    try {
      state.store->set(done[size_t(rank)], "1");
      if (rank == 0 && !failed) state.store->wait(done, timeout);
    } catch (const std::exception&) {
      // A rank that died never says it is done; teardown goes on regardless.
    }
  }
  state.store.reset();
  if (!state.env.launched) state.server.reset();  // the private store of a group of one
}

}  // namespace ember::distributed
