/* Native test of passthrough.c through its generated bindings (see harness.h). */
#include "harness.h"

static void describes_itself(void) {
    exports_tributary_transform_plugin_plugin_info_t info;
    exports_tributary_transform_plugin_describe(&info);
    CHECK(string_eq(&info.name, "passthrough-c"));
    CHECK(info.version.len > 0);
    exports_tributary_transform_plugin_plugin_info_free(&info);
}

static void reads_nothing(void) {
    transform_list_tuple2_string_string_t config = host_config(0, NULL);
    exports_tributary_transform_plugin_setup_t setup;
    transform_string_t err;
    CHECK(exports_tributary_transform_plugin_init(&config, &setup, &err));
    CHECK(setup.outputs.len == 0 && setup.reshapes.len == 0);
    CHECK(setup.interest.columns.is_some && setup.interest.columns.val.len == 0);
    CHECK(!setup.interest.old_images && !setup.interest.messages);
    CHECK(!setup.interest.whole_transactions);
    exports_tributary_transform_plugin_setup_free(&setup);
}

static void refuses_settings(void) {
    const char *const pairs[][2] = {{"salt", "x"}, {"columns", "email"}};
    transform_list_tuple2_string_string_t config = host_config(2, pairs);
    exports_tributary_transform_plugin_setup_t setup;
    transform_string_t err;
    CHECK(!exports_tributary_transform_plugin_init(&config, &setup, &err));
    CHECK(string_contains(&err, "`salt`"));
    CHECK(string_contains(&err, "takes no settings"));
    transform_string_free(&err);
}

static void keeps_every_change_in_order(void) {
    const char *const names[] = {"id", "email"};
    tributary_transform_types_relation_t rel[] = {relation("public", "users", 2, names)};
    value_t r1[] = {int4(1), absent};
    value_t r2[] = {int4(2), absent};
    change_t first[] = {
        change(TRIBUTARY_TRANSFORM_TYPES_OP_INSERT, 0, row(2, r1), no_row),
        change(TRIBUTARY_TRANSFORM_TYPES_OP_DELETE, 0, no_row, row(2, r2)),
    };
    change_t second[] = {change(TRIBUTARY_TRANSFORM_TYPES_OP_TRUNCATE, 0, no_row, no_row)};
    tributary_transform_types_transaction_t t[] = {transaction(2, first), transaction(1, second)};
    exports_tributary_transform_plugin_batch_t b = batch(1, rel, 2, t);

    exports_tributary_transform_plugin_processed_t out;
    exports_tributary_transform_plugin_error_t err;
    CHECK(exports_tributary_transform_plugin_process(&b, &out, &err));
    CHECK(out.emits.len == 3 && out.rejections.len == 0);
    const uint32_t want[][2] = {{0, 0}, {0, 1}, {1, 0}};
    for (size_t i = 0; i < out.emits.len && i < 3; i++) {
        CHECK(out.emits.ptr[i].tag == TRIBUTARY_TRANSFORM_TYPES_EMIT_KEEP);
        CHECK(out.emits.ptr[i].val.keep.transaction == want[i][0]);
        CHECK(out.emits.ptr[i].val.keep.change == want[i][1]);
    }
    exports_tributary_transform_plugin_processed_free(&out);
}

static void an_empty_batch_emits_nothing(void) {
    exports_tributary_transform_plugin_batch_t b = batch(0, NULL, 0, NULL);
    exports_tributary_transform_plugin_processed_t out;
    exports_tributary_transform_plugin_error_t err;
    CHECK(exports_tributary_transform_plugin_process(&b, &out, &err));
    CHECK(out.emits.len == 0);
    exports_tributary_transform_plugin_processed_free(&out);
}

int main(void) {
    describes_itself();
    reads_nothing();
    refuses_settings();
    /* Many batches: the leak checker at exit sees anything one of them left behind. */
    for (int i = 0; i < 1000; i++) keeps_every_change_in_order();
    an_empty_batch_emits_nothing();
    return finish("passthrough");
}
