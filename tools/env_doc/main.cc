// commx-env-doc: prints the environment-variable reference (docs/env.md) generated from the
// settings table, so the docs cannot drift from what the code reads. Layer: tools.
#include <iostream>

#include "core/settings.h"

int main() {
  std::cout << commx::settings_markdown();
  return 0;
}
