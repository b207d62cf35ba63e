#include "logit_rows.h"

#include "ggml-backend.h"

#include <algorithm>

namespace luce {

void LogitRows::reset(int32_t n_vocab) {
    n_vocab_ = n_vocab;
    clear();
}

void LogitRows::clear() {
    rows_.clear();
    n_host_ = 0;
    dev_ = nullptr;
}

int32_t LogitRows::host_slot() {
    const size_t need = size_t(n_host_ + 1) * size_t(n_vocab_);
    if (host_.size() < need) host_.resize(std::max(need, host_.size() * 2));   // zero-filled once, then reused
    return n_host_++;
}

void LogitRows::add_device_rows(ggml_tensor * dev, const int32_t * argmax, int32_t n, bool append, bool fetch_now) {
    if (!append) clear();
    invalidate();
    dev_ = dev;
    for (int32_t i = 0; i < n; ++i) rows_.push_back({argmax[i], i, -1});
    if (fetch_now) {
        // one copy for the whole block of rows
        const int32_t first = n_host_;
        for (int32_t i = 0; i < n; ++i) rows_[rows_.size() - size_t(n) + size_t(i)].host = host_slot();
        ggml_backend_tensor_get(dev, host_.data() + size_t(first) * size_t(n_vocab_), 0,
                                size_t(n) * size_t(n_vocab_) * sizeof(float));
    }
}

void LogitRows::invalidate() {
    for (auto & r : rows_) r.dev = -1;
    dev_ = nullptr;
}

bool LogitRows::readable(int32_t i) const {
    if (i < 0) i += n_rows();
    if (i < 0 || i >= n_rows()) return false;
    const Row & r = rows_[size_t(i)];
    return r.host >= 0 || (r.dev >= 0 && dev_);
}

const float * LogitRows::row(int32_t i) {
    if (i < 0) i += n_rows();
    if (i < 0 || i >= n_rows()) return nullptr;
    Row & r = rows_[size_t(i)];
    if (r.host < 0) {
        if (r.dev < 0 || !dev_) return nullptr;
        r.host = host_slot();
        const size_t bytes = size_t(n_vocab_) * sizeof(float);
        ggml_backend_tensor_get(dev_, host_.data() + size_t(r.host) * size_t(n_vocab_), size_t(r.dev) * bytes, bytes);
    }
    return host_.data() + size_t(r.host) * size_t(n_vocab_);
}

void LogitRows::keep_only(int32_t i) {
    if (i < 0) i += n_rows();
    Row r = rows_[size_t(i)];
    rows_.assign(1, r);
}

LogitRows::Saved LogitRows::save_last() {
    Saved s;
    if (rows_.empty()) return s;
    s.argmax = rows_.back().argmax;
    if (const float * p = row(-1)) s.values.assign(p, p + n_vocab_);
    return s;
}

void LogitRows::restore(Saved && s) {
    clear();
    if (s.argmax < 0) return;
    Row r{s.argmax, -1, -1};
    if (!s.values.empty()) {
        r.host = host_slot();
        std::copy(s.values.begin(), s.values.end(), host_.begin() + long(r.host) * n_vocab_);
    }
    rows_.push_back(r);
}

} // namespace luce
