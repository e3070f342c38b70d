"""The `enumerator` resource of `{{name}}` (world `split-enumerator-plugin`, `wit/types.wit`).

It hands out numbered lines (`line-1`, `line-2`, ...) in `inline` splits and supports batch
snapshots. Config keys (the `config` table of the plugin's entry in the job file):

* `lines`: number of lines, default 10;
* `lines-per-split`: lines in one split, default 3.

Split `split-<i>` holds lines `i * lines-per-split + 1` onwards. The host keeps the history of
which split went to which reader; this plugin keeps (and snapshots) only the splits not yet
handed out.

Snapshot format, version 1: the text `v1`, then one line per unassigned split id, in hand-out
order. A new layout gets a new version, and `restore` keeps reading the old ones.

Expected failures are raised as `componentize_py_types.Err(<error variant>)`, which the
bindings turn into the `err` case of the WIT `result`; any other exception traps.
"""

from typing import List, Optional, Tuple

import wit_world.exports.split_enumerator
from componentize_py_types import Err
from wit_world.imports import enumerator_context, host_log
from wit_world.imports.types import (
    Error_CorruptSnapshot,
    Error_InvalidConfig,
    Error_InvalidState,
    LogLevel,
    Split,
    SplitPayload_Inline,
)

#: The first line of every snapshot this code writes.
SNAPSHOT_V1 = "v1"


def _number(values: dict, key: str, default: int) -> int:
    """A positive whole number from the config; raises `Err(Error_InvalidConfig)` naming `key`."""
    raw = values.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        value = 0
    if value <= 0:
        raise Err(Error_InvalidConfig(f"{key}: {raw!r} is not a positive whole number"))
    return value


def all_splits(config: List[Tuple[str, str]]) -> List[Split]:
    """Every split, in order: what a fresh enumerator discovers."""
    values = dict(config)
    lines = _number(values, "lines", 10)
    per_split = _number(values, "lines-per-split", 3)
    splits = []
    for index, first in enumerate(range(1, lines + 1, per_split)):
        last = min(first + per_split - 1, lines)
        text = "\n".join(f"line-{n}" for n in range(first, last + 1))
        splits.append(Split(f"split-{index}", SplitPayload_Inline(text)))
    return splits


class Enumerator(wit_world.exports.split_enumerator.Enumerator):
    """One enumerator; the host creates one per source job vertex."""

    def __init__(self, splits: List[Split], unassigned: List[Split], restored: bool) -> None:
        self.splits = splits
        #: Splits not handed out yet: the only state a snapshot keeps.
        self.unassigned = unassigned
        #: Restored from a snapshot: `start` must not discover splits again.
        self.restored = restored
        self.started = False

    @classmethod
    def create(cls, config: List[Tuple[str, str]], parallelism: int) -> "Enumerator":
        """A fresh enumerator; raises `Err(Error_InvalidConfig)` on a bad config."""
        return cls(all_splits(config), [], False)

    @classmethod
    def restore(cls, config: List[Tuple[str, str]], parallelism: int, snapshot: bytes) -> "Enumerator":
        """An enumerator from `snapshot-state` bytes; bad bytes raise `Err(Error_CorruptSnapshot)`."""
        splits = all_splits(config)
        by_id = {split.id: split for split in splits}
        try:
            lines = bytes(snapshot).decode("utf-8").split("\n")
        except UnicodeDecodeError:
            raise Err(Error_CorruptSnapshot("{{name}} snapshot: not UTF-8"))
        if lines[0] != SNAPSHOT_V1:
            raise Err(Error_CorruptSnapshot(f"{{name}} snapshot: unknown version {lines[0]!r}"))
        unassigned = []
        for split_id in lines[1:]:
            if split_id not in by_id:
                raise Err(Error_CorruptSnapshot(f"{{name}} snapshot: unknown split {split_id!r}"))
            unassigned.append(by_id[split_id])
        return cls(splits, unassigned, True)

    def start(self) -> None:
        """Discovers the splits, unless restored: a snapshot already says what is left."""
        if self.started:
            raise Err(Error_InvalidState("start was already called"))
        self.started = True
        if not self.restored:
            self.unassigned = list(self.splits)
        host_log.log(LogLevel.INFO, f"{len(self.unassigned)} splits to hand out")

    def handle_split_request(self, subtask: int, hostname: Optional[str]) -> None:
        """Assigns the next split to `subtask`, or says that none is left."""
        if self.unassigned:
            enumerator_context.assign_splits([(subtask, [self.unassigned.pop(0)])])
        else:
            enumerator_context.signal_no_more_splits(subtask)

    def add_splits_back(self, splits: List[Split], subtask: int) -> None:
        """A reset subtask's splits come first, in the order given."""
        self.unassigned[0:0] = list(splits)

    def add_reader(self, subtask: int) -> None:
        """Nothing to do: splits are handed out on request."""

    @classmethod
    def supports_batch_snapshot(cls) -> bool:
        """Yes: the state is the list of unassigned split ids."""
        return True

    def snapshot_state(self, checkpoint_id: int) -> bytes:
        """`v1`, then the unassigned split ids, one a line."""
        return "\n".join([SNAPSHOT_V1] + [split.id for split in self.unassigned]).encode("utf-8")

    def unassigned_splits(self) -> int:
        """How many splits are not handed out yet."""
        return len(self.unassigned)
