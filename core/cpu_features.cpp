// CPU feature checks, read once (see cpu_features.h).
#include "core/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <cstring>

#include "core/ember_variables.h"

namespace ember {
namespace {

bool baseline_forced() { return flag_variable("EMBER_CPU_BASELINE").value_or(false); }

bool supports(bool (*probe)()) { return !baseline_forced() && probe(); }

}  // namespace

#if defined(__x86_64__)
bool cpu_has_avx2() {
  static const bool has = supports([] { return __builtin_cpu_supports("avx2") != 0; });
  return has;
}
bool cpu_has_fma() {
  static const bool has = supports([] { return __builtin_cpu_supports("fma") != 0; });
  return has;
}
// Read from CPUID: clang 14's __builtin_cpu_supports does not know "f16c".
// AVX2's check has already asked the OS for the AVX state F16C works in.
bool cpu_has_f16c() {
  static const bool has = cpu_has_avx2() && supports([] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  });
  return has;
}
bool cpu_has_avx512bw() {
  static const bool has =
      supports([] { return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0; });
  return has;
}
bool cpu_has_avx512_bf16() {
  static const bool has = cpu_has_avx512bw() && supports([] {
    return __builtin_cpu_supports("avx512vl") != 0 && __builtin_cpu_supports("avx512bf16") != 0;
  });
  return has;
}
#else
bool cpu_has_avx2() { return false; }
bool cpu_has_fma() { return false; }
bool cpu_has_f16c() { return false; }
bool cpu_has_avx512bw() { return false; }
bool cpu_has_avx512_bf16() { return false; }
#endif

}  // namespace ember
