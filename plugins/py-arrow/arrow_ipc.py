"""A small Arrow IPC stream codec in pure Python, for coordhost scalar functions and source readers.

componentize-py cannot load native extension modules, so pyarrow and nanoarrow are not
available inside a component. This module reads and writes exactly the batch shape of the
WIT packages `coordhost:function` (wit/function/function.wit) and `coordhost:reader`
(wit/reader/reader.wit), nothing more:

* an Arrow IPC *stream* (https://arrow.apache.org/docs/format/Columnar.html#ipc-streaming-format):
  a Schema message, record-batch messages, an end-of-stream marker;
* flat columns of the WITs' data types, each nullable: int64, int32, float64, utf8, boolean,
  decimal128(precision, scale) and date32 (days since 1970-01-01);
* no dictionaries, no compression, little-endian only.

Anything else is refused with `CodecError` naming what was found, never guessed at.

Values are plain Python values, `None` for null: `int` for int64, int32 and date32, `float` for
float64, `str` for utf8, `bool` for boolean, and for decimal128 the *unscaled* `int`
(`12.34` of a `decimal(15,2)` is `1234`), so decimal arithmetic stays exact.

Types are tuples: `INT64`, `INT32`, `FLOAT64`, `UTF8`, `BOOLEAN`, `DATE32` and
`decimal128(p, s)`.

    columns, rows = read_arguments(data, [decimal128(15, 2), UTF8])   # a function's input
    return write_result(decimal128(15, 2), [...one value per row...])  # its answer

    fields = read_schema(schema)             # a reader's declared schema: [(name, type), ...]
    return write_batch([(name, t, values) for ...])                   # one batch of it

The flatbuffers of the IPC metadata are read and written by hand (the layouts of the
tables used are in Arrow's format/Message.fbs and format/Schema.fbs); the writer lays
every object out front to back, each scalar aligned to its size, so that readers that
verify flatbuffers (arrow-rs does) accept it.
"""

import struct

INT64 = ("int64",)
INT32 = ("int32",)
FLOAT64 = ("float64",)
UTF8 = ("utf8",)
BOOLEAN = ("boolean",)
DATE32 = ("date32",)


def decimal128(precision, scale):
    """The type `decimal128(precision, scale)`: 1 <= precision <= 38, 0 <= scale <= precision."""
    if not (1 <= precision <= 38 and 0 <= scale <= precision):
        raise ValueError(f"decimal128({precision}, {scale}): precision must be 1..=38, scale 0..=precision")
    return ("decimal128", precision, scale)


def type_name(t):
    """A type as the host names it in messages, e.g. `Decimal128(15, 2)`."""
    if t[0] == "decimal128":
        return f"Decimal128({t[1]}, {t[2]})"
    return {"int64": "Int64", "int32": "Int32", "float64": "Float64", "utf8": "Utf8", "boolean": "Boolean", "date32": "Date32"}[t[0]]


class CodecError(Exception):
    """The bytes are not the batch shape this codec reads (the message says why)."""


# Flatbuffer union tags and enum values of Arrow's format (Message.fbs, Schema.fbs).
_HEADER_SCHEMA = 1
_HEADER_RECORD_BATCH = 3
_TYPE_INT = 2
_TYPE_FLOAT = 3
_TYPE_UTF8 = 5
_TYPE_BOOL = 6
_TYPE_DECIMAL = 7
_TYPE_DATE = 8
_METADATA_V5 = 4
_CONTINUATION = 0xFFFFFFFF
_MAX_ROWS = 1 << 31

# ---------------------------------------------------------------------------
# Reading flatbuffers
# ---------------------------------------------------------------------------


class _Table:
    """A flatbuffer table at `pos` of `buf`; every read is bounds-checked."""

    __slots__ = ("buf", "pos", "vt", "vt_len")

    def __init__(self, buf, pos):
        self.buf = buf
        self.pos = pos
        self.vt = pos - _unpack("<i", buf, pos)[0]
        self.vt_len = _unpack("<H", buf, self.vt)[0]

    def _field(self, i):
        slot = 4 + 2 * i
        if slot + 2 > self.vt_len:
            return 0
        return _unpack("<H", self.buf, self.vt + slot)[0]

    def scalar(self, i, fmt, default):
        off = self._field(i)
        return default if off == 0 else _unpack(fmt, self.buf, self.pos + off)[0]

    def _target(self, i):
        off = self._field(i)
        if off == 0:
            return None
        at = self.pos + off
        return at + _unpack("<I", self.buf, at)[0]

    def table(self, i):
        at = self._target(i)
        return None if at is None else _Table(self.buf, at)

    def vector(self, i):
        """(start of the elements, count), or None."""
        at = self._target(i)
        if at is None:
            return None
        return at + 4, _unpack("<I", self.buf, at)[0]

    def tables(self, i):
        v = self.vector(i)
        if v is None:
            return []
        start, n = v
        return [_Table(self.buf, start + 4 * k + _unpack("<I", self.buf, start + 4 * k)[0]) for k in range(n)]

    def string(self, i):
        v = self.vector(i)
        if v is None:
            return None
        start, n = v
        if start + n > len(self.buf):
            raise CodecError("a string of the metadata runs past its end")
        return bytes(self.buf[start:start + n]).decode("utf-8", "replace")


def _unpack(fmt, buf, pos):
    if pos < 0 or pos + struct.calcsize(fmt) > len(buf):
        raise CodecError("the metadata points outside itself")
    return struct.unpack_from(fmt, buf, pos)


# ---------------------------------------------------------------------------
# Writing flatbuffers
# ---------------------------------------------------------------------------


class _Builder:
    """Lays flatbuffer objects out front to back: a table, then what it points to."""

    def __init__(self):
        self.buf = bytearray(b"\0\0\0\0")  # the root offset, patched in finish()

    def _pad(self, n):
        self.buf.extend(b"\0" * (-len(self.buf) % n))

    def _patch_offset(self, at, target):
        struct.pack_into("<I", self.buf, at, target - at)

    def table(self, fields):
        """Writes a table; `fields[i]` is None, `(fmt, value)` or `("off", writer)`, where
        `writer(builder)` writes the child and returns its position. Returns the table's position."""
        layout = []
        size = 4
        for i, f in enumerate(fields):
            if f is None:
                continue
            width = 4 if f[0] == "off" else struct.calcsize("<" + f[0])
            size += -size % width
            layout.append((i, size, f))
            size += width
        size += -size % 8
        slots = [0] * len(fields)
        for i, at, _ in layout:
            slots[i] = at
        self._pad(8)
        vt = len(self.buf)
        self.buf += struct.pack(f"<HH{len(fields)}H", 4 + 2 * len(fields), size, *slots)
        self._pad(8)
        pos = len(self.buf)
        self.buf += b"\0" * size
        struct.pack_into("<i", self.buf, pos, pos - vt)
        children = []
        for _, at, (fmt, value) in layout:
            if fmt == "off":
                children.append((pos + at, value))
            else:
                struct.pack_into("<" + fmt, self.buf, pos + at, value)
        for at, writer in children:
            self._patch_offset(at, writer(self))
        return pos

    def string(self, text):
        data = text.encode("utf-8")
        self._pad(4)
        pos = len(self.buf)
        self.buf += struct.pack("<I", len(data)) + data + b"\0"
        return pos

    def structs(self, packed, count):
        """A vector of `count` structs of 8-byte alignment, already packed."""
        self._pad(8)
        self.buf += b"\0\0\0\0"
        pos = len(self.buf)
        self.buf += struct.pack("<I", count) + packed
        return pos

    def offsets(self, writers):
        """A vector of tables."""
        self._pad(4)
        pos = len(self.buf)
        self.buf += struct.pack("<I", len(writers))
        self.buf += b"\0" * (4 * len(writers))
        for k, writer in enumerate(writers):
            self._patch_offset(pos + 4 + 4 * k, writer(self))
        return pos

    def finish(self, root):
        self._patch_offset(0, root(self))
        self._pad(8)
        return bytes(self.buf)


# ---------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------


def _read_type(field):
    tag = field.scalar(2, "<B", 0)
    t = field.table(3)
    name = field.string(0) or "?"
    if t is None:
        raise CodecError(f"field `{name}` has no type")
    if tag == _TYPE_INT and t.scalar(0, "<i", 0) == 64 and t.scalar(1, "<B", 0):
        return INT64
    if tag == _TYPE_INT and t.scalar(0, "<i", 0) == 32 and t.scalar(1, "<B", 0):
        return INT32
    if tag == _TYPE_FLOAT and t.scalar(0, "<h", 0) == 2:
        return FLOAT64
    if tag == _TYPE_UTF8:
        return UTF8
    if tag == _TYPE_BOOL:
        return BOOLEAN
    if tag == _TYPE_DATE and t.scalar(0, "<h", 1) == 0:
        return DATE32
    if tag == _TYPE_DECIMAL and t.scalar(2, "<i", 128) == 128:
        p, s = t.scalar(0, "<i", 0), t.scalar(1, "<i", 0)
        try:
            return decimal128(p, s)
        except ValueError as e:
            raise CodecError(f"field `{name}`: {e}") from None
    raise CodecError(f"field `{name}` has an Arrow type this codec does not read (type tag {tag})")


def _type_fields(t):
    """(union tag, fields of the type table) for the writer."""
    kind = t[0]
    if kind == "int64":
        return _TYPE_INT, [("i", 64), ("B", 1)]
    if kind == "int32":
        return _TYPE_INT, [("i", 32), ("B", 1)]
    if kind == "float64":
        return _TYPE_FLOAT, [("h", 2)]
    if kind == "utf8":
        return _TYPE_UTF8, []
    if kind == "boolean":
        return _TYPE_BOOL, []
    if kind == "date32":
        return _TYPE_DATE, [("h", 0)]
    if kind == "decimal128":
        return _TYPE_DECIMAL, [("i", t[1]), ("i", t[2]), ("i", 128)]
    raise ValueError(f"not a type of this codec: {t!r}")


# ---------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------


def _messages(data):
    """Yields (header tag, header table, body) for each message until the end marker."""
    pos = 0
    n = len(data)
    while True:
        if pos + 4 > n:
            raise CodecError("the stream ends without its end-of-stream marker")
        size = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if size == _CONTINUATION:
            if pos + 4 > n:
                raise CodecError("the stream ends inside a message prefix")
            size = struct.unpack_from("<I", data, pos)[0]
            pos += 4
        if size == 0:
            return
        if pos + size > n:
            raise CodecError(f"a message of {size} bytes of metadata runs past the end of the stream")
        meta = memoryview(data)[pos:pos + size]
        pos += size
        if len(meta) < 4:
            raise CodecError("a message's metadata is too short")
        msg = _Table(meta, _unpack("<I", meta, 0)[0])
        version = msg.scalar(0, "<h", 0)
        if version < _METADATA_V5:
            raise CodecError(f"metadata version {version + 1} is older than V5")
        body_len = msg.scalar(3, "<q", 0)
        if body_len < 0 or pos + body_len > n:
            raise CodecError(f"a message body of {body_len} bytes runs past the end of the stream")
        body = memoryview(data)[pos:pos + body_len]
        pos += body_len
        header = msg.table(2)
        if header is None:
            raise CodecError("a message has no header")
        yield msg.scalar(1, "<B", 0), header, body


def _bit(bitmap, i):
    return (bitmap[i >> 3] >> (i & 7)) & 1


def _decode_column(t, rows, node, bufs, body, name):
    """One column's values from its field node and buffers (offset, length) in `body`."""
    length, nulls = node
    if length != rows:
        raise CodecError(f"column `{name}` has {length} values in a batch of {rows} rows")
    want = 3 if t == UTF8 else 2
    if len(bufs) < want:
        raise CodecError(f"column `{name}` lacks buffers")
    views = []
    for off, size in bufs[:want]:
        if off < 0 or size < 0 or off + size > len(body):
            raise CodecError(f"a buffer of column `{name}` lies outside the message body")
        views.append(body[off:off + size])
    validity = views[0]
    if nulls and len(validity) * 8 < rows:
        raise CodecError(f"column `{name}` has {nulls} nulls but a validity buffer of {len(validity)} bytes")

    def need(view, nbytes):
        if len(view) < nbytes:
            raise CodecError(f"a buffer of column `{name}` holds {len(view)} bytes, {nbytes} needed")

    kind = t[0]
    vals = views[1]
    if kind in ("int64", "float64"):
        need(vals, 8 * rows)
        out = list(struct.unpack_from(f"<{rows}{'q' if kind == 'int64' else 'd'}", vals, 0))
    elif kind in ("date32", "int32"):
        need(vals, 4 * rows)
        out = list(struct.unpack_from(f"<{rows}i", vals, 0))
    elif kind == "decimal128":
        need(vals, 16 * rows)
        words = struct.unpack_from(f"<{2 * rows}Q", vals, 0)
        out = []
        for i in range(rows):
            v = (words[2 * i + 1] << 64) | words[2 * i]
            out.append(v - (1 << 128) if v >> 127 else v)
    elif kind == "boolean":
        need(vals, (rows + 7) // 8)
        out = [bool(_bit(vals, i)) for i in range(rows)]
    else:  # utf8
        need(vals, 4 * (rows + 1))
        offsets = struct.unpack_from(f"<{rows + 1}i", vals, 0)
        data = bytes(views[2])
        out = []
        for i in range(rows):
            a, b = offsets[i], offsets[i + 1]
            if a < 0 or b < a or b > len(data):
                raise CodecError(f"column `{name}`: string {i} has offsets {a}..{b} outside its data")
            try:
                out.append(data[a:b].decode("utf-8"))
            except UnicodeDecodeError:
                raise CodecError(f"column `{name}`: string {i} is not UTF-8") from None
    if nulls:
        for i in range(rows):
            if not _bit(validity, i):
                out[i] = None
    return out


def _schema_fields(tag, header):
    """The `(name, type)` of each field of the stream's first message, which must be a schema."""
    if tag != _HEADER_SCHEMA:
        raise CodecError("the stream does not start with a schema")
    if header.scalar(0, "<h", 0) != 0:
        raise CodecError("the stream is big-endian")
    return [(f.string(0) or f"column{i}", _read_type(f)) for i, f in enumerate(header.tables(1))]


def read_schema(data):
    """Reads the declared schema a source reader's `configure` gets: an IPC stream holding a
    schema and no record batch. Returns `[(name, type), ...]` in declared order.
    Raises `CodecError` (answer it with the WIT error `invalid-config`)."""
    fields = None
    for tag, header, _body in _messages(data):
        if fields is None:
            fields = _schema_fields(tag, header)
        else:
            raise CodecError("the schema stream holds more than a schema")
    if fields is None:
        raise CodecError("the stream holds no schema")
    return fields


def read_arguments(data, expected):
    """Reads the argument stream of an `invoke`: its schema must have exactly the types in
    `expected` (a list of types), and it must hold exactly one record batch.

    Returns `(columns, rows)`: one list of values per argument, each `rows` long.
    Raises `CodecError` (answer it with the WIT error `invalid-input`)."""
    schema = None
    batch = None
    for tag, header, body in _messages(data):
        if schema is None:
            schema = _schema_fields(tag, header)
            found = [t for _, t in schema]
            if found != list(expected):
                raise CodecError(
                    "the arguments are (" + ", ".join(type_name(t) for t in found)
                    + "), expected (" + ", ".join(type_name(t) for t in expected) + ")"
                )
            continue
        if tag != _HEADER_RECORD_BATCH:
            raise CodecError(f"the stream holds a message of kind {tag}; only record batches are read")
        if batch is not None:
            raise CodecError("the stream holds more than one record batch")
        batch = (header, body)
    if schema is None:
        raise CodecError("the stream holds no schema")
    if batch is None:
        raise CodecError("the stream holds no record batch")
    header, body = batch
    if header.table(3) is not None:
        raise CodecError("the batch is compressed")
    rows = header.scalar(0, "<q", 0)
    if not 0 <= rows < _MAX_ROWS:
        raise CodecError(f"the batch says it has {rows} rows")
    nstart, ncount = header.vector(1) or (0, 0)
    bstart, bcount = header.vector(2) or (0, 0)
    if ncount != len(schema):
        raise CodecError(f"the batch has {ncount} field nodes for {len(schema)} columns")
    meta = header.buf
    nodes = [_unpack("<qq", meta, nstart + 16 * k) for k in range(ncount)]
    buffers = [_unpack("<qq", meta, bstart + 16 * k) for k in range(bcount)]
    columns = []
    at = 0
    for (name, t), node in zip(schema, nodes):
        width = 3 if t == UTF8 else 2
        columns.append(_decode_column(t, rows, node, buffers[at:at + width], body, name))
        at += width
    return columns, rows


def _frame(meta):
    """A message prefix (continuation marker, padded length) and the padded metadata."""
    meta += b"\0" * (-(len(meta) + 8) % 8)
    return struct.pack("<II", _CONTINUATION, len(meta)) + meta


def _validity(values):
    bits = bytearray((len(values) + 7) // 8)
    nulls = 0
    for i, v in enumerate(values):
        if v is None:
            nulls += 1
        else:
            bits[i >> 3] |= 1 << (i & 7)
    return bytes(bits), nulls


def _encode_values(t, values):
    """The buffers (after validity) of a column of type `t`."""
    kind = t[0]
    if kind == "int64":
        return [struct.pack(f"<{len(values)}q", *[0 if v is None else v for v in values])]
    if kind == "float64":
        return [struct.pack(f"<{len(values)}d", *[0.0 if v is None else v for v in values])]
    if kind in ("date32", "int32"):
        return [struct.pack(f"<{len(values)}i", *[0 if v is None else v for v in values])]
    if kind == "decimal128":
        limit = 10 ** t[1]
        out = bytearray(16 * len(values))
        for i, v in enumerate(values):
            if v is None:
                continue
            if not -limit < v < limit:
                raise ValueError(f"row {i}: {v} does not fit {type_name(t)} (unscaled, {t[1]} digits)")
            out[16 * i:16 * i + 16] = (v & ((1 << 128) - 1)).to_bytes(16, "little")
        return [bytes(out)]
    if kind == "boolean":
        bits = bytearray((len(values) + 7) // 8)
        for i, v in enumerate(values):
            if v:
                bits[i >> 3] |= 1 << (i & 7)
        return [bytes(bits)]
    if kind == "utf8":
        offsets = [0]
        data = bytearray()
        for v in values:
            if v is not None:
                data += v.encode("utf-8")
            offsets.append(len(data))
        return [struct.pack(f"<{len(offsets)}i", *offsets), bytes(data)]
    raise ValueError(f"not a type of this codec: {t!r}")


def write_batch(columns):
    """An IPC stream of one batch: `columns` is a list of `(name, type, values)`, every
    `values` list of the same length. A function's result (`write_result`) and a source
    reader's `next-batch` answer. Raises `ValueError` for a value that does not fit its type."""
    rows = len(columns[0][2]) if columns else 0
    for name, t, values in columns:
        if len(values) != rows:
            raise ValueError(f"column `{name}` has {len(values)} values, the first has {rows}")

    def field(name, t):
        tag, type_fields = _type_fields(t)
        return lambda b: b.table([
            ("off", lambda b: b.string(name)),
            ("B", 1),
            ("B", tag),
            ("off", lambda b: b.table(type_fields)),
            None,
            ("off", lambda b: b.offsets([])),
        ])

    def message(tag, header, body_len):
        return _Builder().finish(lambda b: b.table([
            ("h", _METADATA_V5), ("B", tag), ("off", header), ("q", body_len),
        ]))

    schema = message(_HEADER_SCHEMA, lambda b: b.table([
        None, ("off", lambda b: b.offsets([field(n, t) for n, t, _ in columns])),
    ]), 0)

    body = bytearray()
    nodes = bytearray()
    buffers = bytearray()
    for _, t, values in columns:
        validity, nulls = _validity(values)
        nodes += struct.pack("<qq", rows, nulls)
        for buf in [validity if nulls else b""] + _encode_values(t, values):
            buffers += struct.pack("<qq", len(body), len(buf))
            body += buf
            body += b"\0" * (-len(body) % 8)
    batch = message(_HEADER_RECORD_BATCH, lambda b: b.table([
        ("q", rows),
        ("off", lambda b: b.structs(bytes(nodes), len(columns))),
        ("off", lambda b: b.structs(bytes(buffers), len(buffers) // 16)),
    ]), len(body))
    return _frame(schema) + _frame(batch) + bytes(body) + struct.pack("<II", _CONTINUATION, 0)


def write_result(t, values):
    """The answer of an `invoke`: one column `result` of type `t` holding `values`
    (one per argument row, `None` for null), in one batch. Raises `ValueError` for a value
    that does not fit `t`."""
    return write_batch([("result", t, values)])
