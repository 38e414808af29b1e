// GGUF v3 reader: metadata of every value type, the tensor table across split shards, and access to tensor data
// (memory-mapped per tensor, or positioned reads for tables too large to map, such as the PLE table).
// It knows the file format only; what the keys mean for qwen4exp lives in model/hparams.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "common/platform.h"
#include "gguf/ggml_types.h"

namespace strata {

enum class GgufValueType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars use one of the scalar fields; arrays keep their elements compactly by kind.
struct GgufValue {
    GgufValueType type = GgufValueType::UINT8;
    uint64_t u = 0;           // UINT*, BOOL
    int64_t i = 0;            // INT*
    double f = 0;             // FLOAT*
    std::string s;            // STRING
    GgufValueType elem_type = GgufValueType::UINT8;  // ARRAY only
    std::vector<uint64_t> arr_u;        // arrays of unsigned ints and bools
    std::vector<int64_t> arr_i;         // arrays of signed ints
    std::vector<double> arr_f;          // arrays of floats
    std::vector<std::string> arr_s;     // arrays of strings
    std::vector<GgufValue> arr_nested;  // arrays of arrays
    size_t array_size() const;
    std::string summary() const;        // short human-readable form for `strata info`
};

struct GgufTensor {
    std::string name;
    GgmlType type = GgmlType::F32;
    int n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ggml order: ne[0] is contiguous
    int shard = 0;                 // which file of a split model holds the data
    uint64_t file_offset = 0;      // absolute offset of the data in that file
    uint64_t n_bytes = 0;
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    std::string shape_string() const;  // "{2560, 512}"
};

class GgufFile {
public:
    // Opens a single file, or every shard of a split model when path names one shard
    // (`name-0000N-of-0000M.gguf`). Throws strata::Error naming the file and the problem.
    static std::unique_ptr<GgufFile> open(const std::string& path);
    ~GgufFile();
    GgufFile(const GgufFile&) = delete;
    GgufFile& operator=(const GgufFile&) = delete;

    const std::vector<std::string>& paths() const { return paths_; }
    uint32_t version() const { return version_; }

    // Metadata (from shard 0, which holds the full key set).
    const std::map<std::string, GgufValue>& metadata() const { return kv_; }
    const GgufValue* find(const std::string& key) const;
    bool has(const std::string& key) const { return find(key) != nullptr; }
    // Typed getters: any integer type is accepted if the value fits; a missing key or wrong type throws.
    uint64_t get_uint(const std::string& key) const;
    int64_t get_int(const std::string& key) const;
    double get_float(const std::string& key) const;
    bool get_bool(const std::string& key) const;
    std::string get_string(const std::string& key) const;
    std::vector<int64_t> get_int_array(const std::string& key) const;    // signed or unsigned int elements
    std::vector<uint64_t> get_uint64_array(const std::string& key) const;
    std::vector<std::string> get_string_array(const std::string& key) const;
    uint64_t get_uint_or(const std::string& key, uint64_t fallback) const;
    double get_float_or(const std::string& key, double fallback) const;

    // Tensors of all shards, in file order.
    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* find_tensor(const std::string& name) const;
    const GgufTensor& tensor(const std::string& name) const;  // throws if missing

    // Maps a tensor's data read-only and returns a pointer to its first byte (valid while this object lives).
    const uint8_t* map_tensor(const GgufTensor& t);
    // Positioned read of n bytes starting `offset` bytes into the tensor's data.
    void read_tensor_bytes(const GgufTensor& t, uint64_t offset, uint64_t n, void* dst) const;

private:
    GgufFile() = default;
    void parse_shard(int shard, const std::string& path);

    std::vector<std::string> paths_;
    std::vector<platform::FileHandle> files_;
    std::vector<uint64_t> file_sizes_;
    uint32_t version_ = 0;
    std::map<std::string, GgufValue> kv_;
    std::vector<GgufTensor> tensors_;
    std::map<std::string, size_t> tensor_index_;
    std::vector<platform::MappedRange> mappings_;
};

}  // namespace strata
