// (filled by the indexing family)
#include "kernels/cpu/families.h"

namespace ember::cpu {
void register_indexing_kernels() {}
}  // namespace ember::cpu
