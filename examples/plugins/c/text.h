/* Strings for the bindings' types, without stdio: comparing, copying, and building messages.
 *
 * A `transform_string_t` is UTF-8 bytes and a length, not NUL-terminated. What a plugin
 * returns must be malloc'd (the bindings free() it after the call); these helpers allocate
 * with malloc and give the empty string no allocation at all, as the bindings never free a
 * string of length 0. (printf-style formatting would do as well, but stdio brings WASI file
 * imports into the component that a plugin without files does not need.) */
#ifndef TRIBUTARY_EXAMPLE_TEXT_H
#define TRIBUTARY_EXAMPLE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transform.h"

/* malloc that traps when memory runs out (a plugin has no better recovery: the host starts
 * a fresh instance), as the generated cabi_realloc does. */
void *xmalloc(size_t size);

/* Whether `s` holds exactly the bytes of the C string `literal`. */
bool text_is(const transform_string_t *s, const char *literal);
bool text_equal(const transform_string_t *a, const transform_string_t *b);

/* A malloc'd copy of `len` bytes at `bytes`. */
transform_string_t text_copy(const uint8_t *bytes, size_t len);

/* Builds a message piece by piece: start with `text_builder_t b = {0};`, finish with
 * text_finish, which hands over the malloc'd bytes. */
typedef struct text_builder {
    uint8_t *ptr;
    size_t len, cap;
} text_builder_t;

void text_add(text_builder_t *b, const char *literal);
void text_add_string(text_builder_t *b, const transform_string_t *s);
void text_add_uint(text_builder_t *b, uint64_t n);
transform_string_t text_finish(text_builder_t *b);

#endif
