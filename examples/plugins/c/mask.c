/* mask-c: replaces the text of named columns with a keyed digest before it lands.
 *
 * Settings (the pipeline file's `config = { ... }`):
 *   columns  required: comma-separated column names (`email,phone`), in any table;
 *   salt     optional, default "": mixed into the digest, so that short values (phone
 *            numbers) cannot be found again by hashing every candidate.
 *
 * A `text` value of a masked column becomes "sha256:" and the first 8 bytes of
 * SHA-256(salt || 0x00 || text) in lowercase hex: equal values still join and group, but
 * cannot be read back. Other values (NULL, absent, unchanged TOAST, other types) are left
 * as they are. The old image of an update is masked too, or `_old` would land what the row
 * hides.
 *
 * Ownership, as the generated bindings have it: the arguments of an exported function belong
 * to the callee, which frees them (`*_free`); what it returns is freed by the bindings with
 * free() once the host has copied it, so it must all come from malloc and share nothing with
 * the arguments or with the plugin's own state. A list of length 0 is never freed. */
#include <stdlib.h>
#include <string.h>

#include "sha256.h"
#include "text.h"
#include "transform.h"

#define PLUGIN_NAME "mask-c"
#define PLUGIN_VERSION "1.0.0"
#define DIGEST_PREFIX "sha256:"
#define DIGEST_BYTES 8
#define DIGEST_LEN (sizeof DIGEST_PREFIX - 1 + 2 * DIGEST_BYTES)

typedef exports_tributary_transform_plugin_plugin_info_t plugin_info_t;
typedef exports_tributary_transform_plugin_setup_t setup_t;
typedef exports_tributary_transform_plugin_batch_t batch_t;
typedef exports_tributary_transform_plugin_processed_t processed_t;
typedef exports_tributary_transform_plugin_error_t plugin_error_t;
typedef tributary_transform_types_emit_t emit_t;
typedef tributary_transform_types_change_t change_t;
typedef tributary_transform_types_option_list_value_t option_row_t;
typedef tributary_transform_types_list_tuple2_u32_value_t edits_t;

/* What init read, kept for every batch. The plugin owns these copies. */
static struct {
    transform_string_t *columns;
    size_t column_count;
    transform_string_t salt;
} settings;

#define COLUMNS_HINT \
    "name the text columns to mask, e.g. config = { columns = \"email,phone\" }"

/* `before`, then the bytes of `s` (when given), then `after` (when given), malloc'd. */
static transform_string_t message(const char *before, const transform_string_t *s,
                                  const char *after) {
    text_builder_t b = {0};
    text_add(&b, before);
    if (s != NULL) text_add_string(&b, s);
    if (after != NULL) text_add(&b, after);
    return text_finish(&b);
}

static void free_strings(transform_string_t *strings, size_t count) {
    for (size_t i = 0; i < count; i++) transform_string_free(&strings[i]);
    free(strings);
}

static bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Splits `value` at commas into trimmed, distinct names (malloc'd copies). Returns false,
 * with `err` set, when a name is empty. */
static bool parse_columns(const transform_string_t *value, transform_string_t **names_out,
                          size_t *count_out, transform_string_t *err) {
    size_t pieces = 1;
    for (size_t i = 0; i < value->len; i++) pieces += value->ptr[i] == ',';
    transform_string_t *names = xmalloc(pieces * sizeof *names);
    size_t count = 0;
    size_t start = 0;
    for (size_t piece = 0; piece < pieces; piece++) {
        size_t end = start;
        while (end < value->len && value->ptr[end] != ',') end++;
        size_t from = start, to = end;
        while (from < to && is_space(value->ptr[from])) from++;
        while (to > from && is_space(value->ptr[to - 1])) to--;
        if (from == to) {
            free_strings(names, count);
            if (pieces == 1) {
                *err = message("`columns` is empty: " COLUMNS_HINT, NULL, NULL);
            } else {
                text_builder_t b = {0};
                text_add(&b, "`columns` = \"");
                text_add_string(&b, value);
                text_add(&b, "\" has an empty name (name ");
                text_add_uint(&b, piece + 1);
                text_add(&b, "); write column names separated by commas, e.g. \"email,phone\"");
                *err = text_finish(&b);
            }
            return false;
        }
        transform_string_t name = {value->ptr + from, to - from};
        bool seen = false;
        for (size_t i = 0; i < count && !seen; i++) seen = text_equal(&names[i], &name);
        if (!seen) names[count++] = text_copy(name.ptr, name.len);
        start = end + 1;
    }
    *names_out = names;
    *count_out = count;
    return true;
}

/* Tells the operator what the plugin will do, through the host's log. Arguments of an
 * imported function stay the caller's: pointing at literals and borrowed bytes is fine. */
static void log_settings(void) {
    text_builder_t b = {0};
    for (size_t i = 0; i < settings.column_count; i++) {
        if (i > 0) text_add(&b, ",");
        text_add_string(&b, &settings.columns[i]);
    }
    transform_string_t joined = text_finish(&b);
    transform_tuple2_string_string_t fields[2];
    transform_string_set(&fields[0].f0, "columns");
    fields[0].f1 = joined;
    transform_string_set(&fields[1].f0, "salted");
    transform_string_set(&fields[1].f1, settings.salt.len > 0 ? "yes" : "no");
    transform_list_tuple2_string_string_t list = {fields, 2};
    transform_string_t text;
    transform_string_set(&text, "masking text columns");
    tributary_transform_host_log(TRIBUTARY_TRANSFORM_HOST_LEVEL_INFO, &text, &list);
    /* The host copied what it needed: what we allocated for the call is still ours. */
    transform_string_free(&joined);
}

void exports_tributary_transform_plugin_describe(plugin_info_t *ret) {
    /* Copies, not literals: the bindings free() both strings after the call. */
    transform_string_dup(&ret->name, PLUGIN_NAME);
    transform_string_dup(&ret->version, PLUGIN_VERSION);
}

static bool read_settings(const transform_list_tuple2_string_string_t *config,
                          transform_string_t *err) {
    const transform_string_t *columns = NULL, *salt = NULL;
    for (size_t i = 0; i < config->len; i++) {
        const transform_string_t *key = &config->ptr[i].f0, *value = &config->ptr[i].f1;
        const transform_string_t **slot = text_is(key, "columns") ? &columns
                                          : text_is(key, "salt")  ? &salt
                                                                    : NULL;
        if (slot == NULL) {
            *err = message("unknown setting `", key,
                           "`: " PLUGIN_NAME " takes `columns` (required) and `salt`");
            return false;
        }
        if (*slot != NULL) {
            *err = message("`", key, "` is given twice");
            return false;
        }
        *slot = value;
    }
    if (columns == NULL) {
        *err = message("`columns` is missing: " COLUMNS_HINT, NULL, NULL);
        return false;
    }
    transform_string_t *names;
    size_t count;
    if (!parse_columns(columns, &names, &count, err)) return false;

    free_strings(settings.columns, settings.column_count);
    transform_string_free(&settings.salt);
    settings.columns = names;
    settings.column_count = count;
    settings.salt = salt != NULL ? text_copy(salt->ptr, salt->len) : (transform_string_t){0};
    return true;
}

bool exports_tributary_transform_plugin_init(transform_list_tuple2_string_string_t *config,
                                             setup_t *ret, transform_string_t *err) {
    bool ok = read_settings(config, err);
    /* The config is ours to free, whatever the outcome; settings keep copies. */
    transform_list_tuple2_string_string_free(config);
    if (!ok) return false;
    log_settings();

    memset(ret, 0, sizeof *ret);
    /* Only the masked columns cross into the plugin; the host copies no other values. */
    transform_string_t *names = xmalloc(settings.column_count * sizeof *names);
    for (size_t i = 0; i < settings.column_count; i++) {
        names[i] = text_copy(settings.columns[i].ptr, settings.columns[i].len);
    }
    ret->interest.columns.is_some = true;
    ret->interest.columns.val.ptr = names;
    ret->interest.columns.val.len = settings.column_count;
    /* Old images must be read, and masked, or `_old` would land what the row hides. */
    ret->interest.old_images = true;
    ret->interest.messages = false;
    ret->interest.whole_transactions = false;
    return true;
}

/* "sha256:" and 16 hex digits of SHA-256(salt || 0 || text), malloc'd. */
static transform_string_t digest_text(const transform_string_t *text) {
    static const char hex[] = "0123456789abcdef";
    static const uint8_t separator = 0;
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_t h;
    sha256_init(&h);
    sha256_update(&h, settings.salt.ptr, settings.salt.len);
    sha256_update(&h, &separator, 1);
    sha256_update(&h, text->ptr, text->len);
    sha256_final(&h, digest);
    uint8_t *out = xmalloc(DIGEST_LEN);
    memcpy(out, DIGEST_PREFIX, sizeof DIGEST_PREFIX - 1);
    for (size_t i = 0; i < DIGEST_BYTES; i++) {
        out[sizeof DIGEST_PREFIX - 1 + 2 * i] = (uint8_t)hex[digest[i] >> 4];
        out[sizeof DIGEST_PREFIX - 1 + 2 * i + 1] = (uint8_t)hex[digest[i] & 15];
    }
    return (transform_string_t){out, DIGEST_LEN};
}

/* The positions of one relation's masked columns. */
typedef struct {
    uint32_t *at;
    size_t count;
} positions_t;

static positions_t masked_positions(const tributary_transform_types_relation_t *relation) {
    positions_t p = {NULL, 0};
    const tributary_transform_types_list_column_t *columns = &relation->columns;
    for (int pass = 0; pass < 2; pass++) {
        size_t n = 0;
        for (size_t c = 0; c < columns->len; c++) {
            for (size_t m = 0; m < settings.column_count; m++) {
                if (text_equal(&columns->ptr[c].name, &settings.columns[m])) {
                    if (pass == 1) p.at[n] = (uint32_t)c;
                    n++;
                    break;
                }
            }
        }
        if (pass == 0) {
            if (n == 0) return p;
            p.at = xmalloc(n * sizeof *p.at);
            p.count = n;
        }
    }
    return p;
}

/* The (position, digest) pairs for the text values of `row` at `positions`. */
static edits_t mask_row(const option_row_t *row, const positions_t *positions) {
    edits_t edits = {NULL, 0};
    if (!row->is_some) return edits;
    const tributary_transform_types_list_value_t *values = &row->val;
    size_t n = 0;
    for (size_t i = 0; i < positions->count; i++) {
        uint32_t at = positions->at[i];
        n += at < values->len && values->ptr[at].tag == TRIBUTARY_TRANSFORM_TYPES_VALUE_TEXT;
    }
    if (n == 0) return edits;
    edits.ptr = xmalloc(n * sizeof *edits.ptr);
    for (size_t i = 0; i < positions->count; i++) {
        uint32_t at = positions->at[i];
        if (at < values->len && values->ptr[at].tag == TRIBUTARY_TRANSFORM_TYPES_VALUE_TEXT) {
            tributary_transform_types_tuple2_u32_value_t *edit = &edits.ptr[edits.len++];
            edit->f0 = at;
            edit->f1.tag = TRIBUTARY_TRANSFORM_TYPES_VALUE_TEXT;
            edit->f1.val.text = digest_text(&values->ptr[at].val.text);
        }
    }
    return edits;
}

static void free_positions(positions_t *positions, size_t count) {
    for (size_t i = 0; i < count; i++) free(positions[i].at);
    free(positions);
}

bool exports_tributary_transform_plugin_process(batch_t *batch, processed_t *ret, plugin_error_t *err) {
    size_t relations = batch->relations.len;
    positions_t *positions = relations > 0 ? xmalloc(relations * sizeof *positions) : NULL;
    for (size_t r = 0; r < relations; r++) {
        positions[r] = masked_positions(&batch->relations.ptr[r]);
    }
    size_t total = 0;
    for (size_t t = 0; t < batch->transactions.len; t++) {
        total += batch->transactions.ptr[t].changes.len;
    }
    tributary_transform_types_list_emit_t emits = {
        total > 0 ? xmalloc(total * sizeof(emit_t)) : NULL, 0};
    uint64_t masked = 0;
    bool ok = true;

    for (size_t t = 0; t < batch->transactions.len && ok; t++) {
        const tributary_transform_types_list_change_t *changes = &batch->transactions.ptr[t].changes;
        for (size_t c = 0; c < changes->len; c++) {
            const change_t *change = &changes->ptr[c];
            tributary_transform_types_change_ref_t ref = {(uint32_t)t, (uint32_t)c};
            if (change->relation >= relations) {
                /* The host broke the contract: stop rather than guess. */
                text_builder_t b = {0};
                text_add(&b, "change ");
                text_add_uint(&b, c);
                text_add(&b, " of transaction ");
                text_add_uint(&b, t);
                text_add(&b, " refers to relation ");
                text_add_uint(&b, change->relation);
                text_add(&b, ", but the batch has ");
                text_add_uint(&b, relations);
                err->tag = TRIBUTARY_TRANSFORM_TYPES_ERROR_FATAL;
                err->val.fatal = text_finish(&b);
                ok = false;
                break;
            }
            const positions_t *p = &positions[change->relation];
            /* The row is the new one of an insert or update, the old one of a delete. */
            const option_row_t none = {false, {NULL, 0}};
            const option_row_t *row = &none;
            switch (change->op) {
            case TRIBUTARY_TRANSFORM_TYPES_OP_INSERT:
            case TRIBUTARY_TRANSFORM_TYPES_OP_UPDATE:
                row = &change->new_;
                break;
            case TRIBUTARY_TRANSFORM_TYPES_OP_DELETE:
                row = &change->old;
                break;
            default:
                break;
            }
            edits_t values = mask_row(row, p);
            edits_t old = {NULL, 0};
            if (change->op == TRIBUTARY_TRANSFORM_TYPES_OP_UPDATE) old = mask_row(&change->old, p);

            emit_t *emit = &emits.ptr[emits.len++];
            if (values.len == 0 && old.len == 0) {
                emit->tag = TRIBUTARY_TRANSFORM_TYPES_EMIT_KEEP;
                emit->val.keep = ref;
            } else {
                emit->tag = TRIBUTARY_TRANSFORM_TYPES_EMIT_EDIT;
                emit->val.edit.change = ref;
                emit->val.edit.values = values;
                emit->val.edit.old = old;
                masked += values.len + old.len;
            }
        }
    }

    free_positions(positions, relations);
    /* The batch is ours: free it, every call, or the instance grows with each batch. Nothing
     * returned points into it. */
    exports_tributary_transform_plugin_batch_free(batch);
    if (!ok) {
        /* On an error the bindings free only the error: free the emits made so far (and the
         * list itself, which list_emit_free leaves alone when it is still empty). */
        for (size_t i = 0; i < emits.len; i++) tributary_transform_types_emit_free(&emits.ptr[i]);
        free(emits.ptr);
        return false;
    }
    if (masked > 0) {
        transform_string_t counter;
        transform_string_set(&counter, "values_masked");
        tributary_transform_host_count(&counter, masked);
    }
    ret->emits = emits;
    ret->rejections.ptr = NULL;
    ret->rejections.len = 0;
    return true;
}
