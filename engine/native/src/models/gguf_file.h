// gguf_file.h — a GGUF file opened for loading: header checks, typed key access with errors
// that name the key and the file, tensor metadata, and a read-only mapping of the data.
#pragma once

#include "luce.h"
#include "gguf.h"
#include "ggml.h"

#include <cstdint>
#include <string>
#include <vector>

namespace luce {

class GgufFile {
public:
    explicit GgufFile(const std::string & path);   // throws luce::Error
    ~GgufFile();
    GgufFile(const GgufFile &) = delete;
    GgufFile & operator=(const GgufFile &) = delete;

    const std::string & path() const { return path_; }
    std::string arch() const { return arch_; }

    bool has(const std::string & key) const;
    // Required getters throw LUCE_ERR_MODEL naming the key; "opt" getters return the fallback.
    uint32_t    u32(const std::string & key) const;
    uint32_t    u32_opt(const std::string & key, uint32_t fallback) const;
    float       f32(const std::string & key) const;
    float       f32_opt(const std::string & key, float fallback) const;
    bool        bool_opt(const std::string & key, bool fallback) const;
    std::string str_opt(const std::string & key, const std::string & fallback) const;
    // Integer or bool arrays (a scalar integer reads as one element); throws naming the key.
    std::vector<int64_t> int_array(const std::string & key) const;
    std::vector<bool>    bool_array(const std::string & key) const;

    // Tensor metadata (no data); nullptr when absent.
    ggml_tensor * tensor_meta(const std::string & name) const;
    std::vector<std::string> tensor_names() const;   // in file order
    size_t tensor_file_offset(const std::string & name) const;   // absolute offset in the file
    const uint8_t * mapped_data(size_t file_offset) const { return map_ + file_offset; }
    size_t file_size() const { return file_size_; }
    size_t data_offset() const;   // where the tensor data starts: before it, the metadata and tensor table

    [[noreturn]] void fail(luce_status status, const std::string & what) const;

private:
    int64_t key_id(const std::string & key) const;
    uint64_t integer_value(int64_t id, const std::string & key) const;

    std::string path_;
    std::string arch_;
    gguf_context * gguf_ = nullptr;
    ggml_context * meta_ = nullptr;
    int fd_ = -1;
    uint8_t * map_ = nullptr;
    size_t file_size_ = 0;
};

} // namespace luce
