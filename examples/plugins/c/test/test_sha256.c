/* Native test of sha256.c: the FIPS 180-2 examples and the NIST long-message vector, and
 * streaming (any split of the input) against one call. Exits non-zero on a mismatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../sha256.h"

static int failures;

static void hex(const uint8_t *bytes, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", bytes[i]);
}

static void expect(const char *what, const void *data, size_t len, const char *want) {
    sha256_t h;
    uint8_t digest[SHA256_DIGEST_SIZE];
    char got[2 * SHA256_DIGEST_SIZE + 1];
    sha256_init(&h);
    sha256_update(&h, data, len);
    sha256_final(&h, digest);
    hex(digest, sizeof digest, got);
    if (strcmp(got, want) != 0) {
        printf("FAIL %s: got %s, want %s\n", what, got, want);
        failures++;
    }
}

int main(void) {
    expect("empty", "", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect("abc", "abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    expect("448 bits", two_blocks, strlen(two_blocks),
           "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *long_one = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    expect("896 bits", long_one, strlen(long_one),
           "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");

    /* A million 'a', fed in uneven pieces. */
    {
        sha256_t h;
        uint8_t digest[SHA256_DIGEST_SIZE];
        char got[2 * SHA256_DIGEST_SIZE + 1];
        static char chunk[997];
        memset(chunk, 'a', sizeof chunk);
        sha256_init(&h);
        size_t left = 1000000;
        while (left > 0) {
            size_t n = left < sizeof chunk ? left : sizeof chunk;
            sha256_update(&h, chunk, n);
            left -= n;
        }
        sha256_final(&h, digest);
        hex(digest, sizeof digest, got);
        if (strcmp(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") != 0) {
            printf("FAIL million a: got %s\n", got);
            failures++;
        }
    }

    /* Every length around the padding boundaries, split at every point, equals one call. */
    {
        uint8_t message[200];
        for (size_t i = 0; i < sizeof message; i++) message[i] = (uint8_t)(i * 7 + 3);
        for (size_t len = 0; len <= sizeof message; len++) {
            uint8_t whole[SHA256_DIGEST_SIZE], split[SHA256_DIGEST_SIZE];
            sha256_t h;
            sha256_init(&h);
            sha256_update(&h, message, len);
            sha256_final(&h, whole);
            for (size_t cut = 0; cut <= len; cut++) {
                sha256_init(&h);
                sha256_update(&h, message, cut);
                sha256_update(&h, message + cut, len - cut);
                sha256_final(&h, split);
                if (memcmp(whole, split, sizeof whole) != 0) {
                    printf("FAIL split: length %zu cut at %zu\n", len, cut);
                    failures++;
                }
            }
        }
    }

    printf("sha256: %s\n", failures == 0 ? "all vectors match" : "MISMATCH");
    return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
