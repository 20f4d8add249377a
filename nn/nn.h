// The nn layer in one include: modules, layers, containers, attention,
// initialisers and the functional forms. Design notes: nn/README.md.
#pragma once

#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/checkpoint.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/normalization.h"
#include "nn/serialize.h"
#include "nn/transformer.h"
