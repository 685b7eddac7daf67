// Network fault tests of the TCP transport: two ranks in two network namespaces joined by a veth
// pair (addresses 10.231.7.1/.2, only inside the namespaces this test creates); data must flow,
// and cutting the link mid-transfer must end both ranks' waits with PeerFailure or Timeout within
// the deadline, never a hang; the same for a cpu comm forced onto TCP. Skips unless run as root
// with a working `ip netns`.
// Layer: tests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>

#include "commx/comm.h"
#include "tcp_test_util.h"

namespace commx::test {
namespace {

int sh(const std::string& cmd) {
  int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Two namespaces and a veth pair between them; removed by the destructor (deleting a namespace
// deletes its end of the pair, and with it the other end).
class NetnsPair {
 public:
  NetnsPair() {
    std::string id = std::to_string(getpid() % 100000);
    ns_ = {"commx_tcp_" + id + "_a", "commx_tcp_" + id + "_b"};
    veth_ = {"cxta" + id, "cxtb" + id};
    cleanup();
    ok_ = sh("ip netns add " + ns_[0]) == 0 && sh("ip netns add " + ns_[1]) == 0 &&
          sh("ip link add " + veth_[0] + " type veth peer name " + veth_[1]) == 0;
    for (int i = 0; ok_ && i < 2; ++i) {
      std::string n = "ip -n " + ns_[i] + " ";
      ok_ = sh("ip link set " + veth_[i] + " netns " + ns_[i]) == 0 &&
            sh(n + "addr add " + addr(i) + "/30 dev " + veth_[i]) == 0 &&
            sh(n + "link set " + veth_[i] + " up") == 0 && sh(n + "link set lo up") == 0;
    }
  }
  ~NetnsPair() { cleanup(); }
  bool ok() const { return ok_; }
  static std::string addr(int i) { return "10.231.7." + std::to_string(i + 1); }
  const std::string& ns(int i) const { return ns_[i]; }
  const std::string& veth(int i) const { return veth_[i]; }

  // Moves the calling (single-threaded, forked) process into namespace i.
  bool enter(int i) const {
    int fd = open(("/var/run/netns/" + ns_[i]).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = setns(fd, CLONE_NEWNET) == 0;
    close(fd);
    return ok;
  }

 private:
  void cleanup() {
    for (const auto& n : ns_) sh("ip netns del " + n);
    sh("ip link del " + veth_[0]);  // only if it never left the root namespace
  }
  std::vector<std::string> ns_;
  std::vector<std::string> veth_;
  bool ok_ = false;
};

bool netns_usable() {
  if (geteuid() != 0) return false;
  return sh("ip netns list") == 0;
}

class TcpNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!netns_usable()) GTEST_SKIP() << "needs root and `ip netns`";
    net_ = std::make_unique<NetnsPair>();
    if (!net_->ok()) GTEST_SKIP() << "could not create namespaces and a veth pair";
  }
  void TearDown() override { net_.reset(); }

  std::unique_ptr<Transport> rank_transport(int r, const TempDir& dir, const std::string& name) {
    if (!net_->enter(r)) throw Error(ErrorCode::kSystem, "setns failed");
    return make_tcp_transport(r, 2, std::make_shared<DirStore>(dir.path()), name,
                              {{"socket_ifaddr", NetnsPair::addr(r)}});
  }

  // Both ranks stream 8 MiB messages both ways, each exchange bounded by `deadline_ms`, until
  // `cut` (run by the parent once data flows) breaks the link; each rank must then fail with
  // PeerFailure or Timeout, no later than the deadline plus slack.
  void cut_mid_transfer(const std::string& cut) {
    TempDir dir;
    std::string ready = dir.path() + "/flowing";
    const int64_t deadline_ms = 2500;
    const size_t bytes = 8u << 20;
    auto st = run_processes(
        2,
        [&](int r) {
          auto t = rank_transport(r, dir, "cut");
          std::vector<uint8_t> out(bytes, r), in(bytes);
          for (int i = 0;; ++i) {
            SendReq s{1 - r, out.data(), bytes};
            RecvReq v{1 - r, in.data(), bytes};
            auto t0 = Clock::now();
            try {
              t->exchange({&s, 1}, {&v, 1}, in_ms(deadline_ms));
            } catch (const Error& e) {
              double ms = ms_since(t0);
              std::fprintf(stderr, "rank %d after %d transfers, %.0f ms: %s\n", r, i, ms, e.what());
              bool code_ok = e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kTimeout;
              return code_ok && ms < deadline_ms + 1000 && i > 0 ? 0 : 1;
            }
            if (in[0] != 1 - r || in[bytes - 1] != 1 - r) return 2;
            if (i == 2 && r == 0) touch(ready);
          }
        },
        30000, nullptr,
        [&](std::vector<pid_t>&) {
          auto end = Clock::now() + std::chrono::seconds(20);
          while (!std::filesystem::exists(ready) && Clock::now() < end) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
          EXPECT_EQ(sh(cut), 0) << cut;
        });
    EXPECT_EQ(st[0], 0);
    EXPECT_EQ(st[1], 0);
  }

  static void touch(const std::string& path) { std::ofstream(path) << "1"; }

  std::unique_ptr<NetnsPair> net_;
};

TEST_F(TcpNetns, DataFlowsBetweenNamespaces) {
  TempDir dir;
  auto st = run_processes(2, [&](int r) {
    auto t = rank_transport(r, dir, "flow");
    auto out = make_payload(r, 1, (1 << 20) + 11);
    std::vector<uint8_t> in(out.size());
    SendReq s{1 - r, out.data(), out.size()};
    RecvReq v{1 - r, in.data(), in.size()};
    t->exchange({&s, 1}, {&v, 1}, in_ms(20000));
    t->exchange({&s, 1}, {&v, 1}, in_ms(20000));  // both done with the first before exiting
    return first_mismatch(in, 1 - r, 1) == -1 ? 0 : 1;
  });
  EXPECT_EQ(st[0], 0);
  EXPECT_EQ(st[1], 0);
}

TEST_F(TcpNetns, LinkDownBeforeConnectIsTimeoutNamingThePeer) {
  ASSERT_EQ(sh("ip -n " + net_->ns(1) + " link set " + net_->veth(1) + " down"), 0);
  TempDir dir;
  auto st = run_processes(2, [&](int r) {
    auto t = rank_transport(r, dir, "down");
    int x = r;
    SendReq s{1 - r, &x, sizeof(x)};
    RecvReq v{1 - r, &x, sizeof(x)};
    auto t0 = Clock::now();
    try {
      t->exchange({&s, 1}, {&v, 1}, in_ms(1500));
    } catch (const Error& e) {
      double ms = ms_since(t0);
      std::fprintf(stderr, "rank %d, %.0f ms: %s\n", r, ms, e.what());
      std::string want = "rank " + std::to_string(1 - r);
      return e.code() == ErrorCode::kTimeout && ms < 2500 &&
                     std::string(e.what()).find(want) != std::string::npos
                 ? 0
                 : 1;
    }
    return 2;
  });
  EXPECT_EQ(st[0], 0);
  EXPECT_EQ(st[1], 0);
}

TEST_F(TcpNetns, LinkDownMidTransferEndsWithinDeadline) {
  cut_mid_transfer("ip -n " + net_->ns(0) + " link set " + net_->veth(0) + " down");
}

TEST_F(TcpNetns, VethDeletedMidTransferEndsWithinDeadline) {
  cut_mid_transfer("ip -n " + net_->ns(1) + " link del " + net_->veth(1));
}

TEST_F(TcpNetns, CpuCommOverTcpEndsOnLinkCut) {
  // A cpu comm forced onto TCP, its ranks in the two namespaces (rendezvous through a FileStore:
  // the filesystem is shared, the network is not). all_reduce results are checked while the link
  // is up; once it is cut, the op in flight ends within its timeout and later ops fail at once.
  TempDir dir;
  std::string ready = dir.path() + "/flowing";
  const auto timeout = std::chrono::milliseconds(2500);
  auto st = run_processes(
      2,
      [&](int r) {
        if (!net_->enter(r)) return 10;
        CommOptions o;
        o.store = make_file_store(dir.path() + "/store", 2);
        o.rank = r;
        o.size = 2;
        o.timeout = timeout;
        o.hints = {{"transport", "tcp"}, {"socket_ifaddr", NetnsPair::addr(r)}};
        auto comm = Comm::create("cpu", Device::cpu(), "netns", o);
        std::vector<float> v(1 << 20);
        for (int i = 0;; ++i) {
          std::fill(v.begin(), v.end(), static_cast<float>(r + i));
          auto t0 = Clock::now();
          try {
            comm->all_reduce(make_tensor(v.data(), v.size()), ReduceOp::SUM);
          } catch (const Error& e) {
            double ms = ms_since(t0);
            std::fprintf(stderr, "rank %d after %d all_reduces, %.0f ms: %s\n", r, i, ms, e.what());
            bool code_ok = e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kTimeout;
            if (!code_ok || ms > timeout.count() + 1000 || i < 3) return 1;
            t0 = Clock::now();
            try {
              comm->all_reduce(make_tensor(v.data(), v.size()), ReduceOp::SUM);
            } catch (const Error&) {
              return ms_since(t0) < 500 ? 0 : 2;  // fails fast, no second wait
            }
            return 3;
          }
          if (v.front() != 2 * i + 1 || v.back() != 2 * i + 1) return 4;
          if (i == 3 && r == 0) touch(ready);
        }
      },
      30000, nullptr,
      [&](std::vector<pid_t>&) {
        auto end = Clock::now() + std::chrono::seconds(20);
        while (!std::filesystem::exists(ready) && Clock::now() < end) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        EXPECT_EQ(sh("ip -n " + net_->ns(0) + " link set " + net_->veth(0) + " down"), 0);
      });
  EXPECT_EQ(st[0], 0);
  EXPECT_EQ(st[1], 0);
}

}  // namespace
}  // namespace commx::test
