// See config_questions.h. The questions and their order follow
// accelerate/commands/config/cluster.py where Accelerate has the question.
#include "config_questions.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <istream>
#include <limits>
#include <ostream>
#include <span>
#include <string>

#include "core/error.h"

namespace ember::launch {
namespace {

struct Prompt {
  std::istream& in;
  std::ostream& out;
};

std::string trimmed(const std::string& text) {
  auto is_space = [](unsigned char c) { return std::isspace(c) != 0; };
  auto begin = std::find_if_not(text.begin(), text.end(), is_space);
  auto end = std::find_if_not(text.rbegin(), std::make_reverse_iterator(begin), is_space).base();
  return std::string(begin, end);
}

// Asks `question` until `accept` takes the answer (an empty answer stands
// for `fallback`), saying `complaint` after each one it refuses.
template <class T>
T ask(Prompt& prompt, const std::string& question, const std::string& fallback,
      const std::function<std::optional<T>(const std::string&)>& accept, const std::string& complaint) {
  for (;;) {
    prompt.out << question << std::flush;
    std::string line;
    EMBER_CHECK(static_cast<bool>(std::getline(prompt.in, line)),
                "the input ended before every question was answered; nothing was written");
    std::string answer = trimmed(line);
    if (std::optional<T> value = accept(answer.empty() ? fallback : answer)) return *value;
    prompt.out << complaint << "\n";
  }
}

// An integer in [low, high] that is a multiple of `multiple`.
long long ask_integer(Prompt& prompt, const std::string& question, long long fallback, long long low, long long high,
                      long long multiple = 1) {
  std::string complaint = multiple > 1 ? fmt::format("Please enter a multiple of {} from {} to {}.", multiple, low, high)
                                       : fmt::format("Please enter an integer from {} to {}.", low, high);
  return ask<long long>(
      prompt, fmt::format("{} [{}]: ", question, fallback), std::to_string(fallback),
      [&](const std::string& answer) -> std::optional<long long> {
        std::optional<long long> value = parse_integer(answer);
        if (value && *value >= low && *value <= high && *value % multiple == 0) return value;
        return std::nullopt;
      },
      complaint);
}

bool ask_yes_no(Prompt& prompt, const std::string& question, bool fallback) {
  return ask<bool>(
      prompt, fmt::format("{} [{}]: ", question, fallback ? "YES/no" : "yes/NO"), fallback ? "yes" : "no",
      [](const std::string& answer) -> std::optional<bool> {
        std::string lower = answer;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
        if (lower == "yes" || lower == "y") return true;
        if (lower == "no" || lower == "n") return false;
        return std::nullopt;
      },
      "Please enter yes or no.");
}

// A value of `key`; `fallback` "" makes an answer necessary, unless
// `optional`, when an empty answer leaves the key unset (nullopt).
std::optional<std::string> ask_value(Prompt& prompt, const std::string& question, const ConfigKey& key,
                                     const std::string& fallback, bool optional = false) {
  std::string shown = fallback.empty() ? (optional ? " [none]" : "") : " [" + fallback + "]";
  std::string answer = ask<std::string>(
      prompt, question + shown + ": ", fallback,
      [&](const std::string& text) -> std::optional<std::string> {
        if (text.empty() && optional) return text;
        return parse_value(key, text);
      },
      fmt::format("Please enter {}.", describe_kind(key.kind)));
  return answer.empty() ? std::nullopt : std::optional<std::string>(answer);
}

int ask_choice(Prompt& prompt, const std::string& question, std::span<const std::string_view> choices) {
  prompt.out << question << "\n";
  for (size_t index = 0; index < choices.size(); ++index) prompt.out << " [" << index << "] " << choices[index] << "\n";
  return int(ask_integer(prompt, "Your choice", 0, 0, (long long)choices.size() - 1));
}

const ConfigKey& key(std::string_view name) { return *find_config_key(name); }

// ember's own options, which Accelerate's config does not have.
void ask_accelerator_options(Prompt& prompt, Settings& settings) {
  auto boolean = [](bool value) { return std::string(value ? "true" : "false"); };
  settings["split_batches"] = boolean(ask_yes_no(
      prompt, "Should each batch be split between the processes, instead of one batch per process (split_batches)?",
      false));
  settings["even_batches"] = boolean(ask_yes_no(
      prompt, "Should every process get as many batches as the others, repeating samples at the end (even_batches)?",
      true));
  if (auto seed = ask_value(prompt, "Which seed should every process start from (seed)", key("seed"), "", true)) {
    settings["seed"] = *seed;
  }
  if (auto directory = ask_value(prompt, "Which directory should checkpoints and logs go into (project_dir)",
                                 key("project_dir"), "", true)) {
    settings["project_dir"] = *directory;
  }
  bool naming = ask_yes_no(
      prompt, "Should checkpoints be named project_dir/checkpoints/checkpoint_N (automatic_checkpoint_naming)?", false);
  settings["automatic_checkpoint_naming"] = boolean(naming);
  if (naming) {
    if (auto limit = ask_value(prompt, "How many checkpoints should be kept (total_limit)", key("total_limit"), "", true)) {
      settings["total_limit"] = *limit;
    }
  }
}

}  // namespace

Settings ask_config_questions(std::istream& in, std::ostream& out) {
  Prompt prompt{in, out};
  Settings settings;
  constexpr std::string_view kMachineTypes[] = {"No distributed training", "multi-CPU", "multi-GPU"};
  int machine_type = ask_choice(prompt, "Which type of machine are you using?", kMachineTypes);
  long long machines = 1;
  long long processes = 1;
  bool cpu = machine_type == 1;
  if (machine_type == 0) {
    cpu = ask_yes_no(prompt, "Do you want to run your training on CPU only (even if a GPU is available)?", false);
  } else {
    machines = ask_integer(prompt, "How many different machines will you use (use more than 1 for multi-node training)?",
                           1, 1, 1 << 20);
    if (machines > 1) {
      settings["machine_rank"] = std::to_string(
          ask_integer(prompt, "What is the rank of this machine (0 hosts the main process)?", 0, 0, machines - 1));
      settings["main_process_ip"] =
          *ask_value(prompt, "What is the IP address of the machine that will host the main process?",
                     key("main_process_ip"), "");
      settings["main_process_port"] = *ask_value(
          prompt, "What is the port you will use to communicate with the main process?", key("main_process_port"), "29500");
    }
    processes = ask_integer(prompt, "How many processes should be used for distributed training, on all machines together?",
                            machines, machines, std::numeric_limits<int>::max(), machines);
  }
  settings.try_emplace("machine_rank", "0");
  settings["num_machines"] = std::to_string(machines);
  settings["num_processes"] = std::to_string(processes);
  settings["use_cpu"] = cpu ? "true" : "false";
  settings["mixed_precision"] =
      *ask_value(prompt, "Do you wish to use mixed precision (no, fp16 or bf16)?", key("mixed_precision"), "no");
  long long accumulation =
      ask_integer(prompt, "How many batches should be accumulated per optimizer step?", 1, 1, std::numeric_limits<int>::max());
  // Note [Launcher configuration]: Accelerate refuses a file with this key, so it is written only when it matters.
  if (accumulation > 1) settings["gradient_accumulation_steps"] = std::to_string(accumulation);
  if (processes > 1) {
    // Written only when not DDP, like accumulation; config_yaml then names the job FSDP or DEEPSPEED for Accelerate.
    std::string strategy = *ask_value(
        prompt, "Which sharding strategy should the processes use (ddp, zero1, zero2, zero3, fsdp or hybrid)?",
        key("strategy"), "ddp");
    if (strategy != "ddp") settings["strategy"] = strategy;
  }
  if (ask_yes_no(prompt,
                 "Do you want to set ember's other Accelerator options (split_batches, even_batches, seed, project_dir, "
                 "checkpoint naming)?",
                 false)) {
    ask_accelerator_options(prompt, settings);
  }
  return settings;
}

}  // namespace ember::launch
