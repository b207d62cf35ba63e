// device.h — picking a ggml backend device from a user string ("auto", "cpu", "cuda:1", "CUDA0").
#pragma once

#include "ggml-backend.h"

#include <string>
#include <vector>

namespace luce {

ggml_backend_dev_t select_device(const std::string & spec);   // throws LUCE_ERR_DEVICE
bool device_is_cpu(ggml_backend_dev_t dev);
std::string list_devices();                                   // "CPU, CUDA0" for messages
void set_backend_threads(ggml_backend_t backend, int n_threads);
// Lets a backend stop a graph midway when callback(data) returns true (the CPU backend supports it).
void set_backend_abort(ggml_backend_t backend, ggml_abort_callback callback, void * data);
int default_thread_count();
// The backend of `dev` and, when dev is not the CPU, a CPU backend for the ops it lacks (null
// otherwise), both running n_threads; returns them in scheduler order. The caller frees both.
// Throws LUCE_ERR_DEVICE.
std::vector<ggml_backend_t> init_backends(ggml_backend_dev_t dev, int n_threads, ggml_backend_t & backend,
                                          ggml_backend_t & cpu_backend);

} // namespace luce
