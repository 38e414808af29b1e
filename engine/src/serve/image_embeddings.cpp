#include "serve/image_embeddings.h"

#include <cstring>

#include "common/error.h"
#include "common/platform.h"

namespace strata {

namespace {
int32_t le_i32(const uint8_t* p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

struct OpenFile {
    platform::FileHandle f;
    ~OpenFile() { platform::close_file(f); }
};
}  // namespace

std::vector<ImageEmbeddings> read_image_embeddings(const std::string& path, int n_embd) {
    OpenFile file{platform::open_read_only(path)};
    if (!file.f.is_open()) fail("cannot read embeddings file '", path, "': ", platform::last_error_text());
    const int64_t size = platform::file_size(file.f);
    if (size < 0) fail("cannot read embeddings file '", path, "': ", platform::last_error_text());
    std::vector<ImageEmbeddings> out;
    uint64_t off = 0;
    while (off < (uint64_t)size) {
        const int k = (int)out.size() + 1;
        uint8_t head[20];
        const uint64_t left = (uint64_t)size - off;
        if (left < sizeof head)
            fail("embeddings file '", path, "': image ", k, " has a header of ", left, " bytes (expected 20)");
        if (platform::read_at(file.f, head, sizeof head, off) != (int64_t)sizeof head)
            fail("cannot read embeddings file '", path, "': ", platform::last_error_text());
        if (std::memcmp(head, "SVE1", 4) != 0)
            fail("embeddings file '", path, "': image ", k, " does not start with the magic SVE1 (at byte ", off, ")");
        ImageEmbeddings im;
        im.n = le_i32(head + 4);
        im.nx = le_i32(head + 8);
        im.ny = le_i32(head + 12);
        const int32_t width = le_i32(head + 16);
        if (width != n_embd)
            fail("embeddings file '", path, "': image ", k, " has n_embd ", width, ", the model's hidden size is ", n_embd);
        if (im.nx <= 0 || im.ny <= 0 || (int64_t)im.nx * im.ny != im.n)
            fail("embeddings file '", path, "': image ", k, " has n_tokens ", im.n, ", which is not nx ", im.nx,
                 " x ny ", im.ny, " (expected positive values)");
        const uint64_t bytes = (uint64_t)im.n * (uint64_t)n_embd * sizeof(float);
        off += sizeof head;
        if ((uint64_t)size - off < bytes)
            fail("embeddings file '", path, "': image ", k, " needs ", bytes, " bytes of rows (", im.n, " x ", n_embd,
                 " float32), the file has ", (uint64_t)size - off, " left");
        im.rows.resize((size_t)im.n * n_embd);
        if (platform::read_at(file.f, im.rows.data(), bytes, off) != (int64_t)bytes)
            fail("cannot read embeddings file '", path, "': ", platform::last_error_text());
        // The file is little-endian; so is every machine the engine builds for (x86-64).
        off += bytes;
        out.push_back(std::move(im));
    }
    if (out.empty()) fail("embeddings file '", path, "' holds no image (it is empty)");
    return out;
}

std::vector<TokenRun> image_runs(const std::vector<int32_t>& ids, int32_t image_id) {
    std::vector<TokenRun> runs;
    for (int i = 0; i < (int)ids.size(); ++i)
        if (ids[i] == image_id) {
            if (!runs.empty() && runs.back().start + runs.back().n == i) ++runs.back().n;
            else runs.push_back({i, 1});
        }
    return runs;
}

uint64_t hash_image(int nx, int ny, const std::vector<float>& rows) {
    // 64-bit multiply-xorshift over the grid and the rows' bits, word by word.
    uint64_t h = 0x243f6a8885a308d3ull ^ ((uint64_t)(uint32_t)nx << 32 | (uint32_t)ny);
    auto mix = [&](uint64_t v) {
        h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    };
    mix((uint64_t)rows.size());
    size_t i = 0;
    for (; i + 2 <= rows.size(); i += 2) {
        uint64_t v;
        std::memcpy(&v, rows.data() + i, sizeof v);
        mix(v);
    }
    if (i < rows.size()) {
        uint32_t v;
        std::memcpy(&v, rows.data() + i, sizeof v);
        mix(v);
    }
    return h;
}

std::vector<PromptImage> place_images(const std::vector<int32_t>& ids, int32_t image_id,
                                      std::vector<ImageEmbeddings> images, const std::string& path) {
    const std::vector<TokenRun> runs = image_runs(ids, image_id);
    auto list = [](const auto& v, auto count) {
        std::string s;
        for (size_t k = 0; k < v.size() && k < 8; ++k) s += (k ? ", " : "") + std::to_string(count(v[k]));
        if (v.size() > 8) s += ", ...";
        return s;
    };
    if (runs.size() != images.size())
        fail("the prompt has ", runs.size(), " <|image_pad|> run", runs.size() == 1 ? "" : "s",
             runs.empty() ? "" : " (of " + list(runs, [](const TokenRun& r) { return r.n; }) + " tokens)",
             " but embeddings file '", path, "' holds ", images.size(), " image", images.size() == 1 ? "" : "s", " (of ",
             list(images, [](const ImageEmbeddings& m) { return m.n; }), " rows)");
    std::vector<PromptImage> out;
    for (size_t k = 0; k < runs.size(); ++k) {
        if (runs[k].n != images[k].n)
            fail("image ", k + 1, ": the prompt's <|image_pad|> run at position ", runs[k].start, " has ", runs[k].n,
                 " tokens, embeddings file '", path, "' has ", images[k].n, " rows (", images[k].nx, " x ",
                 images[k].ny, ") for it");
        PromptImage p;
        p.start = runs[k].start;
        p.n = runs[k].n;
        p.nx = images[k].nx;
        p.ny = images[k].ny;
        p.hash = hash_image(p.nx, p.ny, images[k].rows);
        p.rows = std::move(images[k].rows);
        out.push_back(std::move(p));
    }
    return out;
}

}  // namespace strata
