// sampler.h — turning logits into the next token: penalties, top-k, top-p, min-p, temperature,
// then a seeded draw (or argmax for temperature 0). The processed distribution is exposed on its
// own because speculative acceptance must sample from exactly the same distribution.
#pragma once

#include "luce.h"

#include <cstdint>
#include <vector>

namespace luce {

struct Candidate {
    int32_t id;
    float logit;
    float p;
};

// Applies penalties (over history) and then the filters, in llama.cpp's common order:
// penalties → top-k → top-p → min-p → temperature → softmax. Returns the surviving candidates
// with normalised probabilities, in an order fixed by the input but otherwise unspecified (a draw
// needs none: sorting the whole vocabulary cost more than a decode step). For temperature <= 0: the
// argmax with p = 1.
std::vector<Candidate> processed_distribution(const float * logits, int32_t n_vocab, const luce_sampling_params & sp,
                                              const int32_t * history, int32_t n_history);

// Deterministic 64-bit generator (splitmix64-seeded xoshiro256**) so sequences are reproducible
// across platforms and standard libraries.
class Rng {
public:
    explicit Rng(uint64_t seed = 0) { reseed(seed); }
    void reseed(uint64_t seed);
    uint64_t next();
    double uniform();   // [0, 1) with 53 random bits
private:
    uint64_t s_[4];
};

int32_t sample_token(const float * logits, int32_t n_vocab, const luce_sampling_params & sp,
                     const int32_t * history, int32_t n_history, Rng & rng);

} // namespace luce
