// (filled by the random family)
#include "kernels/cpu/families.h"

namespace ember::cpu {
void register_random_kernels() {}
}  // namespace ember::cpu
