// The PNG beside commx-bench's SVG, drawn by rsvg-convert (Debian's librsvg2-bin) so the bench
// links no image library. Layer: tools/bench.
#pragma once

#include <string>

namespace commx::bench {

// x.svg -> x.png (any other name gets ".png" appended).
std::string png_path_beside(const std::string& svg_path);
// Converts `svg` to `png`; false with `why` set when rsvg-convert is missing or fails.
bool svg_to_png(const std::string& svg, const std::string& png, std::string& why);

}  // namespace commx::bench
