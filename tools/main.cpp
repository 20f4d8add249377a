// The `ember` command line: every subcommand's flags, and which one runs.
// Subcommands: launch (tools/launch.cpp), which starts and supervises a
// distributed job's workers; config (tools/config_command.cpp), which writes
// the config file launch reads; env (tools/env_command.cpp), which prints what
// a bug report needs; estimate-memory (tools/estimate_memory.cpp), each
// strategy's bytes per process; trace merge (tools/trace_merge.cpp), every
// rank's profile on one timeline. Each of those files takes its options as a
// struct; the flags that fill them are all here, so CLI11 (header-only, about
// 8 s of -O3 code generation in each file that includes it) compiles once.
// Tests: tests/distributed/test_launch.cpp, tests/tools/.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "config_command.h"
#include "config_keys.h"
#include "core/error.h"
#include "env_command.h"
#include "estimate_memory.h"
#include "launch.h"
#include "output_prefixer.h"
#include "supervisor.h"
#include "trace_merge.h"

namespace ember::launch {
namespace {

// --config-file "" (typically "$CFG" with CFG unset) meant "no config file" without a word.
const CLI::Validator kNonEmptyPath(
    [](std::string& value) { return value.empty() ? std::string("an empty path (an unset variable?)") : std::string(); },
    "PATH");
// The same for the launcher's other options whose empty value read as "not given".
const CLI::Validator kNonEmptyValue(
    [](std::string& value) { return value.empty() ? std::string("an empty value (an unset variable?)") : std::string(); },
    "TEXT");

// CLI11 reads a number flag's "010" as octal 8, "0x10" as 16 and "" as 0;
// torchrun and accelerate launch (argparse's int and float) read "010" as 10
// and refuse the others. These take decimal text only, as argparse, and hand
// CLI11 the number's plain form.
std::string_view without_plus(std::string_view text) {
  return text.starts_with('+') && !text.starts_with("+-") ? text.substr(1) : text;
}
const CLI::Validator kDecimalInteger(
    [](std::string& value) {
      const std::string_view text = without_plus(value);
      long long number = 0;
      const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), number);
      if (text.empty() || error != std::errc() || stop != text.data() + text.size())
        return fmt::format("'{}' is not a decimal integer", value);
      value = std::to_string(number);
      return std::string();
    },
    "INT");
const CLI::Validator kDecimalNumber(
    [](std::string& value) {
      const std::string_view text = without_plus(value);
      double number = 0;
      const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), number);
      if (text.empty() || error != std::errc() || stop != text.data() + text.size())
        return fmt::format("'{}' is not a decimal number", value);
      value = fmt::format("{}", number);
      return std::string();
    },
    "NUMBER");

CLI::App* add_launch_command(CLI::App& app, LaunchOptions& options) {
  CLI::App* launch = app.add_subcommand("launch", "Start and supervise the workers of a distributed job on this node");
  // Accelerate's and torchrun's spellings are aliases (Note [Accelerate's and
  // torchrun's flags] in tools/README.md); flags_given holds the first name.
  launch->add_option("--nproc-per-node,--nproc_per_node", options.nproc_per_node, "Workers on this node")
      ->capture_default_str()
      ->transform(kDecimalInteger);
  launch->add_option("--num-processes,--num_processes", options.num_processes,
                     "Accelerate's: workers of ALL nodes together; each node starts num_processes / nnodes")
      ->transform(kDecimalInteger);
  launch->add_option("--nnodes,--num-machines,--num_machines", options.nnodes, "Nodes in the job (one launcher each)")
      ->capture_default_str()
      ->transform(kDecimalInteger);
  launch->add_option("--node-rank,--node_rank,--machine-rank,--machine_rank", options.node_rank,
                     "This node's index, 0 to nnodes-1; node 0 hosts the store")
      ->capture_default_str()
      ->transform(kDecimalInteger);
  launch->add_option("--master-addr,--master_addr,--main-process-ip,--main_process_ip", options.master_addr,
                     "Address of the store (node 0)")
      ->capture_default_str();
  launch->add_option("--master-port,--master_port,--main-process-port,--main_process_port", options.master_port,
                     "Port of the store; 0: a free one (single node)")
      ->capture_default_str()
      ->transform(kDecimalInteger);
  launch->add_flag("--standalone", options.standalone,
                   "torchrun's: one node, the store on a free loopback port (no --master-addr/--master-port)")
      ->disable_flag_override();
  launch->add_flag("--multi-gpu,--multi_gpu")
      ->description("Accelerate's; accepted and changes nothing: ember uses one GPU per worker when it has GPUs")
      ->disable_flag_override();
  launch->add_option("--max-restarts", options.max_restarts, "Relaunch the workers after a failure up to this often")
      ->capture_default_str()
      ->transform(kDecimalInteger);
  launch->add_option("--timeout", options.timeout_seconds,
                     "Seconds for the workers' collectives and store calls (EMBER_TIMEOUT)")
      ->capture_default_str()
      ->transform(kDecimalInteger);
  launch->add_option("--grace-period", options.grace_period_seconds,
                     "Seconds from SIGTERM to SIGKILL when stopping workers")
      ->capture_default_str()
      ->transform(kDecimalNumber);
  launch->add_option("--log-dir", options.log_dir, "Write each rank's output to DIR/rank_N.log")->check(kNonEmptyPath);
  launch->add_flag("--bind-cores", options.bind_cores,
                   "Run each local rank on its own share of the launcher's CPUs (sched_setaffinity)")
      ->disable_flag_override();
  launch->add_option("--local-addr", options.local_addr, "Address this node's workers give Gloo peers")
      ->check(kNonEmptyValue);
  launch->add_option("--profile", options.profile_dir,
                     "Profile every worker: each writes DIR/rank<r>.json and prints its table at the end "
                     "(EMBER_PROFILE; ember trace merge DIR joins them)")
      ->check(kNonEmptyPath);
  launch->add_option("--backend", options.backend,
                     "The workers' process-group backend: shm, gloo, reference, nccl or auto (EMBER_BACKEND; "
                     "init_process_group uses it where the program leaves the backend to auto, and refuses a "
                     "program that names another)")
      ->check(kNonEmptyValue);
  launch->add_option("--config-file,--config_file", options.config_file,
                     "YAML config written by ember config (or accelerate config); default: $EMBER_CONFIG_FILE, else "
                     "$XDG_CACHE_HOME/ember/default_config.yaml, else ~/.cache/ember/default_config.yaml, if it exists")
      ->check(kNonEmptyPath);
  launch->add_option_function<std::string>(
      "--mixed-precision,--mixed_precision", [&options](const std::string& value) { options.accelerator["mixed_precision"] = value; },
      "The Accelerator's mixed precision: no, fp16 or bf16 (EMBER_MIXED_PRECISION)");
  launch->add_option_function<std::string>(
      "--gradient-accumulation-steps,--gradient_accumulation_steps",
      [&options](const std::string& value) { options.accelerator["gradient_accumulation_steps"] = value; },
      "Batches per optimizer step (EMBER_GRADIENT_ACCUMULATION_STEPS)");
  // A flag takes no value: CLI11 would accept --cpu=false and skip the
  // callback, leaving the config file's use_cpu in force (argparse refuses it).
  launch
      ->add_flag_callback(
          "--cpu", [&options] { options.accelerator["use_cpu"] = "true"; },
          "Train on the CPU even with a GPU (EMBER_USE_CPU)")
      ->disable_flag_override();
  launch->add_option_function<std::string>(
      "--strategy", [&options](const std::string& value) { options.accelerator["strategy"] = value; },
      "What each process keeps of the model's state: ddp, zero1, zero2, zero3 (or fsdp), hybrid (EMBER_STRATEGY)");
  launch->parse_complete_callback([launch, &options] {
    for (const CLI::Option* option : launch->get_options()) {
      if (option->count() > 0) options.flags_given.insert(option->get_name());
    }
  });
  // Everything from the first positional on is the program's: flags after it are its own.
  launch->prefix_command();
  launch->footer(
      "Run as: ember launch [OPTIONS] -- program [args...]\n"
      "Each worker gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT\n"
      "and EMBER_STORE_TOKEN, EMBER_TIMEOUT, EMBER_JOB_ID, EMBER_RESTART_COUNT (distributed/README.md),\n"
      "and EMBER_BACKEND with --backend.\n"
      "--nnodes > 1: the same EMBER_STORE_TOKEN must be in every launcher's environment.\n"
      "The Accelerator's options reach the workers as EMBER_MIXED_PRECISION, EMBER_GRADIENT_ACCUMULATION_STEPS,\n"
      "EMBER_USE_CPU, EMBER_STRATEGY, ...: from the flags, else the config file (its deepspeed_config or\n"
      "fsdp_config section too), else the environment (tools/README.md).\n"
      "Accelerate's and torchrun's spellings are accepted too (--num_processes: all machines' workers together,\n"
      "--nproc_per_node, --main_process_port, --master_port, --standalone, ...; Note [Accelerate's and torchrun's\n"
      "flags] in tools/README.md).");
  return launch;
}

CLI::App* add_config_command(CLI::App& app, ConfigCommandOptions& options) {
  CLI::App* config = app.add_subcommand("config", "Write the config file that ember launch reads");
  config->add_option("--config-file", options.config_file,
                     "Where to write; default: $EMBER_CONFIG_FILE, else $XDG_CACHE_HOME/ember/default_config.yaml, "
                     "else ~/.cache/ember/default_config.yaml")
      ->check(kNonEmptyPath);
  config->add_flag("--show", options.show, "Print the config in force instead of writing one");
  for (const ConfigKey& key : config_keys()) {
    std::string name(key.name);
    std::string help = fmt::format("{} ({})", key.help, name);
    if (name == "use_cpu") {
      config->add_flag_callback(flag_name(name), [&options, name] { options.settings[name] = "true"; }, help)
          ->disable_flag_override();  // as launch's --cpu: no --use-cpu=false
    } else {
      config->add_option_function<std::string>(
          flag_name(name), [&options, name](const std::string& value) { options.settings[name] = value; }, help);
    }
  }
  config->footer(
      "On a terminal, without settings among the flags, ember config asks for each value.\n"
      "The file has the key names of Accelerate's default_config.yaml; ember launch's flags beat it.");
  return config;
}

CLI::App* add_env_command(CLI::App& app, EnvCommandOptions& options) {
  CLI::App* env = app.add_subcommand("env", "Print the version, build, machine and config, for bug reports");
  CLI::Option* config_file =
      env->add_option("--config-file", options.config_file, "The config file to show instead of the default one")
          ->check(kNonEmptyPath);
  // The list reads no config file: one given beside it would be ignored.
  env->add_flag("--variables", options.variables, "List every EMBER_* environment variable ember reads, and what it does")
      ->excludes(config_file);
  return env;
}

CLI::App* add_estimate_memory_command(CLI::App& app, EstimateMemoryOptions& options) {
  CLI::App* command = app.add_subcommand(
      "estimate-memory", "Print each process's bytes for parameters, gradients and optimizer state under each strategy");
  command->add_option("--params", options.params, "The model's number of parameters: 124M, 1.5B, 1000000");
  command->add_option("--gpt", options.gpt,
                      "A GPT of nn::TransformerBlocks: layers=12,d_model=768,vocab=50257,context=1024,heads=12 "
                      "[,mlp_ratio=4,bias=true,tied=true]");
  command->add_option("--model", options.model, "A .safetensors file, or a directory of them (headers only)");
  command->add_option("--num-processes", options.num_processes, "Numbers of processes, comma-separated")
      ->capture_default_str();
  command->add_option("--optimizer", options.optimizer,
                      "adamw, adam, adamw-amsgrad, adam-amsgrad, sgd, sgd-momentum, adagrad, rmsprop, "
                      "rmsprop-momentum, lion")
      ->capture_default_str();
  command->add_option("--dtype", options.dtype, "The parameters' dtype: f32, bf16, f16, f64")->capture_default_str();
  command->add_option("--mixed-precision", options.mixed_precision, "no, fp16 or bf16 (autocast adds no copies)")
      ->capture_default_str();
  command->add_option("--unit-params", options.unit_params,
                      "zero3's largest unit's parameters (default: a GPT's largest, else the whole model)");
  command->add_flag("--bytes", options.exact_bytes, "Print exact byte counts");
  return command;
}

CLI::App* add_trace_command(CLI::App& app, TraceMergeOptions& options) {
  CLI::App* trace = app.add_subcommand("trace", "Work with the profiler's traces (EMBER_PROFILE)");
  trace->require_subcommand(1);
  CLI::App* merge = trace->add_subcommand(
      "merge", "Join DIR/rank<r>.json into one Perfetto trace on rank 0's clock (a process track per rank)");
  merge->add_option("directory", options.directory, "The directory EMBER_PROFILE (or launch --profile) named")
      ->required();
  merge->add_option("-o,--output", options.output, "Where to write; default: DIR/merged.json")->check(kNonEmptyPath);
  return merge;
}

}  // namespace
}  // namespace ember::launch

namespace {

// Runs a subcommand, turning its errors into "ember <name>: message" and exit code 1.
int run_reporting_errors(const char* name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ember %s: %s\n", name, error.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else: a SIGINT sent while the launcher reads its flags
  // and config file must stop the job it then starts (supervisor.h).
  if (argc > 1 && std::string_view(argv[1]) == "launch") ember::launch::hold_stop_signals();
  // For launch, everything after the first "--" is the program and its
  // arguments, never flags of ours; CLI11 parses only what comes before it.
  // The other commands run no program: CLI11 takes their "--" as the end of
  // options (`ember trace merge -- DIR`) and refuses flags after it.
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool launching = !args.empty() && args.front() == "launch";
  auto separator = launching ? std::find(args.begin(), args.end(), std::string("--")) : args.end();
  std::vector<std::string> program(separator == args.end() ? args.end() : separator + 1, args.end());
  std::vector<std::string> ours(args.begin(), separator);

  CLI::App app{"ember: a tensor and autograd engine with its own distributed layer"};
  app.name("ember");
  app.require_subcommand(1);
  ember::launch::LaunchOptions launch_options;
  CLI::App* launch = ember::launch::add_launch_command(app, launch_options);
  ember::launch::ConfigCommandOptions config_options;
  CLI::App* config = ember::launch::add_config_command(app, config_options);
  ember::launch::EnvCommandOptions env_options;
  CLI::App* env = ember::launch::add_env_command(app, env_options);
  ember::launch::EstimateMemoryOptions estimate_options;
  CLI::App* estimate = ember::launch::add_estimate_memory_command(app, estimate_options);
  ember::launch::TraceMergeOptions trace_options;
  CLI::App* trace_merge = ember::launch::add_trace_command(app, trace_options);
  // CLI11 reports a misspelt command as "A subcommand is required": name the word.
  if (!ours.empty() && !ours.front().starts_with("-")) {
    std::vector<std::string> names;
    for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; }))
      names.push_back(command->get_name());
    if (std::find(names.begin(), names.end(), ours.front()) == names.end()) {
      std::fprintf(stderr, "ember: unknown command '%s' (choose from %s)\nRun 'ember --help' for usage.\n",
                   ours.front().c_str(), fmt::format("{}", fmt::join(names, ", ")).c_str());
      return 2;
    }
  }
  try {
    std::reverse(ours.begin(), ours.end());  // CLI11 takes a vector in reverse order
    app.parse(ours);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    std::fprintf(stderr, "ember: %s\nRun 'ember --help' or 'ember <command> --help' for usage.\n", error.what());
    return 2;
  }

  if (config->parsed()) return run_reporting_errors("config", [&] { return ember::launch::run_config(config_options); });
  if (env->parsed()) {
    return run_reporting_errors("env", [&] {
      std::printf("Copy and paste the text below into your bug report.\n\n");
      for (const std::string& line : ember::launch::environment_report(env_options)) std::printf("%s\n", line.c_str());
      return 0;
    });
  }
  if (estimate->parsed()) {
    return run_reporting_errors("estimate-memory", [&] {
      for (const std::string& line : ember::launch::memory_table(estimate_options)) std::printf("%s\n", line.c_str());
      return 0;
    });
  }
  if (trace_merge->parsed()) {
    return run_reporting_errors("trace merge", [&] {
      std::printf("merged into %s\n", ember::launch::run_trace_merge(trace_options).c_str());
      return 0;
    });
  }
  if (launch->parsed()) {
    // Without "--", prefix_command() leaves the program and its arguments here.
    std::vector<std::string> rest = launch->remaining();
    if (!rest.empty() && rest.front().starts_with("-")) {
      std::fprintf(stderr, "ember launch: unknown option '%s'\nRun 'ember launch --help' for usage.\n",
                   rest.front().c_str());
      return 2;
    }
    // A "--" after the program's name is one of the program's arguments.
    launch_options.command = rest;
    if (!rest.empty() && separator != args.end()) launch_options.command.push_back("--");
    launch_options.command.insert(launch_options.command.end(), program.begin(), program.end());
    return run_reporting_errors("launch", [&] {
      // The launcher's output waits in non-blocking sinks (output_prefixer.h);
      // with every worker gone, a slow reader gets a little longer to take
      // the last of it, a stalled one does not hold the launcher's exit.
      struct FlushOutputs {
        ~FlushOutputs() { ember::launch::flush_outputs(std::chrono::seconds(2)); }
      } flush_at_exit;
      return ember::launch::run_launch(launch_options);
    });
  }
  return 0;
}
