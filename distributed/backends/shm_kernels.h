// The data movement of the shm backend: copies and reductions between a
// rank's tensor and the segment's slots (Note [Shared-memory collectives]).
// AVX2 versions are picked at run time (core/cpu_features.h), the x86-64
// baseline otherwise. Used by shm_backend.cpp; tests:
// tests/distributed/test_shm.cpp (every dtype and op against
// reduce_host_buffers, the naive reference).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "distributed/backend.h"

namespace ember::distributed::shm {

// dst = src for `nbytes` bytes (distinct or equal buffers, never partly
// overlapping). Not memcpy: glibc's `rep movsb` path copies 128 KB at
// ~1.5 GB/s instead of ~30 on AMD Zen 3 when the destination sits just above
// the source modulo 4 KiB, which is where a tensor and a slot often sit.
void copy_bytes(void* dst, const void* src, int64_t nbytes);

// out_a[i] = out_b[i] = sources[0][i] op sources[1][i] op ... in source
// order, computed in ComputeType and rounded once (f16/bf16 in f32); avg
// (floating dtypes) is the sum divided by num_sources before that rounding.
// out_a may be one of the sources (in-place allreduce); out_b may be null.
void reduce_many(void* out_a, void* out_b, const std::byte* const* sources, int num_sources, int64_t count,
                 DType dtype, ReduceOp op);

}  // namespace ember::distributed::shm
