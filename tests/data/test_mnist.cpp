// load_mnist / load_fashion_mnist: a small fake set laid out by the test, the
// missing-file errors, and the real Fashion-MNIST files from Debian's
// dataset-fashion-mnist package when it is installed.
#include <ember/ember.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "data/file_helpers.h"
#include "support/test_support.h"

namespace ember::data {
namespace {

using ember::testing::big_endian;
using ember::testing::ScratchDirectory;
using ember::testing::write_file;
using ember::testing::write_gzip_file;

std::string header(unsigned char code, const std::vector<uint32_t>& sizes) {
  std::string bytes = {0, 0, char(code), char(sizes.size())};
  for (uint32_t size : sizes) bytes += big_endian(size);
  return bytes;
}

TEST(Mnist, ReadsPlainAndGzippedFilesAsScaledImagesAndInt64Labels) {
  ScratchDirectory directory;
  // Two 28x28 images: pixel p of image i is (i + p) % 256; labels 7 and 3.
  std::string pixels;
  for (int i = 0; i < 2; ++i)
    for (int p = 0; p < 28 * 28; ++p) pixels.push_back(char((i + p) % 256));
  write_gzip_file(directory.file("t10k-images-idx3-ubyte.gz"), header(0x08, {2, 28, 28}) + pixels);
  write_file(directory.file("t10k-labels-idx1-ubyte"), header(0x08, {2}) + std::string{7, 3});
  MnistData data = load_mnist(directory.file(""), MnistSplit::test);
  EXPECT_EQ(data.images.shape(), (Shape{2, 1, 28, 28}));
  EXPECT_EQ(data.images.dtype(), DType::f32);
  EXPECT_EQ(data.labels.dtype(), DType::i64);
  EXPECT_EQ(data.labels.to_vector<int64_t>(), (std::vector<int64_t>{7, 3}));
  std::vector<float> values = data.images.to_vector<float>();
  EXPECT_EQ(values[1], 1.0f / 255.0f);
  EXPECT_EQ(values[255], 1.0f);
  EXPECT_EQ(values[28 * 28 + 255], 0.0f);  // (1 + 255) % 256
  EXPECT_EMBER_ERROR(load_mnist(directory.file(""), MnistSplit::train),
                     "load_mnist: train-images-idx3-ubyte[.gz] not found");
}

TEST(Mnist, MismatchedLabelCountIsAnError) {
  ScratchDirectory directory;
  write_file(directory.file("train-images-idx3-ubyte"), header(0x08, {2, 2, 2}) + std::string(8, '\0'));
  write_file(directory.file("train-labels-idx1-ubyte"), header(0x08, {3}) + std::string(3, '\0'));
  EXPECT_EMBER_ERROR(load_mnist(directory.file(""), MnistSplit::train), "holds labels of shape [3] for 2 images");
}

// MNIST files hold bytes (IDX u8), as torchvision requires. A file of f32 pixels
// of 0.5 was read as 0.5 / 255, and i32 labels -1 and 300 were taken as classes.
// Mutation caught: the [0, 255] check removed (the i32 labels then load).
TEST(Mnist, FilesThatDoNotHoldBytesAreRefused) {
  ScratchDirectory directory;
  const std::string labels = header(0x08, {2}) + std::string{1, 2};
  std::string half = big_endian(0x3F000000u);  // 0.5f, big-endian
  write_file(directory.file("train-images-idx3-ubyte"), header(0x0D, {2, 1, 1}) + half + half);
  write_file(directory.file("train-labels-idx1-ubyte"), labels);
  EXPECT_EMBER_ERROR(load_mnist(directory.file(""), MnistSplit::train), "train-images-idx3-ubyte");
  write_file(directory.file("train-images-idx3-ubyte"), header(0x08, {2, 1, 1}) + std::string{9, 9});
  write_file(directory.file("train-labels-idx1-ubyte"), header(0x0C, {2}) + big_endian(0xFFFFFFFFu) + big_endian(300u));
  EXPECT_EMBER_ERROR(load_mnist(directory.file(""), MnistSplit::train),
                     "train-labels-idx1-ubyte' holds values outside [0, 255]; MNIST files hold bytes");
  write_file(directory.file("train-labels-idx1-ubyte"), labels);
  EXPECT_EQ(load_mnist(directory.file(""), MnistSplit::train).labels.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
}

TEST(Mnist, MissingFashionMnistNamesTheDebianPackage) {
  EXPECT_EMBER_ERROR(load_fashion_mnist(MnistSplit::train, "/nonexistent/fashion-mnist"),
                     "install Debian's dataset-fashion-mnist package");
}

TEST(Mnist, RealFashionMnistFromTheDebianPackage) {
  if (!std::filesystem::exists(std::string(kFashionMnistDirectory) + "/t10k-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(std::string(kFashionMnistDirectory) + "/t10k-images-idx3-ubyte"))
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << kFashionMnistDirectory
                 << " (apt-get install dataset-fashion-mnist)";
  MnistData test = load_fashion_mnist(MnistSplit::test);
  EXPECT_EQ(test.images.shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(test.labels.shape(), (Shape{10000}));
  EXPECT_EQ(ember::min(test.labels).item<int64_t>(), 0);
  EXPECT_EQ(ember::max(test.labels).item<int64_t>(), 9);
  // Fashion-MNIST is balanced: 1000 test images per class.
  std::vector<int64_t> counts(10, 0);
  for (int64_t label : test.labels.to_vector<int64_t>()) ++counts[size_t(label)];
  EXPECT_EQ(counts, std::vector<int64_t>(10, 1000));
  EXPECT_EQ(ember::min(test.images).item<float>(), 0.0f);
  EXPECT_EQ(ember::max(test.images).item<float>(), 1.0f);

  MnistData train = load_fashion_mnist(MnistSplit::train);
  EXPECT_EQ(train.images.shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(train.labels.shape(), (Shape{60000}));
  EXPECT_EQ(ember::min(train.labels).item<int64_t>(), 0);
  EXPECT_EQ(ember::max(train.labels).item<int64_t>(), 9);
  std::vector<int64_t> train_counts(10, 0);
  for (int64_t label : train.labels.to_vector<int64_t>()) ++train_counts[size_t(label)];
  EXPECT_EQ(train_counts, std::vector<int64_t>(10, 6000));
}

}  // namespace
}  // namespace ember::data
