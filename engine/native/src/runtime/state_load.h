// state_load.h — reading a state file's payload (state_file.h) into the engine's tensors as a
// pipeline: reader threads pread chunks ahead (so a disk sees several requests at once and page-
// cache copies run on more than one core), one thread checksums them in file order, and the calling
// thread copies staged chunks into the device tensors, all three overlapping. Device tensors are
// fed through a ring of staging buffers (pinned host memory when the device offers it: at most
// kMaxSlots x 64 MiB, fewer and smaller for a small payload); host-memory tensors (the CPU backend)
// and host arrays are read in place.
//
// The payload is declared first (part() starts a checksummed range of the file, then its bytes in
// file order go to tensors, host memory or nowhere), then run() reads it all. Each part's checksum
// is compared once all is read (or a mismatch stopped it early); the first part that fails is
// reported as damaged. The tensors then hold part of the file: the caller drops the context.
#pragma once

#include "state_stream.h"

#include "ggml-backend.h"

#include <cstdint>
#include <string>
#include <vector>

namespace luce {

class PayloadReader {
public:
    static constexpr int kMaxSlots = 4;
    static constexpr int kReaders = 3;

    // stage_host: host-memory tensors too go through the staging ring (luce_engine_params.
    // debug_staged_state_io: the GPU's path, testable on a CPU).
    PayloadReader(const File & f, ggml_backend_dev_t dev, bool stage_host = false)
        : f_(f), dev_(dev), stage_host_(stage_host) {}

    // A checksummed range starting at offset; `what` names it when it does not match.
    void part(uint64_t offset, uint64_t checksum, std::string what);
    void tensor(ggml_tensor * t, size_t offset, size_t n);   // into bytes [offset, offset + n) of t
    void bytes(void * p, size_t n);                          // into host memory
    void skip(uint64_t n);                                   // read (for the checksum) and dropped

    // Reads everything declared; returns the bytes read. Throws DAMAGED for a part whose checksum
    // fails (or a truncated file), STATE_IO for a read error.
    uint64_t run();

private:
    struct Piece {
        uint64_t at, n;
        ggml_tensor * t;   // staged into t at t_off; nullptr: host (dst) or skipped (dst null)
        size_t t_off;
        uint8_t * dst;
        int part;
    };
    struct Part {
        uint64_t checksum;
        std::string what;
        uint64_t end;   // file position after the bytes declared so far
    };
    void add(Piece p);

    const File & f_;
    ggml_backend_dev_t dev_;
    bool stage_host_;
    std::vector<Part> parts_;
    std::vector<Piece> pieces_;
};

} // namespace luce
