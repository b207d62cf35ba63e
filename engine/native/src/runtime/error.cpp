#include "error.h"

#include "ggml.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace luce {

static thread_local std::string g_last_error;
static thread_local std::string g_ggml_error;
static std::atomic<bool> g_verbose{false};

void set_last_error(const std::string & msg) { g_last_error = msg; }
void clear_last_error() { g_last_error.clear(); }

std::string take_ggml_log_error() {
    std::string s;
    s.swap(g_ggml_error);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

// ggml and gguf report problems through the log callback; keep the last error line so that our
// exceptions can say what gguf found wrong, and stay quiet unless verbose.
static void log_hook(enum ggml_log_level level, const char * text, void * /*user*/) {
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        if (level == GGML_LOG_LEVEL_ERROR) g_ggml_error = text;
    }
    if (g_verbose.load()) fputs(text, stderr);
}

void install_ggml_log_hook() {
    static std::once_flag once;
    std::call_once(once, [] { ggml_log_set(log_hook, nullptr); });
}

std::string format_bytes(uint64_t bytes) {
    char buf[32];
    if (bytes >= (1ull << 30))      snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(1ull << 30));
    else if (bytes >= (1ull << 20)) snprintf(buf, sizeof buf, "%.1f MiB", bytes / double(1ull << 20));
    else                            snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
    return buf;
}

} // namespace luce

extern "C" const char * luce_last_error(void) { return luce::g_last_error.c_str(); }
extern "C" void luce_set_verbose(bool verbose) {
    luce::install_ggml_log_hook();
    luce::g_verbose.store(verbose);
}
