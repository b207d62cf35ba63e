// logit_rows.h — the logits of the last evaluation, fetched from the device only when read.
//
// A 27B target's vocabulary is 248K entries: one row is 1 MB, a 16-token verify 16 MB. Greedy
// decoding and greedy verification need only each row's argmax, which the graph computes on the
// device; whole rows cross to the host only when something reads them (sampling with a
// temperature, penalties, the Python API).
#pragma once

#include "ggml.h"

#include <cstdint>
#include <vector>

namespace luce {

class LogitRows {
public:
    void reset(int32_t n_vocab);   // no rows
    void clear();                  // no rows (vocabulary kept)

    // Rows of an evaluation whose logits tensor dev [n_vocab, n] stays readable until invalidate().
    // append: add after the existing rows (a prompt evaluated in micro-batches with every row kept);
    // fetch_now: copy them to the host at once (needed when the next evaluation overwrites dev).
    void add_device_rows(ggml_tensor * dev, const int32_t * argmax, int32_t n, bool append, bool fetch_now);
    // The device tensor is about to be overwritten or freed: rows not yet on the host are lost.
    void invalidate();

    int32_t n_rows() const { return int32_t(rows_.size()); }
    int32_t argmax(int32_t i) const { return rows_[size_t(i)].argmax; }
    bool readable(int32_t i) const;
    const float * row(int32_t i);   // nullptr when out of range or lost; i < 0 counts from the end

    // Keeps only row i (after a commit); it stays lazily readable.
    void keep_only(int32_t i);

    // A detached single row (the logits before a verification), restored by commit(0).
    struct Saved {
        int32_t argmax = -1;
        std::vector<float> values;   // empty when the row was not readable
    };
    Saved save_last();   // fetches the last row
    void restore(Saved && s);

private:
    struct Row {
        int32_t argmax = -1;
        int32_t dev = -1;    // column in dev_, -1 if none
        int32_t host = -1;   // slot in host_, -1 until fetched
    };
    int32_t n_vocab_ = 0;
    std::vector<Row> rows_;
    std::vector<float> host_;      // fetched rows, n_vocab_ floats per slot (grown, never shrunk)
    int32_t n_host_ = 0;           // slots in use
    ggml_tensor * dev_ = nullptr;
    int32_t host_slot();
};

} // namespace luce
