/*
 * arrow_ipc.h: a small Arrow IPC stream codec in C for coordhost scalar functions
 * (WIT package `coordhost:function`, wit/function/function.wit).
 *
 * A C guest has no Arrow library at hand (the Arrow C++ library is far too large for a
 * component and nanoarrow is not packaged), so this codec reads and writes exactly the batch
 * shape of the WIT, nothing more:
 *
 *  - an Arrow IPC *stream*: a Schema message, one record batch message, the end-of-stream
 *    marker (Arrow's columnar format spec, "IPC Streaming Format");
 *  - flat nullable columns of three types: Int64 (SQL bigint), Float64 (SQL double) and Utf8
 *    (SQL varchar), each with its validity bitmap;
 *  - no dictionaries, no compression, little-endian only (WebAssembly is little-endian).
 *
 * Anything else is refused with a message naming what was found; nothing is guessed.
 *
 * Reading:
 *
 *     arrow_type want[2] = { ARROW_INT64, ARROW_UTF8 };
 *     arrow_batch in;
 *     char why[200];
 *     if (arrow_read(bytes, len, want, 2, &in, why, sizeof why) != 0) { ...invalid-input(why)... }
 *     for (int64_t i = 0; i < in.rows; i++)
 *         if (arrow_is_valid(&in.columns[0], i)) ... arrow_int64(&in.columns[0], i) ...
 *
 * The columns point into `bytes`, which must outlive them; nothing is allocated.
 *
 * Writing one column of the answer:
 *
 *     arrow_builder out;
 *     arrow_builder_init(&out, ARROW_INT64);
 *     arrow_append_int64(&out, 42); arrow_append_null(&out); ...
 *     uint8_t *stream; size_t stream_len;
 *     if (arrow_builder_finish(&out, &stream, &stream_len) != 0) { ...out of memory... }
 *
 * The stream (malloc'd; the caller owns it) holds a schema of one nullable column named
 * `result` and one record batch of the appended rows.
 *
 * The flatbuffers of the IPC metadata (Arrow's format/Message.fbs and format/Schema.fbs) are
 * read and written by hand: the reader checks every offset against the buffer; the writer lays
 * each object out front to back, every scalar aligned to its size, which verifying readers
 * (arrow-rs) accept.
 */
#ifndef COORDHOST_ARROW_IPC_H
#define COORDHOST_ARROW_IPC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most argument columns a batch may have: the WIT allows 0 to 16 arguments. */
#define ARROW_MAX_COLUMNS 16

/* The column types this codec handles. */
typedef enum {
    ARROW_INT64 = 1, /* 64-bit signed integers (SQL bigint) */
    ARROW_FLOAT64,   /* IEEE 754 doubles (SQL double) */
    ARROW_UTF8,      /* UTF-8 text with 32-bit offsets (SQL varchar) */
} arrow_type;

/* The name Arrow (and coordhost's messages) give a type: "Int64", "Float64", "Utf8". */
const char *arrow_type_name(arrow_type type);

/* One column of a batch that was read. Its pointers point into the bytes given to arrow_read. */
typedef struct {
    arrow_type type;
    int64_t length;          /* rows, as the batch's */
    int64_t null_count;      /* as the stream says (checked against the bitmap) */
    const uint8_t *validity; /* bit i set: row i has a value; NULL: every row has one */
    const uint8_t *values;   /* Int64/Float64: 8 bytes per row; Utf8: length + 1 int32 offsets */
    const uint8_t *data;     /* Utf8 only: the text bytes the offsets index */
    size_t data_len;         /* Utf8 only: bytes at `data` */
} arrow_column;

/* A record batch that was read: `rows` rows of `ncolumns` columns. */
typedef struct {
    int64_t rows;
    size_t ncolumns;
    arrow_column columns[ARROW_MAX_COLUMNS];
} arrow_batch;

/*
 * Reads an Arrow IPC stream of one record batch whose columns have exactly the types
 * `expected[0..nexpected)`. Returns 0 and fills `out`, or returns -1 and writes a one-line
 * reason (NUL-terminated, cut to `errlen`) to `err`: bytes that are not an IPC stream, a
 * schema of other columns, no batch or more than one, a buffer outside the body, offsets
 * that run backwards or out of the text, text that is not UTF-8, a compressed or
 * dictionary-encoded batch.
 */
int arrow_read(const uint8_t *bytes, size_t len, const arrow_type *expected, size_t nexpected,
               arrow_batch *out, char *err, size_t errlen);

/* Whether row `row` (0 <= row < column->length) of `column` has a value (is not null). */
bool arrow_is_valid(const arrow_column *column, int64_t row);
/* The value of row `row` of an Int64 column (0 for a null row). */
int64_t arrow_int64(const arrow_column *column, int64_t row);
/* The value of row `row` of a Float64 column (0 for a null row). */
double arrow_float64(const arrow_column *column, int64_t row);
/* The text of row `row` of a Utf8 column: a pointer to its bytes (not NUL-terminated) and
 * their count in *len (0 for a null row). */
const char *arrow_utf8(const arrow_column *column, int64_t row, size_t *len);

/* A column being written: appended to row by row, then made into a stream. */
typedef struct {
    arrow_type type;
    int64_t rows;
    int64_t null_count;
    uint8_t *validity;  /* one bit per row, grown as rows are appended */
    size_t validity_cap;
    uint8_t *values;    /* 8 bytes per row, or (Utf8) int32 offsets, rows + 1 of them */
    size_t values_len, values_cap;
    uint8_t *data;      /* Utf8 text bytes */
    size_t data_len, data_cap;
    bool failed;        /* an allocation failed or the text passed 2 GiB; finish says so */
} arrow_builder;

/* Starts an empty column of `type`. */
void arrow_builder_init(arrow_builder *b, arrow_type type);
/* Appends a null row (any type). */
void arrow_append_null(arrow_builder *b);
/* Appends a value to an Int64 column. */
void arrow_append_int64(arrow_builder *b, int64_t value);
/* Appends a value to a Float64 column. */
void arrow_append_float64(arrow_builder *b, double value);
/* Appends `len` bytes of UTF-8 text to a Utf8 column (the codec does not check the UTF-8). */
void arrow_append_utf8(arrow_builder *b, const char *text, size_t len);
/*
 * Writes the stream: a schema of one nullable column `result` of the builder's type, one
 * record batch of its rows, the end-of-stream marker. On success returns 0 and sets *out
 * (malloc'd, the caller frees it) and *out_len; returns -1 when memory ran out or an append
 * was refused. Frees the builder's buffers either way.
 */
int arrow_builder_finish(arrow_builder *b, uint8_t **out, size_t *out_len);
/* Frees the builder's buffers without writing (after an error). */
void arrow_builder_free(arrow_builder *b);

/*
 * snprintf for the conversions these messages use: %s, %.*s, %d, %u, %zu, %lld, %llu, %%.
 * Writes at most cap - 1 bytes and a NUL (cap > 0); returns the bytes written. wasi-libc's
 * printf family is not used because it links its stdio, which imports WASI's fd_write,
 * fd_seek and fd_close: a component built from this code then imports nothing at all.
 */
int arrow_format(char *out, size_t cap, const char *fmt, ...);
/* arrow_format with a va_list. */
int arrow_vformat(char *out, size_t cap, const char *fmt, va_list ap);

#endif
