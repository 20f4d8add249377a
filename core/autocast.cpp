// The thread-local autocast policy and its guards (core/autocast.h), and the
// casts the op entry points ask for (core/autocast_ops.h), with the cache of
// parameters' casts (Note [Autocast cast cache] in core/README.md).
#include "core/autocast.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/autocast_ops.h"
#include "core/grad_hook.h"
#include "core/ops/elementwise_kernels.h"
#include "core/ops/views.h"

namespace ember {
namespace detail {
constinit thread_local AutocastState t_autocast_state;
}  // namespace detail

namespace {

// One cached cast: the geometry and version of the source it was made from,
// and the cast itself, made without history.
struct CachedCast {
  std::weak_ptr<Storage> source;  // expired once the source's memory is freed, whatever reuses its address
  int64_t offset = 0;
  Shape shape;
  Strides strides;
  DType dtype = DType::f32;  // the cast's
  uint64_t source_version = 0;
  uint64_t source_generation = 0;  // ZeRO-3 refills released memory without a version bump
  Tensor cast;
  uint64_t cast_version = 0;  // an in-place write into a use of the cast bumps it

  bool casts(const Tensor& t, DType to) const {
    return dtype == to && offset == t.offset() && shape == t.shape() && strides == t.strides() &&
           source.lock() == t.storage();
  }
  bool current(const Tensor& t) const {
    return source_version == t.version() && source_generation == t.storage()->generation() &&
           cast_version == cast.version();
  }
};

// Sources a sweep lets die between sweeps, at the least (see sweep_expired_casts).
constexpr size_t kSweepSlack = 16;

// This thread's cache: entries by the source's storage; emptied when the
// outermost AutocastGuard goes.
struct CastCache {
  int depth = 0;  // AutocastGuards alive on this thread
  bool enabled = true;
  std::unordered_map<const Storage*, std::vector<CachedCast>> entries;
  size_t sweep_at = kSweepSlack;  // the number of sources at which the next sweep runs
};
thread_local CastCache t_cast_cache;
std::atomic<detail::LeafQuery> g_leaf_query{nullptr};

uint8_t device_bit(DeviceType device) { return uint8_t(1u << int(device)); }

// The dtype `t` is cast to for an op of `kind`, or `t`'s own when it stays.
DType autocast_target(const Tensor& t, AutocastKind kind) {
  const DType dtype = t.dtype();
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) return dtype;
  const DeviceType device = t.device().type;
  if (!is_autocast_enabled(device)) return dtype;
  return kind == AutocastKind::f32 ? DType::f32 : autocast_dtype(device);
}

// Whether autocast keeps the cast of `t`: an f32 parameter (or a view of one,
// as the transposed weight nn::Linear multiplies by) cast to the lower
// precision, as PyTorch's cache keeps only those. Activations are left out:
// they are used once and the cache would hold their casts to the scope's end.
bool caches_cast_of(const Tensor& t, AutocastKind kind) {
  if (!t_cast_cache.enabled || kind != AutocastKind::lower_precision || t.dtype() != DType::f32) return false;
  if (t.impl()->no_grad_view) return false;  // a plain alias: its casts stay as uncached as its writes
  ensure_backends_registered();              // the autograd layer installs the leaf query there
  const detail::LeafQuery is_leaf_requiring_grad = g_leaf_query.load(std::memory_order_acquire);
  if (!is_leaf_requiring_grad) return false;
  const std::shared_ptr<TensorImpl>& base = t.impl()->view_base;
  return is_leaf_requiring_grad(base ? Tensor(base) : t);
}

// Drops the casts whose source is freed: a leaf used in one iteration only (an
// input that requires grad, for a saliency map) would otherwise keep its cast
// to the scope's end, and a training loop inside one guard would grow without
// bound. A sweep runs when the sources have grown by a quarter (at least
// kSweepSlack) since the last one: O(1) amortised per new source, and the dead
// casts held stay a fraction of the live ones (the parameters').
void sweep_expired_casts() {
  CastCache& cache = t_cast_cache;
  if (cache.entries.size() < cache.sweep_at) return;
  for (auto source = cache.entries.begin(); source != cache.entries.end();) {
    std::erase_if(source->second, [](const CachedCast& e) { return e.source.expired(); });
    source = source->second.empty() ? cache.entries.erase(source) : std::next(source);
  }
  cache.sweep_at = cache.entries.size() + std::max(kSweepSlack, cache.entries.size() / 4);
}

// `t.to(dtype)` through the cache: the values are made once, and each use
// gets its own differentiable copy node over them, as `to` would give it, so
// each use sends its gradient to `t` once (in the layout `to`'s would have)
// and a second backward in the same scope finds a node of its own graph.
Tensor cached_to(const Tensor& t, DType dtype) {
  sweep_expired_casts();
  std::vector<CachedCast>& entries = t_cast_cache.entries[t.storage().get()];
  std::erase_if(entries, [](const CachedCast& e) { return e.source.expired(); });
  auto found = std::find_if(entries.begin(), entries.end(), [&](const CachedCast& e) { return e.casts(t, dtype); });
  if (found == entries.end() || !found->current(t)) {
    Tensor cast;
    {
      NoGradGuard no_grad;
      cast = t.to(dtype);
    }
    CachedCast entry{t.storage(), t.offset(), t.shape(),  t.strides(),
                     dtype,       t.version(), t.storage()->generation(), cast, cast.version()};
    if (found == entries.end()) {
      found = entries.insert(entries.end(), std::move(entry));
    } else {
      *found = std::move(entry);  // the weight was written: its old cast is stale
    }
  }
  const Tensor& cast = found->cast;
  Tensor use = Tensor::make(cast.storage(), dtype, cast.shape(), cast.strides(), cast.offset());
  return with_grad(to_grad, use, {&t});
}

// `t` cast to `dtype` in its own memory layout when it is a permutation of a
// dense tensor, as the transposed weight a Linear multiplies by: the copy is
// one linear pass instead of a transposing one, and the product's gradient
// comes back in the weight's layout (Note [Autocast]). Views only, so the
// cast stays differentiable; the copy itself goes through the cache when
// `cached`.
Tensor cast_in_layout(const Tensor& t, DType dtype, bool cached) {
  auto cast = [&](const Tensor& dense) { return cached ? cached_to(dense, dtype) : dense.to(dtype); };
  if (t.is_contiguous()) return cast(t);
  Dims order;
  for (int d = 0; d < t.dim(); ++d) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  Tensor dense = t.permute(order);
  if (!dense.is_contiguous()) return cast(t);  // a slice or a broadcast: gathered into a fresh tensor
  Dims inverse = order;
  for (int d = 0; d < t.dim(); ++d) inverse[order[d]] = d;
  return cast(dense).permute(inverse);
}

}  // namespace

void detail::set_autocast_leaf_query(LeafQuery query) { g_leaf_query.store(query, std::memory_order_release); }

bool is_autocast_enabled(DeviceType device) {
  return (detail::t_autocast_state.enabled & device_bit(device)) != 0;
}

DType autocast_dtype(DeviceType device) { return detail::t_autocast_state.dtype[int(device)]; }

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled, std::optional<bool> cache_enabled)
    : device_(device),
      previous_enabled_(is_autocast_enabled(device)),
      previous_dtype_(autocast_dtype(device)),
      previous_cache_enabled_(t_cast_cache.enabled) {
  EMBER_CHECK(dtype == DType::bf16 || dtype == DType::f16,
              "AutocastGuard: the autocast dtype must be bfloat16 or float16, got {}", dtype);
  detail::AutocastState& state = detail::t_autocast_state;
  state.dtype[int(device)] = dtype;
  state.enabled = enabled ? state.enabled | device_bit(device) : state.enabled & ~device_bit(device);
  t_cast_cache.enabled = cache_enabled.value_or(t_cast_cache.enabled);
  ++t_cast_cache.depth;
}

AutocastGuard::~AutocastGuard() {
  detail::AutocastState& state = detail::t_autocast_state;
  state.dtype[int(device_)] = previous_dtype_;
  state.enabled =
      previous_enabled_ ? state.enabled | device_bit(device_) : state.enabled & ~device_bit(device_);
  t_cast_cache.enabled = previous_cache_enabled_;
  if (--t_cast_cache.depth == 0) {
    t_cast_cache.entries.clear();
    t_cast_cache.sweep_at = kSweepSlack;
  }
}

NoAutocastGuard::NoAutocastGuard() : previous_enabled_(detail::t_autocast_state.enabled) {
  detail::t_autocast_state.enabled = 0;
}

NoAutocastGuard::~NoAutocastGuard() { detail::t_autocast_state.enabled = previous_enabled_; }

bool detail::autocast_changes_any(AutocastKind kind, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs)
    if (t && t->defined() && autocast_target(*t, kind) != t->dtype()) return true;
  return false;
}

Tensor autocast_input(const Tensor& t, AutocastKind kind) {
  if (!t.defined()) return t;
  const DType target = autocast_target(t, kind);
  if (target == t.dtype()) return t;
  return cast_in_layout(t, target, caches_cast_of(t, kind));
}

}  // namespace ember
