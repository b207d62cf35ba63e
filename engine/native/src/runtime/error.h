// error.h — the engine's exception type and the thread-local "last error" of the C API.
#pragma once

#include "luce.h"

#include <stdexcept>
#include <string>

namespace luce {

// Thrown inside the library; the C API catches it, stores the message and returns the status.
struct Error : std::runtime_error {
    luce_status status;
    Error(luce_status s, const std::string & msg) : std::runtime_error(msg), status(s) {}
};

void set_last_error(const std::string & msg);
void clear_last_error();

// Last error-level line ggml logged on this thread (gguf explains *why* a header is bad there).
std::string take_ggml_log_error();
void install_ggml_log_hook();

std::string format_bytes(uint64_t bytes);

} // namespace luce
