// The profiler's event store (recorder.h) and the recording calls of
// profiler.h and kernel_span.h.
#include "core/profiler/recorder.h"

#include <pthread.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "core/error.h"

namespace ember::profiler {

namespace detail {

std::atomic<int> g_recording{0};

namespace {

struct ThreadBuffer {
  int thread = 0;
  std::string name;
  std::mutex mutex;  // uncontended but for the one stop_session that reads it
  std::vector<Event> events;
};

struct Session {
  uint64_t generation = 0;
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::shared_ptr<ThreadBuffer> communication;
};

// Heap objects never destroyed: EMBER_PROFILE's exit handler reads them after
// static destruction may have begun.
std::mutex& session_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::shared_ptr<Session>& current_session() {
  static auto* session = new std::shared_ptr<Session>;
  return *session;
}
std::atomic<uint64_t> g_generation{0};
std::atomic<int> g_next_thread{1};
std::atomic<int> g_rank{-1};
std::atomic<bool> g_has_offset{false};
std::atomic<int64_t> g_offset_ns{0};

thread_local std::shared_ptr<ThreadBuffer> t_buffer;
thread_local uint64_t t_generation = 0;
thread_local int t_thread = 0;

std::string this_thread_name() {
  char name[32] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0 || name[0] == '\0') return "thread";
  return name;
}

// This thread's buffer in the current session (registered on first use), or
// null when the session ended meanwhile. Shared: a stop_session on another
// thread may drop the session's reference while the caller appends, and the
// communication buffer must outlive that append (a thread's own buffer is
// held by t_buffer as well).
std::shared_ptr<ThreadBuffer> buffer_for(Track track) {
  uint64_t generation = g_generation.load(std::memory_order_acquire);
  if (track == Track::this_thread && t_generation == generation && t_buffer) return t_buffer;
  std::lock_guard lock(session_mutex());
  std::shared_ptr<Session> session = current_session();
  if (!session) return nullptr;
  if (track == Track::communication) return session->communication;
  if (t_thread == 0) t_thread = g_next_thread.fetch_add(1);
  t_buffer = std::make_shared<ThreadBuffer>();
  t_buffer->thread = t_thread;
  t_buffer->name = this_thread_name() + " (" + std::to_string(t_thread) + ")";
  t_generation = session->generation;
  session->buffers.push_back(t_buffer);
  return t_buffer;
}

}  // namespace

void start_session(int mask, const char* who) {
  std::lock_guard lock(session_mutex());
  EMBER_CHECK(!current_session(),
              "{}: a profile is already recording in this process (one at a time; EMBER_PROFILE and "
              "EMBER_DDP_TRACE start one for the whole run)",
              who);
  auto session = std::make_shared<Session>();
  session->generation = g_generation.load() + 1;
  session->communication = std::make_shared<ThreadBuffer>();
  session->communication->thread = kCommunicationTrack;
  session->communication->name = "communication";
  current_session() = session;
  reset_device_spans();
  g_generation.store(session->generation, std::memory_order_release);
  g_recording.store(mask, std::memory_order_relaxed);
}

void stop_session(std::vector<Event>& events, std::map<int, std::string>& tracks) {
  std::shared_ptr<Session> session;
  {
    std::lock_guard lock(session_mutex());
    g_recording.store(0, std::memory_order_relaxed);
    session.swap(current_session());
  }
  if (!session) return;
  session->buffers.push_back(session->communication);
  for (const auto& buffer : session->buffers) {
    std::lock_guard lock(buffer->mutex);
    if (buffer->events.empty() && buffer->thread == kCommunicationTrack) continue;
    tracks[buffer->thread] = buffer->name;
    for (Event& event : buffer->events) events.push_back(std::move(event));
    buffer->events.clear();
  }
  take_device_spans(events, tracks);
}

void append(Event event, Track track) {
  std::shared_ptr<ThreadBuffer> buffer = buffer_for(track);
  if (!buffer) return;
  event.thread = buffer->thread;
  std::lock_guard lock(buffer->mutex);
  buffer->events.push_back(std::move(event));
}

int process_rank() { return g_rank.load(); }
bool has_clock_offset() { return g_has_offset.load(); }
int64_t clock_offset_ns() { return g_offset_ns.load(); }

}  // namespace detail

const char* category_name(Category category) {
  switch (category) {
    case Category::op: return "op";
    case Category::backward: return "backward";
    case Category::module: return "module";
    case Category::collective: return "collective";
    case Category::bucket: return "bucket";
    case Category::data: return "data";
    case Category::optimizer: return "optimizer";
    case Category::checkpoint: return "checkpoint";
    case Category::user: return "user";
    case Category::device_kernel: return "device_kernel";
  }
  return "user";
}

void record_span(Recording what, Category category, std::string name, int64_t begin_ns, int64_t end_ns,
                 nlohmann::json args, Track track) {
  if (!recording(what)) return;
  Event event;
  event.category = category;
  event.name = std::move(name);
  event.begin_ns = begin_ns;
  event.end_ns = end_ns < begin_ns ? begin_ns : end_ns;
  event.args = std::move(args);
  detail::append(std::move(event), track);
}

void record_instant(Recording what, Category category, std::string name, nlohmann::json args, Track track) {
  if (!recording(what)) return;
  Event event;
  event.category = category;
  event.name = std::move(name);
  event.begin_ns = event.end_ns = now_ns();
  event.instant = true;
  event.args = std::move(args);
  detail::append(std::move(event), track);
}

void set_process_rank(int rank) { detail::g_rank.store(rank); }

void set_clock_offset_ns(int64_t offset_ns) {
  detail::g_offset_ns.store(offset_ns);
  detail::g_has_offset.store(true);
}

// A kernel on a device runs after its launch: besides the launch span,
// Note [Device time of kernels] times it on its stream.
KernelSpan::KernelSpan(std::string_view op, DeviceType device, KernelFacts facts)
    : op_(op), device_(device), facts_(std::move(facts)), begin_ns_(now_ns()) {
  if (device_ != DeviceType::cpu) detail::begin_device_span(device_);
}

KernelSpan::~KernelSpan() {
  int64_t end = now_ns();
  if (device_ != DeviceType::cpu) detail::end_device_span(op_, device_, facts_.dtype, facts_.flops, facts_.bytes);
  Event event;
  event.category = Category::op;
  event.name = std::string(op_);
  event.begin_ns = begin_ns_;
  event.end_ns = end;
  event.device = device_;
  event.dtype = facts_.dtype;
  event.flops = facts_.flops;
  event.bytes = facts_.bytes;
  event.shapes = std::move(facts_.shapes);
  detail::append(std::move(event), Track::this_thread);
}

}  // namespace ember::profiler
