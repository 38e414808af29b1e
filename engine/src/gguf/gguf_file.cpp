// GGUF v3 parsing with bounds checks on every read, split-shard discovery, and tensor data access.
#include "gguf/gguf_file.h"

#include <cstring>
#include <regex>
#include <sstream>

#include "common/error.h"
#include "common/platform.h"

namespace strata {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr uint64_t kMaxArrayItems = 1ull << 31;
constexpr int kMaxArrayDepth = 8;

// Sequential reader over a file with positioned reads; every read is checked against the file size.
class Cursor {
public:
    Cursor(platform::FileHandle file, uint64_t size, const std::string& path) : file_(file), size_(size), path_(path) {}
    uint64_t pos() const { return pos_; }

    void read(void* dst, uint64_t n, const char* what) {
        if (n > size_ - std::min(pos_, size_))
            fail(path_, ": truncated header: ", what, " needs ", n, " bytes at offset ", pos_, " but the file has ",
                 size_, " bytes");
        // A small buffer keeps the many tiny reads (keys, token strings) fast.
        uint8_t* out = static_cast<uint8_t*>(dst);
        while (n > 0) {
            if (pos_ < buf_start_ || pos_ >= buf_start_ + buf_.size()) fill();
            uint64_t off = pos_ - buf_start_;
            uint64_t take = std::min<uint64_t>(n, buf_.size() - off);
            std::memcpy(out, buf_.data() + off, take);
            out += take; pos_ += take; n -= take;
        }
    }
    template <typename T> T get(const char* what) { T v; read(&v, sizeof(T), what); return v; }
    std::string get_string(const char* what) {
        uint64_t len = get<uint64_t>(what);
        if (len > kMaxStringBytes) fail(path_, ": ", what, " has an implausible length ", len);
        std::string s(len, '\0');
        if (len) read(s.data(), len, what);
        return s;
    }

private:
    void fill() {
        buf_start_ = pos_;
        buf_.resize(std::min<uint64_t>(1 << 20, size_ - pos_));
        int64_t got = platform::read_at(file_, buf_.data(), buf_.size(), pos_);
        if (got != (int64_t)buf_.size())
            fail(path_, ": read failed at offset ", pos_, ": ", got < 0 ? platform::last_error_text() : "end of file");
    }
    platform::FileHandle file_;
    uint64_t size_;
    std::string path_;
    uint64_t pos_ = 0;
    uint64_t buf_start_ = 0;
    std::vector<uint8_t> buf_;
};

bool is_valid_value_type(uint32_t t) { return t <= 12; }

void read_value(Cursor& c, GgufValueType type, GgufValue& v, const std::string& key, int depth, const std::string& path);

void read_array(Cursor& c, GgufValue& v, const std::string& key, int depth, const std::string& path) {
    if (depth > kMaxArrayDepth) fail(path, ": key ", key, ": arrays nested too deeply");
    uint32_t et = c.get<uint32_t>("array element type");
    if (!is_valid_value_type(et)) fail(path, ": key ", key, ": unknown array element type ", et);
    uint64_t n = c.get<uint64_t>("array length");
    if (n > kMaxArrayItems) fail(path, ": key ", key, ": implausible array length ", n);
    v.elem_type = (GgufValueType)et;
    switch (v.elem_type) {
        case GgufValueType::UINT8: for (uint64_t k = 0; k < n; ++k) v.arr_u.push_back(c.get<uint8_t>("array item")); break;
        case GgufValueType::UINT16: for (uint64_t k = 0; k < n; ++k) v.arr_u.push_back(c.get<uint16_t>("array item")); break;
        case GgufValueType::UINT32: for (uint64_t k = 0; k < n; ++k) v.arr_u.push_back(c.get<uint32_t>("array item")); break;
        case GgufValueType::UINT64: for (uint64_t k = 0; k < n; ++k) v.arr_u.push_back(c.get<uint64_t>("array item")); break;
        case GgufValueType::BOOL: for (uint64_t k = 0; k < n; ++k) v.arr_u.push_back(c.get<uint8_t>("array item") != 0); break;
        case GgufValueType::INT8: for (uint64_t k = 0; k < n; ++k) v.arr_i.push_back(c.get<int8_t>("array item")); break;
        case GgufValueType::INT16: for (uint64_t k = 0; k < n; ++k) v.arr_i.push_back(c.get<int16_t>("array item")); break;
        case GgufValueType::INT32: for (uint64_t k = 0; k < n; ++k) v.arr_i.push_back(c.get<int32_t>("array item")); break;
        case GgufValueType::INT64: for (uint64_t k = 0; k < n; ++k) v.arr_i.push_back(c.get<int64_t>("array item")); break;
        case GgufValueType::FLOAT32: for (uint64_t k = 0; k < n; ++k) v.arr_f.push_back(c.get<float>("array item")); break;
        case GgufValueType::FLOAT64: for (uint64_t k = 0; k < n; ++k) v.arr_f.push_back(c.get<double>("array item")); break;
        case GgufValueType::STRING:
            v.arr_s.reserve(n);
            for (uint64_t k = 0; k < n; ++k) v.arr_s.push_back(c.get_string("array string"));
            break;
        case GgufValueType::ARRAY:
            for (uint64_t k = 0; k < n; ++k) {
                GgufValue item;
                item.type = GgufValueType::ARRAY;
                read_array(c, item, key, depth + 1, path);
                v.arr_nested.push_back(std::move(item));
            }
            break;
    }
}

void read_value(Cursor& c, GgufValueType type, GgufValue& v, const std::string& key, int depth, const std::string& path) {
    v.type = type;
    switch (type) {
        case GgufValueType::UINT8: v.u = c.get<uint8_t>("value"); break;
        case GgufValueType::UINT16: v.u = c.get<uint16_t>("value"); break;
        case GgufValueType::UINT32: v.u = c.get<uint32_t>("value"); break;
        case GgufValueType::UINT64: v.u = c.get<uint64_t>("value"); break;
        case GgufValueType::BOOL: v.u = c.get<uint8_t>("value") != 0; break;
        case GgufValueType::INT8: v.i = c.get<int8_t>("value"); break;
        case GgufValueType::INT16: v.i = c.get<int16_t>("value"); break;
        case GgufValueType::INT32: v.i = c.get<int32_t>("value"); break;
        case GgufValueType::INT64: v.i = c.get<int64_t>("value"); break;
        case GgufValueType::FLOAT32: v.f = c.get<float>("value"); break;
        case GgufValueType::FLOAT64: v.f = c.get<double>("value"); break;
        case GgufValueType::STRING: v.s = c.get_string("string value"); break;
        case GgufValueType::ARRAY: read_array(c, v, key, depth, path); break;
    }
}

bool is_uint_type(GgufValueType t) {
    return t == GgufValueType::UINT8 || t == GgufValueType::UINT16 || t == GgufValueType::UINT32 ||
           t == GgufValueType::UINT64 || t == GgufValueType::BOOL;
}
bool is_int_type(GgufValueType t) {
    return t == GgufValueType::INT8 || t == GgufValueType::INT16 || t == GgufValueType::INT32 ||
           t == GgufValueType::INT64;
}

// "dir/name-00002-of-00003.gguf" → {"dir/name-", 2, 3}
bool parse_split_name(const std::string& path, std::string& prefix, int& no, int& count) {
    static const std::regex re(R"((.*)-(\d{5})-of-(\d{5})\.gguf$)");
    std::smatch m;
    if (!std::regex_match(path, m, re)) return false;
    prefix = m[1].str() + "-";
    no = std::stoi(m[2].str());
    count = std::stoi(m[3].str());
    return true;
}

std::string split_name(const std::string& prefix, int no, int count) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%05d-of-%05d.gguf", no, count);
    return prefix + buf;
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
    static const char* names[] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                  "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
    return (uint32_t)t <= 12 ? names[(uint32_t)t] : "?";
}

size_t GgufValue::array_size() const {
    return arr_u.size() + arr_i.size() + arr_f.size() + arr_s.size() + arr_nested.size();
}

std::string GgufValue::summary() const {
    std::ostringstream os;
    switch (type) {
        case GgufValueType::STRING:
            os << '"' << (s.size() > 60 ? s.substr(0, 57) + "..." : s) << '"';
            break;
        case GgufValueType::ARRAY: {
            os << "[" << gguf_value_type_name(elem_type) << " x " << array_size() << "]";
            const size_t show = 8;
            if (!arr_u.empty() || !arr_i.empty() || !arr_f.empty()) {
                os << " ";
                for (size_t k = 0; k < std::min(show, array_size()); ++k) {
                    if (k) os << ",";
                    if (!arr_u.empty()) os << arr_u[k];
                    else if (!arr_i.empty()) os << arr_i[k];
                    else os << arr_f[k];
                }
                if (array_size() > show) os << ",...";
            }
            break;
        }
        case GgufValueType::FLOAT32: case GgufValueType::FLOAT64: os << f; break;
        default: if (is_int_type(type)) os << i; else os << u; break;
    }
    std::string out = os.str();
    for (char& ch : out) if (ch == '\n' || ch == '\r') ch = ' ';
    return out;
}

std::string GgufTensor::shape_string() const {
    std::ostringstream os;
    os << "{";
    for (int d = 0; d < n_dims; ++d) os << (d ? ", " : "") << ne[d];
    os << "}";
    return os.str();
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    std::string prefix;
    int no = 0, count = 0;
    if (parse_split_name(path, prefix, no, count)) {
        STRATA_CHECK(count >= 1 && no >= 1 && no <= count, path, ": bad split file name");
        for (int k = 1; k <= count; ++k) f->paths_.push_back(split_name(prefix, k, count));
    } else {
        f->paths_.push_back(path);
    }
    for (size_t k = 0; k < f->paths_.size(); ++k) f->parse_shard((int)k, f->paths_[k]);

    if (f->paths_.size() > 1) {
        STRATA_CHECK(f->has("split.count"), f->paths_[0], ": split file without the split.count key");
        uint64_t declared = f->get_uint("split.count");
        STRATA_CHECK(declared == f->paths_.size(), f->paths_[0], ": split.count is ", declared, " but the name says ",
                     f->paths_.size(), " shards");
        if (f->has("split.tensors.count")) {
            uint64_t total = f->get_uint("split.tensors.count");
            STRATA_CHECK(total == f->tensors_.size(), path, ": split.tensors.count is ", total, " but the shards hold ",
                         f->tensors_.size(), " tensors");
        }
    }
    return f;
}

GgufFile::~GgufFile() {
    for (auto& m : mappings_) platform::unmap_range(m);
    for (auto& file : files_) platform::close_file(file);
}

void GgufFile::parse_shard(int shard, const std::string& path) {
    platform::FileHandle file = platform::open_read_only(path);
    if (!file.is_open()) fail(path, ": cannot open: ", platform::last_error_text());
    files_.push_back(file);
    int64_t file_size = platform::file_size(file);
    if (file_size < 0) fail(path, ": cannot stat: ", platform::last_error_text());
    uint64_t size = (uint64_t)file_size;
    file_sizes_.push_back(size);

    Cursor c(file, size, path);
    uint32_t magic = c.get<uint32_t>("magic");
    if (magic != kMagic) fail(path, ": not a GGUF file (magic 0x", std::hex, magic, ", expected 0x", kMagic, ")");
    uint32_t version = c.get<uint32_t>("version");
    if (version != 2 && version != 3) fail(path, ": unsupported GGUF version ", version, " (this reader knows 2 and 3)");
    if (shard == 0) version_ = version;
    uint64_t n_tensors = c.get<uint64_t>("tensor count");
    uint64_t n_kv = c.get<uint64_t>("metadata count");
    if (n_tensors > (1u << 24)) fail(path, ": implausible tensor count ", n_tensors);
    if (n_kv > (1u << 24)) fail(path, ": implausible metadata count ", n_kv);

    std::map<std::string, GgufValue> kv;
    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string key = c.get_string("metadata key");
        uint32_t type = c.get<uint32_t>("metadata value type");
        if (!is_valid_value_type(type)) fail(path, ": key ", key, " has unknown value type ", type);
        GgufValue v;
        read_value(c, (GgufValueType)type, v, key, 0, path);
        if (kv.count(key)) fail(path, ": duplicate metadata key ", key);
        kv.emplace(std::move(key), std::move(v));
    }
    uint64_t alignment = 32;
    if (auto it = kv.find("general.alignment"); it != kv.end()) {
        alignment = it->second.u;
        if (alignment == 0 || (alignment & (alignment - 1)))
            fail(path, ": general.alignment must be a power of two, got ", alignment);
    }
    if (shard == 0) {
        kv_ = std::move(kv);
    } else if (auto it = kv.find("split.no"); it != kv.end() && it->second.u != (uint64_t)shard) {
        fail(path, ": split.no is ", it->second.u, " but this is shard ", shard, " (0-based)");
    }

    std::vector<GgufTensor> local;
    for (uint64_t k = 0; k < n_tensors; ++k) {
        GgufTensor t;
        t.name = c.get_string("tensor name");
        uint32_t n_dims = c.get<uint32_t>("tensor n_dims");
        if (n_dims < 1 || n_dims > 4) fail(path, ": tensor ", t.name, " has ", n_dims, " dimensions (1 to 4 allowed)");
        t.n_dims = (int)n_dims;
        for (uint32_t d = 0; d < n_dims; ++d) {
            uint64_t ne = c.get<uint64_t>("tensor dimension");
            if (ne == 0 || ne > (1ull << 40)) fail(path, ": tensor ", t.name, " has dimension ", d, " = ", ne);
            t.ne[d] = (int64_t)ne;
        }
        uint32_t type = c.get<uint32_t>("tensor type");
        const GgmlTypeInfo* info = ggml_type_info(type);
        if (!info) fail(path, ": tensor ", t.name, " has unknown ggml type ", type);
        t.type = info->type;
        if (t.ne[0] % info->block_elems != 0)
            fail(path, ": tensor ", t.name, " of type ", info->name, " has ne0 = ", t.ne[0],
                 ", not a multiple of the block size ", info->block_elems);
        uint64_t rel = c.get<uint64_t>("tensor offset");
        if (rel % alignment != 0) fail(path, ": tensor ", t.name, " offset ", rel, " is not aligned to ", alignment);
        t.shard = shard;
        t.file_offset = rel;  // relative for now
        t.n_bytes = (uint64_t)ggml_row_bytes(t.type, t.ne[0]) * (uint64_t)(t.ne[1] * t.ne[2] * t.ne[3]);
        local.push_back(std::move(t));
    }
    uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
    for (auto& t : local) {
        t.file_offset += data_start;
        if (t.file_offset > size || t.n_bytes > size - t.file_offset)
            fail(path, ": tensor ", t.name, " (", t.n_bytes, " bytes at offset ", t.file_offset,
                 ") runs past the end of the file (", size, " bytes): the file is truncated or corrupt");
        if (tensor_index_.count(t.name)) fail(path, ": duplicate tensor name ", t.name);
        tensor_index_[t.name] = tensors_.size();
        tensors_.push_back(std::move(t));
    }
}

const GgufValue* GgufFile::find(const std::string& key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
}

static const GgufValue& need(const GgufFile& f, const std::string& key) {
    const GgufValue* v = f.find(key);
    if (!v) fail(f.paths()[0], ": missing required metadata key ", key);
    return *v;
}

uint64_t GgufFile::get_uint(const std::string& key) const {
    const GgufValue& v = need(*this, key);
    if (is_uint_type(v.type)) return v.u;
    if (is_int_type(v.type) && v.i >= 0) return (uint64_t)v.i;
    fail(paths_[0], ": key ", key, " should be a non-negative integer, found ", gguf_value_type_name(v.type), " ",
         v.summary());
}

int64_t GgufFile::get_int(const std::string& key) const {
    const GgufValue& v = need(*this, key);
    if (is_int_type(v.type)) return v.i;
    if (is_uint_type(v.type) && v.u <= (uint64_t)INT64_MAX) return (int64_t)v.u;
    fail(paths_[0], ": key ", key, " should be an integer, found ", gguf_value_type_name(v.type));
}

double GgufFile::get_float(const std::string& key) const {
    const GgufValue& v = need(*this, key);
    if (v.type == GgufValueType::FLOAT32 || v.type == GgufValueType::FLOAT64) return v.f;
    if (is_int_type(v.type)) return (double)v.i;
    if (is_uint_type(v.type)) return (double)v.u;
    fail(paths_[0], ": key ", key, " should be a number, found ", gguf_value_type_name(v.type));
}

bool GgufFile::get_bool(const std::string& key) const {
    const GgufValue& v = need(*this, key);
    if (v.type == GgufValueType::BOOL) return v.u != 0;
    fail(paths_[0], ": key ", key, " should be a bool, found ", gguf_value_type_name(v.type));
}

std::string GgufFile::get_string(const std::string& key) const {
    const GgufValue& v = need(*this, key);
    if (v.type == GgufValueType::STRING) return v.s;
    fail(paths_[0], ": key ", key, " should be a string, found ", gguf_value_type_name(v.type));
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
    const GgufValue& v = need(*this, key);
    if (v.type != GgufValueType::ARRAY) fail(paths_[0], ": key ", key, " should be an array, found ", gguf_value_type_name(v.type));
    if (is_int_type(v.elem_type)) return v.arr_i;
    if (is_uint_type(v.elem_type)) {
        std::vector<int64_t> out;
        for (uint64_t x : v.arr_u) {
            if (x > (uint64_t)INT64_MAX) fail(paths_[0], ": key ", key, " has a value too large for int64: ", x);
            out.push_back((int64_t)x);
        }
        return out;
    }
    fail(paths_[0], ": key ", key, " should be an integer array, found an array of ", gguf_value_type_name(v.elem_type));
}

std::vector<uint64_t> GgufFile::get_uint64_array(const std::string& key) const {
    const GgufValue& v = need(*this, key);
    if (v.type == GgufValueType::ARRAY && is_uint_type(v.elem_type)) return v.arr_u;
    if (v.type == GgufValueType::ARRAY && is_int_type(v.elem_type)) {
        std::vector<uint64_t> out;
        for (int64_t x : v.arr_i) {
            if (x < 0) fail(paths_[0], ": key ", key, " has a negative value ", x);
            out.push_back((uint64_t)x);
        }
        return out;
    }
    fail(paths_[0], ": key ", key, " should be an array of unsigned integers");
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
    const GgufValue& v = need(*this, key);
    if (v.type == GgufValueType::ARRAY && v.elem_type == GgufValueType::STRING) return v.arr_s;
    fail(paths_[0], ": key ", key, " should be an array of strings");
}

uint64_t GgufFile::get_uint_or(const std::string& key, uint64_t fallback) const {
    return has(key) ? get_uint(key) : fallback;
}

double GgufFile::get_float_or(const std::string& key, double fallback) const {
    return has(key) ? get_float(key) : fallback;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
    const GgufTensor* t = find_tensor(name);
    if (!t) fail(paths_[0], ": missing required tensor ", name);
    return *t;
}

const uint8_t* GgufFile::map_tensor(const GgufTensor& t) {
    platform::MappedRange m;
    if (!platform::map_range(files_[t.shard], t.file_offset, t.n_bytes, m))
        fail(paths_[t.shard], ": cannot map tensor ", t.name, ": ", platform::last_error_text());
    mappings_.push_back(m);
    return m.data;
}

void GgufFile::read_tensor_bytes(const GgufTensor& t, uint64_t offset, uint64_t n, void* dst) const {
    STRATA_CHECK(offset <= t.n_bytes && n <= t.n_bytes - offset, "read of ", n, " bytes at ", offset,
                 " is outside tensor ", t.name, " (", t.n_bytes, " bytes)");
    int64_t got = platform::read_at(files_[t.shard], dst, n, t.file_offset + offset);
    if (got != (int64_t)n)
        fail(paths_[t.shard], ": read of tensor ", t.name, " failed: ", got < 0 ? platform::last_error_text() : "end of file");
}

}  // namespace strata
