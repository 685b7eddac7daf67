// TEMPORARY: placeholders until the TCP and file stores land (the store work replaces this file).
#include "commx/error.h"
#include "commx/store.h"

namespace commx {
std::shared_ptr<Store> make_tcp_store(const std::string&, TCPStoreOptions) {
  throw Error(ErrorCode::kUnsupported, "TCPStore is not built yet");
}
std::unique_ptr<TCPStoreServer> start_tcp_store_server(const std::string&, uint16_t) {
  throw Error(ErrorCode::kUnsupported, "TCPStore server is not built yet");
}
std::shared_ptr<Store> make_file_store(const std::string&, int) {
  throw Error(ErrorCode::kUnsupported, "FileStore is not built yet");
}
}  // namespace commx
