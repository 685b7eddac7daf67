// Interoperability with PyTorch's own TCPStore (both its libuv and classic servers): a torch
// client against the commx server, and a commx client against torch servers, including torch's
// wait-for-workers. Skipped when python3 has no torch package.
// Layer: tests (store).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "commx/error.h"
#include "store/store_env.h"

namespace commx::test {
namespace {

using namespace std::chrono_literals;

bool have_torch() {
  static int ok = -1;
  // find_spec does not import torch (seconds on a busy machine); the scripts do that.
  if (ok < 0)
    ok = std::system(
             "python3 -c 'import importlib.util as u, sys; "
             "sys.exit(u.find_spec(\"torch\") is None)' >/dev/null 2>&1") == 0;
  return ok == 1;
}

// A python3 child whose stdout we read line by line.
class PyProc {
 public:
  explicit PyProc(const std::string& script) {
    int p[2];
    if (::pipe(p) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(p[1], 1);
      ::close(p[0]);
      ::close(p[1]);
      ::execlp("python3", "python3", "-u", "-c", script.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(p[1]);
    out_ = p[0];
  }
  ~PyProc() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_);
  }
  // The next stdout line, or "" on EOF / timeout.
  std::string line(int timeout_ms = 60000) {
    std::string s;
    for (;;) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) return s;
      char c;
      if (::read(out_, &c, 1) != 1) return s;
      if (c == '\n') return s;
      s += c;
    }
  }
  // The exit code (-1 if it had to be killed after `timeout`).
  int wait(std::chrono::seconds timeout = 60s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(5ms);
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

const char* kPrelude = R"(
import sys, datetime
from torch.distributed import TCPStore
T = datetime.timedelta(seconds=30)
def check(c, what):
    if not c:
        print("FAIL " + what, file=sys.stderr); sys.exit(1)
)";

TEST(TorchInterop, TorchClientAgainstCommxServer) {
  if (!have_torch()) GTEST_SKIP() << "torch is not importable by python3";
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  TCPStoreOptions o;
  o.port = srv->port();
  o.timeout = 30s;
  auto s = make_tcp_store("127.0.0.1", o);
  s->set("from_commx", B("hello"));
  s->add("cnt", 2);
  std::string script = std::string(kPrelude) + R"(
port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
s = TCPStore("127.0.0.1", )" +
                       std::to_string(o.port) +
                       R"(, world_size=2, is_master=False, timeout=T)
check(s.get("from_commx") == b"hello", "get")
check(s.add("cnt", 5) == 7, "add")
s.set("from_torch", b"world")
check(s.compare_set("cs", "", "v1") == b"v1", "cs create")
check(s.compare_set("cs", "v1", "v2") == b"v2", "cs swap")
check(s.compare_set("cs", "zz", "v3") == b"v2", "cs mismatch")
s.append("ap", b"ab"); s.append("ap", b"cd")
check(s.get("ap") == b"abcd", "append")
s.multi_set(["m1", "m2"], [b"x", b"y"])
check(s.multi_get(["m2", "m1"]) == [b"y", b"x"], "multi")
check(s.check(["m1", "from_commx"]), "check")
check(not s.check(["nope"]), "check missing")
check(s.delete_key("m2") and not s.delete_key("m2"), "delete")
try:
    s.wait(["never"], datetime.timedelta(milliseconds=200)); check(False, "wait timeout")
except Exception as e:
    check("imeout" in str(e) or "imed out" in str(e), "timeout text: " + str(e))
if hasattr(s, "queue_push"):
    s.queue_push("q", b"a"); s.queue_push("q", b"b")
    check(s.queue_len("q") == 2, "queue_len")
    check(s.queue_pop("q") == b"a", "queue_pop")
if hasattr(s, "list_keys"):
    check("from_commx" in s.list_keys(), "list_keys")
print("READY")
s.wait(["bye"])
)";
  PyProc py(script);
  EXPECT_EQ(py.line(), "READY");
  EXPECT_EQ(S(s->get("from_torch")), "world");
  EXPECT_EQ(s->add("cnt", 0), 7);
  EXPECT_EQ(S(s->get("cs")), "v2");
  EXPECT_FALSE(s->check({"m2"}));
  s->set("bye", B("1"));
  EXPECT_EQ(py.wait(), 0);
  // torch's client (world_size=2, not master) counted itself in init/, a raw key.
  EXPECT_EQ(s->num_keys(), 8);  // from_commx cnt from_torch cs ap m1 bye init/
}

void commx_client_against_torch_server(bool libuv) {
  std::string script =
      std::string(kPrelude) + "s = TCPStore('127.0.0.1', 0, is_master=True, " +
      "wait_for_workers=False, timeout=T, use_libuv=" + (libuv ? "True" : "False") + R"()
print("PORT", s.port)
s.wait(["done"])
check(s.get("from_commx") == b"hi", "commx set")
check(s.get("cnt") == b"10", "commx add")
check(s.get("cs") == b"new", "commx compare_set")
check(s.get("ap") == b"xyz", "commx append")
check(s.multi_get(["a", "b"]) == [b"1", b"22"], "commx multi_set")
check(not s.check(["gone"]), "commx delete")
s.set("torch_ack", b"ok")
)";
  PyProc py(script);
  std::string l = py.line();
  ASSERT_EQ(l.rfind("PORT ", 0), 0u) << "python said: " << l;
  TCPStoreOptions o;
  o.port = static_cast<uint16_t>(std::stoi(l.substr(5)));
  o.timeout = 30s;
  auto s = make_tcp_store("127.0.0.1", o);
  s->set("from_commx", B("hi"));
  EXPECT_EQ(S(s->get("from_commx")), "hi");
  EXPECT_EQ(s->add("cnt", 4), 4);
  EXPECT_EQ(s->add("cnt", 6), 10);
  EXPECT_EQ(S(s->compare_set("cs", {}, B("old"))), "old");
  EXPECT_EQ(S(s->compare_set("cs", B("x"), B("y"))), "old");
  EXPECT_EQ(S(s->compare_set("cs", B("old"), B("new"))), "new");
  EXPECT_EQ(S(s->compare_set("missing", B("e"), B("d"))), "e");
  s->append("ap", B("x"));
  s->append("ap", B("yz"));
  s->multi_set({"a", "b"}, {B("1"), B("22")});
  auto v = s->multi_get({"b", "a"});
  EXPECT_EQ(S(v[0]), "22");
  EXPECT_EQ(S(v[1]), "1");
  s->set("gone", B("1"));
  EXPECT_TRUE(s->delete_key("gone"));
  EXPECT_FALSE(s->delete_key("gone"));
  EXPECT_TRUE(s->check({"a", "b"}));
  EXPECT_FALSE(s->check({"a", "zzz"}));
  EXPECT_GE(s->num_keys(), 6);
  // A timed-out WAIT is cancelled with CANCEL_WAIT; the connection stays usable.
  try {
    s->wait({"never"}, 200ms);
    ADD_FAILURE() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  s->set("done", B("1"));
  EXPECT_EQ(S(s->get("torch_ack")), "ok");
  EXPECT_EQ(py.wait(), 0);
}

TEST(TorchInterop, CommxClientAgainstTorchLibuvServer) {
  if (!have_torch()) GTEST_SKIP() << "torch is not importable by python3";
  commx_client_against_torch_server(true);
}

TEST(TorchInterop, CommxClientAgainstTorchClassicServer) {
  if (!have_torch()) GTEST_SKIP() << "torch is not importable by python3";
  commx_client_against_torch_server(false);
}

TEST(TorchInterop, CommxWorkerReleasesTorchMasterWaitingForWorkers) {
  if (!have_torch()) GTEST_SKIP() << "torch is not importable by python3";
  uint16_t port = 0;
  {
    auto probe = start_tcp_store_server("127.0.0.1", 0);  // find a free port
    port = probe->port();
  }
  std::string script = std::string(kPrelude) + "print('STARTING')\n" +
                       "s = TCPStore('127.0.0.1', " + std::to_string(port) +
                       ", world_size=2, is_master=True, wait_for_workers=True, timeout=T)\n" +
                       "print('JOINED')\n";
  PyProc py(script);
  EXPECT_EQ(py.line(), "STARTING");
  TCPStoreOptions o;
  o.port = port;
  o.timeout = 30s;
  o.num_workers = 2;
  o.wait_for_workers = true;
  auto s = make_tcp_store("127.0.0.1", o);
  EXPECT_EQ(py.line(), "JOINED");
  EXPECT_EQ(py.wait(), 0);
}

}  // namespace
}  // namespace commx::test
