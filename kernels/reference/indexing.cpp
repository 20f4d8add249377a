// (filled by the indexing family)
#include "kernels/reference/families.h"

namespace ember::reference {
void register_indexing_kernels() {}
}  // namespace ember::reference
