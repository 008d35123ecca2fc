#include "text.h"

#include <stdlib.h>
#include <string.h>

void *xmalloc(size_t size) {
    void *p = malloc(size);
    if (p == NULL && size > 0) abort();
    return p;
}

bool text_is(const transform_string_t *s, const char *literal) {
    size_t len = strlen(literal);
    return s->len == len && (len == 0 || memcmp(s->ptr, literal, len) == 0);
}

bool text_equal(const transform_string_t *a, const transform_string_t *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

transform_string_t text_copy(const uint8_t *bytes, size_t len) {
    transform_string_t s = {NULL, 0};
    if (len > 0) {
        s.ptr = xmalloc(len);
        memcpy(s.ptr, bytes, len);
        s.len = len;
    }
    return s;
}

static void add_bytes(text_builder_t *b, const uint8_t *bytes, size_t len) {
    if (len == 0) return;
    if (b->len + len > b->cap) {
        size_t cap = b->cap > 0 ? b->cap : 64;
        while (cap < b->len + len) cap *= 2;
        uint8_t *grown = realloc(b->ptr, cap);
        if (grown == NULL) abort();
        b->ptr = grown;
        b->cap = cap;
    }
    memcpy(b->ptr + b->len, bytes, len);
    b->len += len;
}

void text_add(text_builder_t *b, const char *literal) {
    add_bytes(b, (const uint8_t *)literal, strlen(literal));
}

void text_add_string(text_builder_t *b, const transform_string_t *s) {
    add_bytes(b, s->ptr, s->len);
}

void text_add_uint(text_builder_t *b, uint64_t n) {
    uint8_t digits[20];
    size_t at = sizeof digits;
    do {
        digits[--at] = (uint8_t)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    add_bytes(b, digits + at, sizeof digits - at);
}

transform_string_t text_finish(text_builder_t *b) {
    transform_string_t s = {b->ptr, b->len};
    if (s.len == 0) {
        free(b->ptr);
        s.ptr = NULL;
    }
    *b = (text_builder_t){0};
    return s;
}
