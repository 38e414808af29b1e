// Binary PPM (P6, 8-bit RGB) reader: the picture format the gateway hands to strata-vision.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::vision {

struct RgbImage {
    int width = 0;
    int height = 0;
    std::vector<uint8_t> rgb;   // height rows of width pixels, R G B per pixel
};

// Reads a P6 file with maxval 255 (header comments allowed). Throws strata::Error naming the file and the fault
// (missing, not a PPM, a header field out of range, truncated pixel data).
RgbImage read_ppm(const std::string& path);

}  // namespace strata::vision
