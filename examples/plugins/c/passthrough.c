/* passthrough-c: lets every change through as it came.
 *
 * The smallest useful transform plugin in C, on the bindings `wit-bindgen c` generates for
 * the `transform` world (transform.h). It takes no settings, reads no column values (the host
 * then copies none into it) and emits one `keep` per change, in order.
 *
 * Ownership, as the generated bindings have it: the arguments of an exported function belong
 * to the callee, which frees them (`*_free`); what it returns is freed by the bindings with
 * free() once the host has copied it, so it must all come from malloc. */
#include <stdlib.h>
#include <string.h>

#include "text.h"
#include "transform.h"

#define PLUGIN_NAME "passthrough-c"
#define PLUGIN_VERSION "1.0.0"

typedef exports_tributary_transform_plugin_plugin_info_t plugin_info_t;
typedef exports_tributary_transform_plugin_setup_t setup_t;
typedef exports_tributary_transform_plugin_batch_t batch_t;
typedef exports_tributary_transform_plugin_processed_t processed_t;
typedef exports_tributary_transform_plugin_error_t plugin_error_t;
typedef tributary_transform_types_emit_t emit_t;

void exports_tributary_transform_plugin_describe(plugin_info_t *ret) {
    /* Copies, not literals: the bindings free() both strings after the call. */
    transform_string_dup(&ret->name, PLUGIN_NAME);
    transform_string_dup(&ret->version, PLUGIN_VERSION);
}

bool exports_tributary_transform_plugin_init(transform_list_tuple2_string_string_t *config,
                                             setup_t *ret, transform_string_t *err) {
    bool ok = config->len == 0;
    if (!ok) {
        /* Name what it was given: the operator reads this. */
        text_builder_t b = {0};
        text_add(&b, PLUGIN_NAME " takes no settings; remove ");
        for (size_t i = 0; i < config->len; i++) {
            text_add(&b, i == 0 ? "`" : ", `");
            text_add_string(&b, &config->ptr[i].f0);
            text_add(&b, "`");
        }
        text_add(&b, " from its config");
        *err = text_finish(&b);
    } else {
        memset(ret, 0, sizeof *ret);
        /* No outputs, no reshapes; `some([])`: no column values at all, so every value
         * arrives as `absent`, which is all a `keep` needs. (`is_some = false` would read
         * every column; a list of names reads those.) */
        ret->interest.columns.is_some = true;
        ret->interest.columns.val.ptr = NULL;
        ret->interest.columns.val.len = 0;
        ret->interest.old_images = false;
        ret->interest.messages = false;
        ret->interest.whole_transactions = false;
    }
    transform_list_tuple2_string_string_free(config);
    return ok;
}

bool exports_tributary_transform_plugin_process(batch_t *batch, processed_t *ret, plugin_error_t *err) {
    (void)err;
    size_t total = 0;
    for (size_t t = 0; t < batch->transactions.len; t++) {
        total += batch->transactions.ptr[t].changes.len;
    }
    /* The bindings free a list only when it is not empty: allocate none for zero. */
    emit_t *emits = total > 0 ? xmalloc(total * sizeof *emits) : NULL;
    size_t n = 0;
    for (size_t t = 0; t < batch->transactions.len; t++) {
        size_t changes = batch->transactions.ptr[t].changes.len;
        for (size_t c = 0; c < changes; c++) {
            /* Edit here: decide what lands for each change. A `keep` lands it as it came;
             * TRIBUTARY_TRANSFORM_TYPES_EMIT_EDIT replaces some values (malloc'd, see
             * README.md); TRIBUTARY_TRANSFORM_TYPES_EMIT_ROW spells a row out whole. */
            emits[n].tag = TRIBUTARY_TRANSFORM_TYPES_EMIT_KEEP;
            emits[n].val.keep.transaction = (uint32_t)t;
            emits[n].val.keep.change = (uint32_t)c;
            n++;
        }
    }
    ret->emits.ptr = emits;
    ret->emits.len = n;
    ret->rejections.ptr = NULL;
    ret->rejections.len = 0;
    /* The batch is ours: free it, every call, or the instance grows with each batch. */
    exports_tributary_transform_plugin_batch_free(batch);
    return true;
}
