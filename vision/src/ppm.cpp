#include "ppm.h"

#include <cctype>
#include <fstream>
#include <iterator>

#include "common/error.h"

namespace strata::vision {
namespace {

// Skips whitespace and '#' comments (to the end of the line) between header fields.
void skip_space(const std::vector<uint8_t>& b, size_t& p) {
    while (p < b.size()) {
        if (b[p] == '#') {
            while (p < b.size() && b[p] != '\n' && b[p] != '\r') ++p;
        } else if (std::isspace(b[p])) {
            ++p;
        } else {
            break;
        }
    }
}

long read_field(const std::vector<uint8_t>& b, size_t& p, const std::string& path, const char* what) {
    skip_space(b, p);
    if (p >= b.size() || !std::isdigit(b[p])) fail(path, ": not a binary PPM (bad ", what, " in the header)");
    long v = 0;
    while (p < b.size() && std::isdigit(b[p])) {
        v = v * 10 + (b[p] - '0');
        if (v > 1000000) fail(path, ": PPM ", what, " is too large");
        ++p;
    }
    return v;
}

}  // namespace

RgbImage read_ppm(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open image ", path);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.bad()) fail("cannot read image ", path);
    if (b.size() < 2 || b[0] != 'P' || b[1] != '6') fail(path, ": not a binary PPM (expected the magic P6)");
    size_t p = 2;
    long w = read_field(b, p, path, "width");
    long h = read_field(b, p, path, "height");
    long maxval = read_field(b, p, path, "maxval");
    if (w < 1 || h < 1 || w > 65535 || h > 65535) fail(path, ": PPM size ", w, "x", h, " is out of range");
    if (maxval != 255) fail(path, ": PPM maxval ", maxval, " (expected 255: 8-bit RGB)");
    if (p >= b.size() || !std::isspace(b[p])) fail(path, ": not a binary PPM (no whitespace after maxval)");
    ++p;   // exactly one whitespace character before the raster
    const size_t need = (size_t)w * (size_t)h * 3;
    if (b.size() - p < need) fail(path, ": PPM pixel data is truncated (", b.size() - p, " of ", need, " bytes)");
    RgbImage img;
    img.width = (int)w;
    img.height = (int)h;
    img.rgb.assign(b.begin() + (std::ptrdiff_t)p, b.begin() + (std::ptrdiff_t)(p + need));
    return img;
}

}  // namespace strata::vision
