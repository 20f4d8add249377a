// (filled by the conv family)
#include "kernels/reference/families.h"

namespace ember::reference {
void register_conv_kernels() {}
}  // namespace ember::reference
