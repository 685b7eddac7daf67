// Threads-as-ranks helper (see thread_ranks.h). Layer: tests.
#include "thread_ranks.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <regex>
#include <thread>
#include <vector>

#include "commx/store.h"

namespace commx::testing {
namespace {

// Comm::create numbers comms per process ("commx/<name>/<k>/..."), so threads of one process
// would each get a different k for the same comm. Every run uses a fresh name, so the number can
// be dropped: this wrapper rewrites it to 0 for all ranks.
class SameInstanceStore : public Store {
 public:
  explicit SameInstanceStore(std::shared_ptr<Store> base) : base_(std::move(base)) {
    timeout_ = base_->timeout();
  }
  void set(const std::string& k, const Bytes& v) override { base_->set(key(k), v); }
  Bytes get(const std::string& k) override { return base_->get(key(k)); }
  int64_t add(const std::string& k, int64_t d) override { return base_->add(key(k), d); }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    return base_->compare_set(key(k), e, d);
  }
  bool check(const std::vector<std::string>& ks) override { return base_->check(keys(ks)); }
  void wait(const std::vector<std::string>& ks, Timeout t) override { base_->wait(keys(ks), t); }
  bool delete_key(const std::string& k) override { return base_->delete_key(key(k)); }
  int64_t num_keys() override { return base_->num_keys(); }
  void append(const std::string& k, const Bytes& v) override { base_->append(key(k), v); }
  std::vector<Bytes> multi_get(const std::vector<std::string>& ks) override {
    return base_->multi_get(keys(ks));
  }
  void multi_set(const std::vector<std::string>& ks, const std::vector<Bytes>& vs) override {
    base_->multi_set(keys(ks), vs);
  }

 private:
  static std::string key(const std::string& k) {
    static const std::regex re("^commx/([^/]+)/[0-9]+/");
    return std::regex_replace(k, re, "commx/$1/0/", std::regex_constants::format_first_only);
  }
  static std::vector<std::string> keys(const std::vector<std::string>& ks) {
    std::vector<std::string> out;
    for (const auto& k : ks) out.push_back(key(k));
    return out;
  }
  std::shared_ptr<Store> base_;
};

}  // namespace

void run_thread_ranks(int n, const std::string& backend, const std::function<void(Comm&)>& fn,
                      Timeout timeout) {
  static std::atomic<int> runs{0};
  std::string name = "t" + std::to_string(runs++);
  auto store = std::make_shared<SameInstanceStore>(make_hash_store());
  store->set_timeout(timeout);
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        CommOptions o;
        o.rank = r;
        o.size = n;
        o.store = store;
        o.timeout = timeout;
        auto comm = Comm::create(backend, Device::cpu(), name, o);
        fn(*comm);
        comm->finalize();
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace commx::testing
