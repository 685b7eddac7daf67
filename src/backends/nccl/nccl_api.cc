// Loads libnccl with dlopen and resolves the entry points of nccl_api.h. Layer: backends (nccl).
#include "nccl/nccl_api.h"

#include <dlfcn.h>

#include <mutex>

#include "commx/error.h"
#include "commx/env.h"

namespace commx::nccl {
namespace {

struct Loaded {
  Api api;
  std::string error;  // empty when loaded
};

template <typename F>
bool resolve(void* h, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(h, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  return fn != nullptr;
}

Loaded load() {
  Loaded l;
  std::string path = env_str("COMMX_NCCL_LIBRARY").value_or("libnccl.so.2");
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    l.error = "cannot load NCCL from '" + path + "' (" + (e ? e : "unknown error") +
              "); set COMMX_NCCL_LIBRARY to the path of libnccl.so.2";
    return l;
  }
  Api& a = l.api;
  a.path = path;
  std::string missing;
  resolve(h, "ncclGetVersion", a.GetVersion, missing);
  resolve(h, "ncclGetErrorString", a.GetErrorString, missing);
  resolve(h, "ncclGetUniqueId", a.GetUniqueId, missing);
  resolve(h, "ncclCommInitRank", a.CommInitRank, missing);
  resolve(h, "ncclCommDestroy", a.CommDestroy, missing);
  resolve(h, "ncclCommAbort", a.CommAbort, missing);
  resolve(h, "ncclCommGetAsyncError", a.CommGetAsyncError, missing);
  resolve(h, "ncclAllReduce", a.AllReduce, missing);
  resolve(h, "ncclReduce", a.Reduce, missing);
  resolve(h, "ncclBroadcast", a.Broadcast, missing);
  resolve(h, "ncclAllGather", a.AllGather, missing);
  resolve(h, "ncclReduceScatter", a.ReduceScatter, missing);
  resolve(h, "ncclSend", a.Send, missing);
  resolve(h, "ncclRecv", a.Recv, missing);
  resolve(h, "ncclGroupStart", a.GroupStart, missing);
  resolve(h, "ncclGroupEnd", a.GroupEnd, missing);
  // Optional (newer NCCL): a better error text.
  a.GetLastError = reinterpret_cast<const char* (*)(ncclComm_t)>(dlsym(h, "ncclGetLastError"));
  if (!missing.empty()) {
    l.error = path + " lacks NCCL entry points: " + missing;
    return l;
  }
  if (a.GetVersion(&a.version) != ncclSuccess || a.version < 21000) {
    l.error = path + " reports NCCL version " + std::to_string(a.version) + "; commx needs 2.10+";
  }
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const Api& api() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error(ErrorCode::kUnsupported, "nccl backend: " + l.error);
  return l.api;
}

bool available() { return loaded().error.empty(); }

}  // namespace commx::nccl
