// state_api.cpp — the C API of engine state files (luce.h; the format in runtime/state_file.h).
#include "luce.h"
#include "api_guard.h"
#include "engine.h"
#include "state_file.h"

#include <algorithm>

using luce::guarded;

extern "C" {

luce_status luce_engine_state_bytes(luce_engine * e, uint64_t * bytes) {
    return guarded([&] {
        REQUIRE(e && bytes, "luce_engine_state_bytes: engine and bytes are required");
        *bytes = luce::engine_state_bytes(*e->impl);
    });
}

luce_status luce_engine_state_save(luce_engine * e, const char * path, bool allow_append, luce_state_io * out) {
    return guarded([&] {
        REQUIRE(e && path && *path, "luce_engine_state_save: engine and path are required");
        const luce_state_io io = luce::save_engine_state(*e->impl, path, allow_append);
        if (out) *out = io;
    });
}

luce_status luce_engine_state_load(luce_engine * e, const char * path, luce_state_io * out) {
    return guarded([&] {
        REQUIRE(e && path && *path, "luce_engine_state_load: engine and path are required");
        const luce_state_io io = luce::load_engine_state(*e->impl, path);
        if (out) *out = io;
    });
}

luce_status luce_state_file_info_read(const char * path, luce_state_info * out) {
    return guarded([&] {
        REQUIRE(path && *path && out, "luce_state_file_info_read: path and out are required");
        *out = luce::read_state_info(path);
    });
}

luce_status luce_state_file_tokens(const char * path, int32_t * tokens, int32_t capacity, int32_t * n_tokens) {
    return guarded([&] {
        REQUIRE(path && *path && n_tokens && capacity >= 0 && (tokens || capacity == 0),
                "luce_state_file_tokens: path, n_tokens and room for the tokens are required");
        const std::vector<int32_t> all = luce::read_state_tokens(path);
        std::copy_n(all.begin(), std::min<size_t>(all.size(), size_t(capacity)), tokens);
        *n_tokens = int32_t(all.size());
    });
}

}  // extern "C"
