// ProcessGroup's device path (Note [Collectives on a device stream]) on any
// machine: a stand-in "cuda" device whose memory is host memory, whose
// streams and events only log what is asked of them, and whose kernels are
// the CPU's, plus a stand-in device backend. The tests check the order of
// events and waits that makes a device collective safe (the caller's kernels,
// then the backend's stream, then the caller's stream again), the values
// (write-backs and AVG's division run through the device's kernels), that
// the backend holds an operation's tensors, the routing by device of a group
// with both kinds of backend, and the errors only device tensors can cause.
// The NCCL backend itself runs on a GPU in tests/cuda/test_cuda_nccl.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_backend.h"
#include "core/device_runtime.h"
#include "core/dispatch.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise_kernels.h"
#include "core/profiler/profile.h"
#include "core/stream.h"
#include "core/version.h"
#include "distributed/process_group.h"
#include "support/test_support.h"

namespace ember::distributed {
namespace {

using namespace std::chrono_literals;

const Device kGpu0{DeviceType::cuda, 0};
const Device kGpu1{DeviceType::cuda, 1};

// What the stand-in device was asked to do, in order, from every thread.
class Log {
 public:
  void add(std::string line) {
    std::lock_guard lock(mutex_);
    lines_.push_back(std::move(line));
  }
  std::vector<std::string> take() {
    std::lock_guard lock(mutex_);
    return std::exchange(lines_, {});
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

Log& device_log() {
  static Log* log = new Log;
  return *log;
}

// Streams are numbered handles (null: the default stream, "s0"); events are
// heap-allocated numbers. Work "runs" at once, so every event is complete,
// at the host time it was recorded (what elapsed_ms measures).
thread_local void* t_current_streams[kMaxDevicesPerType] = {};
thread_local int t_current_device = 0;

std::string stream_name(void* stream) { return fmt::format("s{}", reinterpret_cast<uintptr_t>(stream)); }
std::string event_name(void* event) { return fmt::format("e{}", *static_cast<int*>(event)); }

class StandInRuntime final : public DeviceRuntime {
 public:
  int device_count() override { return 2; }
  int current_device() override { return t_current_device; }
  void set_device(int index) override {
    t_current_device = index;
    device_log().add(fmt::format("set_device {}", index));
  }
  void synchronize(int) override {}
  void copy(void* dst, Device, const void* src, Device, size_t nbytes, bool) override { std::memcpy(dst, src, nbytes); }
  void* create_stream(int) override { return reinterpret_cast<void*>(uintptr_t(++streams_)); }
  void destroy_stream(int, void*) override {}
  void* current_stream(int index) override { return t_current_streams[index]; }
  void set_current_stream(int index, void* stream) override { t_current_streams[index] = stream; }
  void synchronize_stream(int, void*) override {}
  bool query_stream(int, void*) override { return true; }
  void* create_event(int, bool) override { return new int(++events_); }
  void destroy_event(int, void* event) override { delete static_cast<int*>(event); }
  void record_event(int, void* event, void* stream) override {
    device_log().add(fmt::format("record {} on {}", event_name(event), stream_name(stream)));
    std::lock_guard lock(mutex_);
    recorded_ns_[*static_cast<int*>(event)] = profiler::now_ns();
  }
  void wait_event(int, void* stream, void* event) override {
    device_log().add(fmt::format("{} waits {}", stream_name(stream), event_name(event)));
  }
  void synchronize_event(int, void*) override {}
  bool query_event(int, void*) override { return true; }
  double elapsed_ms(int, void* start, void* end) override {
    std::lock_guard lock(mutex_);
    return double(recorded_ns_.at(*static_cast<int*>(end)) - recorded_ns_.at(*static_cast<int*>(start))) / 1e6;
  }

  void reset_numbers() {
    streams_ = 0;
    events_ = 0;
  }

 private:
  std::atomic<int> streams_ = 0;
  std::atomic<int> events_ = 0;
  std::mutex mutex_;
  std::map<int, int64_t> recorded_ns_;  // by event number: when it was last recorded
};

class HostMemory final : public Allocator {
 public:
  void* allocate(size_t nbytes) override { return nbytes == 0 ? nullptr : std::aligned_alloc(64, (nbytes + 63) / 64 * 64); }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
  MemoryStats stats() const override { return {}; }
  void reset_peak() override {}
  void empty_cache() override {}
};

StandInRuntime& stand_in() {
  static StandInRuntime* runtime = new StandInRuntime;
  return *runtime;
}

// The stand-in device backend of a group of two whose other rank holds the
// same values: sums double, gathers repeat the input.
class StandInBackend final : public Backend {
 public:
  explicit StandInBackend(Device device) : device_(device), stream_(Stream::create(device)) {}
  std::string name() const override { return "stand-in"; }
  std::string algorithm(Collective) const override { return "doubling"; }
  Device device() const override { return device_; }
  Stream stream() const override { return stream_; }
  void watch(std::string description, Event done, std::shared_ptr<const void> keep_alive) override {
    device_log().add(fmt::format("watch {} {}", description, event_name(done.handle())));
    std::lock_guard lock(mutex);
    held.push_back(std::move(keep_alive));
  }

  void allreduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    called("allreduce");
    EMBER_ASSERT(dtype == DType::f32 && op == ReduceOp::sum, "the stand-in sums f32");
    if (fail_next.exchange(false)) throw Error("injected failure");
    float* values = static_cast<float*>(data);
    for (int64_t i = 0; i < count; ++i) values[i] *= 2;
  }
  void broadcast(void*, int64_t, int) override { called("broadcast"); }
  void allgather(const void* input, void* output, int64_t nbytes) override {
    called("allgather");
    for (int rank = 0; rank < 2; ++rank) std::memcpy(static_cast<char*>(output) + rank * nbytes, input, size_t(nbytes));
  }
  void reduce_scatter(const void*, void*, int64_t, DType, ReduceOp) override { called("reduce_scatter"); }
  void all_to_all(const void*, void*, int64_t) override { called("all_to_all"); }
  void barrier() override { called("barrier"); }
  void send(const void*, int64_t, int, uint32_t) override { called("send"); }
  void recv(void*, int64_t, int, uint32_t) override { called("recv"); }

  std::atomic<bool> fail_next = false;
  std::mutex mutex;
  std::vector<std::shared_ptr<const void>> held;

 private:
  // Each call says which stream is current on its thread: its work goes there.
  void called(const char* what) {
    device_log().add(fmt::format("{} on {}", what, stream_name(current_stream(device_).handle())));
  }
  Device device_;
  Stream stream_;
};

class StandInHostBackend final : public Backend {
 public:
  std::string name() const override { return "host"; }
  std::string algorithm(Collective) const override { return "none"; }
  void allreduce(void*, int64_t, DType, ReduceOp) override { device_log().add("host allreduce"); }
  void broadcast(void*, int64_t, int) override {}
  void allgather(const void*, void*, int64_t) override {}
  void reduce_scatter(const void*, void*, int64_t, DType, ReduceOp) override {}
  void all_to_all(const void*, void*, int64_t) override {}
  void barrier() override { device_log().add("host barrier"); }
  void send(const void*, int64_t, int, uint32_t) override {}
  void recv(void*, int64_t, int, uint32_t) override {}
};

// Makes "cuda" the stand-in device, for the rest of the process (ctest runs
// each test in a process of its own).
void install_stand_in_device() {
  ensure_backends_registered();
  cuda::backend();  // a CUDA build's plugin installs its runtime and kernels first; the stand-in replaces them
  set_device_runtime(DeviceType::cuda, &stand_in());
  static HostMemory memory;
  set_allocator(kGpu0, &memory);
  set_allocator(kGpu1, &memory);
  for (DType dtype : kAllDTypes) {
    if (copy_op.kind(DeviceType::cpu, dtype) != KernelKind::none)
      copy_op.set(DeviceType::cuda, dtype, copy_op.lookup(DeviceType::cpu, dtype));
    if (fill_op.kind(DeviceType::cpu, dtype) != KernelKind::none)
      fill_op.set(DeviceType::cuda, dtype, fill_op.lookup(DeviceType::cpu, dtype));
    if (div_op.kind(DeviceType::cpu, dtype) != KernelKind::none)
      div_op.set(DeviceType::cuda, dtype, div_op.lookup(DeviceType::cpu, dtype));
  }
}

class DeviceCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::is_available()) GTEST_SKIP() << "a real GPU is here: tests/cuda/test_cuda_nccl.cpp runs the real path";
    static std::once_flag installed;
    std::call_once(installed, install_stand_in_device);
    stand_in().reset_numbers();
    t_current_device = 0;
    device_log().take();
  }

  // A group of rank 0 of 2 with the stand-in device backend, and `host` for CPU tensors.
  std::unique_ptr<ProcessGroup> make_group(std::unique_ptr<Backend> host = nullptr) {
    BackendContext context{.rank = 0, .size = 2, .global_ranks = {0, 1}, .store = nullptr,
                           .store_prefix = "pg/test/", .timeout = 5s, .advertise_address = ""};
    DeviceBackendFactory factory{.name = "stand-in", .make = [this](const BackendContext&, Device device) {
                                   ++backends_made;
                                   made_on = std::this_thread::get_id();
                                   auto backend = std::make_unique<StandInBackend>(device);
                                   backend_ = backend.get();
                                   return std::unique_ptr<Backend>(std::move(backend));
                                 }};
    return std::make_unique<ProcessGroup>(context, std::move(host), ProcessGroupOptions{.timeout = 5s}, factory);
  }

  int backends_made = 0;
  std::thread::id made_on;
  StandInBackend* backend_ = nullptr;
};

Tensor values_on(Device device, const std::vector<float>& values) {
  return from_vector(values, {int64_t(values.size())}).to(device);
}

// Note [Collectives on a device stream], event by event: the ready event is
// recorded on the caller's stream at the call; the backend's stream waits for
// it; the backend's calls run with its stream current; the done event is
// recorded there and watched; wait() makes the caller's stream wait for it.
TEST_F(DeviceCollectives, AnOperationIsOrderedBetweenTheCallersKernels) {
  auto group = make_group();
  const Stream caller = Stream::create(kGpu0);  // s1
  StreamGuard on_caller(caller);
  Tensor t = values_on(kGpu0, {1.5f, -2.0f, 0.0f, 4.0f});
  device_log().take();

  auto work = group->allreduce(t, ReduceOp::sum);
  const std::vector<std::string> at_the_call = device_log().take();
  ASSERT_FALSE(at_the_call.empty());
  EXPECT_EQ(at_the_call.front(), "record e1 on s1");  // before the call returns
  work->wait();
  std::vector<std::string> log = at_the_call;
  for (std::string& line : device_log().take()) log.push_back(std::move(line));
  EXPECT_EQ(log, (std::vector<std::string>{"record e1 on s1", "set_device 0", "s2 waits e1", "allreduce on s2",
                                           "record e2 on s2", "watch allreduce([4], float32, sum) e2",
                                           "s1 waits e2"}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{3.0f, -4.0f, 0.0f, 8.0f}));
  EXPECT_EQ(backends_made, 1);
  EXPECT_NE(made_on, std::this_thread::get_id());  // made on the communication thread
  EXPECT_EQ(group->backend_name(), "stand-in");
  EXPECT_EQ(group->backend_name(DeviceType::cuda), "stand-in");
  EXPECT_EQ(group->backend_name(DeviceType::cpu), "");
}

// AVG divides the sum by the group's size with the device's division kernel;
// non-contiguous views are staged and written back with its copy kernel.
TEST_F(DeviceCollectives, AverageAndWriteBacksUseTheDevicesKernels) {
  auto group = make_group();
  Tensor t = values_on(kGpu0, {1.5f, -2.0f, 7.0f});
  group->allreduce(t, ReduceOp::avg)->wait();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 7.0f}));

  Tensor base = values_on(kGpu0, {1, 2, 3, 4, 5, 6}).view({2, 3});
  group->allreduce(base.t(), ReduceOp::sum)->wait();
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12}));

  Tensor input = values_on(kGpu0, {7, 8, 9});
  Tensor output_base = make_tensor({3, 2}, DType::f32, kGpu0);
  group->allgather(output_base.t(), input)->wait();  // [2, 3], non-contiguous
  EXPECT_EQ(output_base.t().to_vector<float>(), (std::vector<float>{7, 8, 9, 7, 8, 9}));
}

// Under a profile, the group's span of a device operation names the device
// backend's algorithm and says it timed the launch only, and the kernel the
// operation runs (AVG's division) is a device_kernel span on the track of
// the backend's stream, not the caller's (Note [Device time of kernels]),
// timed by the stand-in's events. Catches: device spans missing or put on
// the default stream's track, a device span that begins before its launch
// (seen failing with the anchor's host time moved 1 ms early), the algorithm
// field missing.
TEST_F(DeviceCollectives, ProfiledOperationShowsItsAlgorithmAndItsKernelOnTheBackendsStream) {
  auto group = make_group();
  Tensor t = values_on(kGpu0, {1.5f, -2.0f, 7.0f});
  profiler::Profile profile;
  group->allreduce(t, ReduceOp::avg)->wait();
  profile.stop();
  const profiler::Event* collective = nullptr;
  std::vector<const profiler::Event*> launches, kernels;
  for (const profiler::Event& event : profile.events()) {
    if (event.category == profiler::Category::collective) collective = &event;
    if (event.category == profiler::Category::op && event.device == DeviceType::cuda) launches.push_back(&event);
    if (event.category == profiler::Category::device_kernel) kernels.push_back(&event);
  }
  ASSERT_NE(collective, nullptr);
  EXPECT_EQ(collective->args["algorithm"], "doubling");
  EXPECT_EQ(collective->args["timed"], "launch only");
  // The divisor's fill, then the division: each launch has its device span, in order.
  ASSERT_EQ(launches.size(), 2u);
  ASSERT_EQ(kernels.size(), launches.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    const profiler::Event& kernel = *kernels[i];
    EXPECT_EQ(kernel.name, launches[i]->name);
    EXPECT_EQ(profile.tracks().at(kernel.thread), "GPU cuda:0 stream 0x1");  // the backend's, the first stream made
    EXPECT_GE(kernel.begin_ns, launches[i]->begin_ns) << kernel.name;
    EXPECT_LE(kernel.begin_ns, kernel.end_ns) << kernel.name;
    if (i > 0) {
      EXPECT_GE(kernel.begin_ns, kernels[i - 1]->end_ns) << kernel.name;
    }
  }
  EXPECT_EQ(kernels.back()->name, "div");
}

// The memory a queued device operation uses must not return to the allocator
// before the device is done with it: the backend holds the tensors.
TEST_F(DeviceCollectives, TheBackendHoldsAnOperationsTensors) {
  auto group = make_group();
  Tensor t = values_on(kGpu0, {1, 2});
  group->allreduce(t, ReduceOp::sum)->wait();
  ASSERT_NE(backend_, nullptr);
  EXPECT_GT(t.impl_ptr().use_count(), 1);
  {
    std::lock_guard lock(backend_->mutex);
    ASSERT_EQ(backend_->held.size(), 1u);
    backend_->held.clear();
  }
  EXPECT_EQ(t.impl_ptr().use_count(), 1);
}

// A failure inside a device operation: what it queued is still watched, the
// caller gets the error, and the group is broken.
TEST_F(DeviceCollectives, AFailedOperationIsStillWatchedAndBreaksTheGroup) {
  auto group = make_group();
  Tensor t = values_on(kGpu0, {1, 2, 3, 4});
  group->barrier()->wait();  // makes the backend
  backend_->fail_next = true;
  device_log().take();
  auto work = group->allreduce(t, ReduceOp::sum);
  EXPECT_EMBER_ERROR(work->wait(),
                     "allreduce([4], float32, sum) failed on rank 0 of 2 in group pg/test/ (stand-in backend): "
                     "injected failure");
  const std::vector<std::string> log = device_log().take();
  EXPECT_NE(std::find(log.begin(), log.end(), "watch allreduce([4], float32, sum) e4"), log.end())
      << fmt::format("{}", fmt::join(log, "\n"));
  EXPECT_TRUE(group->failed());
  EXPECT_EMBER_ERROR(group->allreduce(t, ReduceOp::sum)->wait(), "an earlier operation of the group failed");
}

// Note [Choosing a backend]: with a host backend too (backend auto), CPU
// tensors go to it and CUDA tensors to the device backend, made once.
TEST_F(DeviceCollectives, AGroupWithBothBackendsRoutesByDevice) {
  auto group = make_group(std::make_unique<StandInHostBackend>());
  EXPECT_EQ(group->backend_name(), "host");
  EXPECT_EQ(group->backend_name(DeviceType::cpu), "host");
  EXPECT_EQ(group->backend_name(DeviceType::cuda), "stand-in");
  Tensor on_host = from_vector(std::vector<float>{1}, {1});
  Tensor on_gpu = values_on(kGpu0, {1});
  group->allreduce(on_host, ReduceOp::sum)->wait();
  EXPECT_EQ(backends_made, 0);  // no device operation yet: no device backend
  group->allreduce(on_gpu, ReduceOp::sum)->wait();
  group->allreduce(on_gpu, ReduceOp::sum)->wait();
  group->barrier()->wait();
  group->allreduce(on_host, ReduceOp::sum)->wait();
  EXPECT_EQ(backends_made, 1);
  std::vector<std::string> calls;
  for (const std::string& line : device_log().take())
    if (line.starts_with("host") || line.starts_with("allreduce")) calls.push_back(line);
  EXPECT_EQ(calls, (std::vector<std::string>{"host allreduce", "allreduce on s1", "allreduce on s1", "host barrier",
                                             "host allreduce"}));
  EXPECT_EQ(on_gpu.to_vector<float>(), (std::vector<float>{4}));
}

// A group of CUDA tensors only meets at a barrier through its device backend,
// on the current GPU when no operation chose one yet.
TEST_F(DeviceCollectives, ABarrierOfADeviceOnlyGroupUsesTheCurrentGpu) {
  auto group = make_group();
  cuda::set_device(1);
  group->barrier()->wait();
  ASSERT_NE(backend_, nullptr);
  EXPECT_EQ(backend_->device(), kGpu1);
  cuda::set_device(0);
}

// Errors on the calling thread, before anything is queued.
TEST_F(DeviceCollectives, WhatOnlyDeviceTensorsCanGetWrong) {
  auto device_only = make_group();
  EXPECT_EMBER_ERROR(device_only->allreduce(from_vector(std::vector<float>{1}, {1}), ReduceOp::sum),
                     "allreduce: the input tensor ([1], float32) is on the CPU; the group's stand-in backend takes "
                     "CUDA tensors only (backend auto takes both)");
  EXPECT_EMBER_ERROR(device_only->send(values_on(kGpu0, {1}), 1, 3),
                     "send: tag 3 on a CUDA tensor ([1], float32): the nccl backend has no tags");
  EXPECT_EMBER_ERROR(device_only->recv(values_on(kGpu0, {1}), 1, 2), "recv: tag 2 on a CUDA tensor");
  device_only->allreduce(values_on(kGpu0, {1}), ReduceOp::sum)->wait();
  EXPECT_EMBER_ERROR(device_only->allreduce(values_on(kGpu1, {1}), ReduceOp::sum),
                     "allreduce: the input tensor ([1], float32) is on cuda:1, but the group's stand-in backend runs "
                     "on cuda:0");

  auto both = make_group(std::make_unique<StandInHostBackend>());
  EXPECT_EMBER_ERROR(both->allgather(make_tensor({2}, DType::f32, kGpu0), from_vector(std::vector<float>{1}, {1})),
                     "allgather: the output is on cuda:0 but the input on cpu");
  EXPECT_EMBER_ERROR(both->reduce_scatter(from_vector(std::vector<float>{1}, {1}), make_tensor({2}, DType::f32, kGpu0)),
                     "reduce_scatter: the output is on cpu but the input on cuda:0");

  BackendContext context{.rank = 0, .size = 2, .global_ranks = {0, 1}, .store = nullptr,
                         .store_prefix = "pg/host/", .timeout = 5s, .advertise_address = ""};
  ProcessGroup host_only(context, std::make_unique<StandInHostBackend>());
  EXPECT_EMBER_ERROR(host_only.broadcast(values_on(kGpu0, {1}), 0),
                     "broadcast: the input tensor ([1], float32) is on cuda:0; the group's host backend takes CPU "
                     "tensors only (backend auto or nccl takes CUDA tensors)");
  EXPECT_EQ(host_only.backend_name(DeviceType::cuda), "");
}

}  // namespace
}  // namespace ember::distributed
