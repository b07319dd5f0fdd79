/* XXH64, the reference algorithm (Yann Collet's xxHash, 64-bit variant), for the
 * kaudit stamp's payload checksum. Spark SQL's xxhash64() of a binary column is XXH64
 * with seed 42 (checked against this code by tests/unit/test_plugin_native.py), so the
 * consume job's SQL definition can compute the same checksum. */
#ifndef KAUDIT_XXH64_H
#define KAUDIT_XXH64_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KX_P1 11400714785074694791ULL
#define KX_P2 14029467366897019727ULL
#define KX_P3 1609587929392839161ULL
#define KX_P4 9650029242287828579ULL
#define KX_P5 2870177450012600261ULL

static inline uint64_t kx_rotl(uint64_t x, int r) {
        return (x << r) | (x >> (64 - r));
}

static inline uint64_t kx_read64(const uint8_t *p) { /* little-endian hosts only */
        uint64_t v;
        memcpy(&v, p, sizeof(v));
        return v;
}

static inline uint32_t kx_read32(const uint8_t *p) {
        uint32_t v;
        memcpy(&v, p, sizeof(v));
        return v;
}

static inline uint64_t kx_round(uint64_t acc, uint64_t lane) {
        acc += lane * KX_P2;
        acc = kx_rotl(acc, 31);
        return acc * KX_P1;
}

static inline uint64_t kx_merge(uint64_t h, uint64_t v) {
        h ^= kx_round(0, v);
        return h * KX_P1 + KX_P4;
}

static inline uint64_t kaudit_xxh64(const void *data, size_t len, uint64_t seed) {
        const uint8_t *p   = (const uint8_t *)data;
        const uint8_t *end = p + len;
        uint64_t h;

        if (len >= 32) {
                const uint8_t *limit = end - 32;
                uint64_t v1 = seed + KX_P1 + KX_P2, v2 = seed + KX_P2, v3 = seed,
                         v4 = seed - KX_P1;
                do {
                        v1 = kx_round(v1, kx_read64(p));
                        v2 = kx_round(v2, kx_read64(p + 8));
                        v3 = kx_round(v3, kx_read64(p + 16));
                        v4 = kx_round(v4, kx_read64(p + 24));
                        p += 32;
                } while (p <= limit);
                h = kx_rotl(v1, 1) + kx_rotl(v2, 7) + kx_rotl(v3, 12) + kx_rotl(v4, 18);
                h = kx_merge(h, v1);
                h = kx_merge(h, v2);
                h = kx_merge(h, v3);
                h = kx_merge(h, v4);
        } else {
                h = seed + KX_P5;
        }
        h += (uint64_t)len;
        while (p + 8 <= end) {
                h ^= kx_round(0, kx_read64(p));
                h = kx_rotl(h, 27) * KX_P1 + KX_P4;
                p += 8;
        }
        if (p + 4 <= end) {
                h ^= (uint64_t)kx_read32(p) * KX_P1;
                h = kx_rotl(h, 23) * KX_P2 + KX_P3;
                p += 4;
        }
        while (p < end) {
                h ^= (*p) * KX_P5;
                h = kx_rotl(h, 11) * KX_P1;
                p++;
        }
        h ^= h >> 33;
        h *= KX_P2;
        h ^= h >> 29;
        h *= KX_P3;
        h ^= h >> 32;
        return h;
}

#endif
