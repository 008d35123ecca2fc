/* SHA-256 (FIPS 180-4), small and portable: no allocation, no globals, no platform calls. */
#ifndef TRIBUTARY_EXAMPLE_SHA256_H
#define TRIBUTARY_EXAMPLE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_SIZE 32

typedef struct sha256 {
    uint32_t state[8];
    uint64_t length;   /* bytes hashed so far */
    uint8_t block[64]; /* the block being filled */
    size_t filled;     /* bytes of `block` in use */
} sha256_t;

void sha256_init(sha256_t *h);
void sha256_update(sha256_t *h, const void *data, size_t len);
/* Writes the digest; `h` must be initialised again before reuse. */
void sha256_final(sha256_t *h, uint8_t digest[SHA256_DIGEST_SIZE]);

#endif
