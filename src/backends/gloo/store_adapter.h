// Gloo's rendezvous::Store interface over a commx Store, so Gloo contexts meet through the
// comm's own store (TCP/file/hash) -- Debian's Gloo has no TCP store, and its FileStore throws
// when a key is written twice. Layer: backends/gloo.
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>

#include "commx/store.h"

namespace commx::gloo_backend {

class StoreAdapter : public ::gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(std::shared_ptr<commx::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<commx::Store> store_;
};

}  // namespace commx::gloo_backend
