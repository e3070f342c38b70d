/*
 * `{{name}}`: a coordhost scalar function in C (world `scalar-function-plugin` of
 * `wit/function.wit`, package `coordhost:function`), made by `coordhost plugin new`.
 *
 * `{{crate}}(x double, factor double) -> double`: `x * factor + offset`, null when either
 * argument is null. Config key (the `config` table of the function's `[functions.NAME]` entry
 * in the job file): `offset` (a number, default 0).
 *
 * The batch shape: `invoke` gets an Arrow IPC stream of one batch with one column per argument
 * (`arg0`, `arg1`, of the declared types) and answers an Arrow IPC stream of one column of the
 * declared result type, in one batch of the same number of rows. The host checks the answer.
 * `arrow_ipc.h` reads and writes that shape for Int64, Float64 and Utf8 columns.
 *
 * The rules (coordhost's docs/write-a-plugin.md): the same arguments must always give the same
 * result (recovery re-runs tasks); a batch of another schema gets the error value
 * `invalid-input`, never a trap (abort, a bad pointer); a value the function has no answer for
 * gives null, not an error, since one error fails the whole query.
 *
 * Memory: the generated bindings hand this code the `config` list and the argument bytes to
 * own (free them with the generated *_free functions) and free what it returns once the host
 * has copied it, so answers are malloc'd. No printf: wasi-libc's stdio would import WASI;
 * arrow_format formats messages instead.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arrow_ipc.h"
#include "scalar_function_plugin.h"

typedef exports_coordhost_function_scalar_function_error_t function_error;
typedef scalar_function_plugin_string_t string_t;

/* The `offset` config key; `configure` runs once on each new instance, first. */
static double offset = 0.0;

/* Sets *err to the variant case `tag` with a copy of `message`. */
static void set_error(function_error *err, uint8_t tag, const char *message) {
    err->tag = tag;
    /* Every case of the error variant carries one string, at the same place. */
    scalar_function_plugin_string_dup(&err->val.invalid_config, message);
}

/* `s` as a double: the whole string must be a number (strtod's syntax). */
static bool parse_double(const string_t *s, double *out) {
    char text[64];
    if (s->len == 0 || s->len >= sizeof text) return false;
    memcpy(text, s->ptr, s->len);
    text[s->len] = '\0';
    char *end;
    *out = strtod(text, &end);
    return *end == '\0';
}

bool exports_coordhost_function_scalar_function_configure(
    exports_coordhost_function_scalar_function_config_t *config, function_error *err) {
    bool ok = true;
    char message[200];
    for (size_t i = 0; i < config->len && ok; i++) {
        const string_t *key = &config->ptr[i].f0, *value = &config->ptr[i].f1;
        int key_len = (int)(key->len > 60 ? 60 : key->len);
        int value_len = (int)(value->len > 60 ? 60 : value->len);
        if (key->len == 6 && memcmp(key->ptr, "offset", 6) == 0) {
            if (!parse_double(value, &offset)) {
                arrow_format(message, sizeof message, "`offset`: `%.*s` is not a number",
                             value_len, (const char *)value->ptr);
                ok = false;
            }
        } else {
            arrow_format(message, sizeof message, "unknown key `%.*s`", key_len,
                         (const char *)key->ptr);
            ok = false;
        }
    }
    exports_coordhost_function_scalar_function_config_free(config);
    if (!ok) set_error(err, COORDHOST_FUNCTION_TYPES_ERROR_INVALID_CONFIG, message);
    return ok;
}

void exports_coordhost_function_scalar_function_signature(
    exports_coordhost_function_scalar_function_function_signature_t *ret) {
    coordhost_function_types_data_type_t *arguments = malloc(2 * sizeof *arguments);
    if (arguments == NULL) abort();
    arguments[0].tag = COORDHOST_FUNCTION_TYPES_DATA_TYPE_FLOAT64;
    arguments[1].tag = COORDHOST_FUNCTION_TYPES_DATA_TYPE_FLOAT64;
    ret->arguments.ptr = arguments;
    ret->arguments.len = 2;
    ret->returns.tag = COORDHOST_FUNCTION_TYPES_DATA_TYPE_FLOAT64;
    /* Recovery re-runs tasks: the host refuses a function that says false here. */
    ret->deterministic = true;
}

bool exports_coordhost_function_scalar_function_invoke(scalar_function_plugin_list_u8_t *arguments,
                                                       scalar_function_plugin_list_u8_t *ret,
                                                       function_error *err) {
    static const arrow_type types[2] = {ARROW_FLOAT64, ARROW_FLOAT64};
    arrow_batch in;
    char why[200];
    if (arrow_read(arguments->ptr, arguments->len, types, 2, &in, why, sizeof why) != 0) {
        scalar_function_plugin_list_u8_free(arguments);
        set_error(err, COORDHOST_FUNCTION_TYPES_ERROR_INVALID_INPUT, why);
        return false;
    }
    arrow_builder out;
    arrow_builder_init(&out, ARROW_FLOAT64);
    const arrow_column *x = &in.columns[0], *factor = &in.columns[1];
    for (int64_t i = 0; i < in.rows; i++) {
        if (arrow_is_valid(x, i) && arrow_is_valid(factor, i))
            arrow_append_float64(&out, arrow_float64(x, i) * arrow_float64(factor, i) + offset);
        else
            arrow_append_null(&out);
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
