// Paths ember opens (core/file_io.h, core/safetensors.h, core/shown_text.h):
// temporaries never written through a planted link, readers that
// refuse a FIFO or device at once instead of blocking, the copying load that
// keeps nothing of the file, and names from files escaped in messages. Each
// guarantee's test names the mutation it catches; which were checked by
// making them: tests/RELIABILITY.md, "Attacks on files".
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/file_io.h"
#include "support/test_support.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
}

// The writer tries `<target>.tmp` first, then `<target>.tmp2`: the names a
// test plants links at. Restores random names when it goes.
struct PredictableTemporaryNames {
  PredictableTemporaryNames() {
    detail::set_temporary_names_for_testing(
        [](const std::string& target, int attempt) { return target + (attempt == 0 ? ".tmp" : ".tmp2"); });
  }
  ~PredictableTemporaryNames() { detail::set_temporary_names_for_testing(nullptr); }
};

// Whether this process maps `path` (its /proc/self/maps lists it).
bool is_mapped(const fs::path& path) {
  return read_text("/proc/self/maps").find(fs::canonical(path).string()) != std::string::npos;
}

// Mutation caught: creating the temporary with O_CREAT | O_TRUNC and no
// O_EXCL | O_NOFOLLOW (as before) writes the new bytes through the planted
// link into the file outside, which then no longer reads "precious".
TEST(FileSafety, APlantedTemporaryLinkIsNeverWrittenThrough) {
  testing::ScratchDirectory scratch;
  const fs::path outside = scratch.path() / "outside.txt";
  write_text(outside, "precious");
  fs::create_directory(scratch.path() / "dir");
  const fs::path target = scratch.path() / "dir" / "model.safetensors";
  fs::create_symlink(outside, target.string() + ".tmp");
  {
    PredictableTemporaryNames names;
    save_safetensors(target, {{"w", ones({2})}});
    write_file_atomically("test", scratch.path() / "dir" / "latest", std::string_view("checkpoint_1"));
    fs::create_symlink(outside, (scratch.path() / "dir" / "latest").string() + ".tmp");
    write_file_atomically("test", scratch.path() / "dir" / "latest", std::string_view("checkpoint_2"));
  }
  EXPECT_EQ(read_text(outside), "precious");
  EXPECT_TRUE(fs::is_symlink(target.string() + ".tmp")) << "the planted link is left alone, not replaced";
  EXPECT_TRUE(testing::all_close(load_safetensors(target).tensors.at(0).second, ones({2}), 0, 0));
  EXPECT_EQ(read_text(scratch.path() / "dir" / "latest"), "checkpoint_2");
  // With random names (the default) nothing is left behind but the planted links.
  save_safetensors(target, {{"w", zeros({2})}});
  int leftovers = 0;
  for (const auto& entry : fs::directory_iterator(scratch.path() / "dir"))
    leftovers += entry.path().filename().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(leftovers, 0);
}

// A save in the place of a link replaced the link with a regular file and left its
// target as it was (the user meant the target), and as root a save to /dev/full
// "succeeded" by replacing the device node. Now every save refuses anything there but
// a regular file, and changes nothing. Mutation caught: write_file_atomically without
// its lstat check (the link becomes a file, the FIFO is replaced).
TEST(FileSafety, ASaveRefusesALinkOrSpecialFileInItsPlace) {
  testing::ScratchDirectory scratch;
  const fs::path real = scratch.path() / "real.safetensors";
  save_safetensors(real, {{"w", ones({2})}});
  const fs::path link = scratch.path() / "link.safetensors";
  fs::create_symlink(real, link);
  EXPECT_EMBER_ERROR(save_safetensors(link, {{"w", zeros({2})}}),
                     fmt::format("save_safetensors: '{}' is a symbolic link; a file is never written through one",
                                 link.string()));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(testing::all_close(load_safetensors(real).tensors.at(0).second, ones({2}), 0, 0));
  const fs::path dangling = scratch.path() / "dangling.json";
  fs::create_symlink(scratch.path() / "nowhere.json", dangling);
  EXPECT_EMBER_ERROR(write_file_atomically("test", dangling, std::string_view("{}")), "is a symbolic link");
  EXPECT_FALSE(fs::exists(scratch.path() / "nowhere.json"));
  const fs::path fifo = scratch.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EMBER_ERROR(write_file_atomically("test", fifo, std::string_view("x")), "exists and is not a regular file: it "
                                                                                 "is a FIFO");
  EXPECT_EMBER_ERROR(write_file_atomically("test", scratch.path(), std::string_view("x")), "it is a directory");
  EXPECT_EQ(fs::status(fifo).type(), fs::file_type::fifo);
  int leftovers = 0;
  for (const auto& entry : fs::directory_iterator(scratch.path()))
    leftovers += entry.path().filename().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(leftovers, 0);
}

// Mutation caught: dropping O_NONBLOCK from open_regular_file makes the open
// of a FIFO block until a writer comes, so this test hangs (ctest's timeout
// fails it); dropping the fstat check reads the FIFO as an empty file.
TEST(FileSafety, AFifoOrDeviceIsRefusedAtOnceNamingWhatItIs) {
  testing::ScratchDirectory scratch;
  const fs::path fifo = scratch.path() / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EMBER_ERROR(load_safetensors(fifo), fmt::format("'{}' is not a regular file: it is a FIFO", fifo.string()));
  EXPECT_EMBER_ERROR(load_safetensors(fifo, {.mmap = false}), "it is a FIFO");
  EXPECT_EMBER_ERROR(read_safetensors_header(fifo), "it is a FIFO");
  EXPECT_EMBER_ERROR(read_small_file("test", fifo, 100), "it is a FIFO");
  EXPECT_EMBER_ERROR(load_safetensors("/dev/zero"), "it is a character device");
  EXPECT_EMBER_ERROR(load_safetensors(scratch.path()), "it is a directory");
  // A log is never opened on a FIFO nor through a link.
  EXPECT_EMBER_ERROR(open_log_file("test", fifo, true), fifo.string());
  fs::create_symlink(scratch.path() / "elsewhere.log", scratch.path() / "metrics.jsonl");
  EXPECT_EMBER_ERROR(open_log_file("test", scratch.path() / "metrics.jsonl", false), "is a symbolic link");
  EXPECT_FALSE(fs::exists(scratch.path() / "elsewhere.log"));
}

// Mutation caught: reading into memory through a mapping again (mmap = true
// in the copying branch) leaves the file in /proc/self/maps while the tensors
// live, and truncating it then kills the test with SIGBUS.
TEST(FileSafety, TheCopyingLoadKeepsNothingOfTheFile) {
  testing::ScratchDirectory scratch;
  const fs::path path = scratch.path() / "weights.safetensors";
  const Tensor original = arange(0, 4096, 1, {.dtype = DType::f32});
  save_safetensors(path, {{"w", original}});
  SafetensorsContents copied = load_safetensors(path, {.mmap = false});
  EXPECT_FALSE(is_mapped(path));
  fs::resize_file(path, 0);
  EXPECT_TRUE(testing::all_close(copied.tensors.at(0).second, original, 0, 0));
  // The mapping (the default) is what the header warns of: it is there while the tensors are.
  save_safetensors(path, {{"w", original}});
  {
    SafetensorsContents mapped = load_safetensors(path);
    EXPECT_TRUE(is_mapped(path));
  }
  EXPECT_FALSE(is_mapped(path));
}

// Mutation caught: showing names raw (shown_text returning its input) lets
// the escape sequence and the NUL through: the message then holds byte 0x1b
// and ends at the NUL, before the rest of the name.
TEST(FileSafety, NamesFromFilesAreEscapedInMessages) {
  EXPECT_EQ(shown_text(std::string("a\0b\x1b[31mc\n\t\x7f", 12)), "a\\0b\\x1b[31mc\\n\\t\\x7f");
  EXPECT_EQ(shown_text("\xc2\x9b" "x"), "\\u009bx");                  // C1 CSI
  EXPECT_EQ(shown_text("caf\xc3\xa9 \xff"), "caf\xc3\xa9 \\xff");      // UTF-8 kept, a stray byte escaped
  EXPECT_EQ(shown_text(std::string(100, 'n'), 10), "nnnnnnnnnn... (100 bytes)");
  testing::ScratchDirectory scratch;
  const fs::path path = scratch.path() / "hostile.safetensors";
  const std::string name("evil\x1b[2J\0tail", 13);
  // A header whose tensor name holds an escape sequence and a NUL (as \u0000), with a bad dtype.
  const std::string header = R"({"evil\u001b[2J\u0000tail":{"dtype":"X9","shape":[1],"data_offsets":[0,4]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  write_text(path, bytes + header + std::string(4, '\0'));
  try {
    load_safetensors(path);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
    EXPECT_NE(message.find("evil\\x1b[2J\\0tail"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace ember
