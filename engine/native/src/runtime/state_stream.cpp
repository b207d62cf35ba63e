// state_stream.cpp — see state_stream.h.
#include "state_stream.h"

#include "device.h"
#include "error.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace luce {

namespace {
constexpr size_t kPinnedChunk = size_t(64) << 20;   // GPU: large chunks keep the copies near full speed
constexpr size_t kPlainChunk = size_t(8) << 20;

[[noreturn]] void io_fail(const std::string & path, const std::string & what, int err) {
    throw Error(LUCE_ERR_STATE_IO, "state file " + path + ": " + what + ": " + std::strerror(err));
}

bool in_host_memory(const ggml_tensor * t) { return t->buffer && ggml_backend_buffer_is_host(t->buffer) && t->data; }

std::string dir_of(const std::string & path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}
} // namespace

void damaged(const std::string & path, const std::string & what) {
    throw Error(LUCE_ERR_STATE_DAMAGED, "state file " + path + " is damaged: " + what);
}

bool file_exists(const std::string & path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

long current_pid() { return long(::getpid()); }

void rename_over(const std::string & from, const std::string & to) {
    if (::rename(from.c_str(), to.c_str()) != 0) io_fail(to, "cannot replace it", errno);
    const int d = ::open(dir_of(to).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d >= 0) {   // the rename itself is durable once its directory is
        ::fsync(d);
        ::close(d);
    }
}

void remove_quietly(const std::string & path) { ::unlink(path.c_str()); }

File::File(const std::string & path, Mode mode) : path_(path) {
    const int flags = mode == Read ? O_RDONLY : mode == ReadWrite ? O_RDWR : (O_WRONLY | O_CREAT | O_TRUNC);
    fd_ = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd_ < 0) io_fail(path, mode == Create ? "cannot create it" : "cannot open it", errno);
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd_);
        fd_ = -1;
        damaged(path, "it is not a regular file");
    }
}

File::~File() {
    if (fd_ >= 0) ::close(fd_);
}

uint64_t File::size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) io_fail(path_, "cannot stat it", errno);
    return uint64_t(st.st_size);
}

void File::read_exact(void * p, size_t n, uint64_t at) const {
    auto * b = static_cast<uint8_t *>(p);
    while (n > 0) {
        const ssize_t got = ::pread(fd_, b, n, off_t(at));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) io_fail(path_, "cannot read it", errno);
        if (got == 0) damaged(path_, "it is truncated (it ends at byte " + std::to_string(at) + ")");
        b += got;
        n -= size_t(got);
        at += uint64_t(got);
    }
}

void File::will_need(uint64_t at, uint64_t n) const {
    ::posix_fadvise(fd_, off_t(at), off_t(n), POSIX_FADV_WILLNEED);
}

void File::write_exact(const void * p, size_t n, uint64_t at) {
    const auto * b = static_cast<const uint8_t *>(p);
    while (n > 0) {
        const ssize_t put = ::pwrite(fd_, b, n, off_t(at));
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) io_fail(path_, "cannot write it", put < 0 ? errno : ENOSPC);
        b += put;
        n -= size_t(put);
        at += uint64_t(put);
    }
}

void File::sync() {
    if (::fdatasync(fd_) != 0) io_fail(path_, "cannot sync it to disk", errno);
}

void File::truncate_quietly(uint64_t size) {
    if (fd_ >= 0 && ::ftruncate(fd_, off_t(size)) == 0) ::fdatasync(fd_);
}

void File::close() {
    if (fd_ >= 0 && ::close(fd_) != 0) {
        fd_ = -1;
        io_fail(path_, "cannot close it", errno);   // NFS and friends report write errors here
    }
    fd_ = -1;
}

WriteLock::WriteLock(const std::string & path) {
    const std::string lock = path + ".lock";
    fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) io_fail(path, "cannot create its lock file", errno);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        ::close(fd_);
        fd_ = -1;
        if (err == EWOULDBLOCK) throw Error(LUCE_ERR_STATE_IO, "state file " + path + " is being written by another process");
        io_fail(path, "cannot lock it", err);
    }
}

WriteLock::~WriteLock() {
    if (fd_ >= 0) ::close(fd_);   // closing releases the lock
}

Staging::~Staging() {
    if (pinned_) ggml_backend_buffer_free(pinned_);
}

uint8_t * Staging::data() {
    if (data_) return data_;
    ggml_backend_buffer_type_t host = device_is_cpu(dev_) ? nullptr : ggml_backend_dev_host_buffer_type(dev_);
    if (host) pinned_ = ggml_backend_buft_alloc_buffer(host, kPinnedChunk);
    if (pinned_) {
        data_ = static_cast<uint8_t *>(ggml_backend_buffer_get_base(pinned_));
        size_ = kPinnedChunk;
    } else {
        plain_.resize(kPlainChunk);
        data_ = plain_.data();
        size_ = kPlainChunk;
    }
    return data_;
}

void Writer::bytes(const void * p, size_t n) {
    f_.write_exact(p, n, pos_);
    ck_.update(p, n);
    pos_ += n;
}

void Writer::tensor(ggml_tensor * t, size_t offset, size_t n) {
    if (in_host_memory(t)) {
        bytes(static_cast<const uint8_t *>(t->data) + offset, n);
        return;
    }
    uint8_t * buf = st_.data();
    for (size_t done = 0; done < n;) {
        const size_t len = std::min(st_.size(), n - done);
        ggml_backend_tensor_get(t, buf, offset + done, len);
        bytes(buf, len);
        done += len;
    }
}

} // namespace luce
