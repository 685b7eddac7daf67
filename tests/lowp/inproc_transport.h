// A tiny in-process Transport for threads-as-ranks tests of the low-precision collectives:
// one FIFO of byte messages per (sender, receiver) pair, condition variables, deadlines.
// Layer: tests.
#pragma once

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "commx/error.h"
#include "transport/transport.h"

namespace commx::testing {

class InprocWorld {
 public:
  explicit InprocWorld(int size) : size_(size) {}
  int size() const { return size_; }
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> queues;  // (src, dst)
  bool aborted = false;
  uint64_t bytes_sent = 0;

 private:
  int size_;
};

class InprocTransport : public Transport {
 public:
  InprocTransport(std::shared_ptr<InprocWorld> w, int rank) : w_(std::move(w)), rank_(rank) {}
  std::string name() const override { return "inproc"; }

  void exchange(std::span<const SendReq> sends, std::span<const RecvReq> recvs,
                Deadline deadline) override {
    std::unique_lock<std::mutex> lk(w_->mu);
    if (w_->aborted) throw Error(ErrorCode::kAborted, "inproc transport aborted");
    for (const SendReq& s : sends) {
      const uint8_t* p = static_cast<const uint8_t*>(s.data);
      w_->queues[{rank_, s.peer}].emplace_back(p, p + s.bytes);
      w_->bytes_sent += s.bytes;
    }
    w_->cv.notify_all();
    for (const RecvReq& r : recvs) {
      auto& q = w_->queues[{r.peer, rank_}];
      if (!w_->cv.wait_until(lk, deadline, [&] { return !q.empty() || w_->aborted; }))
        throw Error(ErrorCode::kTimeout, "inproc: rank " + std::to_string(rank_) +
                                             " timed out waiting for rank " +
                                             std::to_string(r.peer));
      if (w_->aborted) throw Error(ErrorCode::kAborted, "inproc transport aborted");
      std::vector<uint8_t> m = std::move(q.front());
      q.pop_front();
      if (m.size() != r.bytes)
        throw Error(ErrorCode::kInvalidArgument, "inproc: rank " + std::to_string(rank_) +
                                                     " expected " + std::to_string(r.bytes) +
                                                     " bytes from rank " + std::to_string(r.peer) +
                                                     ", got " + std::to_string(m.size()));
      if (!m.empty()) std::memcpy(r.data, m.data(), m.size());
    }
  }

  void abort() override {
    std::lock_guard<std::mutex> lk(w_->mu);
    w_->aborted = true;
    w_->cv.notify_all();
  }

 private:
  std::shared_ptr<InprocWorld> w_;
  int rank_;
};

// Runs fn(rank, transport) on `size` threads; rethrows the first exception (after joining all).
// A failing rank aborts the world so the others do not wait for it until their deadline.
inline void run_ranks(int size, const std::function<void(int, Transport&)>& fn,
                      std::shared_ptr<InprocWorld> world = nullptr) {
  if (!world) world = std::make_shared<InprocWorld>(size);
  std::vector<std::exception_ptr> errs(size);
  std::vector<std::thread> th;
  for (int r = 0; r < size; ++r) {
    th.emplace_back([&, r] {
      InprocTransport t(world, r);
      try {
        fn(r, t);
      } catch (...) {
        errs[r] = std::current_exception();
        t.abort();
      }
    });
  }
  for (auto& t : th) t.join();
  // Prefer the root cause over the Aborted errors it caused on the other ranks.
  for (auto& e : errs) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      if (err.code() != ErrorCode::kAborted) throw;
    } catch (...) {
      throw;
    }
  }
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

}  // namespace commx::testing
