/*
 * arrow_ipc.c: the codec of arrow_ipc.h (read it first for what is handled and what is not).
 *
 * The layouts used, from Arrow's format/Message.fbs and format/Schema.fbs (field numbers in
 * brackets, as flatbuffers count them):
 *
 *   Message     { version: short [0], header_type: ubyte [1], header: table [2],
 *                 bodyLength: long [3] }
 *   Schema      { endianness: short [0], fields: [Field] [1] }
 *   Field       { name: string [0], nullable: bool [1], type_type: ubyte [2], type: table [3],
 *                 dictionary: table [4], children: [Field] [5] }
 *   Int         { bitWidth: int [0], is_signed: bool [1] }
 *   FloatingPoint { precision: short [0] }      Utf8 { }
 *   RecordBatch { length: long [0], nodes: [FieldNode] [1], buffers: [Buffer] [2],
 *                 compression: table [3] }
 *   FieldNode   struct { length: long, null_count: long }
 *   Buffer      struct { offset: long, length: long }   (offset into the message body)
 *
 * A message in a stream is framed as 0xFFFFFFFF, an int32 length of the flatbuffer (padded to
 * 8 bytes), the flatbuffer, then bodyLength bytes of body; a zero length ends the stream. A
 * column's buffers in the body are: validity bitmap, then values (Int64, Float64), or validity,
 * int32 offsets, text bytes (Utf8).
 */
#include "arrow_ipc.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Union tags and enum values of Arrow's format. */
enum { HEADER_SCHEMA = 1, HEADER_DICTIONARY_BATCH = 2, HEADER_RECORD_BATCH = 3 };
enum { TYPE_INT = 2, TYPE_FLOATING_POINT = 3, TYPE_UTF8 = 5 };
enum { PRECISION_DOUBLE = 2 };
enum { METADATA_V4 = 3, METADATA_V5 = 4 };
#define CONTINUATION 0xFFFFFFFFu
/* More rows than the host ever sends in one batch; bounds every size computed from a count. */
#define MAX_ROWS ((int64_t)1 << 31)

const char *arrow_type_name(arrow_type type) {
    switch (type) {
    case ARROW_INT64: return "Int64";
    case ARROW_FLOAT64: return "Float64";
    case ARROW_UTF8: return "Utf8";
    }
    return "an unknown type";
}

/* ------------------------------------------------------------------------------------------
 * Little-endian loads and stores (byte by byte: nothing in the input is assumed aligned).
 * ------------------------------------------------------------------------------------------ */

static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (uint16_t)p[1] << 8); }
static uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t ld64(const uint8_t *p) { return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32; }
static void st(uint8_t *p, uint64_t v, size_t size) {
    for (size_t i = 0; i < size; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ------------------------------------------------------------------------------------------
 * Reading flatbuffers: every offset is checked against the message's metadata.
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *b; /* the flatbuffer of the message being read */
    size_t len;
    char *err;
    size_t errlen;
} reader;

/* Appends `n` bytes of `s` to the message at out[*at], keeping room for the NUL. */
static void put_text(char *out, size_t cap, size_t *at, const char *s, size_t n) {
    while (n-- > 0 && *at + 1 < cap) out[(*at)++] = *s++;
}

static void put_unsigned(char *out, size_t cap, size_t *at, unsigned long long v, bool negative) {
    char digits[24];
    size_t n = 0;
    do {
        digits[sizeof digits - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    if (negative) digits[sizeof digits - 1 - n++] = '-';
    put_text(out, cap, at, digits + sizeof digits - n, n);
}

int arrow_vformat(char *out, size_t cap, const char *fmt, va_list ap) {
    size_t at = 0;
    if (cap == 0) return 0;
    for (const char *p = fmt; *p != '\0'; p++) {
        if (*p != '%') {
            put_text(out, cap, &at, p, 1);
            continue;
        }
        p++;
        if (*p == '%') {
            put_text(out, cap, &at, "%", 1);
        } else if (p[0] == '.' && p[1] == '*' && p[2] == 's') {
            int n = va_arg(ap, int);
            const char *s = va_arg(ap, const char *);
            put_text(out, cap, &at, s, n > 0 ? (size_t)n : 0);
            p += 2;
        } else if (*p == 's') {
            const char *s = va_arg(ap, const char *);
            put_text(out, cap, &at, s, strlen(s));
        } else if (*p == 'd') {
            int v = va_arg(ap, int);
            put_unsigned(out, cap, &at, v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v, v < 0);
        } else if (*p == 'u') {
            put_unsigned(out, cap, &at, va_arg(ap, unsigned), false);
        } else if (p[0] == 'z' && p[1] == 'u') {
            put_unsigned(out, cap, &at, va_arg(ap, size_t), false);
            p += 1;
        } else if (p[0] == 'l' && p[1] == 'l' && p[2] == 'd') {
            long long v = va_arg(ap, long long);
            put_unsigned(out, cap, &at, v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v, v < 0);
            p += 2;
        } else if (p[0] == 'l' && p[1] == 'l' && p[2] == 'u') {
            put_unsigned(out, cap, &at, va_arg(ap, unsigned long long), false);
            p += 2;
        } else {
            /* Not a conversion this formatter knows: written as it is, and no argument taken. */
            put_text(out, cap, &at, p - 1, *p != '\0' ? 2 : 1);
            if (*p == '\0') break;
        }
    }
    out[at] = '\0';
    return (int)at;
}

int arrow_format(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = arrow_vformat(out, cap, fmt, ap);
    va_end(ap);
    return n;
}

static int fail(reader *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    arrow_vformat(r->err, r->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

typedef struct {
    size_t pos;      /* the table */
    size_t vt;       /* its vtable */
    uint16_t vt_len; /* bytes of the vtable */
    uint16_t len;    /* bytes of the table */
} table;

static int open_table(reader *r, size_t pos, table *t, const char *what) {
    if (pos > r->len || r->len - pos < 4) return fail(r, "%s: a table outside the metadata", what);
    int64_t vt = (int64_t)pos - (int32_t)ld32(r->b + pos);
    if (vt < 0 || (uint64_t)vt > r->len - 4)
        return fail(r, "%s: a vtable outside the metadata", what);
    t->pos = pos;
    t->vt = (size_t)vt;
    t->vt_len = ld16(r->b + vt);
    t->len = ld16(r->b + vt + 2);
    if (t->vt_len < 4 || t->vt_len % 2 != 0 || t->vt_len > r->len - t->vt)
        return fail(r, "%s: a vtable of %u bytes does not fit the metadata", what, t->vt_len);
    if (t->len < 4 || t->len > r->len - pos)
        return fail(r, "%s: a table of %u bytes does not fit the metadata", what, t->len);
    return 0;
}

/* Where field `i` of `size` bytes is: 1 and *at, 0 when absent, -1 when it is outside its table. */
static int field_at(reader *r, const table *t, int i, size_t size, size_t *at, const char *what) {
    size_t slot = 4 + 2 * (size_t)i;
    if (slot + 2 > t->vt_len) return 0;
    uint16_t off = ld16(r->b + t->vt + slot);
    if (off == 0) return 0;
    if (off < 4 || (size_t)off + size > t->len)
        return fail(r, "%s: field %d lies outside its table", what, i);
    *at = t->pos + off;
    return 1;
}

/* A scalar field of `size` bytes, or `dflt` when absent. */
static int scalar(reader *r, const table *t, int i, size_t size, uint64_t dflt, uint64_t *out,
                  const char *what) {
    size_t at;
    int rc = field_at(r, t, i, size, &at, what);
    if (rc < 0) return -1;
    *out = dflt;
    if (rc == 1) {
        *out = 0;
        for (size_t k = 0; k < size; k++) *out |= (uint64_t)r->b[at + k] << (8 * k);
    }
    return 0;
}


/* Follows the uoffset at `at`: 0 and *target, -1 when it leaves the metadata. */
static int follow(reader *r, size_t at, size_t *target, const char *what) {
    uint32_t u = ld32(r->b + at);
    if (u > r->len - at) return fail(r, "%s: an offset leaves the metadata", what);
    *target = at + u;
    return 0;
}

/* A table field: 1 and *out, 0 when absent, -1 when broken. */
static int sub_table(reader *r, const table *t, int i, table *out, const char *what) {
    size_t at, target;
    int rc = field_at(r, t, i, 4, &at, what);
    if (rc <= 0) return rc;
    if (follow(r, at, &target, what) < 0 || open_table(r, target, out, what) < 0) return -1;
    return 1;
}

/* A vector field of `elem` bytes per element: 1, *start (first element) and *n, 0 when absent. */
static int vector(reader *r, const table *t, int i, size_t elem, size_t *start, uint32_t *n,
                  const char *what) {
    size_t at, target;
    int rc = field_at(r, t, i, 4, &at, what);
    if (rc <= 0) return rc;
    if (follow(r, at, &target, what) < 0) return -1;
    if (r->len - target < 4) return fail(r, "%s: a vector outside the metadata", what);
    *n = ld32(r->b + target);
    *start = target + 4;
    if (*n > (r->len - *start) / elem)
        return fail(r, "%s: a vector of %u elements runs past the metadata", what, *n);
    return 1;
}

/* The table that element `k` of a vector of tables points to. */
static int vector_table(reader *r, size_t start, uint32_t k, table *out, const char *what) {
    size_t target;
    if (follow(r, start + 4 * (size_t)k, &target, what) < 0) return -1;
    return open_table(r, target, out, what);
}

/* A string field: 1 with *s and *n, 0 when absent. */
static int string(reader *r, const table *t, int i, const char **s, uint32_t *n, const char *what) {
    size_t start;
    int rc = vector(r, t, i, 1, &start, n, what);
    if (rc == 1) *s = (const char *)r->b + start;
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Reading the stream
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    uint8_t header_type;
    table header;    /* valid when has_header */
    bool has_header;
    const uint8_t *body;
    size_t body_len;
} message;

static const char *header_name(uint8_t h) {
    switch (h) {
    case 0: return "message without a header";
    case HEADER_SCHEMA: return "schema";
    case HEADER_DICTIONARY_BATCH: return "dictionary batch";
    case HEADER_RECORD_BATCH: return "record batch";
    case 4: return "tensor";
    case 5: return "sparse tensor";
    }
    return "message of an unknown kind";
}

/*
 * The message at *pos of the stream: 0 and *m (the reader then reads its metadata), or 0
 * with *end set at the end-of-stream marker or the end of the bytes; -1 when broken.
 */
static int next_message(reader *r, const uint8_t *bytes, size_t len, size_t *pos, message *m,
                        bool *end) {
    size_t p = *pos;
    *end = false;
    if (p == len) {
        *end = true;
        return 0;
    }
    if (len - p < 4) return fail(r, "%zu stray bytes at the end of the stream", len - p);
    uint32_t n = ld32(bytes + p);
    p += 4;
    if (n == CONTINUATION) {
        if (len - p < 4) return fail(r, "the stream ends inside a message's length");
        n = ld32(bytes + p);
        p += 4;
    }
    if (n == 0) {
        *end = true;
        *pos = p;
        return 0;
    }
    if (n > len - p)
        return fail(r, "a message of %u bytes of metadata runs past the end of the stream "
                       "(%zu bytes left): not an Arrow IPC stream", n, len - p);
    r->b = bytes + p;
    r->len = n;
    p += n;
    table msg;
    size_t root;
    if (n < 4 || follow(r, 0, &root, "message") < 0 || open_table(r, root, &msg, "message") < 0)
        return -1;
    uint64_t version, header_type, body_len;
    if (scalar(r, &msg, 0, 2, 0, &version, "message") < 0) return -1;
    if (version != METADATA_V4 && version != METADATA_V5)
        return fail(r, "metadata version %u: only V4 and V5 are read", (unsigned)version);
    if (scalar(r, &msg, 1, 1, 0, &header_type, "message") < 0) return -1;
    m->header_type = (uint8_t)header_type;
    int rc = sub_table(r, &msg, 2, &m->header, "message header");
    if (rc < 0) return -1;
    m->has_header = rc == 1;
    if (scalar(r, &msg, 3, 8, 0, &body_len, "message") < 0) return -1;
    if (body_len > len - p)
        return fail(r, "a %s's body of %llu bytes runs past the end of the stream",
                    header_name(m->header_type), (unsigned long long)body_len);
    m->body = bytes + p;
    m->body_len = (size_t)body_len;
    *pos = p + (size_t)body_len;
    return 0;
}

/* The name of an Arrow type this codec does not read, from its Type union tag. */
static const char *other_type_name(uint8_t tag) {
    static const char *const names[] = {
        "no type", "Null", "Int", "FloatingPoint", "Binary", "Utf8", "Boolean", "Decimal",
        "Date", "Time", "Timestamp", "Interval", "List", "Struct", "Union", "FixedSizeBinary",
        "FixedSizeList", "Map", "Duration", "LargeBinary", "LargeUtf8", "LargeList",
        "RunEndEncoded", "BinaryView", "Utf8View", "ListView", "LargeListView",
    };
    return tag < sizeof names / sizeof names[0] ? names[tag] : "a type of an unknown tag";
}

static int read_schema(reader *r, const message *m, const arrow_type *expected, size_t nexpected) {
    if (!m->has_header) return fail(r, "the schema message has no schema");
    uint64_t endianness;
    if (scalar(r, &m->header, 0, 2, 0, &endianness, "schema") < 0) return -1;
    if (endianness != 0) return fail(r, "the stream is big-endian; only little-endian is read");
    size_t start = 0;
    uint32_t n = 0;
    if (vector(r, &m->header, 1, 4, &start, &n, "schema fields") < 0) return -1;
    if (n != nexpected)
        return fail(r, "the schema has %u columns, expected %zu (one per argument)", n, nexpected);
    for (uint32_t k = 0; k < n; k++) {
        table f, type;
        const char *name = "";
        uint32_t name_len = 0;
        uint64_t tag;
        size_t at;
        if (vector_table(r, start, k, &f, "schema field") < 0) return -1;
        if (string(r, &f, 0, &name, &name_len, "field name") < 0) return -1;
        if (name_len > 40) name_len = 40;
        if (scalar(r, &f, 2, 1, 0, &tag, "field") < 0) return -1;
        int rc = field_at(r, &f, 4, 4, &at, "field");
        if (rc < 0) return -1;
        if (rc == 1)
            return fail(r, "column %u (`%.*s`) is dictionary-encoded; only plain columns are read",
                        k, (int)name_len, name);
        int has_type = sub_table(r, &f, 3, &type, "field type");
        if (has_type < 0) return -1;
        arrow_type found = 0;
        char other[40];
        arrow_format(other, sizeof other, "%s", other_type_name((uint8_t)tag));
        if (tag == TYPE_INT && has_type == 1) {
            uint64_t bits, is_signed;
            if (scalar(r, &type, 0, 4, 0, &bits, "Int type") < 0 ||
                scalar(r, &type, 1, 1, 0, &is_signed, "Int type") < 0)
                return -1;
            if (bits == 64 && is_signed) found = ARROW_INT64;
            else arrow_format(other, sizeof other, "%sInt%u", is_signed ? "" : "U", (unsigned)bits);
        } else if (tag == TYPE_FLOATING_POINT && has_type == 1) {
            uint64_t precision;
            if (scalar(r, &type, 0, 2, 0, &precision, "FloatingPoint type") < 0) return -1;
            if (precision == PRECISION_DOUBLE) found = ARROW_FLOAT64;
            else arrow_format(other, sizeof other, "Float%u", precision == 0 ? 16u : 32u);
        } else if (tag == TYPE_UTF8) {
            found = ARROW_UTF8;
        }
        if (found != expected[k])
            return fail(r, "column %u (`%.*s`) is %s, expected %s", k, (int)name_len, name,
                        found ? arrow_type_name(found) : other, arrow_type_name(expected[k]));
        size_t children_start;
        uint32_t children = 0;
        if (vector(r, &f, 5, 4, &children_start, &children, "field children") < 0) return -1;
        if (children != 0)
            return fail(r, "column %u (`%.*s`) has child columns", k, (int)name_len, name);
    }
    return 0;
}

/* Whether `s[0..n)` is well-formed UTF-8 (Unicode's table 3-7: no overlong forms, no
 * surrogates, nothing past U+10FFFF). */
static bool utf8_ok(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t more;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return false;
        if (n - i - 1 < more) return false;
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (size_t k = 2; k <= more; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return false;
        i += more + 1;
    }
    return true;
}

/* Buffer `k` of the batch, checked to lie in the body: *p and *n (bytes). */
static int body_buffer(reader *r, const message *m, size_t buffers, uint32_t k, const uint8_t **p,
                       size_t *n) {
    uint64_t off = ld64(r->b + buffers + 16 * (size_t)k);
    uint64_t len = ld64(r->b + buffers + 16 * (size_t)k + 8);
    if (off > m->body_len || len > m->body_len - off)
        return fail(r, "buffer %u (%llu bytes at %llu) lies outside the batch's body of %zu bytes",
                    k, (unsigned long long)len, (unsigned long long)off, m->body_len);
    *p = m->body + off;
    *n = (size_t)len;
    return 0;
}

static int read_batch(reader *r, const message *m, arrow_batch *out) {
    if (!m->has_header) return fail(r, "the record batch message has no record batch");
    const table *rb = &m->header;
    uint64_t rows;
    if (scalar(r, rb, 0, 8, 0, &rows, "record batch") < 0) return -1;
    if ((int64_t)rows < 0 || (int64_t)rows > MAX_ROWS)
        return fail(r, "the batch says it has %lld rows", (long long)rows);
    size_t at;
    int compressed = field_at(r, rb, 3, 4, &at, "record batch");
    if (compressed < 0) return -1;
    if (compressed == 1) return fail(r, "the batch is compressed; only uncompressed batches are read");
    size_t nodes = 0, buffers = 0;
    uint32_t nnodes = 0, nbuffers = 0;
    if (vector(r, rb, 1, 16, &nodes, &nnodes, "record batch nodes") < 0 ||
        vector(r, rb, 2, 16, &buffers, &nbuffers, "record batch buffers") < 0)
        return -1;
    if (nnodes != out->ncolumns)
        return fail(r, "the batch has %u columns but its schema %zu", nnodes, out->ncolumns);
    uint32_t need = 0;
    for (size_t c = 0; c < out->ncolumns; c++) need += out->columns[c].type == ARROW_UTF8 ? 3 : 2;
    if (nbuffers != need)
        return fail(r, "the batch has %u buffers; its columns need %u", nbuffers, need);
    out->rows = (int64_t)rows;
    uint32_t k = 0;
    for (size_t c = 0; c < out->ncolumns; c++) {
        arrow_column *col = &out->columns[c];
        int64_t length = (int64_t)ld64(r->b + nodes + 16 * c);
        int64_t nulls = (int64_t)ld64(r->b + nodes + 16 * c + 8);
        if (length != (int64_t)rows)
            return fail(r, "column %zu has %lld rows, the batch %llu", c, (long long)length,
                        (unsigned long long)rows);
        if (nulls < 0 || nulls > length)
            return fail(r, "column %zu says it has %lld nulls in %lld rows", c, (long long)nulls,
                        (long long)length);
        col->length = length;
        col->null_count = nulls;
        const uint8_t *p;
        size_t n;
        if (body_buffer(r, m, buffers, k++, &p, &n) < 0) return -1;
        if (n == 0) {
            if (nulls != 0)
                return fail(r, "column %zu says it has %lld nulls but has no validity bitmap", c,
                            (long long)nulls);
            col->validity = NULL;
        } else {
            if ((uint64_t)n < ((uint64_t)length + 7) / 8)
                return fail(r, "column %zu: a validity bitmap of %zu bytes for %lld rows", c, n,
                            (long long)length);
            col->validity = p;
            int64_t counted = 0;
            for (int64_t i = 0; i < length; i++) counted += !((p[i >> 3] >> (i & 7)) & 1);
            if (counted != nulls)
                return fail(r, "column %zu says it has %lld nulls, its bitmap %lld", c,
                            (long long)nulls, (long long)counted);
        }
        if (body_buffer(r, m, buffers, k++, &p, &n) < 0) return -1;
        col->values = p;
        if (col->type == ARROW_UTF8) {
            if (length > 0 && (uint64_t)n < ((uint64_t)length + 1) * 4)
                return fail(r, "column %zu: %zu bytes of offsets for %lld rows", c, n,
                            (long long)length);
            if (body_buffer(r, m, buffers, k++, &col->data, &col->data_len) < 0) return -1;
            for (int64_t i = 0; i < length; i++) {
                int32_t a = (int32_t)ld32(p + 4 * i), b = (int32_t)ld32(p + 4 * i + 4);
                if (a < 0 || b < a || (uint64_t)b > col->data_len)
                    return fail(r, "column %zu: the offsets of row %lld (%d..%d) leave the %zu "
                                   "bytes of text", c, (long long)i, a, b, col->data_len);
                if (!utf8_ok(col->data + a, (size_t)(b - a)))
                    return fail(r, "column %zu: row %lld is not UTF-8", c, (long long)i);
            }
        } else {
            col->data = NULL;
            col->data_len = 0;
            if ((uint64_t)n < (uint64_t)length * 8)
                return fail(r, "column %zu: %zu bytes of values for %lld rows of %s", c, n,
                            (long long)length, arrow_type_name(col->type));
        }
    }
    return 0;
}

int arrow_read(const uint8_t *bytes, size_t len, const arrow_type *expected, size_t nexpected,
               arrow_batch *out, char *err, size_t errlen) {
    reader r = {.b = NULL, .len = 0, .err = err, .errlen = errlen};
    if (errlen > 0) err[0] = '\0';
    if (nexpected > ARROW_MAX_COLUMNS)
        return fail(&r, "%zu columns asked for; at most %d are read", nexpected, ARROW_MAX_COLUMNS);
    memset(out, 0, sizeof *out);
    out->ncolumns = nexpected;
    for (size_t c = 0; c < nexpected; c++) out->columns[c].type = expected[c];
    size_t pos = 0;
    message m;
    bool end;
    if (next_message(&r, bytes, len, &pos, &m, &end) < 0) return -1;
    if (end) return fail(&r, "the stream is empty: no schema");
    if (m.header_type != HEADER_SCHEMA)
        return fail(&r, "the stream starts with a %s, not a schema", header_name(m.header_type));
    if (read_schema(&r, &m, expected, nexpected) < 0) return -1;
    if (next_message(&r, bytes, len, &pos, &m, &end) < 0) return -1;
    if (end) return fail(&r, "the stream has a schema but no record batch");
    if (m.header_type == HEADER_DICTIONARY_BATCH)
        return fail(&r, "the stream has a dictionary batch; only plain columns are read");
    if (m.header_type != HEADER_RECORD_BATCH)
        return fail(&r, "a %s follows the schema, not a record batch", header_name(m.header_type));
    if (read_batch(&r, &m, out) < 0) return -1;
    if (next_message(&r, bytes, len, &pos, &m, &end) < 0) return -1;
    if (!end)
        return fail(&r, "a %s follows the record batch; the stream must hold exactly one batch",
                    header_name(m.header_type));
    return 0;
}

bool arrow_is_valid(const arrow_column *column, int64_t row) {
    return column->validity == NULL || ((column->validity[row >> 3] >> (row & 7)) & 1);
}

int64_t arrow_int64(const arrow_column *column, int64_t row) {
    return arrow_is_valid(column, row) ? (int64_t)ld64(column->values + 8 * row) : 0;
}

double arrow_float64(const arrow_column *column, int64_t row) {
    double v = 0;
    if (arrow_is_valid(column, row)) {
        uint64_t bits = ld64(column->values + 8 * row);
        memcpy(&v, &bits, sizeof v);
    }
    return v;
}

const char *arrow_utf8(const arrow_column *column, int64_t row, size_t *len) {
    *len = 0;
    if (!arrow_is_valid(column, row)) return "";
    uint32_t a = ld32(column->values + 4 * row), b = ld32(column->values + 4 * row + 4);
    *len = b - a;
    return (const char *)column->data + a;
}

/* ------------------------------------------------------------------------------------------
 * Building a column
 * ------------------------------------------------------------------------------------------ */

/* Grows *p (capacity *cap) to hold `need` bytes, zeroing what is new. */
static bool grow(uint8_t **p, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need) {
        if (cap2 > SIZE_MAX / 2) return false;
        cap2 *= 2;
    }
    uint8_t *q = realloc(*p, cap2);
    if (q == NULL) return false;
    memset(q + *cap, 0, cap2 - *cap);
    *p = q;
    *cap = cap2;
    return true;
}

void arrow_builder_init(arrow_builder *b, arrow_type type) {
    memset(b, 0, sizeof *b);
    b->type = type;
}

void arrow_builder_free(arrow_builder *b) {
    free(b->validity);
    free(b->values);
    free(b->data);
    arrow_type type = b->type;
    arrow_builder_init(b, type);
}

/* Appends one row: its validity bit, and `size` bytes of `value` (NULL: zeros). */
static void append(arrow_builder *b, bool valid, const uint8_t *value, size_t size) {
    if (b->failed) return;
    if (b->rows >= MAX_ROWS || !grow(&b->validity, &b->validity_cap, (size_t)(b->rows / 8) + 1)) {
        b->failed = true;
        return;
    }
    if (b->type == ARROW_UTF8 && b->values_len == 0) {
        if (!grow(&b->values, &b->values_cap, 4)) {
            b->failed = true;
            return;
        }
        b->values_len = 4; /* the first offset, 0 */
    }
    if (!grow(&b->values, &b->values_cap, b->values_len + size)) {
        b->failed = true;
        return;
    }
    if (value != NULL) memcpy(b->values + b->values_len, value, size);
    else memset(b->values + b->values_len, 0, size);
    b->values_len += size;
    if (valid) b->validity[b->rows >> 3] |= (uint8_t)(1u << (b->rows & 7));
    else b->null_count++;
    b->rows++;
}

/* Appends the offset after the text so far (Utf8). */
static void append_offset(arrow_builder *b, bool valid) {
    uint8_t end[4];
    st(end, (uint64_t)b->data_len, 4);
    append(b, valid, end, 4);
}

void arrow_append_null(arrow_builder *b) {
    if (b->type == ARROW_UTF8) append_offset(b, false);
    else append(b, false, NULL, 8);
}

void arrow_append_int64(arrow_builder *b, int64_t value) {
    uint8_t le[8];
    st(le, (uint64_t)value, 8);
    if (b->type != ARROW_INT64) b->failed = true;
    append(b, true, le, 8);
}

void arrow_append_float64(arrow_builder *b, double value) {
    uint64_t bits;
    uint8_t le[8];
    memcpy(&bits, &value, sizeof bits);
    st(le, bits, 8);
    if (b->type != ARROW_FLOAT64) b->failed = true;
    append(b, true, le, 8);
}

void arrow_append_utf8(arrow_builder *b, const char *text, size_t len) {
    if (b->type != ARROW_UTF8 || b->failed || len > (size_t)INT32_MAX - b->data_len ||
        !grow(&b->data, &b->data_cap, b->data_len + len)) {
        b->failed = true;
        return;
    }
    if (len > 0) memcpy(b->data + b->data_len, text, len);
    b->data_len += len;
    append_offset(b, true);
}

/* ------------------------------------------------------------------------------------------
 * Writing flatbuffers front to back: a parent before its children (uoffsets point forward),
 * a vtable just before its table, every scalar aligned to its size.
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    uint8_t *p;
    size_t len, cap;
    bool failed;
} builder;

/* Reserves `n` zero bytes at the end; their position. */
static size_t reserve(builder *b, size_t n) {
    size_t at = b->len;
    if (b->failed) return 0;
    if (n > SIZE_MAX - b->len || !grow(&b->p, &b->cap, b->len + n)) {
        b->failed = true;
        return 0;
    }
    b->len += n;
    return at;
}

static void align(builder *b, size_t a) {
    if (b->len % a != 0) reserve(b, a - b->len % a);
}

static void put(builder *b, size_t at, uint64_t v, size_t size) {
    if (!b->failed) st(b->p + at, v, size);
}

/* Makes the uoffset at `at` point to `target` (which lies after it). */
static void point(builder *b, size_t at, size_t target) { put(b, at, target - at, 4); }

/* One field of a table to write: its size in bytes (0: absent) and value (offsets: 0, set
 * later with point()). */
typedef struct {
    uint8_t size;
    uint64_t value;
} field;

/* Writes a vtable and its table of `n` fields; returns the table's position and each field's
 * position in at[]. */
static size_t write_table(builder *b, const field *fields, int n, size_t *at) {
    align(b, 2);
    size_t vt = reserve(b, 4 + 2 * (size_t)n);
    align(b, 8);
    size_t t = reserve(b, 4);
    for (int i = 0; i < n; i++) {
        at[i] = 0;
        if (fields[i].size == 0) continue;
        align(b, fields[i].size);
        at[i] = reserve(b, fields[i].size);
        put(b, at[i], fields[i].value, fields[i].size);
    }
    put(b, vt, 4 + 2 * (uint64_t)n, 2);
    put(b, vt + 2, b->len - t, 2);
    for (int i = 0; i < n; i++) put(b, vt + 4 + 2 * (size_t)i, at[i] ? at[i] - t : 0, 2);
    put(b, t, (uint64_t)(t - vt), 4);
    return t;
}

/* Writes the length of a vector of `count` elements of `size` bytes, aligned to `elem_align`;
 * returns its position (the elements follow it, zeroed). */
static size_t write_vector(builder *b, size_t size, uint32_t count, size_t elem_align) {
    align(b, 4);
    while ((b->len + 4) % elem_align != 0) reserve(b, 4);
    size_t v = reserve(b, 4 + size * count);
    put(b, v, count, 4);
    return v;
}

static size_t write_string(builder *b, const char *s) {
    size_t n = strlen(s);
    align(b, 4);
    size_t v = reserve(b, 4 + n + 1);
    put(b, v, n, 4);
    if (!b->failed) memcpy(b->p + v + 4, s, n);
    return v;
}

/* The Schema message of one nullable column `result` of `type`. */
static void write_schema(builder *b, arrow_type type) {
    size_t root = reserve(b, 4), at[6], schema_at[2];
    field message[4] = {{2, METADATA_V5}, {1, HEADER_SCHEMA}, {4, 0}, {8, 0}};
    point(b, root, write_table(b, message, 4, at));
    size_t header = at[2];
    field schema[2] = {{2, 0 /* little-endian */}, {4, 0}};
    point(b, header, write_table(b, schema, 2, schema_at));
    size_t fields = write_vector(b, 4, 1, 4);
    point(b, schema_at[1], fields);
    uint8_t tag = type == ARROW_INT64 ? TYPE_INT : type == ARROW_FLOAT64 ? TYPE_FLOATING_POINT
                                                                          : TYPE_UTF8;
    field f[6] = {{4, 0}, {1, 1}, {1, tag}, {4, 0}, {0, 0}, {4, 0}};
    size_t field_at_[6];
    point(b, fields + 4, write_table(b, f, 6, field_at_));
    point(b, field_at_[0], write_string(b, "result"));
    size_t type_at[2];
    if (type == ARROW_INT64) {
        field t[2] = {{4, 64}, {1, 1}};
        point(b, field_at_[3], write_table(b, t, 2, type_at));
    } else if (type == ARROW_FLOAT64) {
        field t[1] = {{2, PRECISION_DOUBLE}};
        point(b, field_at_[3], write_table(b, t, 1, type_at));
    } else {
        point(b, field_at_[3], write_table(b, NULL, 0, type_at));
    }
    point(b, field_at_[5], write_vector(b, 4, 0, 4));
}

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

/* The RecordBatch message of column `c` whose buffers have lengths `lens[0..nbuf)`, laid
 * one after the other in the body, each padded to 8 bytes. */
static void write_batch(builder *b, const arrow_builder *c, const size_t *lens, uint32_t nbuf,
                        size_t body_len) {
    size_t root = reserve(b, 4), at[4], rb_at[3];
    field message[4] = {{2, METADATA_V5}, {1, HEADER_RECORD_BATCH}, {4, 0}, {8, body_len}};
    point(b, root, write_table(b, message, 4, at));
    field rb[3] = {{8, (uint64_t)c->rows}, {4, 0}, {4, 0}};
    point(b, at[2], write_table(b, rb, 3, rb_at));
    size_t nodes = write_vector(b, 16, 1, 8);
    put(b, nodes + 4, (uint64_t)c->rows, 8);
    put(b, nodes + 12, (uint64_t)c->null_count, 8);
    point(b, rb_at[1], nodes);
    size_t buffers = write_vector(b, 16, nbuf, 8), offset = 0;
    for (uint32_t k = 0; k < nbuf; k++) {
        put(b, buffers + 4 + 16 * k, offset, 8);
        put(b, buffers + 4 + 16 * k + 8, lens[k], 8);
        offset += pad8(lens[k]);
    }
    point(b, rb_at[2], buffers);
}

/* Appends a framed message: continuation marker, length, the flatbuffer padded to 8. */
static void frame(builder *out, const builder *meta) {
    size_t n = pad8(meta->len);
    size_t at = reserve(out, 8 + n);
    put(out, at, CONTINUATION, 4);
    put(out, at + 4, n, 4);
    if (!out->failed) memcpy(out->p + at + 8, meta->p, meta->len);
}

int arrow_builder_finish(arrow_builder *c, uint8_t **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (c->type == ARROW_UTF8 && c->values_len == 0 && !c->failed) {
        if (grow(&c->values, &c->values_cap, 4)) c->values_len = 4;
        else c->failed = true;
    }
    if (c->failed) {
        arrow_builder_free(c);
        return -1;
    }
    /* A column without nulls has an empty validity buffer. */
    const uint8_t *bufs[3] = {c->validity, c->values, c->data};
    size_t lens[3] = {c->null_count > 0 ? (size_t)(c->rows + 7) / 8 : 0, c->values_len,
                      c->data_len};
    uint32_t nbuf = c->type == ARROW_UTF8 ? 3 : 2;
    size_t body_len = 0;
    for (uint32_t k = 0; k < nbuf; k++) body_len += pad8(lens[k]);

    builder schema = {0}, batch = {0}, stream = {0};
    write_schema(&schema, c->type);
    write_batch(&batch, c, lens, nbuf, body_len);
    frame(&stream, &schema);
    frame(&stream, &batch);
    size_t body = reserve(&stream, body_len);
    for (uint32_t k = 0; k < nbuf && !stream.failed; k++) {
        if (lens[k] > 0) memcpy(stream.p + body, bufs[k], lens[k]);
        body += pad8(lens[k]);
    }
    size_t eos = reserve(&stream, 8);
    put(&stream, eos, CONTINUATION, 4);
    bool failed = schema.failed || batch.failed || stream.failed;
    free(schema.p);
    free(batch.p);
    arrow_builder_free(c);
    if (failed) {
        free(stream.p);
        return -1;
    }
    *out = stream.p;
    *out_len = stream.len;
    return 0;
}
