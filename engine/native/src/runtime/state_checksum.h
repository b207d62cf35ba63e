// state_checksum.h — the 64-bit checksum of state files (state_file.h): four independent lanes
// over 8-byte words (so a core keeps four multiplies in flight: several GB/s), folded together
// with the length at the end. It detects damage (torn writes, bit flips, truncation); it is not
// meant to resist anyone forging a file. The result depends only on the bytes, not on how they
// were split across update() calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace luce {

class Checksum64 {
public:
    explicit Checksum64(uint64_t seed = 0) { reset(seed); }

    void reset(uint64_t seed = 0) {
        for (int i = 0; i < 4; ++i) lane_[i] = seed + kLaneInit[i];
        length_ = 0;
        n_carry_ = 0;
    }

    void update(const void * data, size_t n) {
        const uint8_t * p = static_cast<const uint8_t *>(data);
        length_ += n;
        if (n_carry_ > 0) {   // finish the partial block of the previous call
            const size_t take = n < kBlock - n_carry_ ? n : kBlock - n_carry_;
            std::memcpy(carry_ + n_carry_, p, take);
            n_carry_ += take;
            p += take;
            n -= take;
            if (n_carry_ < kBlock) return;
            block(carry_);
            n_carry_ = 0;
        }
        for (; n >= kBlock; p += kBlock, n -= kBlock) block(p);
        std::memcpy(carry_, p, n);
        n_carry_ = n;
    }

    uint64_t digest() const {
        uint64_t l[4] = {lane_[0], lane_[1], lane_[2], lane_[3]};
        if (n_carry_ > 0) {   // the tail, zero-padded (the length below tells paddings apart)
            uint8_t last[kBlock] = {};
            std::memcpy(last, carry_, n_carry_);
            for (int i = 0; i < 4; ++i) l[i] = mix_word(l[i], load(last + 8 * i));
        }
        uint64_t h = length_ * kOdd1;
        for (int i = 0; i < 4; ++i) h = avalanche(h ^ rotl(l[i], 13 * i + 7)) * kOdd2;
        return avalanche(h);
    }

    // One call for a buffer in memory.
    static uint64_t of(const void * data, size_t n, uint64_t seed = 0) {
        Checksum64 c(seed);
        c.update(data, n);
        return c.digest();
    }

private:
    static constexpr size_t kBlock = 32;
    static constexpr uint64_t kOdd1 = 0xd6e8feb86659fd93ull, kOdd2 = 0xa0761d6478bd642full;
    static constexpr uint64_t kLaneInit[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull,
                                              0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull};

    static uint64_t rotl(uint64_t x, int r) { return r == 0 ? x : (x << r) | (x >> (64 - r)); }
    static uint64_t load(const uint8_t * p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
    // A word into a lane: multiply spreads low bits up, the rotation brings high bits down.
    static uint64_t mix_word(uint64_t lane, uint64_t w) { return rotl((lane ^ w) * kOdd1, 29) + w; }
    static uint64_t avalanche(uint64_t x) {
        x ^= x >> 31;
        x *= kOdd2;
        x ^= x >> 29;
        x *= kOdd1;
        return x ^ (x >> 32);
    }
    void block(const uint8_t * p) {
        for (int i = 0; i < 4; ++i) lane_[i] = mix_word(lane_[i], load(p + 8 * i));
    }

    uint64_t lane_[4];
    uint64_t length_ = 0;
    uint8_t carry_[kBlock];
    size_t n_carry_ = 0;
};

} // namespace luce
