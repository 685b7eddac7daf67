// A test program for commx-run: each mode exercises one launcher behaviour (environment, output
// relaying, failures, signals, the hosted store). Not a gtest; the launcher tests run it.
// Layer: tests (run).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "commx/error.h"
#include "commx/store.h"
#include "core/bootstrap.h"

namespace {

int env_int(const char* k) {
  const char* v = getenv(k);
  return v ? atoi(v) : -1;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Ranks that are not the failing one wait here until the launcher ends them.
int wait_to_be_killed() {
  std::printf("ready\n");
  std::fflush(stdout);
  sleep_ms(60000);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  std::string mode = argv[1];
  int rank = env_int("RANK");
  if (mode == "env") {
    for (const char* k : {"COMMX_RANK", "COMMX_WORLD_SIZE", "COMMX_LOCAL_RANK",
                          "COMMX_LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "COMMX_STORE_HOSTED",
                          "COMMX_AUTH_TOKEN", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
                          "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS", "RUN_TEST_EXPORTED"}) {
      const char* v = getenv(k);
      std::printf("%s=%s\n", k, v ? v : "<unset>");
    }
    for (int i = 2; i < argc; ++i) std::printf("ARG=%s\n", argv[i]);
    return 0;
  }
  if (mode == "lines") {  // lines N: N stdout and N stderr lines, then a partial last line
    int n = atoi(argv[2]);
    std::string pad(200, 'x');
    for (int i = 0; i < n; ++i) {
      std::printf("out %d of rank %d %s\n", i, rank, pad.c_str());
      std::fprintf(stderr, "err %d of rank %d\n", i, rank);
    }
    std::printf("tail of rank %d", rank);
    return 0;
  }
  if (mode == "fail") {  // fail R CODE: rank R exits CODE after 200 ms
    if (rank != atoi(argv[2])) return wait_to_be_killed();
    sleep_ms(200);
    return atoi(argv[3]);
  }
  if (mode == "signal") {  // signal R SIG: rank R dies by SIG after 200 ms
    if (rank != atoi(argv[2])) return wait_to_be_killed();
    sleep_ms(200);
    ::signal(atoi(argv[3]), SIG_DFL);
    ::raise(atoi(argv[3]));
    return 99;
  }
  if (mode == "ignore_term") {  // rank 0 exits 3; the others ignore SIGTERM
    if (rank == 0) {
      sleep_ms(200);
      return 3;
    }
    ::signal(SIGTERM, SIG_IGN);
    return wait_to_be_killed();
  }
  if (mode == "sleep") return wait_to_be_killed();
  if (mode == "slow_survivors") {  // rank 0 exits 7; the others report after 1.5 s and exit 5
    if (rank == 0) {
      sleep_ms(200);
      return 7;
    }
    sleep_ms(1500);
    std::printf("survivor %d reporting\n", rank);
    return 5;
  }
  if (mode == "pidfile") {  // pidfile DIR: writes DIR/<rank> with its pid, then waits
    std::ofstream(std::string(argv[2]) + "/" + std::to_string(rank)) << getpid() << "\n";
    return wait_to_be_killed();
  }
  if (mode == "store") {  // rendezvous through the store the launcher hosts, via core bootstrap
    try {
      auto ri = commx::rank_from_env();
      if (!ri) return 65;
      auto s = commx::store_from_env(*ri, std::chrono::seconds(20));
      s->set_str("rank/" + std::to_string(ri->rank), std::to_string(ri->rank * 10));
      for (int r = 0; r < ri->size; ++r)
        if (s->get_str("rank/" + std::to_string(r)) != std::to_string(r * 10)) return 66;
      int64_t n = s->add("arrived", 1);
      std::printf("store ok rank %d of %d (arrival %lld)\n", ri->rank, ri->size,
                  static_cast<long long>(n));
      if (n == ri->size) s->set_str("done", "1");
      s->wait({"done"});
      return 0;
    } catch (const commx::Error& e) {
      std::fprintf(stderr, "store error: %s\n", e.what());
      return 67;
    }
  }
  if (mode == "intruder") {  // processes without the job's token cannot use its store
    commx::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(env_int("MASTER_PORT"));
    o.timeout = std::chrono::seconds(2);
    std::string token = getenv("COMMX_AUTH_TOKEN") ? getenv("COMMX_AUTH_TOKEN") : "";
    auto attempt = [&](const char* who) {
      try {
        commx::make_tcp_store("127.0.0.1", o)->set_str("intruder", "1");
        std::printf("%s: accepted\n", who);
      } catch (const commx::Error& e) {
        std::printf("%s: refused: %s\n", who, e.what());
      }
    };
    setenv("COMMX_AUTH_TOKEN", "0123456789abcdef-not-the-token", 1);
    attempt("wrong token");
    unsetenv("COMMX_AUTH_TOKEN");
    attempt("no token");
    if (!token.empty()) setenv("COMMX_AUTH_TOKEN", token.c_str(), 1);
    attempt("job token");
    return 0;
  }
  return 64;
}
