// SVG to PNG through rsvg-convert (see png.h). Layer: tools/bench.
#include "png.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <vector>

extern char** environ;

namespace commx::bench {

std::string png_path_beside(const std::string& svg_path) {
  const std::string ext = ".svg";
  if (svg_path.size() > ext.size() &&
      svg_path.compare(svg_path.size() - ext.size(), ext.size(), ext) == 0)
    return svg_path.substr(0, svg_path.size() - ext.size()) + ".png";
  return svg_path + ".png";
}

bool svg_to_png(const std::string& svg, const std::string& png, std::string& why) {
  std::vector<std::string> args = {"rsvg-convert", "--format", "png", "--background-color",
                                   "white", "--output", png, svg};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, "rsvg-convert", nullptr, nullptr, argv.data(), environ);
  if (rc != 0) {
    why = rc == ENOENT ? "rsvg-convert not found (apt install librsvg2-bin)"
                       : std::string("cannot start rsvg-convert: ") + std::strerror(rc);
    return false;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    why = "rsvg-convert failed on " + svg;
    return false;
  }
  return true;
}

}  // namespace commx::bench
