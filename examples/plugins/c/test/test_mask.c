/* Native test of mask.c through its generated bindings (see harness.h). The digests were
 * computed independently: sha256(salt + b"\0" + text).digest()[:8].hex() in Python. */
#include "harness.h"

#define A_AT_X "sha256:6ea2e2f114e1ffff"   /* salt "s", "a@x" */
#define B_AT_X "sha256:e44d0b18050932f3"   /* salt "s", "b@x" */
#define ALICE "sha256:247cebed8b500e03"    /* salt "", "alice@example.com" */
#define PHONE "sha256:2b249efd793b8c23"    /* salt "pepper", "+1 555 0100" */

static bool init(size_t n, const char *const pairs[][2], exports_tributary_transform_plugin_setup_t *setup,
                 transform_string_t *err) {
    transform_list_tuple2_string_string_t config = host_config(n, pairs);
    return exports_tributary_transform_plugin_init(&config, setup, err);
}

static void refused(size_t n, const char *const pairs[][2], const char *says) {
    exports_tributary_transform_plugin_setup_t setup;
    transform_string_t err;
    if (init(n, pairs, &setup, &err)) {
        printf("FAIL: init accepted what should say %s\n", says);
        failures++;
        exports_tributary_transform_plugin_setup_free(&setup);
        return;
    }
    if (!string_contains(&err, says)) {
        printf("FAIL: init said \"%.*s\", not %s\n", (int)err.len, (const char *)err.ptr, says);
        failures++;
    }
    transform_string_free(&err);
}

static void refuses_bad_settings(void) {
    refused(0, NULL, "`columns` is missing");
    refused(0, NULL, "columns = \"email,phone\"");
    const char *const empty[][2] = {{"columns", " "}};
    refused(1, empty, "`columns` is empty");
    const char *const hole[][2] = {{"columns", "email,,phone"}};
    refused(1, hole, "has an empty name (name 2)");
    const char *const typo[][2] = {{"colums", "email"}};
    refused(1, typo, "unknown setting `colums`");
    const char *const extra[][2] = {{"columns", "email"}, {"pepper", "x"}};
    refused(2, extra, "unknown setting `pepper`");
}

static void describes_itself(void) {
    exports_tributary_transform_plugin_plugin_info_t info;
    exports_tributary_transform_plugin_describe(&info);
    CHECK(string_eq(&info.name, "mask-c"));
    CHECK(info.version.len > 0);
    exports_tributary_transform_plugin_plugin_info_free(&info);
}

static void configure(const char *columns, const char *salt) {
    const char *const pairs[][2] = {{"columns", columns}, {"salt", salt}};
    exports_tributary_transform_plugin_setup_t setup;
    transform_string_t err;
    bool ok = init(salt ? 2 : 1, pairs, &setup, &err);
    CHECK(ok);
    if (!ok) {
        printf("  init said: %.*s\n", (int)err.len, (const char *)err.ptr);
        transform_string_free(&err);
        return;
    }
    exports_tributary_transform_plugin_setup_free(&setup);
}

static void reads_the_masked_columns_and_old_images(void) {
    const char *const pairs[][2] = {{"salt", "s"}, {"columns", " email , phone,email "}};
    exports_tributary_transform_plugin_setup_t setup;
    transform_string_t err;
    CHECK(init(2, pairs, &setup, &err));
    CHECK(setup.outputs.len == 0 && setup.reshapes.len == 0);
    CHECK(setup.interest.columns.is_some && setup.interest.columns.val.len == 2);
    if (setup.interest.columns.val.len == 2) {
        CHECK(string_eq(&setup.interest.columns.val.ptr[0], "email"));
        CHECK(string_eq(&setup.interest.columns.val.ptr[1], "phone"));
    }
    CHECK(setup.interest.old_images);
    CHECK(!setup.interest.messages && !setup.interest.whole_transactions);
    CHECK(strstr(last_log, "columns=email,phone") != NULL);
    exports_tributary_transform_plugin_setup_free(&setup);
}

static bool edit_is(const tributary_transform_types_list_tuple2_u32_value_t *edits, size_t i,
                    uint32_t at, const char *digest) {
    return i < edits->len && edits->ptr[i].f0 == at &&
           edits->ptr[i].f1.tag == TRIBUTARY_TRANSFORM_TYPES_VALUE_TEXT &&
           string_eq(&edits->ptr[i].f1.val.text, digest);
}

static void masks_rows_and_old_images(void) {
    configure("email,phone", "s");
    uint64_t counted_before = counted;
    const char *const user_columns[] = {"id", "email", "phone", "note"};
    const char *const order_columns[] = {"id", "email_sent"};
    tributary_transform_types_relation_t rel[] = {
        relation("public", "users", 4, user_columns),
        relation("public", "orders", 2, order_columns),
    };
    value_t inserted[] = {int4(1), text("a@x"), null, absent};
    value_t updated_new[] = {int4(1), text("b@x"), text("b@x"), absent};
    value_t updated_old[] = {int4(1), text("a@x"), null, null};
    value_t deleted[] = {int4(1), text("a@x"), null, null};
    value_t order[] = {int4(7), absent};
    value_t no_email[] = {int4(2), null, int4(5), absent};
    value_t key_only_old[] = {int4(3), null, null, null};
    value_t key_only_new[] = {int4(4), null, null, absent};
    change_t changes[] = {
        change(TRIBUTARY_TRANSFORM_TYPES_OP_INSERT, 0, row(4, inserted), no_row),
        change(TRIBUTARY_TRANSFORM_TYPES_OP_UPDATE, 0, row(4, updated_new), row(4, updated_old)),
        change(TRIBUTARY_TRANSFORM_TYPES_OP_DELETE, 0, no_row, row(4, deleted)),
        change(TRIBUTARY_TRANSFORM_TYPES_OP_INSERT, 1, row(2, order), no_row),
        change(TRIBUTARY_TRANSFORM_TYPES_OP_INSERT, 0, row(4, no_email), no_row),
        change(TRIBUTARY_TRANSFORM_TYPES_OP_UPDATE, 0, row(4, key_only_new), row(4, key_only_old)),
        change(TRIBUTARY_TRANSFORM_TYPES_OP_TRUNCATE, 0, no_row, no_row),
    };
    const size_t n = sizeof changes / sizeof *changes;
    tributary_transform_types_transaction_t t[] = {transaction(n, changes)};
    exports_tributary_transform_plugin_batch_t b = batch(2, rel, 1, t);

    exports_tributary_transform_plugin_processed_t out;
    exports_tributary_transform_plugin_error_t err;
    CHECK(exports_tributary_transform_plugin_process(&b, &out, &err));
    CHECK(out.emits.len == n && out.rejections.len == 0);
    if (out.emits.len == n) {
        const emit_t *e = out.emits.ptr;
        for (size_t i = 0; i < n; i++) {
            uint32_t change_index = e[i].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_KEEP
                                        ? e[i].val.keep.change
                                        : e[i].val.edit.change.change;
            CHECK(change_index == i);
        }
        /* insert: the email; phone is NULL. */
        CHECK(e[0].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_EDIT);
        CHECK(e[0].val.edit.values.len == 1 && edit_is(&e[0].val.edit.values, 0, 1, A_AT_X));
        CHECK(e[0].val.edit.old.len == 0);
        /* update: both columns of the new row, the email of the old image. */
        CHECK(e[1].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_EDIT);
        CHECK(e[1].val.edit.values.len == 2);
        CHECK(edit_is(&e[1].val.edit.values, 0, 1, B_AT_X));
        CHECK(edit_is(&e[1].val.edit.values, 1, 2, B_AT_X));
        CHECK(e[1].val.edit.old.len == 1 && edit_is(&e[1].val.edit.old, 0, 1, A_AT_X));
        /* delete: its row is the old one, edited in `values`. */
        CHECK(e[2].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_EDIT);
        CHECK(e[2].val.edit.values.len == 1 && edit_is(&e[2].val.edit.values, 0, 1, A_AT_X));
        CHECK(e[2].val.edit.old.len == 0);
        /* another table without masked columns; no text to mask; a truncate. */
        CHECK(e[3].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_KEEP);
        CHECK(e[4].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_KEEP);
        CHECK(e[5].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_KEEP);
        CHECK(e[6].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_KEEP);
    }
    CHECK(counted - counted_before == 5);
    exports_tributary_transform_plugin_processed_free(&out);
}

static void digest_of(const char *salt, const char *value, const char *want) {
    configure("email", salt);
    const char *const columns[] = {"email"};
    tributary_transform_types_relation_t rel[] = {relation("public", "users", 1, columns)};
    value_t r[] = {text(value)};
    change_t c[] = {change(TRIBUTARY_TRANSFORM_TYPES_OP_INSERT, 0, row(1, r), no_row)};
    tributary_transform_types_transaction_t t[] = {transaction(1, c)};
    exports_tributary_transform_plugin_batch_t b = batch(1, rel, 1, t);
    exports_tributary_transform_plugin_processed_t out;
    exports_tributary_transform_plugin_error_t err;
    CHECK(exports_tributary_transform_plugin_process(&b, &out, &err));
    CHECK(out.emits.len == 1 && out.emits.ptr[0].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_EDIT);
    if (out.emits.len == 1 && out.emits.ptr[0].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_EDIT) {
        CHECK(edit_is(&out.emits.ptr[0].val.edit.values, 0, 0, want));
    }
    exports_tributary_transform_plugin_processed_free(&out);
}

static void a_change_of_an_unknown_relation_is_fatal(void) {
    configure("email", NULL);
    const char *const columns[] = {"email"};
    tributary_transform_types_relation_t rel[] = {relation("public", "users", 1, columns)};
    value_t r[] = {text("a@x")};
    value_t r2[] = {text("a@x")};
    change_t c[] = {
        change(TRIBUTARY_TRANSFORM_TYPES_OP_INSERT, 0, row(1, r), no_row),
        change(TRIBUTARY_TRANSFORM_TYPES_OP_INSERT, 5, row(1, r2), no_row),
    };
    tributary_transform_types_transaction_t t[] = {transaction(2, c)};
    exports_tributary_transform_plugin_batch_t b = batch(1, rel, 1, t);
    exports_tributary_transform_plugin_processed_t out;
    exports_tributary_transform_plugin_error_t err;
    CHECK(!exports_tributary_transform_plugin_process(&b, &out, &err));
    CHECK(err.tag == TRIBUTARY_TRANSFORM_TYPES_ERROR_FATAL);
    CHECK(string_contains(&err.val.fatal, "relation 5"));
    exports_tributary_transform_plugin_error_free(&err);
}

int main(void) {
    describes_itself();
    refuses_bad_settings();
    reads_the_masked_columns_and_old_images();
    CHECK(logs == 1);
    /* Many batches: the leak checker at exit sees anything one of them left behind. */
    for (int i = 0; i < 500; i++) masks_rows_and_old_images();
    digest_of("", "alice@example.com", ALICE);
    digest_of("pepper", "+1 555 0100", PHONE);
    a_change_of_an_unknown_relation_is_fatal();
    return finish("mask");
}
