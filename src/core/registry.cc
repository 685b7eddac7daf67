// Backend registry: self-registration by name, and plugin loading with dlopen.
// Layer: core. Knows no backend by name: backends register themselves.
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <mutex>

#include "commx/backend.h"
#include "commx/backends.h"
#include "commx/error.h"
#include "core/env.h"
#include "core/settings.h"

namespace commx {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, BackendFactory>& registry() {
  static std::map<std::string, BackendFactory> r;
  return r;
}

std::optional<BackendFactory> find_factory(const std::string& name) {
  std::lock_guard<std::mutex> g(registry_mutex());
  auto it = registry().find(name);
  if (it == registry().end()) return std::nullopt;
  return it->second;
}

// Loads one plugin file; returns an explanation on failure (empty on success).
std::string load_plugin(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) return std::string(dlerror());
  using VersionFn = uint32_t (*)();
  using RegisterFn = void (*)();
  auto version = reinterpret_cast<VersionFn>(dlsym(handle, "commx_plugin_abi_version"));
  auto reg = reinterpret_cast<RegisterFn>(dlsym(handle, "commx_plugin_register"));
  if (version == nullptr || reg == nullptr) {
    dlclose(handle);
    return path + " does not export commx_plugin_abi_version/commx_plugin_register";
  }
  if (version() != kBackendAbiVersion) {
    std::string msg = path + " was built for backend ABI " + std::to_string(version()) +
                      ", this libcommx has ABI " + std::to_string(kBackendAbiVersion);
    dlclose(handle);
    return msg;
  }
  reg();  // the handle stays open for the life of the process
  return "";
}

// Backends a plugin file offers in `dir` (libcommx_backend_<name>.so), not loaded yet.
void add_plugins_in(const std::string& dir, std::vector<std::string>& names) {
  const std::string head = "libcommx_backend_", tail = ".so";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string f = entry.path().filename().string();
    if (f.size() > head.size() + tail.size() && f.rfind(head, 0) == 0 &&
        f.compare(f.size() - tail.size(), tail.size(), tail) == 0)
      names.push_back(f.substr(head.size(), f.size() - head.size() - tail.size()));
  }
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  std::lock_guard<std::mutex> g(registry_mutex());
  registry()[name] = std::move(factory);
}

bool has_backend(const std::string& name) { return find_factory(name).has_value(); }

std::vector<std::string> registered_backends() {
  std::lock_guard<std::mutex> g(registry_mutex());
  std::vector<std::string> names;
  for (auto& [n, f] : registry()) names.push_back(n);
  return names;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names = registered_backends();
  add_plugins_in(library_dir(), names);
  if (auto dir = setting_str("COMMX_PLUGIN_DIR")) add_plugins_in(*dir, names);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::unique_ptr<Backend> create_backend(const std::string& name) {
  if (auto f = find_factory(name)) return (*f)();
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  std::vector<std::string> candidates;
  if (auto p = setting_str(("COMMX_BACKEND_LIB_PATH_" + upper).c_str())) candidates.push_back(*p);
  std::string file = "libcommx_backend_" + name + ".so";
  if (auto dir = setting_str("COMMX_PLUGIN_DIR")) candidates.push_back(*dir + "/" + file);
  candidates.push_back(library_dir() + "/" + file);
  std::string tried;
  for (const auto& path : candidates) {
    std::string why = load_plugin(path);
    if (why.empty()) {
      if (auto f = find_factory(name)) return (*f)();
      why = path + " loaded but registered no backend named '" + name + "'";
    }
    tried += "\n  " + why;
  }
  std::string known;
  for (auto& n : available_backends()) known += (known.empty() ? "" : ", ") + n;
  throw Error(ErrorCode::kUnsupported, "no backend named '" + name + "'; backends here: " + known +
                                           " (plugins tried:" + tried + ")");
}

}  // namespace commx
