// MNIST-style image sets from their four IDX files: {train,t10k}-images-idx3-
// ubyte and {train,t10k}-labels-idx1-ubyte, each optionally gzipped (.gz).
// Debian's dataset-fashion-mnist installs Fashion-MNIST's, gzipped, in
// kFashionMnistDirectory. Tests: tests/data/test_mnist.cpp.
#pragma once

#include <string>

#include "core/tensor.h"

namespace ember::data {

inline constexpr const char* kFashionMnistDirectory = "/usr/share/datasets/fashion-mnist";

enum class MnistSplit { train, test };  // the "train" and "t10k" files

struct MnistData {
  Tensor images;  // f32 [N, 1, 28, 28], pixel / 255 in [0, 1]
  Tensor labels;  // i64 [N]
};

// The split's images and labels from `directory`. Missing files give an
// ember::Error naming the files looked for.
MnistData load_mnist(const std::string& directory, MnistSplit split);
// The same for Fashion-MNIST, whose error when the files are missing names
// the Debian package that installs them.
MnistData load_fashion_mnist(MnistSplit split, const std::string& directory = kFashionMnistDirectory);

}  // namespace ember::data
