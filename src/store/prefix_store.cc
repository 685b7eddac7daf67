// PrefixStore: a view of another store with every key under "<prefix>/" (c10d PrefixStore).
// Layer: store.
#include "commx/store.h"

namespace commx {
namespace {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : prefix_(std::move(prefix) + "/"), base_(std::move(base)) {
    timeout_ = base_->timeout();
  }
  void set(const std::string& k, const Bytes& v) override { base_->set(key(k), v); }
  // Blocking reads honour this view's timeout (set_timeout is not virtual, so the base keeps
  // its own): wait here first, then the base's read finds the key present.
  Bytes get(const std::string& k) override {
    base_->wait({key(k)}, timeout_);
    return base_->get(key(k));
  }
  int64_t add(const std::string& k, int64_t d) override { return base_->add(key(k), d); }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    return base_->compare_set(key(k), e, d);
  }
  bool check(const std::vector<std::string>& ks) override { return base_->check(keys(ks)); }
  void wait(const std::vector<std::string>& ks, Timeout t) override { base_->wait(keys(ks), t); }
  bool delete_key(const std::string& k) override { return base_->delete_key(key(k)); }
  // Counts every key of the base store, as c10d's PrefixStore does.
  int64_t num_keys() override { return base_->num_keys(); }
  void append(const std::string& k, const Bytes& v) override { base_->append(key(k), v); }
  std::vector<Bytes> multi_get(const std::vector<std::string>& ks) override {
    auto full = keys(ks);
    base_->wait(full, timeout_);
    return base_->multi_get(full);
  }
  void multi_set(const std::vector<std::string>& ks, const std::vector<Bytes>& vs) override {
    base_->multi_set(keys(ks), vs);
  }

 private:
  std::string key(const std::string& k) const { return prefix_ + k; }
  std::vector<std::string> keys(const std::vector<std::string>& ks) const {
    std::vector<std::string> out;
    out.reserve(ks.size());
    for (auto& k : ks) out.push_back(key(k));
    return out;
  }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace

std::shared_ptr<Store> make_prefix_store(const std::string& prefix, std::shared_ptr<Store> base) {
  return std::make_shared<PrefixStore>(prefix, std::move(base));
}

}  // namespace commx
