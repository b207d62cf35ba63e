#include "device.h"
#include "error.h"

#include <algorithm>
#include <cctype>
#include <thread>

namespace luce {

static std::string lower(std::string s) {
    for (auto & c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

bool device_is_cpu(ggml_backend_dev_t dev) { return ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU; }

std::string list_devices() {
    std::string out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        if (!out.empty()) out += ", ";
        out += ggml_backend_dev_name(ggml_backend_dev_get(i));
    }
    return out.empty() ? "none" : out;
}

ggml_backend_dev_t select_device(const std::string & spec_in) {
    const std::string spec = lower(spec_in.empty() ? "auto" : spec_in);
    const size_t n = ggml_backend_dev_count();
    if (spec == "auto") {
        for (size_t i = 0; i < n; ++i) {
            auto t = ggml_backend_dev_type(ggml_backend_dev_get(i));
            if (t == GGML_BACKEND_DEVICE_TYPE_GPU) return ggml_backend_dev_get(i);
        }
        return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    }
    if (spec == "cpu") return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);

    // "<backend>:<index>" counts devices of that backend registry ("cuda:0" -> first CUDA device)
    auto colon = spec.find(':');
    if (colon != std::string::npos) {
        std::string reg = spec.substr(0, colon);
        int want = -1;
        try { want = std::stoi(spec.substr(colon + 1)); } catch (...) { want = -1; }
        int seen = 0;
        for (size_t i = 0; i < n && want >= 0; ++i) {
            ggml_backend_dev_t d = ggml_backend_dev_get(i);
            if (lower(ggml_backend_reg_name(ggml_backend_dev_backend_reg(d))) == reg && seen++ == want) return d;
        }
    }
    for (size_t i = 0; i < n; ++i) {
        if (lower(ggml_backend_dev_name(ggml_backend_dev_get(i))) == spec) return ggml_backend_dev_get(i);
    }
    throw Error(LUCE_ERR_DEVICE, "device '" + spec_in + "' not found; available: " + list_devices() +
                                     " (use auto, cpu, cuda:N or a device name)");
}

void set_backend_threads(ggml_backend_t backend, int n_threads) {
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    ggml_backend_reg_t reg = dev ? ggml_backend_dev_backend_reg(dev) : nullptr;
    if (!reg) return;
    auto fn = (ggml_backend_set_n_threads_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
    if (fn) fn(backend, n_threads);
}

void set_backend_abort(ggml_backend_t backend, ggml_abort_callback callback, void * data) {
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    ggml_backend_reg_t reg = dev ? ggml_backend_dev_backend_reg(dev) : nullptr;
    if (!reg) return;
    using set_abort_t = void (*)(ggml_backend_t, ggml_abort_callback, void *);
    auto fn = (set_abort_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_abort_callback");
    if (fn) fn(backend, callback, data);
}

int default_thread_count() {
    unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    // ggml's CPU threads spin at barriers: if one of them loses its core to another process
    // (the UI thread included) a decode step stalls by orders of magnitude. Leave a core free
    // on small machines; past 4 logical CPUs assume SMT, where siblings add little bandwidth.
    return int(hw <= 4 ? std::max(1u, hw - 1) : hw / 2);
}

} // namespace luce

extern "C" int32_t luce_device_count(void) { return int32_t(ggml_backend_dev_count()); }

extern "C" luce_status luce_device_get(int32_t index, luce_device_info * out) {
    if (index < 0 || size_t(index) >= ggml_backend_dev_count() || !out) {
        luce::set_last_error("device index out of range");
        return LUCE_ERR_INVALID_ARG;
    }
    ggml_backend_dev_t d = ggml_backend_dev_get(size_t(index));
    *out = {};
    snprintf(out->name, sizeof out->name, "%s", ggml_backend_dev_name(d));
    snprintf(out->description, sizeof out->description, "%s", ggml_backend_dev_description(d));
    const char * kind = "accel";
    switch (ggml_backend_dev_type(d)) {
        case GGML_BACKEND_DEVICE_TYPE_CPU:  kind = "cpu"; break;
        case GGML_BACKEND_DEVICE_TYPE_GPU:  kind = "gpu"; break;
        case GGML_BACKEND_DEVICE_TYPE_IGPU: kind = "igpu"; break;
        default: break;
    }
    snprintf(out->kind, sizeof out->kind, "%s", kind);
    ggml_backend_dev_memory(d, &out->memory_free, &out->memory_total);
    return LUCE_OK;
}

namespace luce {

std::vector<ggml_backend_t> init_backends(ggml_backend_dev_t dev, int n_threads, ggml_backend_t & backend,
                                          ggml_backend_t & cpu_backend) {
    backend = ggml_backend_dev_init(dev, nullptr);
    if (!backend) throw Error(LUCE_ERR_DEVICE, "cannot initialise backend " + std::string(ggml_backend_dev_name(dev)));
    if (device_is_cpu(dev)) {
        set_backend_threads(backend, n_threads);
        return {backend};
    }
    cpu_backend = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
    if (!cpu_backend) throw Error(LUCE_ERR_DEVICE, "cannot initialise the CPU backend");
    set_backend_threads(cpu_backend, n_threads);
    return {backend, cpu_backend};
}

} // namespace luce
