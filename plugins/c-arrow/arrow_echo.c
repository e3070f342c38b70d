/*
 * arrow_echo: a native test driver of the C Arrow IPC codec (arrow_ipc.c), used by
 * tests/e2e/tests/all/plugin_c_arrow.rs to check the codec against arrow-rs in both directions.
 *
 *   arrow_echo TYPES COLUMN < stream > answer
 *
 * TYPES is a comma-separated list of int64, float64 and utf8: the column types the stream on
 * standard input must have. COLUMN (from 0) is the column written back, row by row through an
 * arrow_builder, as a one-column stream on standard output. A stream the codec refuses: its
 * message on standard error, exit 1. Bad arguments: exit 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrow_ipc.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: arrow_echo int64|float64|utf8[,...] COLUMN < stream\n");
        return 2;
    }
    arrow_type types[ARROW_MAX_COLUMNS + 1];
    size_t ntypes = 0;
    for (char *t = strtok(argv[1], ","); t != NULL; t = strtok(NULL, ",")) {
        if (ntypes > ARROW_MAX_COLUMNS) {
            fprintf(stderr, "arrow_echo: more than %d types\n", ARROW_MAX_COLUMNS + 1);
            return 2;
        }
        if (strcmp(t, "int64") == 0) types[ntypes++] = ARROW_INT64;
        else if (strcmp(t, "float64") == 0) types[ntypes++] = ARROW_FLOAT64;
        else if (strcmp(t, "utf8") == 0) types[ntypes++] = ARROW_UTF8;
        else {
            fprintf(stderr, "arrow_echo: unknown type `%s`\n", t);
            return 2;
        }
    }
    size_t column = (size_t)strtoul(argv[2], NULL, 10);
    if (column >= ntypes) {
        fprintf(stderr, "arrow_echo: column %zu of %zu\n", column, ntypes);
        return 2;
    }

    size_t cap = 1 << 16, len = 0, n;
    uint8_t *bytes = malloc(cap);
    while (bytes != NULL && (n = fread(bytes + len, 1, cap - len, stdin)) > 0) {
        len += n;
        if (len == cap) bytes = realloc(bytes, cap *= 2);
    }
    if (bytes == NULL) {
        fprintf(stderr, "arrow_echo: out of memory\n");
        return 2;
    }

    arrow_batch in;
    char why[300];
    if (arrow_read(bytes, len, types, ntypes, &in, why, sizeof why) != 0) {
        fprintf(stderr, "%s\n", why);
        free(bytes);
        return 1;
    }
    const arrow_column *c = &in.columns[column];
    arrow_builder out;
    arrow_builder_init(&out, c->type);
    for (int64_t i = 0; i < in.rows; i++) {
        if (!arrow_is_valid(c, i)) {
            arrow_append_null(&out);
        } else if (c->type == ARROW_INT64) {
            arrow_append_int64(&out, arrow_int64(c, i));
        } else if (c->type == ARROW_FLOAT64) {
            arrow_append_float64(&out, arrow_float64(c, i));
        } else {
            size_t text_len;
            const char *text = arrow_utf8(c, i, &text_len);
            arrow_append_utf8(&out, text, text_len);
        }
    }
    free(bytes);
    uint8_t *stream;
    size_t stream_len;
    if (arrow_builder_finish(&out, &stream, &stream_len) != 0) {
        fprintf(stderr, "arrow_echo: out of memory writing the answer\n");
        return 2;
    }
    fwrite(stream, 1, stream_len, stdout);
    free(stream);
    return 0;
}
