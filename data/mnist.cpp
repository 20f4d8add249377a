// load_mnist / load_fashion_mnist: finds the split's two IDX files (plain or
// .gz), reads them and checks that they describe the same images.
#include "data/mnist.h"

#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "data/idx.h"

namespace ember::data {

namespace {

// `directory/name` or `directory/name.gz`, whichever exists.
std::optional<std::string> find_file(const std::string& directory, const std::string& name) {
  for (const char* suffix : {"", ".gz"}) {
    std::filesystem::path path = std::filesystem::path(directory) / (name + suffix);
    std::error_code error;
    if (std::filesystem::is_regular_file(path, error)) return path.string();
  }
  return std::nullopt;
}

MnistData load(const std::string& directory, MnistSplit split, const char* op, const std::string& install_hint) {
  std::string prefix = split == MnistSplit::train ? "train" : "t10k";
  std::string images_name = prefix + "-images-idx3-ubyte", labels_name = prefix + "-labels-idx1-ubyte";
  std::optional<std::string> images_path = find_file(directory, images_name);
  std::optional<std::string> labels_path = find_file(directory, labels_name);
  EMBER_CHECK(images_path && labels_path, "{}: {}{} not found in '{}'{}", op, !images_path ? images_name : labels_name,
              "[.gz]", directory, install_hint);

  // Both files hold bytes (IDX type u8), as torchvision requires: read as integers, so
  // that a file of floats is refused, and checked to be in [0, 255], so that one of
  // wider integers is too (f32 pixels of 0.5 were read as 0.002, labels -1 and 300 taken).
  auto bytes = [&](const std::string& path, DType dtype) {
    Tensor values = read_idx(path, {.dtype = dtype});
    EMBER_CHECK(values.numel() == 0 || (amin(values).item<int64_t>() >= 0 && amax(values).item<int64_t>() <= 255),
                "{}: '{}' holds values outside [0, 255]; MNIST files hold bytes (IDX type u8)", op, path);
    return values;
  };
  MnistData data;
  Tensor images = bytes(*images_path, DType::i32);
  EMBER_CHECK(images.dim() == 3, "{}: '{}' holds shape {}, expected [N, rows, columns]", op, *images_path,
              images.shape());
  data.images = images.unsqueeze(1).to(DType::f32);  // [N, H, W] -> [N, 1, H, W]
  data.images /= 255.0;
  data.labels = bytes(*labels_path, DType::i64);
  EMBER_CHECK(data.labels.dim() == 1 && data.labels.size(0) == images.size(0),
              "{}: '{}' holds labels of shape {} for {} images in '{}'", op, *labels_path, data.labels.shape(),
              images.size(0), *images_path);
  return data;
}

}  // namespace

MnistData load_mnist(const std::string& directory, MnistSplit split) {
  return load(directory, split, "load_mnist", "");
}

MnistData load_fashion_mnist(MnistSplit split, const std::string& directory) {
  return load(directory, split, "load_fashion_mnist",
              "; install Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist)");
}

}  // namespace ember::data
