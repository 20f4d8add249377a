// Run-time CPU feature checks for kernels that have ISA-specific versions
// (compiled with target attributes, never with -march). EMBER_CPU_BASELINE=1
// in the environment makes every check answer false, so a test can run the
// x86-64 baseline paths on any machine.
#pragma once

namespace ember {

bool cpu_has_avx2();
bool cpu_has_fma();
bool cpu_has_f16c();      // AVX2 and F16C (vcvtps2ph, vcvtph2ps)
bool cpu_has_avx512bw();  // AVX-512 F and BW
bool cpu_has_avx512_bf16();  // AVX-512 F, BW, VL and BF16 (vcvtne2ps2bf16)

}  // namespace ember
