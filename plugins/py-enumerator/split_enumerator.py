"""The `enumerator` resource of `coordhost:plugin/split-enumerator@0.1.3`, in Python.

A split enumerator over the files of one directory, with the same behaviour as the Rust
`file-enumerator` sample (Flink's `SplitEnumerator` with FLIP-383's `SupportsBatchSnapshot`):

* config keys: `dir` (absolute path; the host grants it to the guest at the same path),
  `split-bytes` (positive integer, default 1048576), `pattern` (optional file-name suffix);
  any other key is refused (`invalid-config` naming it);
* `start` lists `dir` (non-recursive, regular files only, hidden files skipped, sorted by name)
  and cuts every file into `file-range` splits of at most `split-bytes` bytes, with ids
  `"<file name>:<index>"`; an empty file gives no split;
* `start` is called once (a second call is `invalid-state`), before any split request;
* `handle-split-request` hands ONE split to the asking subtask, or signals "no more splits";
  a subtask index beyond the parallelism is `invalid-state` (also in `add-reader`);
* `add-splits-back` puts the returned splits at the front of the queue, in the given order;
* the batch snapshot is the unassigned queue plus a "started" flag, as JSON (format below).

Snapshot format (UTF-8 JSON object; the same in the JavaScript sample):

    {"format": "coordhost-file-enumerator", "version": 1, "started": true,
     "queue": [{"id": "a.txt:0", "file-range": {"path": "/d/a.txt", "start": 0, "length": 10}},
               {"id": "x", "inline": "line 1\\nline 2"}]}

Expected failures are raised as `componentize_py_types.Err(<error variant>)`, which the
bindings turn into the `err` case of the WIT `result`; any other exception would trap.
"""

import json
import os
from typing import List, Optional, Tuple

import wit_world.exports.split_enumerator
from componentize_py_types import Err
from wit_world.imports import enumerator_context, host_log
from wit_world.imports.types import (
    Error_CorruptSnapshot,
    Error_InvalidConfig,
    Error_InvalidState,
    Error_Io,
    FileRange,
    LogLevel,
    Split,
    SplitPayload_FileRange,
    SplitPayload_Inline,
)

#: Default size of one split in bytes (1 MiB), as in the Rust `file-enumerator`.
DEFAULT_SPLIT_BYTES = 1048576
#: Value of the snapshot's `format` field.
SNAPSHOT_FORMAT = "coordhost-file-enumerator"
#: Version of the snapshot layout this code writes and reads.
SNAPSHOT_VERSION = 1


class Settings:
    """The parsed configuration: directory, split size and optional file-name suffix."""

    def __init__(self, config: List[Tuple[str, str]]) -> None:
        """Parses the `config` map; raises `Err(Error_InvalidConfig)` naming the bad key."""
        _only_keys(config, ("dir", "split-bytes", "pattern"))
        values = dict(config)
        directory = values.get("dir")
        if directory is None or directory == "":
            raise Err(Error_InvalidConfig("dir: missing; set it to an absolute directory path"))
        if not directory.startswith("/"):
            raise Err(Error_InvalidConfig(f"dir: {directory!r} is not an absolute path"))
        raw_bytes = values.get("split-bytes", str(DEFAULT_SPLIT_BYTES))
        try:
            split_bytes = int(raw_bytes.strip(), 10)
        except ValueError:
            split_bytes = 0
        if split_bytes <= 0 or split_bytes >= 2**64:
            raise Err(Error_InvalidConfig(f"split-bytes: {raw_bytes!r} is not a positive integer"))
        self.directory: str = directory.rstrip("/") or "/"
        self.split_bytes: int = split_bytes
        self.pattern: Optional[str] = values.get("pattern")


def _only_keys(config: List[Tuple[str, str]], known: Tuple[str, ...]) -> None:
    """Raises `Err(Error_InvalidConfig)` naming the first key not in `known` (a misspelt key
    would otherwise be ignored and its default used without a word)."""
    for key, _ in config:
        if key not in known:
            raise Err(Error_InvalidConfig(
                f"unknown config key `{key}` (this plugin reads: {', '.join(known)})"))


def _log(level: LogLevel, message: str) -> None:
    """Writes one line into the host's log."""
    host_log.log(level, message)


def split_to_json(split: Split) -> dict:
    """Encodes one split as a JSON object (see the module doc)."""
    payload = split.payload
    if isinstance(payload, SplitPayload_FileRange):
        rng = payload.value
        return {"id": split.id, "file-range": {"path": rng.path, "start": rng.start, "length": rng.length}}
    return {"id": split.id, "inline": payload.value}


def _is_u64(value: object) -> bool:
    """Whether `value` is a JSON integer that fits a WIT `u64` (bools excluded)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


def split_from_json(obj: object) -> Split:
    """Decodes one split; raises `ValueError` when `obj` does not have the expected shape."""
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise ValueError("a split needs a string `id`")
    if "file-range" in obj:
        rng = obj["file-range"]
        if (
            not isinstance(rng, dict)
            or not isinstance(rng.get("path"), str)
            or not _is_u64(rng.get("start"))
            or not _is_u64(rng.get("length"))
        ):
            raise ValueError(f"split {obj['id']!r}: bad `file-range`")
        return Split(obj["id"], SplitPayload_FileRange(FileRange(rng["path"], rng["start"], rng["length"])))
    if isinstance(obj.get("inline"), str):
        return Split(obj["id"], SplitPayload_Inline(obj["inline"]))
    raise ValueError(f"split {obj['id']!r}: needs `file-range` or `inline`")


def list_splits(settings: Settings) -> List[Split]:
    """Lists the directory and cuts its files into splits; raises `Err(Error_Io)` on failure."""
    try:
        with os.scandir(settings.directory) as entries:
            files = []
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if settings.pattern is not None and not entry.name.endswith(settings.pattern):
                    continue
                if entry.is_file(follow_symlinks=True):
                    files.append((entry.name, entry.stat(follow_symlinks=True).st_size))
    except OSError as error:
        raise Err(Error_Io(f"cannot list directory {settings.directory}: {error.strerror or error}"))
    splits = []
    prefix = settings.directory if settings.directory.endswith("/") else settings.directory + "/"
    for name, size in sorted(files):
        for index, start in enumerate(range(0, size, settings.split_bytes)):
            length = min(settings.split_bytes, size - start)
            splits.append(Split(f"{name}:{index}", SplitPayload_FileRange(FileRange(prefix + name, start, length))))
    return splits


class Enumerator(wit_world.exports.split_enumerator.Enumerator):
    """One enumerator: the queue of unassigned splits and whether the directory was listed."""

    def __init__(self, settings: Settings, parallelism: int, queue: List[Split], started: bool) -> None:
        """Builds an enumerator from parsed settings and an initial state."""
        self.settings = settings
        self.parallelism = parallelism
        self.queue = queue
        self.started = started
        #: Whether `start` was called on this instance (not part of snapshots).
        self.start_called = False

    @classmethod
    def create(cls, config: List[Tuple[str, str]], parallelism: int) -> "Enumerator":
        """A fresh enumerator; raises `Err(Error_InvalidConfig)` on a bad config."""
        return cls(Settings(config), parallelism, [], False)

    @classmethod
    def restore(cls, config: List[Tuple[str, str]], parallelism: int, snapshot: bytes) -> "Enumerator":
        """An enumerator from `snapshot-state` bytes; bad bytes raise `Err(Error_CorruptSnapshot)`."""
        settings = Settings(config)
        try:
            state = json.loads(bytes(snapshot).decode("utf-8"))
            if not isinstance(state, dict) or state.get("format") != SNAPSHOT_FORMAT:
                raise ValueError(f"not a {SNAPSHOT_FORMAT} snapshot")
            if state.get("version") != SNAPSHOT_VERSION:
                raise ValueError(f"version {state.get('version')!r} is not {SNAPSHOT_VERSION}")
            if not isinstance(state.get("started"), bool) or not isinstance(state.get("queue"), list):
                raise ValueError("needs a boolean `started` and a list `queue`")
            queue = [split_from_json(item) for item in state["queue"]]
        except (UnicodeDecodeError, ValueError) as error:
            raise Err(Error_CorruptSnapshot(f"enumerator snapshot: {error}"))
        return cls(settings, parallelism, queue, state["started"])

    def start(self) -> None:
        """Lists the directory, unless this enumerator was already started before a snapshot.

        A second call raises `Err(Error_InvalidState)`; listing failures raise `Err(Error_Io)`.
        """
        if self.start_called:
            raise Err(Error_InvalidState("start was already called"))
        self.start_called = True
        if self.started:
            _log(LogLevel.INFO, f"restored with {len(self.queue)} unassigned splits; not listing again")
            return
        self.queue = list_splits(self.settings)
        self.started = True
        _log(LogLevel.INFO, f"listed {self.settings.directory}: {len(self.queue)} splits")

    def _check_subtask(self, subtask: int) -> None:
        """Raises `Err(Error_InvalidState)` for a subtask index beyond the parallelism."""
        if subtask >= self.parallelism:
            raise Err(Error_InvalidState(f"subtask {subtask} is beyond the parallelism {self.parallelism}"))

    def handle_split_request(self, subtask: int, hostname: Optional[str]) -> None:
        """Assigns the first unassigned split to `subtask`, or says that none is left."""
        self._check_subtask(subtask)
        if not self.start_called:
            raise Err(Error_InvalidState("split requested before start"))
        if self.queue:
            split = self.queue.pop(0)
            enumerator_context.assign_splits([(subtask, [split])])
        else:
            enumerator_context.signal_no_more_splits(subtask)

    def add_splits_back(self, splits: List[Split], subtask: int) -> None:
        """Puts `splits` back at the front of the queue, keeping their order."""
        self.queue[0:0] = list(splits)
        _log(LogLevel.DEBUG, f"{len(splits)} splits came back from subtask {subtask}")

    def add_reader(self, subtask: int) -> None:
        """Only checks the subtask index: splits are handed out on request."""
        self._check_subtask(subtask)

    @classmethod
    def supports_batch_snapshot(cls) -> bool:
        """The state is small and self-contained, so batch snapshots are supported."""
        return True

    def snapshot_state(self, checkpoint_id: int) -> bytes:
        """Encodes the queue and the started flag as JSON (see the module doc)."""
        state = {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "started": self.started,
            "queue": [split_to_json(split) for split in self.queue],
        }
        return json.dumps(state, separators=(",", ":")).encode("utf-8")

    def unassigned_splits(self) -> int:
        """Length of the queue."""
        return len(self.queue)
