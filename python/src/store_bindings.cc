// Stores for Python: TCPStore (c10d wire protocol), FileStore, HashStore, PrefixStore, and
// PythonStore, which adapts any object with the c10d store methods (a torch.distributed store).
// Layer: Python bindings.
#include <string>

#include "commx/bootstrap.h"
#include "module.h"

namespace commx_py {
namespace {

commx::Bytes to_bytes(py::handle v) {
  if (py::isinstance<py::str>(v)) {
    std::string s = v.cast<std::string>();
    return commx::Bytes(s.begin(), s.end());
  }
  if (py::isinstance<py::bytes>(v) || py::isinstance<py::bytearray>(v) ||
      py::isinstance<py::memoryview>(v)) {
    std::string s = py::bytes(py::reinterpret_borrow<py::object>(v)).cast<std::string>();
    return commx::Bytes(s.begin(), s.end());
  }
  // A list of ints (torch's stores accept list[int] for values too).
  return v.cast<commx::Bytes>();
}

py::bytes from_bytes(const commx::Bytes& b) {
  return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
}

// Forwards every call to `inner_`: lets TCPStore/FileStore/... be distinct Python classes.
class NamedStore : public commx::Store {
 public:
  explicit NamedStore(std::shared_ptr<commx::Store> inner) : inner_(std::move(inner)) {
    timeout_ = inner_->timeout();
  }
  void set(const std::string& k, const commx::Bytes& v) override { inner_->set(k, v); }
  commx::Bytes get(const std::string& k) override { return inner_->get(k); }
  int64_t add(const std::string& k, int64_t d) override { return inner_->add(k, d); }
  commx::Bytes compare_set(const std::string& k, const commx::Bytes& e,
                           const commx::Bytes& d) override {
    return inner_->compare_set(k, e, d);
  }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  void wait(const std::vector<std::string>& keys, commx::Timeout t) override {
    inner_->wait(keys, t);
  }
  bool delete_key(const std::string& k) override { return inner_->delete_key(k); }
  int64_t num_keys() override { return inner_->num_keys(); }
  void append(const std::string& k, const commx::Bytes& v) override { inner_->append(k, v); }
  std::vector<commx::Bytes> multi_get(const std::vector<std::string>& keys) override {
    return inner_->multi_get(keys);
  }
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<commx::Bytes>& values) override {
    inner_->multi_set(keys, values);
  }
  void set_store_timeout(commx::Timeout t) {
    set_timeout(t);
    inner_->set_timeout(t);
  }

 protected:
  std::shared_ptr<commx::Store> inner_;
};

class TcpStoreHandle : public NamedStore {
 public:
  TcpStoreHandle(std::shared_ptr<commx::Store> client,
                 std::shared_ptr<commx::TCPStoreServer> server, std::string host, uint16_t port)
      : NamedStore(std::move(client)),
        server_(std::move(server)),
        host_(std::move(host)),
        port_(port) {}
  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }

 private:
  std::shared_ptr<commx::TCPStoreServer> server_;  // set when this object hosts the store
  std::string host_;
  uint16_t port_;
};

class FileStoreHandle : public NamedStore {
 public:
  FileStoreHandle(std::shared_ptr<commx::Store> s, std::string path)
      : NamedStore(std::move(s)), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class HashStoreHandle : public NamedStore {
 public:
  HashStoreHandle() : NamedStore(commx::make_hash_store()) {}
};

class PrefixStoreHandle : public NamedStore {
 public:
  PrefixStoreHandle(std::string prefix, std::shared_ptr<commx::Store> base)
      : NamedStore(commx::make_prefix_store(prefix, base)),
        prefix_(std::move(prefix)),
        base_(std::move(base)) {}
  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<commx::Store>& underlying_store() const { return base_; }

 private:
  std::string prefix_;
  std::shared_ptr<commx::Store> base_;
};

// A store implemented by a Python object with the c10d methods (torch.distributed.Store and
// subclasses, or any duck-typed class). Every call takes the GIL: commx threads may call it.
class PythonStore : public commx::Store {
 public:
  explicit PythonStore(py::object obj) : obj_(std::move(obj)) {
    if (py::hasattr(obj_, "timeout")) {
      if (auto t = to_timeout(obj_.attr("timeout"))) timeout_ = *t;
    }
  }
  ~PythonStore() override {
    py::gil_scoped_acquire gil;
    obj_ = py::object();
  }
  void set(const std::string& k, const commx::Bytes& v) override {
    call([&] { obj_.attr("set")(k, from_bytes(v)); });
  }
  commx::Bytes get(const std::string& k) override {
    commx::Bytes out;
    call([&] { out = to_bytes(obj_.attr("get")(k)); });
    return out;
  }
  int64_t add(const std::string& k, int64_t d) override {
    int64_t out = 0;
    call([&] { out = obj_.attr("add")(k, d).cast<int64_t>(); });
    return out;
  }
  commx::Bytes compare_set(const std::string& k, const commx::Bytes& e,
                           const commx::Bytes& d) override {
    commx::Bytes out;
    call([&] { out = to_bytes(obj_.attr("compare_set")(k, from_bytes(e), from_bytes(d))); });
    return out;
  }
  bool check(const std::vector<std::string>& keys) override {
    bool out = false;
    call([&] { out = obj_.attr("check")(keys).cast<bool>(); });
    return out;
  }
  void wait(const std::vector<std::string>& keys, commx::Timeout t) override {
    call([&] {
      py::object td =
          py::module_::import("datetime")
              .attr("timedelta")(py::arg("milliseconds") = static_cast<double>(t.count()));
      obj_.attr("wait")(keys, td);
    });
  }
  bool delete_key(const std::string& k) override {
    bool out = false;
    call([&] { out = obj_.attr("delete_key")(k).cast<bool>(); });
    return out;
  }
  int64_t num_keys() override {
    int64_t out = 0;
    call([&] { out = obj_.attr("num_keys")().cast<int64_t>(); });
    return out;
  }
  void append(const std::string& k, const commx::Bytes& v) override {
    call([&] { obj_.attr("append")(k, from_bytes(v)); });
  }
  std::vector<commx::Bytes> multi_get(const std::vector<std::string>& keys) override {
    std::vector<commx::Bytes> out;
    call([&] {
      for (py::handle v : obj_.attr("multi_get")(keys)) out.push_back(to_bytes(v));
    });
    return out;
  }
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<commx::Bytes>& values) override {
    call([&] {
      py::list vals;
      for (auto& v : values) vals.append(from_bytes(v));
      obj_.attr("multi_set")(keys, vals);
    });
  }
  const py::object& object() const { return obj_; }

 private:
  template <typename F>
  void call(F&& f) {
    py::gil_scoped_acquire gil;
    try {
      f();
    } catch (py::error_already_set& e) {
      throw error_from_python(e);
    }
  }
  py::object obj_;
};

template <typename Ret, typename... Args>
auto nogil(Ret (commx::Store::*fn)(Args...)) {
  return [fn](commx::Store& s, Args... args) {
    py::gil_scoped_release r;
    return (s.*fn)(std::forward<Args>(args)...);
  };
}

}  // namespace

void bind_stores(py::module_& m) {
  using commx::Store;
  py::class_<Store, std::shared_ptr<Store>>(m, "Store", "A rendezvous key-value store.")
      .def(
          "set",
          [](Store& s, const std::string& k, py::handle v) {
            commx::Bytes b = to_bytes(v);
            py::gil_scoped_release r;
            s.set(k, b);
          },
          py::arg("key"), py::arg("value"))
      .def(
          "get",
          [](Store& s, const std::string& k) {
            commx::Bytes b;
            {
              py::gil_scoped_release r;
              b = s.get(k);
            }
            return from_bytes(b);
          },
          py::arg("key"))
      .def("add", nogil(&Store::add), py::arg("key"), py::arg("value"))
      .def(
          "compare_set",
          [](Store& s, const std::string& k, py::handle e, py::handle d) {
            commx::Bytes eb = to_bytes(e), db = to_bytes(d), out;
            {
              py::gil_scoped_release r;
              out = s.compare_set(k, eb, db);
            }
            return from_bytes(out);
          },
          py::arg("key"), py::arg("expected_value"), py::arg("desired_value"))
      .def("check", nogil(&Store::check), py::arg("keys"))
      .def(
          "wait",
          [](Store& s, const std::vector<std::string>& keys, py::handle timeout) {
            auto t = to_timeout(timeout).value_or(s.timeout());
            py::gil_scoped_release r;
            s.wait(keys, t);
          },
          py::arg("keys"), py::arg("timeout") = py::none())
      .def("delete_key", nogil(&Store::delete_key), py::arg("key"))
      .def("num_keys", nogil(&Store::num_keys))
      .def(
          "append",
          [](Store& s, const std::string& k, py::handle v) {
            commx::Bytes b = to_bytes(v);
            py::gil_scoped_release r;
            s.append(k, b);
          },
          py::arg("key"), py::arg("value"))
      .def(
          "multi_get",
          [](Store& s, const std::vector<std::string>& keys) {
            std::vector<commx::Bytes> vals;
            {
              py::gil_scoped_release r;
              vals = s.multi_get(keys);
            }
            py::list out;
            for (auto& v : vals) out.append(from_bytes(v));
            return out;
          },
          py::arg("keys"))
      .def(
          "multi_set",
          [](Store& s, const std::vector<std::string>& keys, py::sequence values) {
            std::vector<commx::Bytes> vals;
            for (py::handle v : values) vals.push_back(to_bytes(v));
            py::gil_scoped_release r;
            s.multi_set(keys, vals);
          },
          py::arg("keys"), py::arg("values"))
      .def(
          "set_timeout",
          [](Store& s, py::handle t) {
            auto to = to_timeout(t);
            if (!to) return;
            if (auto* n = dynamic_cast<NamedStore*>(&s))
              n->set_store_timeout(*to);
            else
              s.set_timeout(*to);
          },
          py::arg("timeout"))
      .def_property_readonly("timeout", [](const Store& s) {
        return py::module_::import("datetime")
            .attr("timedelta")(py::arg("milliseconds") = static_cast<double>(s.timeout().count()));
      });

  py::class_<TcpStoreHandle, Store, std::shared_ptr<TcpStoreHandle>>(
      m, "TCPStore", "A client of a c10d-protocol TCP store; with is_server=True it also hosts it.")
      .def(py::init([](const std::string& host, int port, py::object world_size, bool is_server,
                       py::object timeout, bool wait_for_workers) {
             if (port < 0 || port > 65535)
               throw commx::Error(commx::ErrorCode::kInvalidArgument,
                                  "TCPStore: port " + std::to_string(port) + " is out of range");
             commx::TCPStoreOptions o;
             o.port = static_cast<uint16_t>(port);
             if (auto t = to_timeout(timeout)) o.timeout = *t;
             if (!world_size.is_none()) o.num_workers = world_size.cast<int>();
             o.wait_for_workers = wait_for_workers && o.num_workers.has_value();
             py::gil_scoped_release r;
             std::shared_ptr<commx::TCPStoreServer> server;
             if (is_server) {
               bool loopback = host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
               server = commx::start_tcp_store_server(loopback ? host : "0.0.0.0", o.port);
               o.port = server->port();
             }
             uint16_t actual = o.port;
             return std::make_shared<TcpStoreHandle>(commx::make_tcp_store(host, o),
                                                     std::move(server), host, actual);
           }),
           py::arg("host"), py::arg("port"), py::arg("world_size") = py::none(),
           py::arg("is_server") = false, py::arg("timeout") = py::none(),
           py::arg("wait_for_workers") = true)
      .def_property_readonly("host", &TcpStoreHandle::host)
      .def_property_readonly("port", &TcpStoreHandle::port);

  py::class_<FileStoreHandle, Store, std::shared_ptr<FileStoreHandle>>(
      m, "FileStore", "A store in one file shared by the processes of one host.")
      .def(py::init([](const std::string& path, int num_workers) {
             py::gil_scoped_release r;
             return std::make_shared<FileStoreHandle>(commx::make_file_store(path, num_workers),
                                                      path);
           }),
           py::arg("path"), py::arg("num_workers") = -1)
      .def_property_readonly("path", &FileStoreHandle::path);

  py::class_<HashStoreHandle, Store, std::shared_ptr<HashStoreHandle>>(
      m, "HashStore", "A store inside this process.")
      .def(py::init<>());

  py::class_<PrefixStoreHandle, Store, std::shared_ptr<PrefixStoreHandle>>(
      m, "PrefixStore", "Prefixes every key with '<prefix>/'.")
      .def(py::init<std::string, std::shared_ptr<Store>>(), py::arg("prefix"), py::arg("store"))
      .def_property_readonly("prefix", &PrefixStoreHandle::prefix)
      .def_property_readonly("underlying_store", &PrefixStoreHandle::underlying_store);

  py::class_<PythonStore, Store, std::shared_ptr<PythonStore>>(
      m, "PythonStore",
      "Adapts an object with the c10d store methods (e.g. a torch.distributed store).")
      .def(py::init<py::object>(), py::arg("store"))
      .def_property_readonly("wrapped", &PythonStore::object);

  m.def(
      "launcher_store",
      [](py::handle timeout) {
        auto t = to_timeout(timeout).value_or(commx::kDefaultTimeout);
        py::gil_scoped_release r;
        return commx::launcher_store(t);
      },
      py::arg("timeout") = py::none(),
      "The store comms created without a store meet on, from the launcher's variables.");
}

}  // namespace commx_py
