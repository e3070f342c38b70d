"""The `shuffle-master` resource of `{{name}}` (world `shuffle-master-plugin`, `wit/types.wit`).

It keeps result partitions as folders under one root and supports batch snapshots.

Config key `root`: an absolute folder, granted writable to the plugin in the job file
(`dirs = [{ path = "...", writable = true }]`). Partition `<data set>/<vertex>-<subtask>-<attempt>`
of job `J` lives in `<root>/<J>/<data set>/<vertex>-<subtask>-<attempt>` (characters other than
`[A-Za-z0-9._-]` become `_`). The host writes `data` there, then `index` (coordhost's
docs/shuffle-format.md); a partition is reported only once `index` exists, checks out and
records `data`'s length, with the bytes of each subpartition taken from it.

Snapshot format, version 1: the text `v1`, then one line per partition, tab-separated: data
set, vertex, subtask, attempt, subpartitions, location. Every snapshot is full
(`incremental = False`); a plugin with many partitions may send only what is new after a first
full one.

Expected failures are raised as `componentize_py_types.Err(<error variant>)`.
"""

import os
import re
import shutil
import struct
from typing import List, Optional, Tuple

import wit_world.exports.shuffle_master
from componentize_py_types import Err
from wit_world.imports import host_log
from wit_world.imports.types import (
    Error_CorruptSnapshot,
    Error_InvalidConfig,
    Error_Io,
    ExecutionAttemptId,
    LogLevel,
    PartitionDescriptor,
    PartitionWithMetrics,
    ProducerDescriptor,
    ResultPartitionId,
    ShuffleDescriptor,
    ShuffleMasterSnapshot,
)

#: The first line of every snapshot this code writes.
SNAPSHOT_V1 = "v1"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe(component: str) -> str:
    """One path component, reduced to `[A-Za-z0-9._-]` so it can neither climb nor nest."""
    cleaned = _UNSAFE.sub("_", component)
    if cleaned.strip(".") == "":
        return "_" * max(len(cleaned), 1)
    return cleaned


def key(partition: ResultPartitionId) -> Tuple[str, str, int, int]:
    """A partition's identity, comparable."""
    p = partition.producer
    return (partition.intermediate_data_set, p.job_vertex, p.subtask, p.attempt)


def make_dirs(path: str) -> None:
    """`mkdir -p` that starts at `path`: under WASI the parents of a granted folder are not visible."""
    try:
        os.mkdir(path)
    except FileExistsError:
        return
    except FileNotFoundError:
        make_dirs(os.path.dirname(path))
        os.mkdir(path)



def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli), the checksum of a partition's index."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def partition_sizes(location: str, num_subpartitions: int, producer: tuple) -> Optional[List[int]]:
    """The bytes of each subpartition from `<location>/index` (magic `CHSHUFX1`, version 2,
    subpartition count, length of `data`, region count, the producer it names, regions of
    (subpartition, offset, length, records, header CRC32C) entries, CRC32C); `None` when the
    index is missing or damaged, names another producer than `producer` (job, intermediate
    data set, job vertex, subtask, attempt), or `data` has another length."""
    try:
        with open(f"{location}/index", "rb") as f:
            raw = f.read()
        data = os.stat(f"{location}/data").st_size
    except OSError:
        return None
    body = raw[:-4]
    if len(raw) < 32 or crc32c(body) != struct.unpack_from("<I", raw, len(body))[0]:
        return None
    version, count, data_len, regions = struct.unpack_from("<IIQI", body, 8)
    if body[:8] != b"CHSHUFX1" or version != 2 or count != num_subpartitions:
        return None
    sizes, at, following = [0] * count, 28, 0
    try:
        names = []
        for _ in range(3):
            (length,) = struct.unpack_from("<I", body, at)
            names.append(body[at + 4 : at + 4 + length].decode("utf-8", "replace"))
            at += 4 + length
        subtask, attempt = struct.unpack_from("<II", body, at)
        at += 8
        # Another producer's partition copied to this place is not this one.
        if (names[0], names[1], names[2], subtask, attempt) != producer:
            return None
        for _ in range(regions):
            (entries,) = struct.unpack_from("<I", body, at)
            at += 4
            for _ in range(entries):
                # Records and the header checksum are the host's to check.
                sub, offset, length, _records, _crc = struct.unpack_from("<IQQQI", body, at)
                at += 32
                if sub >= count or offset != following or length == 0:
                    return None
                following = offset + length
                sizes[sub] += length
    except struct.error:
        return None
    ok = at == len(body) and following == data_len == data
    return sizes if ok else None

class ShuffleMaster(wit_world.exports.shuffle_master.ShuffleMaster):
    """One shuffle master; the host creates one per job."""

    def __init__(self, root: str) -> None:
        self.root = root
        #: Every partition registered (or restored) and not released, by `key`.
        self.partitions = {}

    @classmethod
    def create(cls, config: List[Tuple[str, str]]) -> "ShuffleMaster":
        """Needs `root`, an absolute folder; raises `Err(Error_InvalidConfig)` naming it."""
        root = dict(config).get("root")
        if not root:
            raise Err(Error_InvalidConfig("root: missing; set an absolute folder"))
        if not root.startswith("/"):
            raise Err(Error_InvalidConfig(f"root: {root!r} is not an absolute path"))
        return cls(root.rstrip("/"))

    def register_job(self, job_id: str) -> None:
        host_log.log(LogLevel.INFO, f"job {job_id} registered")

    def register_partition_with_producer(
        self, job_id: str, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        """Makes the partition's folder and answers where it is."""
        p = partition.id.producer
        location = "/".join([
            self.root, safe(job_id), safe(partition.id.intermediate_data_set),
            f"{safe(p.job_vertex)}-{p.subtask}-{p.attempt}",
        ])
        try:
            make_dirs(location)
        except OSError as error:
            raise Err(Error_Io(f"cannot create {location}: {error.strerror or error}"))
        descriptor = ShuffleDescriptor(partition.id, location, partition.num_subpartitions)
        self.partitions[key(partition.id)] = descriptor
        return descriptor

    def release_partition_externally(self, descriptor: ShuffleDescriptor) -> None:
        """Forgets the partition and deletes its folder (only under the root)."""
        self.partitions.pop(key(descriptor.id), None)
        if descriptor.location.startswith(self.root + "/"):
            shutil.rmtree(descriptor.location, ignore_errors=True)

    @classmethod
    def supports_batch_snapshot(cls) -> bool:
        return True

    def snapshot_state(self, job_id: str) -> ShuffleMasterSnapshot:
        """A full snapshot of every known partition."""
        lines = [SNAPSHOT_V1]
        for d in self.partitions.values():
            p = d.id.producer
            fields = [d.id.intermediate_data_set, p.job_vertex, str(p.subtask), str(p.attempt),
                      str(d.num_subpartitions), d.location]
            lines.append("\t".join(fields))
        return ShuffleMasterSnapshot(False, "\n".join(lines).encode("utf-8"))

    def restore_state(self, snapshots: List[ShuffleMasterSnapshot]) -> None:
        """A full snapshot replaces what is known; an incremental one adds to it."""
        for snapshot in snapshots:
            if not snapshot.incremental:
                self.partitions = {}
            try:
                lines = bytes(snapshot.data).decode("utf-8").split("\n")
            except UnicodeDecodeError:
                raise Err(Error_CorruptSnapshot("{{name}} snapshot: not UTF-8"))
            if lines[0] != SNAPSHOT_V1:
                raise Err(Error_CorruptSnapshot(f"{{name}} snapshot: unknown version {lines[0]!r}"))
            for line in lines[1:]:
                fields = line.split("\t")
                try:
                    data_set, vertex, subtask, attempt, subpartitions, location = fields
                    attempt_id = ExecutionAttemptId(vertex, int(subtask), int(attempt))
                    descriptor = ShuffleDescriptor(
                        ResultPartitionId(data_set, attempt_id), location, int(subpartitions)
                    )
                except ValueError:
                    raise Err(Error_CorruptSnapshot(f"{{name}} snapshot: bad line {line!r}"))
                self.partitions[key(descriptor.id)] = descriptor

    def notify_partition_recovery_started(self, job_id: str) -> None:
        """Nothing to do: partitions are looked up when asked for."""

    def get_partitions_with_metrics(
        self, job_id: str, expected: List[ResultPartitionId], remaining_ms: int
    ) -> List[PartitionWithMetrics]:
        """The expected partitions that are complete, with their sizes; answers at once."""
        found = []
        for partition in expected:
            d = self.partitions.get(key(partition))
            producer = (job_id,) + key(partition)
            sizes = None if d is None else partition_sizes(d.location, d.num_subpartitions, producer)
            if sizes is not None:
                found.append(PartitionWithMetrics(d, sizes))
        return found

    def unregister_job(self, job_id: str) -> None:
        self.partitions = {}
