#include "gguf_file.h"
#include "error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace luce {

void GgufFile::fail(luce_status status, const std::string & what) const {
    throw Error(status, path_ + ": " + what);
}

GgufFile::GgufFile(const std::string & path) : path_(path) {
    install_ggml_log_hook();
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(LUCE_ERR_IO, std::string("cannot open: ") + strerror(errno));
    struct stat st {};
    if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) fail(LUCE_ERR_IO, "not a regular file");
    file_size_ = size_t(st.st_size);

    // Check the fixed header ourselves: gguf's own parser only says "failed to load".
    uint8_t head[8] = {};
    ssize_t got = ::pread(fd_, head, sizeof head, 0);
    if (got < 4 || memcmp(head, "GGUF", 4) != 0) {
        fail(LUCE_ERR_FORMAT, "not a GGUF file (the first bytes are not the magic \"GGUF\")");
    }
    if (got < 8) fail(LUCE_ERR_FORMAT, "truncated GGUF header");
    uint32_t version;
    memcpy(&version, head + 4, 4);
    if (version < 2 || version > 3) {
        fail(LUCE_ERR_FORMAT, "unsupported GGUF version " + std::to_string(version) + " (expected 2 or 3)");
    }

    gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ &meta_};
    take_ggml_log_error();
    gguf_ = gguf_init_from_file(path.c_str(), params);
    if (!gguf_) {
        std::string why = take_ggml_log_error();
        fail(LUCE_ERR_FORMAT, "malformed GGUF metadata (file truncated or corrupt)" +
                                  (why.empty() ? std::string() : ": " + why));
    }

    int64_t id = gguf_find_key(gguf_, "general.architecture");
    if (id < 0) fail(LUCE_ERR_MODEL, "missing key general.architecture");
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_STRING) fail(LUCE_ERR_MODEL, "key general.architecture is not a string");
    arch_ = gguf_get_val_str(gguf_, id);

    // Every tensor's bytes must lie inside the file: catches truncated downloads up front.
    const size_t data_off = gguf_get_data_offset(gguf_);
    for (int64_t i = 0; i < gguf_get_n_tensors(gguf_); ++i) {
        size_t end = data_off + gguf_get_tensor_offset(gguf_, i) + gguf_get_tensor_size(gguf_, i);
        if (end > file_size_) {
            fail(LUCE_ERR_FORMAT, std::string("file is truncated: tensor ") + gguf_get_tensor_name(gguf_, i) +
                                      " ends at byte " + std::to_string(end) + " but the file has " +
                                      std::to_string(file_size_) + " bytes");
        }
    }

    void * m = mmap(nullptr, file_size_, PROT_READ, MAP_SHARED, fd_, 0);
    if (m == MAP_FAILED) fail(LUCE_ERR_IO, std::string("mmap failed: ") + strerror(errno));
    map_ = static_cast<uint8_t *>(m);
}

GgufFile::~GgufFile() {
    if (map_) munmap(map_, file_size_);
    if (gguf_) gguf_free(gguf_);
    if (meta_) ggml_free(meta_);
    if (fd_ >= 0) ::close(fd_);
}

size_t GgufFile::data_offset() const { return gguf_get_data_offset(gguf_); }

bool GgufFile::has(const std::string & key) const { return gguf_find_key(gguf_, key.c_str()) >= 0; }

int64_t GgufFile::key_id(const std::string & key) const {
    int64_t id = gguf_find_key(gguf_, key.c_str());
    if (id < 0) fail(LUCE_ERR_MODEL, "missing required key " + key);
    return id;
}

uint64_t GgufFile::integer_value(int64_t id, const std::string & key) const {
    switch (gguf_get_kv_type(gguf_, id)) {
        case GGUF_TYPE_UINT8:  return gguf_get_val_u8(gguf_, id);
        case GGUF_TYPE_UINT16: return gguf_get_val_u16(gguf_, id);
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(gguf_, id);
        case GGUF_TYPE_UINT64: return gguf_get_val_u64(gguf_, id);
        case GGUF_TYPE_INT8:   if (gguf_get_val_i8(gguf_, id)  >= 0) return uint64_t(gguf_get_val_i8(gguf_, id));  break;
        case GGUF_TYPE_INT16:  if (gguf_get_val_i16(gguf_, id) >= 0) return uint64_t(gguf_get_val_i16(gguf_, id)); break;
        case GGUF_TYPE_INT32:  if (gguf_get_val_i32(gguf_, id) >= 0) return uint64_t(gguf_get_val_i32(gguf_, id)); break;
        case GGUF_TYPE_INT64:  if (gguf_get_val_i64(gguf_, id) >= 0) return uint64_t(gguf_get_val_i64(gguf_, id)); break;
        case GGUF_TYPE_ARRAY:
            fail(LUCE_ERR_UNSUPPORTED, "key " + key + " is a per-layer array; only a single value is supported");
        default:
            fail(LUCE_ERR_MODEL, "key " + key + " has type " + gguf_type_name(gguf_get_kv_type(gguf_, id)) +
                                     ", expected an unsigned integer");
    }
    fail(LUCE_ERR_MODEL, "key " + key + " is negative");
}

uint32_t GgufFile::u32(const std::string & key) const {
    uint64_t v = integer_value(key_id(key), key);
    if (v > UINT32_MAX) fail(LUCE_ERR_MODEL, "key " + key + " is out of range");
    return uint32_t(v);
}

uint32_t GgufFile::u32_opt(const std::string & key, uint32_t fallback) const {
    return has(key) ? u32(key) : fallback;
}

float GgufFile::f32(const std::string & key) const {
    int64_t id = key_id(key);
    switch (gguf_get_kv_type(gguf_, id)) {
        case GGUF_TYPE_FLOAT32: return gguf_get_val_f32(gguf_, id);
        case GGUF_TYPE_FLOAT64: return float(gguf_get_val_f64(gguf_, id));
        default: fail(LUCE_ERR_MODEL, "key " + key + " is not a float");
    }
}

float GgufFile::f32_opt(const std::string & key, float fallback) const { return has(key) ? f32(key) : fallback; }

bool GgufFile::bool_opt(const std::string & key, bool fallback) const {
    int64_t id = gguf_find_key(gguf_, key.c_str());
    if (id < 0) return fallback;
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_BOOL) fail(LUCE_ERR_MODEL, "key " + key + " is not a bool");
    return gguf_get_val_bool(gguf_, id);
}

std::string GgufFile::str_opt(const std::string & key, const std::string & fallback) const {
    int64_t id = gguf_find_key(gguf_, key.c_str());
    if (id < 0) return fallback;
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_STRING) fail(LUCE_ERR_MODEL, "key " + key + " is not a string");
    return gguf_get_val_str(gguf_, id);
}

std::vector<int64_t> GgufFile::int_array(const std::string & key) const {
    const int64_t id = key_id(key);
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_ARRAY) return {int64_t(integer_value(id, key))};
    const size_t n = gguf_get_arr_n(gguf_, id);
    const void * d = gguf_get_arr_data(gguf_, id);
    std::vector<int64_t> out(n);
    switch (gguf_get_arr_type(gguf_, id)) {
        case GGUF_TYPE_INT32:  for (size_t i = 0; i < n; ++i) out[i] = static_cast<const int32_t *>(d)[i]; break;
        case GGUF_TYPE_UINT32: for (size_t i = 0; i < n; ++i) out[i] = static_cast<const uint32_t *>(d)[i]; break;
        case GGUF_TYPE_INT64:  for (size_t i = 0; i < n; ++i) out[i] = static_cast<const int64_t *>(d)[i]; break;
        default: fail(LUCE_ERR_MODEL, "key " + key + " is not an integer array");
    }
    return out;
}

std::vector<bool> GgufFile::bool_array(const std::string & key) const {
    const int64_t id = key_id(key);
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_ARRAY || gguf_get_arr_type(gguf_, id) != GGUF_TYPE_BOOL) {
        fail(LUCE_ERR_MODEL, "key " + key + " is not a bool array");
    }
    const size_t n = gguf_get_arr_n(gguf_, id);
    const auto * d = static_cast<const int8_t *>(gguf_get_arr_data(gguf_, id));
    std::vector<bool> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = d[i] != 0;
    return out;
}

ggml_tensor * GgufFile::tensor_meta(const std::string & name) const {
    return ggml_get_tensor(meta_, name.c_str());
}

std::vector<std::string> GgufFile::tensor_names() const {
    std::vector<std::string> names;
    for (int64_t i = 0; i < gguf_get_n_tensors(gguf_); ++i) names.emplace_back(gguf_get_tensor_name(gguf_, i));
    return names;
}

size_t GgufFile::tensor_file_offset(const std::string & name) const {
    int64_t id = gguf_find_tensor(gguf_, name.c_str());
    if (id < 0) fail(LUCE_ERR_MODEL, "missing tensor " + name);
    return gguf_get_data_offset(gguf_) + gguf_get_tensor_offset(gguf_, id);
}

} // namespace luce
