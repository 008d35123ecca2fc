/* A stand-in for the host, to run a plugin natively (with the address sanitizer, so that a
 * leak, a double free or a stray read fails the test). It hands the plugin its arguments the
 * way the canonical ABI does: every string and list in its own malloc'd block, and empty ones
 * as a dangling pointer that must never be read or freed. Results are released with the
 * generated *_free helpers, which free exactly what the generated post-return code frees. */
#ifndef TRIBUTARY_EXAMPLE_HARNESS_H
#define TRIBUTARY_EXAMPLE_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transform.h"

typedef tributary_transform_types_value_t value_t;
typedef tributary_transform_types_change_t change_t;
typedef tributary_transform_types_emit_t emit_t;

static int failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                   \
            failures++;                                                              \
        }                                                                            \
    } while (0)

/* What the canonical ABI's realloc gives for zero bytes: an aligned, dangling pointer. */
#define DANGLING ((void *)8)

static inline void *host_copy(const void *bytes, size_t len) {
    if (len == 0) return DANGLING;
    void *p = malloc(len);
    memcpy(p, bytes, len);
    return p;
}

static inline transform_string_t host_string(const char *s) {
    return (transform_string_t){host_copy(s, strlen(s)), strlen(s)};
}

static inline bool string_eq(const transform_string_t *s, const char *literal) {
    return s->len == strlen(literal) && memcmp(s->ptr, literal, s->len) == 0;
}

static inline bool string_contains(const transform_string_t *s, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= s->len; i++) {
        if (memcmp(s->ptr + i, needle, n) == 0) return true;
    }
    return false;
}

static inline transform_list_tuple2_string_string_t host_config(size_t n, const char *const pairs[][2]) {
    transform_tuple2_string_string_t *items = n ? malloc(n * sizeof *items) : DANGLING;
    for (size_t i = 0; i < n; i++) {
        items[i].f0 = host_string(pairs[i][0]);
        items[i].f1 = host_string(pairs[i][1]);
    }
    return (transform_list_tuple2_string_string_t){items, n};
}

static inline value_t text(const char *s) {
    value_t v = {.tag = TRIBUTARY_TRANSFORM_TYPES_VALUE_TEXT};
    v.val.text = host_string(s);
    return v;
}

static inline value_t int4(int32_t i) {
    value_t v = {.tag = TRIBUTARY_TRANSFORM_TYPES_VALUE_INT4};
    v.val.int4 = i;
    return v;
}

static const value_t null = {.tag = TRIBUTARY_TRANSFORM_TYPES_VALUE_NULL};
static const value_t absent = {.tag = TRIBUTARY_TRANSFORM_TYPES_VALUE_ABSENT};

static inline tributary_transform_types_option_list_value_t row(size_t n, const value_t *values) {
    tributary_transform_types_option_list_value_t r = {true, {host_copy(values, n * sizeof *values), n}};
    return r;
}

static const tributary_transform_types_option_list_value_t no_row = {false, {NULL, 0}};

static inline change_t change(tributary_transform_types_op_t op, uint32_t relation,
                       tributary_transform_types_option_list_value_t new_,
                       tributary_transform_types_option_list_value_t old) {
    static uint32_t seq;
    return (change_t){op, relation, seq++, new_, old};
}

static inline tributary_transform_types_relation_t relation(const char *schema, const char *table,
                                                     size_t n, const char *const names[]) {
    tributary_transform_types_column_t *columns = n ? malloc(n * sizeof *columns) : DANGLING;
    for (size_t i = 0; i < n; i++) {
        columns[i] = (tributary_transform_types_column_t){
            host_string(names[i]), 25, -1, host_string("text"), i == 0};
    }
    return (tributary_transform_types_relation_t){
        16384, host_string(schema), host_string(table), {columns, n}};
}

static inline tributary_transform_types_transaction_t transaction(size_t n, const change_t *changes) {
    return (tributary_transform_types_transaction_t){
        .xid = 731,
        .commit_lsn = 0x16B3748,
        .end_lsn = 0x16B3778,
        .commit_time = 1700000000000000,
        .changes = {host_copy(changes, n * sizeof *changes), n},
        .messages = {DANGLING, 0},
        .part = 0,
        .last_part = true,
    };
}

static inline exports_tributary_transform_plugin_batch_t batch(size_t relations,
                                                        const tributary_transform_types_relation_t *r,
                                                        size_t transactions,
                                                        const tributary_transform_types_transaction_t *t) {
    return (exports_tributary_transform_plugin_batch_t){
        {host_copy(r, relations * sizeof *r), relations},
        {host_copy(t, transactions * sizeof *t), transactions},
        {DANGLING, 0},
    };
}

/* The host's imports, recorded. */
static int logs;
static char last_log[256];
static uint64_t counted;

void __wasm_import_tributary_transform_host_log(int32_t level, uint8_t *message, size_t len,
                                                uint8_t *fields, size_t fields_len) {
    (void)level;
    logs++;
    int at = snprintf(last_log, sizeof last_log, "%.*s", (int)len, (const char *)message);
    const transform_tuple2_string_string_t *f = (const transform_tuple2_string_string_t *)fields;
    for (size_t i = 0; i < fields_len && at < (int)sizeof last_log; i++) {
        at += snprintf(last_log + at, sizeof last_log - at, " %.*s=%.*s", (int)f[i].f0.len,
                       (const char *)f[i].f0.ptr, (int)f[i].f1.len, (const char *)f[i].f1.ptr);
    }
}

void __wasm_import_tributary_transform_host_count(uint8_t *name, size_t len, int64_t delta) {
    if (len == strlen("values_masked") && memcmp(name, "values_masked", len) == 0) {
        counted += (uint64_t)delta;
    }
}

/* Natively there is no component-type object to force into the link. */
void __component_type_object_force_link_transform(void) {}

static inline int finish(const char *what) {
    printf("%s: %s\n", what, failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
