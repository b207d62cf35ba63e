// api_guard.h — how the C API functions turn C++ exceptions into status codes (luce_last_error()
// holds the message). Used by luce_api.cpp and draft_api.cpp.
#pragma once

#include "luce.h"
#include "error.h"

#include <new>
#include <string>

namespace luce {

template <typename F>
inline luce_status guarded(F && f) {
    clear_last_error();
    try {
        f();
        return LUCE_OK;
    } catch (const luce::Error & e) {
        set_last_error(e.what());
        return e.status;
    } catch (const std::bad_alloc &) {
        set_last_error("out of host memory");
        return LUCE_ERR_MEMORY;
    } catch (const std::exception & e) {
        set_last_error(std::string("internal error: ") + e.what());
        return LUCE_ERR_COMPUTE;
    }
}

}  // namespace luce

// Argument check inside guarded(): throws an invalid-argument error with msg.
#define REQUIRE(cond, msg) do { if (!(cond)) throw ::luce::Error(LUCE_ERR_INVALID_ARG, msg); } while (0)
