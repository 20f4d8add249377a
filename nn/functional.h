// nn::functional: the stateless forms of the layers, torch.nn.functional's
// names. Most are core's ops re-exported; linear, embedding and attention
// have their own files here, and losses live in nn/functional/loss.h.
#pragma once

#include "nn/functional/activation.h"
#include "nn/functional/attention.h"
#include "nn/functional/conv.h"
#include "nn/functional/distance.h"
#include "nn/functional/linear.h"
#include "nn/functional/loss.h"
#include "nn/functional/normalization.h"
