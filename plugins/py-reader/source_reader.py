"""`py-reader`: a coordhost source reader in Python for web-server access logs in the Common
Log Format (CLF) of NCSA httpd, Apache and nginx, optionally with the two quoted fields of the
"combined" format after it:

    127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326
    10.0.0.7 - - [10/Oct/2000:13:56:01 +0000] "POST /login HTTP/1.1" 302 - "https://a.example/" "curl/8.5"

# Columns

The table declares any of these columns, by name, in any order (each nullable):

| column | type | from |
|---|---|---|
| `host` | varchar | the client address |
| `ident` | varchar | RFC 1413 identity (`-` is null) |
| `user` | varchar | the authenticated user (`-` is null) |
| `time` | bigint | the request time as seconds since 1970-01-01 UTC |
| `time` | date | the request's day in UTC |
| `time` | varchar | the time as written, e.g. `10/Oct/2000:13:55:36 -0700` |
| `method`, `path`, `protocol` | varchar | the request line's three words (all null when the request line is not three words, e.g. `-`) |
| `request` | varchar | the request line as written |
| `status` | int or bigint | the status code |
| `bytes` | bigint | the body size (`-` is null) |
| `referer`, `user_agent` | varchar | the combined format's fields (null when the line has none, or `-`) |

Any other column name or type is refused by `configure` with `invalid-config` naming it. No
config keys (any key is refused likewise).

# Splits

A `file-range` split holds the lines that *start* in its byte range (the rule the host's CSV
reader and the sample `file-enumerator` follow: the line holding byte `start - 1` belongs to
the split before); an `inline` split is its text's lines. A line ends at `\\n` (an `\\r`
before it is dropped); empty lines are skipped. A line that is not a CLF line (or whose time or
numbers do not parse) is the error value `invalid-split` naming the split, the file, the line's
byte offset and the line. The file is opened through the reader's grants (WASI preopens at the
host paths), so a file outside them cannot be opened: that is the error value `io`.

Batches hold at most `BATCH_ROWS` rows, encoded by the pure-Python Arrow IPC codec
plugins/py-arrow/arrow_ipc.py (componentize-py cannot load pyarrow). Deterministic: the batches
depend only on the split's bytes and the declared schema.
"""

import arrow_ipc
import wit_world.exports.source_reader
from componentize_py_types import Err
from wit_world.imports.types import (
    Error_InvalidConfig,
    Error_InvalidSplit,
    Error_Io,
    Error_Other,
    SplitPayload_FileRange,
    SplitPayload_Inline,
)

#: Rows per batch.
BATCH_ROWS = 4096
#: Longest line read, in bytes.
MAX_LINE_BYTES = 1 << 16

_TEXT = (arrow_ipc.UTF8,)
#: The columns a table may declare: name -> the types it may have.
COLUMNS = {
    "host": _TEXT,
    "ident": _TEXT,
    "user": _TEXT,
    "time": (arrow_ipc.INT64, arrow_ipc.DATE32, arrow_ipc.UTF8),
    "method": _TEXT,
    "path": _TEXT,
    "protocol": _TEXT,
    "request": _TEXT,
    "status": (arrow_ipc.INT32, arrow_ipc.INT64),
    "bytes": (arrow_ipc.INT64,),
    "referer": _TEXT,
    "user_agent": _TEXT,
}

_MONTHS = {m: i + 1 for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"])}

#: The declared schema, `[(name, type), ...]`, set by `configure`.
_declared = None


def configure(config, schema):
    """Checks the configuration (none) and the declared schema; raises `Err(Error_InvalidConfig)`."""
    global _declared
    for key, _ in config:
        raise Err(Error_InvalidConfig(f"unknown key `{key}`; py-reader takes no configuration"))
    try:
        fields = arrow_ipc.read_schema(schema)
    except arrow_ipc.CodecError as e:
        raise Err(Error_InvalidConfig(f"the declared schema does not decode: {e}"))
    for name, t in fields:
        allowed = COLUMNS.get(name)
        if allowed is None:
            raise Err(Error_InvalidConfig(
                f"column `{name}`: not a field of an access log (fields: {', '.join(COLUMNS)})"))
        if t not in allowed:
            raise Err(Error_InvalidConfig(
                f"column `{name}`: type {arrow_ipc.type_name(t)} is not one it reads as "
                f"(" + " or ".join(arrow_ipc.type_name(a) for a in allowed) + ")"))
    _declared = fields


class BadLine(Exception):
    """A line that is not a CLF line; the message says what is wrong."""


def _quoted(line, at):
    """The quoted field starting at `line[at] == '"'` (backslash escapes kept) and the index
    after its closing quote."""
    if at >= len(line) or line[at] != '"':
        raise BadLine("a quoted field is missing")
    i = at + 1
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return line[at + 1:i], i + 1
        i += 1
    raise BadLine("a quoted field is not closed")


def _word(line, at):
    """The space-free word at `at` and the index after it."""
    end = line.find(" ", at)
    if end < 0:
        end = len(line)
    if end == at:
        raise BadLine(f"a field is missing at character {at + 1}")
    return line[at:end], end


def _space(line, at):
    if at >= len(line) or line[at] != " ":
        raise BadLine(f"a space is expected at character {at + 1}")
    return at + 1


def _days(y, m, d):
    """Days since 1970-01-01 of a proleptic Gregorian date."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * ((m + 9) % 12) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _epoch(text):
    """Seconds since 1970-01-01 UTC of `dd/Mon/yyyy:HH:MM:SS +hhmm`."""
    try:
        date, zone = text.split(" ")
        day, month, rest = date.split("/")
        year, hh, mm, ss = rest.split(":")
        d, y, h, mi, s = int(day), int(year), int(hh), int(mm), int(ss)
        mo = _MONTHS[month]
        sign = {"+": 1, "-": -1}[zone[0]]
        if len(zone) != 5 or len(year) != 4:
            raise ValueError
        off = sign * (int(zone[1:3]) * 3600 + int(zone[3:5]) * 60)
    except (ValueError, KeyError, IndexError):
        raise BadLine(f"the time `{text}` is not `dd/Mon/yyyy:HH:MM:SS +hhmm`") from None
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    month_days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1]
    if not (1 <= d <= month_days and h < 24 and mi < 60 and ss.isdigit() and s < 61):
        raise BadLine(f"the time `{text}` is not a valid time")
    return _days(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - off


def _dash(text):
    return None if text == "-" else text


def parse_line(line):
    """The fields of one CLF line as a dict of column values; raises `BadLine`."""
    host, at = _word(line, 0)
    ident, at = _word(line, _space(line, at))
    user, at = _word(line, _space(line, at))
    at = _space(line, at)
    if at >= len(line) or line[at] != "[":
        raise BadLine("the time in `[...]` is missing")
    close = line.find("]", at)
    if close < 0:
        raise BadLine("the time's `]` is missing")
    time_text = line[at + 1:close]
    seconds = _epoch(time_text)
    request, at = _quoted(line, _space(line, close + 1))
    status_text, at = _word(line, _space(line, at))
    bytes_text, at = _word(line, _space(line, at))
    referer = agent = None
    if at < len(line):
        referer, at = _quoted(line, _space(line, at))
        agent, at = _quoted(line, _space(line, at))
        if at != len(line):
            raise BadLine(f"unexpected text after the user agent at character {at + 1}")
    if not (len(status_text) == 3 and status_text.isdigit()):
        raise BadLine(f"the status `{status_text}` is not a 3-digit code")
    if bytes_text != "-" and not bytes_text.isdigit():
        raise BadLine(f"the size `{bytes_text}` is not a number of bytes or `-`")
    words = request.split(" ")
    method, path, protocol = words if len(words) == 3 else (None, None, None)
    return {
        "host": host,
        "ident": _dash(ident),
        "user": _dash(user),
        "time": (seconds, time_text),
        "method": method,
        "path": path,
        "protocol": protocol,
        "request": request,
        "status": int(status_text),
        "bytes": None if bytes_text == "-" else int(bytes_text),
        "referer": _dash(referer) if referer is not None else None,
        "user_agent": _dash(agent) if agent is not None else None,
    }


def _value(record, name, t):
    """The value of column `name` of type `t` from a parsed record."""
    if name == "time":
        seconds, text = record["time"]
        if t == arrow_ipc.UTF8:
            return text
        if t == arrow_ipc.DATE32:
            return seconds // 86400
        return seconds
    return record[name]


def _read_range(path, start, length):
    """`(offset, line bytes)` of the lines that start in `[start, start + length)` of `path`."""
    end = start + length
    lines = []
    with open(path, "rb") as f:
        pos = start
        if start > 0:
            # The line holding byte start-1 belongs to the split before.
            f.seek(start - 1)
            pos = start - 1 + len(f.readline(MAX_LINE_BYTES + 1))
        else:
            f.seek(0)
        while pos < end:
            line = f.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            if len(line) > MAX_LINE_BYTES:
                raise BadLine(f"the line at byte {pos} is longer than {MAX_LINE_BYTES} bytes")
            lines.append((pos, line))
            pos += len(line)
    return lines


def _inline_lines(text):
    data = text.encode("utf-8")
    out = []
    pos = 0
    for line in data.splitlines(keepends=True):
        out.append((pos, line))
        pos += len(line)
    return out


class SplitReader(wit_world.exports.source_reader.SplitReader):
    """The reading of one split: its lines, read at `open`, parsed a batch at a time."""

    def __init__(self, where, lines):
        self.where = where
        self.lines = lines
        self.at = 0

    @classmethod
    def open(cls, split):
        if _declared is None:
            raise Err(Error_Other("`open` before `configure`"))
        payload = split.payload
        if isinstance(payload, SplitPayload_FileRange):
            r = payload.value
            where = f"split `{split.id}` ({r.path})"
            try:
                lines = _read_range(r.path, r.start, r.length)
            except BadLine as e:
                raise Err(Error_InvalidSplit(f"{where}: {e}"))
            except OSError as e:
                raise Err(Error_Io(f"{where}: cannot read {r.path}: {e}"))
        elif isinstance(payload, SplitPayload_Inline):
            where = f"split `{split.id}` (inline)"
            lines = _inline_lines(payload.value)
        else:
            raise Err(Error_InvalidSplit(f"split `{split.id}`: a payload this reader does not take"))
        return cls(where, lines)

    def next_batch(self):
        columns = [[] for _ in _declared]
        rows = 0
        while self.at < len(self.lines) and rows < BATCH_ROWS:
            offset, raw = self.lines[self.at]
            self.at += 1
            raw = raw.rstrip(b"\n").rstrip(b"\r")
            if not raw:
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise Err(Error_InvalidSplit(f"{self.where}, line at byte {offset}: not UTF-8 text"))
            try:
                record = parse_line(line)
            except BadLine as e:
                shown = line if len(line) <= 120 else line[:120] + "..."
                raise Err(Error_InvalidSplit(
                    f"{self.where}, line at byte {offset}: not a Common Log Format line ({e}): {shown!r}"))
            for values, (name, t) in zip(columns, _declared):
                values.append(_value(record, name, t))
            rows += 1
        if rows == 0:
            return None
        try:
            return arrow_ipc.write_batch([(n, t, v) for (n, t), v in zip(_declared, columns)])
        except (ValueError, OverflowError) as e:
            raise Err(Error_Other(f"{self.where}: cannot encode a batch: {e}"))
