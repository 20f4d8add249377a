// (filled by the nn gradient family)
#include "autograd/functions/families.h"

namespace ember::autograd {
void register_nn_functions() {}
}  // namespace ember::autograd
