// (filled by the conv family)
#include "kernels/cpu/families.h"

namespace ember::cpu {
void register_conv_kernels() {}
}  // namespace ember::cpu
