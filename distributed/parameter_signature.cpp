// The same-parameters check (see parameter_signature.h).
#include "distributed/parameter_signature.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/ops/creation.h"
#include "distributed/process_group.h"

namespace ember::distributed {

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// Every rank's description, through two all-gathers: the lengths, then the
// bytes packed into i64 words, padded to the longest.
std::vector<std::string> gather_descriptions(ProcessGroup& group, const std::string& mine) {
  Tensor length = from_vector(std::vector<int64_t>{int64_t(mine.size())}, {1});
  Tensor lengths = zeros({group.size()}, {.dtype = DType::i64});
  group.allgather(lengths, length)->wait();
  const std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  const int64_t words = std::max<int64_t>(1, (longest + 7) / 8);
  std::vector<int64_t> packed(size_t(words), 0);
  std::memcpy(packed.data(), mine.data(), mine.size());
  Tensor all = zeros({group.size(), words}, {.dtype = DType::i64});
  group.allgather(all, from_vector(packed, {words}))->wait();
  const std::vector<int64_t> gathered = all.to_vector<int64_t>();
  std::vector<std::string> texts;
  for (int rank = 0; rank < group.size(); ++rank) {
    const char* bytes = reinterpret_cast<const char*>(gathered.data() + size_t(rank) * size_t(words));
    texts.emplace_back(bytes, size_t(std::clamp<int64_t>(sizes[size_t(rank)], 0, words * 8)));
  }
  return texts;
}

}  // namespace

std::string describe_parameters(const NamedTensors& parameters) {
  std::string text;
  for (const auto& [name, parameter] : parameters)
    text += fmt::format("{} {} {} {}{}\n", name, parameter.shape(), parameter.dtype(),
                        parameter.device().is_cpu() ? "cpu" : "cuda", parameter.requires_grad() ? "" : " frozen");
  return text;
}

uint64_t fingerprint(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (char c : text) {
    hash ^= uint8_t(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

// Note [Same parameters on every rank].
void check_same_parameters_on_every_rank(ProcessGroup& group, const NamedTensors& parameters, std::string_view op,
                                         const NamedTensors& buffers) {
  if (group.size() == 1) return;
  // Buffers too: rank 0's are broadcast over every rank's, and differing
  // ones failed inside that broadcast, naming neither the engine nor the buffer.
  std::string mine = describe_parameters(parameters);
  for (const auto& [name, buffer] : buffers)
    mine += fmt::format("buffer {} {} {} {}\n", name, buffer.shape(), buffer.dtype(),
                        buffer.device().is_cpu() ? "cpu" : "cuda");
  Tensor local = from_vector(std::vector<int64_t>{int64_t(fingerprint(mine))}, {1});
  Tensor all = zeros({group.size()}, {.dtype = DType::i64});
  group.allgather(all, local)->wait();
  const std::vector<int64_t> fingerprints = all.to_vector<int64_t>();
  if (std::all_of(fingerprints.begin(), fingerprints.end(), [&](int64_t f) { return f == fingerprints[0]; })) return;

  // Every rank saw the same fingerprints, so every rank takes this path and
  // throws the same error.
  const std::vector<std::string> texts = gather_descriptions(group, mine);
  const int rank = int(std::find_if(fingerprints.begin(), fingerprints.end(),
                                    [&](int64_t f) { return f != fingerprints[0]; }) -
                       fingerprints.begin());
  const std::vector<std::string> theirs = lines_of(texts[size_t(rank)]), first = lines_of(texts[0]);
  size_t index = 0;
  while (index < theirs.size() && index < first.size() && theirs[index] == first[index]) ++index;
  auto at = [index](const std::vector<std::string>& lines) {
    return index < lines.size() ? "'" + lines[index] + "'" : std::string("nothing");
  };
  throw Error(fmt::format(
              "{}: every rank must build the same model, but parameter or buffer {} (name shape dtype device, frozen "
              "if it is) is {} on rank {} and {} on rank 0 (rank {} has {} parameters and buffers, rank 0 has {})",
              op, index, at(theirs), rank, at(first), rank, theirs.size(), first.size()));
}

}  // namespace ember::distributed
