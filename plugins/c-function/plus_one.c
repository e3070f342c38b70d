/*
 * A sample scalar function in C (world `scalar-function-plugin` of `coordhost:function@0.1.0`,
 * wit/function/function.wit): issue 27's fourth guest language.
 *
 * `plus_one(x bigint) -> bigint`: x + 1. A null argument gives null, and so does
 * 9223372036854775807, which has no successor in a bigint (a value the function has no answer
 * for is null, not an error value, which would fail the whole query). Deterministic: the answer
 * depends on the argument only. No config keys: any key is refused as `invalid-config`.
 *
 * Built by `make plugins` (the top-level Makefile, `plugins-c`): `wit-bindgen c` writes the
 * bindings (scalar_function_plugin.h), clang-19 compiles this file with the C Arrow IPC codec
 * of plugins/c-arrow for wasm32-wasi, and `wasm-tools component new` makes the component
 * build/plugins/c-function.wasm. It imports nothing: no stdio, no files, no clock.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arrow_ipc.h"
#include "scalar_function_plugin.h"

typedef exports_coordhost_function_scalar_function_error_t function_error;

/* Sets *err to the variant case `tag` with a copy of `message`. */
static void set_error(function_error *err, uint8_t tag, const char *message) {
    err->tag = tag;
    /* Every case of the error variant carries one string, at the same place. */
    scalar_function_plugin_string_dup(&err->val.invalid_config, message);
}

bool exports_coordhost_function_scalar_function_configure(
    exports_coordhost_function_scalar_function_config_t *config, function_error *err) {
    bool ok = true;
    if (config->len > 0) {
        char message[160];
        scalar_function_plugin_string_t *key = &config->ptr[0].f0;
        arrow_format(message, sizeof message, "unknown key `%.*s`; plus_one takes no configuration",
                     (int)(key->len > 60 ? 60 : key->len), (const char *)key->ptr);
        set_error(err, COORDHOST_FUNCTION_TYPES_ERROR_INVALID_CONFIG, message);
        ok = false;
    }
    exports_coordhost_function_scalar_function_config_free(config);
    return ok;
}

void exports_coordhost_function_scalar_function_signature(
    exports_coordhost_function_scalar_function_function_signature_t *ret) {
    coordhost_function_types_data_type_t *arguments = malloc(sizeof *arguments);
    if (arguments == NULL) abort();
    arguments[0].tag = COORDHOST_FUNCTION_TYPES_DATA_TYPE_INT64;
    ret->arguments.ptr = arguments;
    ret->arguments.len = 1;
    ret->returns.tag = COORDHOST_FUNCTION_TYPES_DATA_TYPE_INT64;
    /* Recovery re-runs tasks: the host refuses a function that says false here. */
    ret->deterministic = true;
}

bool exports_coordhost_function_scalar_function_invoke(scalar_function_plugin_list_u8_t *arguments,
                                                       scalar_function_plugin_list_u8_t *ret,
                                                       function_error *err) {
    static const arrow_type types[1] = {ARROW_INT64};
    arrow_batch in;
    char why[200];
    if (arrow_read(arguments->ptr, arguments->len, types, 1, &in, why, sizeof why) != 0) {
        scalar_function_plugin_list_u8_free(arguments);
        set_error(err, COORDHOST_FUNCTION_TYPES_ERROR_INVALID_INPUT, why);
        return false;
    }
    arrow_builder out;
    arrow_builder_init(&out, ARROW_INT64);
    const arrow_column *x = &in.columns[0];
    for (int64_t i = 0; i < in.rows; i++) {
        int64_t v = arrow_int64(x, i);
        if (!arrow_is_valid(x, i) || v == INT64_MAX) arrow_append_null(&out);
        else arrow_append_int64(&out, v + 1);
    }
    /* The columns point into the argument bytes: free them only now. */
    scalar_function_plugin_list_u8_free(arguments);
    uint8_t *stream;
    size_t len;
    if (arrow_builder_finish(&out, &stream, &len) != 0) {
        set_error(err, COORDHOST_FUNCTION_TYPES_ERROR_OTHER, "out of memory writing the answer");
        return false;
    }
    ret->ptr = stream;
    ret->len = len;
    return true;
}
