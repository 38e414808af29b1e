// GENI's image embeddings file (protocol.md §3, written by the vision helper): per image a header — the 4 bytes
// "SVE1", then int32 n_tokens, nx, ny, n_embd (little-endian) — and n_tokens × n_embd float32 rows, row i at
// merged-grid column i % nx, row i / nx; a file holds one or more images back to back, in prompt order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "generate/text_generator.h"

namespace strata {

struct ImageEmbeddings {
    int n = 0, nx = 0, ny = 0;
    std::vector<float> rows;   // [n, n_embd]
};

// Reads every image of the file; each must have n_tokens = nx · ny > 0 and n_embd = the model's hidden size.
// Throws Error whose message is the ERR text (it names the file, the image and the numbers at fault).
std::vector<ImageEmbeddings> read_image_embeddings(const std::string& path, int n_embd);

// The prompt's runs of `image_id` (maximal runs of consecutive ids), in order.
struct TokenRun {
    int start = 0, n = 0;
};
std::vector<TokenRun> image_runs(const std::vector<int32_t>& ids, int32_t image_id);

// Places the file's images on the prompt's runs, one image per run in order; the counts must match exactly.
// Throws Error naming the numbers otherwise. Each image's hash covers its grid and rows.
std::vector<PromptImage> place_images(const std::vector<int32_t>& ids, int32_t image_id,
                                      std::vector<ImageEmbeddings> images, const std::string& path);

// A 64-bit hash of an image's grid and rows (names the picture for prefix reuse).
uint64_t hash_image(int nx, int ny, const std::vector<float>& rows);

}  // namespace strata
