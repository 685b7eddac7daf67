// Reading the environment as commx does, for the library and for backends built outside it: a
// COMMX_* variable declared in the settings table (docs/env.md) is validated there (type, range;
// an invalid value throws InvalidArgument naming the variable); any other variable (a launcher's,
// or one an out-of-tree backend defines) is read as text, and the typed reads check its form.
// Layer: public API for backend authors.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace commx {

// The value of `name`; nullopt when unset or empty.
std::optional<std::string> env_str(const char* name);
int64_t env_int(const char* name, int64_t dflt);
double env_double(const char* name, double dflt);
bool env_bool(const char* name, bool dflt);
// The value as set, an empty one included (CUDA_VISIBLE_DEVICES="" hides every GPU); nullopt
// only when unset. For variables that are not commx settings.
std::optional<std::string> env_raw(const char* name);
// The first of `names` that is set (aliases such as RCCL_DDA_ENABLE for COMMX_DDA_ENABLE).
std::optional<std::string> env_first(std::initializer_list<const char*> names);

}  // namespace commx
