// state_load.cpp — see state_load.h.
#include "state_load.h"

#include "device.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace luce {

namespace {
constexpr size_t kPinnedSlot = size_t(64) << 20;   // GPU: large copies run near full speed
constexpr size_t kPlainSlot = size_t(8) << 20;
constexpr size_t kHostChunk = size_t(8) << 20;      // in-place reads
constexpr size_t kSlotGrain = size_t(1) << 20;
constexpr long kHostAhead = 2 * PayloadReader::kReaders;   // in-place chunks read ahead of the checksum
constexpr size_t kPrefetch = PayloadReader::kReaders;      // chunks ahead whose reading is started early

bool in_host_memory(const ggml_tensor * t) { return t->buffer && ggml_backend_buffer_is_host(t->buffer) && t->data; }

struct Chunk {
    uint64_t at;
    size_t n;
    int part;
    ggml_tensor * t;   // staged chunks: copied into t at t_off (nullptr: skipped)
    size_t t_off;
    uint8_t * dst;     // in-place chunks: read here; nullptr: staged in slot
    int slot;
    long wait_for;     // the chunk that must be done first (its slot, or the read-ahead bound); -1 none
};

// One staging buffer: pinned host memory when the device has it, else plain.
struct Slot {
    ggml_backend_buffer_t pinned = nullptr;
    std::vector<uint8_t> plain;
    uint8_t * data = nullptr;

    Slot() = default;
    Slot(const Slot &) = delete;
    Slot & operator=(const Slot &) = delete;
    void allocate(ggml_backend_dev_t dev, size_t n) {
        ggml_backend_buffer_type_t host = device_is_cpu(dev) ? nullptr : ggml_backend_dev_host_buffer_type(dev);
        if (host) pinned = ggml_backend_buft_alloc_buffer(host, n);
        if (pinned) {
            data = static_cast<uint8_t *>(ggml_backend_buffer_get_base(pinned));
        } else {
            plain.resize(n);
            data = plain.data();
        }
    }
    ~Slot() {
        if (pinned) ggml_backend_buffer_free(pinned);
    }
};

// The shared state of one run: what each chunk has been through, under one lock (chunks are
// megabytes, so the lock is taken a few times per millisecond at most).
struct Progress {
    std::mutex m;
    std::condition_variable cv;
    std::vector<uint8_t> read, checked, copied, slot_ready;
    size_t next = 0;
    bool stop = false;
    std::exception_ptr error;

    bool done(long i) const { return i < 0 || (checked[size_t(i)] && copied[size_t(i)]); }
    void fail(std::exception_ptr e) {
        std::lock_guard<std::mutex> lk(m);
        if (!error) error = e;
        stop = true;
        cv.notify_all();
    }
    void mark(std::vector<uint8_t> & v, size_t i) {
        {
            std::lock_guard<std::mutex> lk(m);
            v[i] = 1;
        }
        cv.notify_all();
    }
    bool wait_read(size_t i) {   // false: stopped
        std::unique_lock<std::mutex> lk(m);
        cv.wait(lk, [&] { return stop || read[i]; });
        return !stop;
    }
};
} // namespace

void PayloadReader::part(uint64_t offset, uint64_t checksum, std::string what) {
    parts_.push_back({checksum, std::move(what), offset});
}

void PayloadReader::add(Piece p) {
    if (p.n == 0) return;
    p.part = int(parts_.size()) - 1;
    p.at = parts_.back().end;
    parts_.back().end += p.n;
    pieces_.push_back(p);
}

void PayloadReader::tensor(ggml_tensor * t, size_t offset, size_t n) {
    if (in_host_memory(t) && !stage_host_) add({0, n, nullptr, 0, static_cast<uint8_t *>(t->data) + offset, 0});
    else add({0, n, t, offset, nullptr, 0});
}

void PayloadReader::bytes(void * p, size_t n) { add({0, n, nullptr, 0, static_cast<uint8_t *>(p), 0}); }

void PayloadReader::skip(uint64_t n) { add({0, n, nullptr, 0, nullptr, 0}); }

uint64_t PayloadReader::run() {
    // The chunks, in file order. Staged chunks are sized to the largest staged piece (up to a slot).
    const bool pinned = !device_is_cpu(dev_) && ggml_backend_dev_host_buffer_type(dev_);
    uint64_t largest = 0;
    for (const Piece & p : pieces_) if (!p.dst) largest = std::max(largest, p.n);
    const size_t slot_bytes = size_t(std::min<uint64_t>(pinned ? kPinnedSlot : kPlainSlot,
                                                        (largest + kSlotGrain - 1) / kSlotGrain * kSlotGrain));
    std::vector<Chunk> chunks;
    std::vector<long> staged;   // chunk index of each staged chunk
    for (const Piece & p : pieces_) {
        const size_t step = p.dst ? kHostChunk : slot_bytes;
        for (uint64_t done = 0; done < p.n;) {
            const size_t len = size_t(std::min<uint64_t>(step, p.n - done));
            chunks.push_back({p.at + done, len, p.part, p.t, p.t_off + size_t(done), p.dst ? p.dst + done : nullptr, -1, -1});
            if (!p.dst) staged.push_back(long(chunks.size()) - 1);
            done += len;
        }
    }
    const int n_slots = int(std::min<size_t>(kMaxSlots, staged.size()));
    for (size_t j = 0; j < staged.size(); ++j) {
        Chunk & c = chunks[size_t(staged[j])];
        c.slot = int(j % size_t(n_slots));
        c.wait_for = j >= size_t(n_slots) ? staged[j - size_t(n_slots)] : -1;
    }
    std::vector<long> host;   // in-place chunks wait for the one kHostAhead in-place chunks back
    for (size_t i = 0; i < chunks.size(); ++i) {
        if (!chunks[i].dst) continue;
        host.push_back(long(i));
        if (host.size() > size_t(kHostAhead)) chunks[i].wait_for = host[host.size() - 1 - size_t(kHostAhead)];
    }

    const size_t n = chunks.size();
    Progress pr;
    pr.read.assign(n, 0);
    pr.checked.assign(n, 0);
    pr.copied.assign(n, 0);
    for (size_t i = 0; i < n; ++i) pr.copied[i] = chunks[i].t ? 0 : 1;
    pr.slot_ready.assign(size_t(n_slots), 0);
    std::vector<Slot> slots(static_cast<size_t>(n_slots));
    auto buffer = [&](const Chunk & c) { return c.dst ? c.dst : slots[size_t(c.slot)].data; };

    std::vector<Checksum64> sums(parts_.size());
    auto reader = [&] {
        for (;;) {
            size_t i;
            {
                std::unique_lock<std::mutex> lk(pr.m);
                if (pr.stop || pr.next >= n) return;
                i = pr.next++;
                const Chunk & c = chunks[i];
                pr.cv.wait(lk, [&] { return pr.stop || (pr.done(c.wait_for) && (c.dst || pr.slot_ready[size_t(c.slot)])); });
                if (pr.stop) return;
            }
            try {
                // Concurrent reads at scattered offsets defeat the kernel's sequential readahead:
                // ask for the chunk the readers reach next-but-one round, so the disk is busy ahead.
                if (i + kPrefetch < n) f_.will_need(chunks[i + kPrefetch].at, chunks[i + kPrefetch].n);
                f_.read_exact(buffer(chunks[i]), chunks[i].n, chunks[i].at);
            } catch (...) {
                pr.fail(std::current_exception());
                return;
            }
            pr.mark(pr.read, i);
        }
    };
    auto checker = [&] {
        for (size_t i = 0; i < n; ++i) {
            if (!pr.wait_read(i)) return;
            const Chunk & c = chunks[i];
            Checksum64 & s = sums[size_t(c.part)];
            s.update(buffer(c), c.n);
            const bool part_ends = i + 1 == n || chunks[i + 1].part != c.part;
            if (part_ends && s.digest() != parts_[size_t(c.part)].checksum) {
                std::lock_guard<std::mutex> lk(pr.m);   // no use reading on: run() reports this part
                pr.checked[i] = 1;
                pr.stop = true;
                pr.cv.notify_all();
                return;
            }
            pr.mark(pr.checked, i);
        }
    };

    std::vector<std::thread> threads;
    auto finish = [&] {
        {
            std::lock_guard<std::mutex> lk(pr.m);
            pr.stop = true;
            pr.cv.notify_all();
        }
        for (std::thread & t : threads) if (t.joinable()) t.join();
    };
    try {
        if (n_slots > 0) {   // the first slot before the readers start, the others while they read
            slots[0].allocate(dev_, slot_bytes);
            pr.slot_ready[0] = 1;
        }
        threads.emplace_back(checker);
        for (int r = 0; r < std::min<int>(kReaders, int(n)); ++r) threads.emplace_back(reader);
        for (int s = 1; s < n_slots; ++s) {
            slots[size_t(s)].allocate(dev_, slot_bytes);
            pr.mark(pr.slot_ready, size_t(s));
        }
        for (size_t i = 0; i < n; ++i) {   // this thread copies the staged chunks into the device
            const Chunk & c = chunks[i];
            if (!c.t) continue;
            if (!pr.wait_read(i)) break;
            ggml_backend_tensor_set(c.t, slots[size_t(c.slot)].data, c.t_off, c.n);
            pr.mark(pr.copied, i);
        }
        threads[0].join();   // the checksums, to the end or to the first mismatch
    } catch (...) {
        finish();
        throw;
    }
    finish();
    if (pr.error) std::rethrow_exception(pr.error);
    for (size_t i = 0; i < parts_.size(); ++i) {
        if (sums[i].digest() != parts_[i].checksum) damaged(f_.path(), parts_[i].what);
    }
    uint64_t total = 0;
    for (const Chunk & c : chunks) total += c.n;
    return total;
}

} // namespace luce
