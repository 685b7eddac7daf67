// Which backends this installation offers. Layer: public API.
#pragma once

#include <string>
#include <vector>

namespace commx {

// The registered backends and those a plugin file offers (next to libcommx or in
// COMMX_PLUGIN_DIR), sorted: what create_backend finds without COMMX_BACKEND_LIB_PATH_<NAME>.
std::vector<std::string> available_backends();

}  // namespace commx
