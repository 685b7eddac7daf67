// Finds or hosts the rendezvous store from launcher variables.
// Layer: core (bootstrap).
#include "core/bootstrap.h"

#include <unistd.h>

#include <map>
#include <mutex>
#include <random>

#include "commx/backend.h"
#include "commx/bootstrap.h"
#include "commx/error.h"
#include "core/settings.h"

namespace commx {
namespace {

// A store server hosted by this process lives as long as the process.
std::unique_ptr<TCPStoreServer>& hosted_server() {
  static std::unique_ptr<TCPStoreServer> s;
  return s;
}

std::shared_ptr<Store> tcp_store_from_env(const RankInfo& ri, Timeout timeout) {
  std::string host = *env_str("MASTER_ADDR");
  auto port_str = env_str("MASTER_PORT");
  if (!port_str)
    throw Error(ErrorCode::kInvalidArgument, "MASTER_ADDR is set but MASTER_PORT is not");
  auto port = static_cast<uint16_t>(env_int("MASTER_PORT", 0));
  bool hosted_elsewhere = setting_bool("COMMX_STORE_HOSTED") ||
                          env_bool("TORCHELASTIC_USE_AGENT_STORE", false);
  if (ri.rank == 0 && !hosted_elsewhere) {
    static std::mutex m;
    std::lock_guard<std::mutex> g(m);
    if (!hosted_server()) {
      try {
        // A loopback MASTER_ADDR keeps the store off the network; otherwise listen everywhere.
        bool loopback = host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
        hosted_server() = start_tcp_store_server(
            loopback ? (host == "localhost" ? "127.0.0.1" : host) : "0.0.0.0", port);
      } catch (const Error&) {
        // Someone already listens on the port (a launcher's store): join it as a client.
      }
    }
  }
  TCPStoreOptions o;
  o.port = port;
  o.timeout = timeout;
  return make_tcp_store(host, o);
}

// "pid P on host H" plus a random nonce: names this process to the others, and stays distinct
// where pids repeat (containers).
const std::string& process_token() {
  static const std::string token = [] {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::random_device rd;
    return "pid " + std::to_string(getpid()) + " on host " + host + " #" +
           std::to_string((uint64_t{rd()} << 32) | rd());
  }();
  return token;
}

std::string claim_key(const std::string& name, int rank, const char* what) {
  return "commx/" + name + "/" + what + "/" + env_str("TORCHELASTIC_RESTART_COUNT").value_or("0") +
         "/" + std::to_string(rank);
}

// The token without its nonce, for messages.
std::string process_of(const std::string& token) { return token.substr(0, token.rfind(" #")); }

}  // namespace

void claim_rank(Store& store, const std::string& name, int rank, int size) {
  const std::string& mine = process_token();
  Bytes got = store.compare_set(claim_key(name, rank, "owner"), {}, Bytes(mine.begin(), mine.end()));
  const std::string holder(got.begin(), got.end());
  if (holder == mine) return;
  store.set_str(claim_key(name, rank, "duplicate"), process_of(mine));
  throw Error(ErrorCode::kInvalidArgument,
              comm_context(name, rank, size) + "rank " + std::to_string(rank) +
                  " is already taken by another process (" + process_of(holder) + "); this process (" +
                  process_of(mine) + ") was started with the same rank: every process of a job needs "
                  "its own rank (check RANK/COMMX_RANK or the launcher's rank assignment)");
}

std::string duplicate_rank_note(Store& store, const std::string& name, int rank) {
  const std::string key = claim_key(name, rank, "duplicate");
  if (!store.check({key})) return {};
  return "rank " + std::to_string(rank) + " was also claimed by another process (" +
         store.get_str(key) + "): two processes were started with rank " + std::to_string(rank);
}

std::shared_ptr<Store> store_from_env(const RankInfo& ri, Timeout timeout) {
  // The comms of a rank that are alive share one bootstrap store: one connection, and a FileStore
  // whose file goes away only when the job's ranks are done with it (not when one comm does).
  // Held weakly: once every comm is gone the store is closed (and its file cleaned up).
  static std::mutex cache_mu;
  static std::map<std::string, std::weak_ptr<Store>> cache;
  std::string key = std::to_string(ri.rank) + "/" + std::to_string(ri.size) + "/" +
                    env_str("MASTER_ADDR").value_or("") + ":" + env_str("MASTER_PORT").value_or("") +
                    "/" + setting_str("COMMX_STORE_FILE").value_or("");
  std::lock_guard<std::mutex> g(cache_mu);
  if (auto it = cache.find(key); it != cache.end())
    if (auto alive = it->second.lock()) return alive;
  std::shared_ptr<Store> store;
  if (ri.size == 1) {
    store = make_hash_store();  // a 1-rank job meets no one: no server to wait for
  } else if (env_str("MASTER_ADDR")) {
    store = tcp_store_from_env(ri, timeout);
  } else if (auto path = setting_str("COMMX_STORE_FILE")) {
    store = make_file_store(*path, ri.size);
  } else if (auto job = env_first({"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_JOBID",
                                   "SLURM_JOB_ID"})) {
    // mpirun without MASTER_ADDR: ranks of one host meet in a file named after the job.
    std::string tmp = env_str("TMPDIR").value_or("/tmp");
    std::string safe;
    for (char c : *job) safe += (isalnum(static_cast<unsigned char>(c)) ? c : '_');
    store = make_file_store(tmp + "/commx-store-" + safe + "-" + std::to_string(getuid()), ri.size);
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "rank " + std::to_string(ri.rank) + " of " + std::to_string(ri.size) +
                    ": no rendezvous store; set MASTER_ADDR/MASTER_PORT or COMMX_STORE_FILE, run "
                    "under commx-run/torchrun/mpirun, or pass a store (new_comm(..., store=...) in Python, "
                    "CommOptions::store in C++)");
  }
  store->set_timeout(timeout);
  cache[key] = store;
  return store;
}

std::shared_ptr<Store> launcher_store(Timeout timeout) {
  auto ri = rank_from_env();
  if (!ri)
    throw Error(ErrorCode::kInvalidArgument,
                "no launcher rank/size in the environment (RANK/WORLD_SIZE, COMMX_RANK/"
                "COMMX_WORLD_SIZE, mpirun, PMI): run under commx-run/torchrun/mpirun or pass a store");
  return store_from_env(*ri, timeout);
}

}  // namespace commx
