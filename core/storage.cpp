// Storage ownership: allocator-backed or external (from_blob).
#include "core/storage.h"

#include "core/allocator.h"
#include "core/error.h"

namespace ember {

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device)) {
  data_ = allocator_->allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (released_) return;
  if (allocator_) allocator_->deallocate(data_, nbytes_);
  else if (deleter_) deleter_(data_);
}


void Storage::release() {
  EMBER_CHECK(allocator_ != nullptr, "Storage::release: only memory from ember's allocator can be released, not "
                                     "external memory (from_blob)");
  if (released_) return;
  allocator_->deallocate(data_, nbytes_);
  data_ = nullptr;
  released_ = true;
  ++generation_;
}

void Storage::reallocate() {
  if (!released_) return;
  data_ = allocator_->allocate(nbytes_);
  released_ = false;
}

void Storage::throw_released() const {
  EMBER_CHECK(false,
              "this tensor's memory ({} bytes on {}) is released: it is a parameter sharded by ZeRO-3/FSDP, "
              "gathered only while its module runs. Call the module (module(x), not module.forward(x)), or "
              "read the full parameters through the Accelerator (get_state_dict, save_model)",
              nbytes_, device_.str());
}

}  // namespace ember
