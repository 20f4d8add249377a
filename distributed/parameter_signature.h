// The start-up check of DistributedDataParallel and ShardedDataParallel: every
// rank must hold the same trainable parameters (Note [Same parameters on
// every rank] in distributed/README.md). Tests: tests/distributed/test_ddp.cpp
// and test_zero.cpp (scenarios ddp_mismatched_*, zero_mismatched_*).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/named_tensors.h"

namespace ember::distributed {

class ProcessGroup;

// One line per parameter, "name shape dtype device-type", in order. The
// device's index is left out: with NCCL rank r's parameters live on cuda:r.
std::string describe_parameters(const NamedTensors& parameters);

// FNV-1a over `text`: the same on every process and every build (std::hash
// promises neither).
uint64_t fingerprint(std::string_view text);

// Throws ember::Error on every rank, naming `op`, the first differing
// parameter or buffer and what each of the two ranks holds, when some rank's
// differ from rank 0's. One all-gather of an 8-byte fingerprint when they
// agree; two more (lengths, then descriptions) only to write the error.
void check_same_parameters_on_every_rank(ProcessGroup& group, const NamedTensors& parameters, std::string_view op,
                                         const NamedTensors& buffers = {});

}  // namespace ember::distributed
