// StoreAdapter (see store_adapter.h). Layer: backends/gloo.
#include "store_adapter.h"

namespace commx::gloo_backend {

void StoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, Bytes(data.begin(), data.end()));
}

std::vector<char> StoreAdapter::get(const std::string& key) {
  Bytes b = store_->get(key);  // blocks until set or the store's timeout (commx Timeout error)
  return std::vector<char>(b.begin(), b.end());
}

void StoreAdapter::wait(const std::vector<std::string>& keys) { store_->wait(keys); }

void StoreAdapter::wait(const std::vector<std::string>& keys,
                        const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace commx::gloo_backend
