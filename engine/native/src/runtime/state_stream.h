// state_stream.h — the file side of state files (state_file.h): a file descriptor with exact reads
// and writes whose errors name the file, the writer's lock, and the stream that writes tensor bytes
// from the device to a file in chunks through one staging buffer (pinned host memory when the
// device offers it), checksumming as it goes. Host-memory tensors (the CPU backend) are written in
// place, without staging. Reading is state_load.h's pipeline.
#pragma once

#include "state_checksum.h"

#include "ggml-backend.h"

#include <cstdint>
#include <string>
#include <vector>

namespace luce {

[[noreturn]] void damaged(const std::string & path, const std::string & what);   // LUCE_ERR_STATE_DAMAGED
bool file_exists(const std::string & path);
long current_pid();
void rename_over(const std::string & from, const std::string & to);   // rename, then sync the directory
void remove_quietly(const std::string & path);

class File {
public:
    enum Mode { Read, ReadWrite, Create };
    File(const std::string & path, Mode mode);   // throws LUCE_ERR_STATE_IO (or DAMAGED: not a regular file)
    ~File();
    File(File && o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
    File(const File &) = delete;
    File & operator=(const File &) = delete;

    uint64_t size() const;
    void read_exact(void * p, size_t n, uint64_t at) const;   // short: DAMAGED (truncated)
    void will_need(uint64_t at, uint64_t n) const;            // starts reading it into the page cache (a hint)
    void write_exact(const void * p, size_t n, uint64_t at);  // errors (ENOSPC, EROFS, ...): STATE_IO
    void sync();
    void truncate_quietly(uint64_t size);   // best effort: drops bytes a failed write left past size
    void close();
    const std::string & path() const { return path_; }

private:
    int fd_ = -1;
    std::string path_;
};

// Held while a process writes path: an exclusive lock on path + ".lock" (a separate file, since a
// full write renames a new file over path). A second writer gets LUCE_ERR_STATE_IO at once.
class WriteLock {
public:
    explicit WriteLock(const std::string & path);
    ~WriteLock();
    WriteLock(const WriteLock &) = delete;
    WriteLock & operator=(const WriteLock &) = delete;

private:
    int fd_ = -1;
};

// One chunk buffer for the device copies of a save, allocated on first use.
class Staging {
public:
    explicit Staging(ggml_backend_dev_t dev) : dev_(dev) {}
    ~Staging();
    Staging(const Staging &) = delete;
    Staging & operator=(const Staging &) = delete;
    uint8_t * data();
    size_t size() const { return size_; }

private:
    ggml_backend_dev_t dev_;
    ggml_backend_buffer_t pinned_ = nullptr;
    std::vector<uint8_t> plain_;
    uint8_t * data_ = nullptr;
    size_t size_ = 0;
};

class Writer {
public:
    Writer(File & f, uint64_t at, Staging & st) : f_(f), pos_(at), st_(st) {}
    void begin() { ck_.reset(); }                  // a new checksummed part starts here
    uint64_t checksum() const { return ck_.digest(); }
    uint64_t pos() const { return pos_; }
    void bytes(const void * p, size_t n);
    void tensor(ggml_tensor * t, size_t offset, size_t n);   // bytes [offset, offset + n) of t

private:
    File & f_;
    uint64_t pos_;
    Staging & st_;
    Checksum64 ck_;
};

} // namespace luce
