/*
 * The shared counter-based generator of lc_cfr, in C (docs/game.md, "Shared generator").
 *
 * random_bits(seed, iteration, index, counter, purpose) is MurmurHash3 x86_32 (the
 * algorithm of Austin Appleby, public domain) of the five uint32 words in that order,
 * little-endian, with hash seed 0x9747B28C. It is a pure function of its arguments and
 * returns the same bits as lc_cfr/game/rng.py (JAX and plain Python).
 */
#ifndef LC_RNG_H
#define LC_RNG_H

#include <stdint.h>

#define LC_HASH_SEED 0x9747B28Cu

/* Purposes: the fifth word of every draw (lc_cfr.game.rng.Purpose). */
#define LC_PURPOSE_DEAL 0u
#define LC_PURPOSE_RANDOM_PLAY 1u
#define LC_PURPOSE_EXPLORE 2u
#define LC_PURPOSE_SAMPLE 3u
#define LC_PURPOSE_ROLLOUT 4u
#define LC_PURPOSE_BOT_NOISE 5u
#define LC_PURPOSE_OPPONENT 6u

static inline uint32_t lc_rotl32(uint32_t x, unsigned r) {
    return (x << r) | (x >> (32u - r));
}

/* One body round of MurmurHash3 x86_32: mixes the word k into the state h. */
static inline uint32_t lc_murmur_round(uint32_t h, uint32_t k) {
    k *= 0xCC9E2D51u;
    k = lc_rotl32(k, 15);
    k *= 0x1B873593u;
    h ^= k;
    h = lc_rotl32(h, 13);
    return h * 5u + 0xE6546B64u;
}

/* 32 random bits that depend only on the five counters. */
static inline uint32_t lc_random_bits(uint32_t seed, uint32_t iteration, uint32_t index,
                                      uint32_t counter, uint32_t purpose) {
    uint32_t h = LC_HASH_SEED;
    h = lc_murmur_round(h, seed);
    h = lc_murmur_round(h, iteration);
    h = lc_murmur_round(h, index);
    h = lc_murmur_round(h, counter);
    h = lc_murmur_round(h, purpose);
    h ^= 20u; /* key length in bytes */
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

/* A float in [0, 1): the top 24 bits times 2^-24 (exact in float32). */
static inline float lc_uniform(uint32_t bits) {
    return (float)(bits >> 8) * (1.0f / 16777216.0f);
}

/* An integer in [0, n) for 1 <= n <= 256: ((bits >> 8) * n) >> 24. */
static inline int32_t lc_below(uint32_t bits, uint32_t n) {
    return (int32_t)(((bits >> 8) * n) >> 24);
}

#endif /* LC_RNG_H */
