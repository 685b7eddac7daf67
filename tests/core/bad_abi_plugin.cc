// A test plugin built for a future ABI: loading it must fail with a clear message.
#include <cstdint>

extern "C" uint32_t commx_plugin_abi_version() { return 999; }
extern "C" void commx_plugin_register() {}
