"""The `shuffle-master` resource of `coordhost:plugin/shuffle-master@0.1.3`, in Python.

A shuffle master that keeps partitions as directories under one local root, with the same
behaviour as the Rust `local-shuffle` sample (Flink's `ShuffleMaster` with FLIP-383's
`getPartitionWithMetrics` and batch snapshots):

* config key `root`: an absolute directory, granted read-write to the guest at the same path
  (any other key is refused, `invalid-config` naming it);
  `create` makes it if missing (an `io` error if it was not granted);
* a job must be registered (`register-job`, or restored) before its partitions are;
* a partition lives at `<root>/<job-id>/<intermediate-data-set>/<job-vertex>-<subtask>-<attempt>`,
  every path component reduced to `[A-Za-z0-9._-]` (any other character becomes `_`; a
  component that is empty or only dots has each character, or the empty name, made `_`);
  `register-partition-with-producer` creates that directory; the host writes
  `<location>/data` and finally `<location>/index` (docs/shuffle-format.md);
* `get-partitions-with-metrics` answers at once, never sleeping: an expected partition is
  reported when its descriptor is known and its `index` exists, with the bytes of every
  subpartition read from the index; one whose index is damaged or whose `data` is missing or
  has another length than the index records is left out, with a warning;
* with worker processes (`job-shuffle-context.reported-partitions` answers a list, WIT
  0.1.1), `get-partitions-with-metrics` answers from the workers' reports instead of files:
  an expected partition is reported when a worker holds it at the place this plugin chose
  (relative to its grant) with one size per subpartition;
* `release-partition-externally` deletes the directory, only if it lies strictly under the root;
* snapshots are per job: the first one (and the first after a restore) is full, later ones
  are incremental and hold only the descriptors registered since the previous snapshot;
  `restore-state` needs a full snapshot first.

Snapshot data (UTF-8 JSON object):

    {"format": "coordhost-local-shuffle", "version": 1, "job-id": "j1",
     "partitions": [{"intermediate-data-set": "ds", "job-vertex": "map", "subtask": 0,
                     "attempt": 0, "location": "/root/j1/ds/map-0-0", "num-subpartitions": 2}]}

Expected failures are raised as `componentize_py_types.Err(<error variant>)`.
"""

import json
import os
import re
import struct
from typing import Dict, List, Optional, Tuple

import wit_world.exports.shuffle_master
from componentize_py_types import Err
from wit_world.imports import host_log, job_shuffle_context
from wit_world.imports.types import (
    Error_CorruptSnapshot,
    Error_InvalidConfig,
    Error_InvalidState,
    Error_Io,
    ExecutionAttemptId,
    LogLevel,
    PartitionDescriptor,
    PartitionWithMetrics,
    ProducerDescriptor,
    ReportedPartition,
    ResultPartitionId,
    ShuffleDescriptor,
    ShuffleMasterSnapshot,
)

#: Value of the snapshot's `format` field.
SNAPSHOT_FORMAT = "coordhost-local-shuffle"
#: Version of the snapshot layout this code writes and reads.
SNAPSHOT_VERSION = 1
#: Name of the file holding the blocks of every subpartition of a partition.
DATA_FILE = "data"
#: Name of the index the host creates once `data` is durable: its existence means "complete".
INDEX_FILE = "index"
#: First 8 bytes of an index.
INDEX_MAGIC = b"CHSHUFX1"
#: Index format version this code reads (version 1 names no producer and is refused: its
#: producer runs again and writes version 2).
INDEX_VERSION = 2
#: Longest producer name an index may hold, bytes.
MAX_NAME_BYTES = 4096

#: Key of a partition inside one job: (intermediate data set, job vertex, subtask, attempt).
PartitionKey = Tuple[str, str, int, int]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def sanitize(component: str) -> str:
    """Reduces one path component to `[A-Za-z0-9._-]` so it can neither escape nor nest."""
    if component == "":
        return "_"
    if component.strip(".") == "":
        return "_" * len(component)
    return _UNSAFE.sub("_", component)


def _crc32c_table() -> List[int]:
    """The byte table of CRC32C (Castagnoli, reflected polynomial 0x82F63B78)."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC32C of `data`, the checksum of the index and of every block."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def parse_index(data: bytes, num_subpartitions: int) -> Tuple[int, List[int], Tuple[str, str, str, int, int]]:
    """Parses an index (docs/shuffle-format.md, version 2): the length `data` must have, the
    bytes of each subpartition and the producer it names (job, intermediate data set, job
    vertex, subtask, attempt). Raises `ValueError` saying what is wrong (checksum, magic,
    version, subpartition count, producer names, entries that do not tile `data` in order)."""
    if len(data) < 32:
        raise ValueError("it is shorter than its header")
    body = data[:-4]
    if crc32c(body) != struct.unpack_from("<I", data, len(body))[0]:
        raise ValueError("its checksum (CRC32C) does not match")
    if body[:8] != INDEX_MAGIC:
        raise ValueError("it is not an index (bad magic)")
    version, count, data_len, regions = struct.unpack_from("<IIQI", body, 8)
    if version != INDEX_VERSION:
        raise ValueError(f"its format version {version} is not {INDEX_VERSION}")
    if count != num_subpartitions:
        raise ValueError(f"it counts {count} subpartitions, the descriptor {num_subpartitions}")
    at = 28
    sizes = [0] * count
    following = 0
    try:
        names = []
        for _ in range(3):
            (length,) = struct.unpack_from("<I", body, at)
            if length > MAX_NAME_BYTES or at + 4 + length > len(body):
                raise ValueError(f"its producer name at byte {at} is too long")
            try:
                names.append(body[at + 4 : at + 4 + length].decode("utf-8"))
            except UnicodeDecodeError:
                raise ValueError(f"its producer name at byte {at} is not UTF-8")
            at += 4 + length
        subtask, attempt = struct.unpack_from("<II", body, at)
        at += 8
        producer = (names[0], names[1], names[2], subtask, attempt)
        for _ in range(regions):
            (entries,) = struct.unpack_from("<I", body, at)
            at += 4
            last = -1
            for _ in range(entries):
                # Records and the header checksum are the consumer's to check.
                sub, offset, length, _records, _crc = struct.unpack_from("<IQQQI", body, at)
                if sub >= count or sub <= last or length == 0 or offset != following:
                    raise ValueError(f"its entry at byte {at} is out of order")
                at += 32
                last = sub
                following = offset + length
                sizes[sub] += length
    except struct.error:
        raise ValueError(f"it ends early at byte {at}")
    if at != len(body) or following != data_len:
        raise ValueError("its entries do not cover the data file")
    return data_len, sizes, producer


def partition_key(partition: ResultPartitionId) -> PartitionKey:
    """The dictionary key of a partition within its job."""
    producer = partition.producer
    return (partition.intermediate_data_set, producer.job_vertex, producer.subtask, producer.attempt)


def descriptor_to_json(descriptor: ShuffleDescriptor) -> dict:
    """Encodes one shuffle descriptor (see the module doc)."""
    partition = descriptor.id
    return {
        "intermediate-data-set": partition.intermediate_data_set,
        "job-vertex": partition.producer.job_vertex,
        "subtask": partition.producer.subtask,
        "attempt": partition.producer.attempt,
        "location": descriptor.location,
        "num-subpartitions": descriptor.num_subpartitions,
    }


def _is_u32(value: object) -> bool:
    """Whether `value` is a JSON integer that fits a WIT `u32` (bools excluded)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32


def descriptor_from_json(obj: object) -> ShuffleDescriptor:
    """Decodes one shuffle descriptor; raises `ValueError` on a bad shape."""
    if not isinstance(obj, dict):
        raise ValueError("a partition must be an object")
    for key in ("intermediate-data-set", "job-vertex", "location"):
        if not isinstance(obj.get(key), str):
            raise ValueError(f"partition field `{key}` must be a string")
    for key in ("subtask", "attempt", "num-subpartitions"):
        if not _is_u32(obj.get(key)):
            raise ValueError(f"partition field `{key}` must be a u32")
    attempt = ExecutionAttemptId(obj["job-vertex"], obj["subtask"], obj["attempt"])
    partition = ResultPartitionId(obj["intermediate-data-set"], attempt)
    return ShuffleDescriptor(partition, obj["location"], obj["num-subpartitions"])


def decode_snapshot(snapshot: ShuffleMasterSnapshot) -> Tuple[str, List[ShuffleDescriptor]]:
    """Decodes the data of one snapshot into its job id and descriptors; `ValueError` if bad."""
    try:
        state = json.loads(bytes(snapshot.data).decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8: {error}")
    if not isinstance(state, dict) or state.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"not a {SNAPSHOT_FORMAT} snapshot")
    if state.get("version") != SNAPSHOT_VERSION:
        raise ValueError(f"version {state.get('version')!r} is not {SNAPSHOT_VERSION}")
    if not isinstance(state.get("job-id"), str) or not isinstance(state.get("partitions"), list):
        raise ValueError("needs a string `job-id` and a list `partitions`")
    return state["job-id"], [descriptor_from_json(item) for item in state["partitions"]]


def make_dirs(path: str) -> None:
    """Creates directory `path` and any missing parents, like `mkdir -p`.

    Unlike `os.makedirs` it starts at `path` itself and climbs only while a parent is
    missing: under WASI the ancestors of a granted directory are not visible at all, so
    `os.makedirs` (which first looks at the parents) would try to create `/tmp` and fail.
    """
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if parent == path:
            raise
        make_dirs(parent)
        try:
            os.mkdir(path)
        except FileExistsError:
            pass


def remove_tree(path: str) -> None:
    """Deletes `path` and everything below it, without following symbolic links."""
    if os.path.islink(path) or not os.path.isdir(path):
        os.remove(path)
        return
    with os.scandir(path) as entries:
        children = [entry.path for entry in entries]
    for child in children:
        remove_tree(child)
    os.rmdir(path)


class JobState:
    """What the shuffle master knows of one job."""

    def __init__(self) -> None:
        """An empty job: no partitions, never snapshotted."""
        #: Every known partition of the job, by key, in registration order.
        self.partitions: Dict[PartitionKey, ShuffleDescriptor] = {}
        #: Keys registered since the last snapshot (what the next incremental one holds).
        self.pending: List[PartitionKey] = []
        #: Whether a snapshot was taken (or restored), so that the next one may be incremental.
        self.snapshotted = False


class ShuffleMaster(wit_world.exports.shuffle_master.ShuffleMaster):
    """One shuffle master: the root directory and the known partitions of each job."""

    def __init__(self, root: str) -> None:
        """A shuffle master over `root` (absolute, without a trailing slash)."""
        self.root = root
        self.jobs: Dict[str, JobState] = {}

    @classmethod
    def create(cls, config: List[Tuple[str, str]]) -> "ShuffleMaster":
        """Parses `root`; raises `Err(Error_InvalidConfig)` if it is missing or relative."""
        for key, _ in config:
            if key != "root":
                raise Err(Error_InvalidConfig(f"unknown config key `{key}` (this plugin reads: root)"))
        root = dict(config).get("root")
        if root is None or root == "":
            raise Err(Error_InvalidConfig("root: missing; set it to an absolute directory path"))
        if not root.startswith("/"):
            raise Err(Error_InvalidConfig(f"root: {root!r} is not an absolute path"))
        root = root.rstrip("/") or "/"
        try:
            make_dirs(root)
        except OSError as error:
            raise Err(Error_Io(f"cannot create shuffle root {root}: {error.strerror or error}"))
        return cls(root)

    def _job(self, job_id: str) -> JobState:
        """The state of a registered job; raises `Err(Error_InvalidState)` for an unknown one."""
        job = self.jobs.get(job_id)
        if job is None:
            raise Err(Error_InvalidState(f"job {job_id} is not registered"))
        return job

    def register_job(self, job_id: str) -> None:
        """Starts tracking `job_id`; registering a known job again keeps its partitions."""
        self.jobs.setdefault(job_id, JobState())

    def register_partition_with_producer(
        self, job_id: str, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        """Names the partition's directory under the root, creates it and remembers it."""
        job = self._job(job_id)
        attempt = partition.id.producer
        leaf = f"{sanitize(attempt.job_vertex)}-{attempt.subtask}-{attempt.attempt}"
        parts = [self.root.rstrip("/"), sanitize(job_id), sanitize(partition.id.intermediate_data_set), leaf]
        location = "/".join(parts)
        try:
            make_dirs(location)
        except OSError as error:
            raise Err(Error_Io(f"cannot create partition directory {location}: {error.strerror or error}"))
        descriptor = ShuffleDescriptor(partition.id, location, partition.num_subpartitions)
        key = partition_key(partition.id)
        job.partitions[key] = descriptor
        job.pending.append(key)
        return descriptor

    def _inside_root(self, location: str) -> bool:
        """Whether `location` names something strictly below the root, never climbing out
        (no empty, `.` or `..` component after the root)."""
        prefix = self.root.rstrip("/") + "/"
        if not location.startswith(prefix):
            return False
        rest = location[len(prefix):]
        return rest != "" and all(part not in ("", ".", "..") for part in rest.split("/"))

    def release_partition_externally(self, descriptor: ShuffleDescriptor) -> None:
        """Deletes the partition's directory (if present) and forgets the partition."""
        location = descriptor.location
        if not self._inside_root(location):
            raise Err(Error_InvalidState(f"refusing to delete {location}: it is not a partition directory under {self.root}"))
        try:
            if os.path.lexists(location):
                remove_tree(location)
        except OSError as error:
            raise Err(Error_Io(f"cannot delete partition directory {location}: {error.strerror or error}"))
        key = partition_key(descriptor.id)
        for job in self.jobs.values():
            if key in job.partitions and job.partitions[key].location == location:
                del job.partitions[key]

    @classmethod
    def supports_batch_snapshot(cls) -> bool:
        """Snapshots are supported: the descriptors are the whole state."""
        return True

    def snapshot_state(self, job_id: str) -> ShuffleMasterSnapshot:
        """The first snapshot of a job (and the first after a restore) is full; later ones hold
        only what was registered since. An unknown job raises `Err(Error_InvalidState)`."""
        job = self._job(job_id)
        incremental = job.snapshotted
        keys = job.pending if incremental else list(job.partitions)
        descriptors = [job.partitions[key] for key in keys if key in job.partitions]
        state = {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "job-id": job_id,
            "partitions": [descriptor_to_json(d) for d in descriptors],
        }
        job.pending = []
        job.snapshotted = True
        return ShuffleMasterSnapshot(incremental, json.dumps(state, separators=(",", ":")).encode("utf-8"))

    def restore_state(self, snapshots: List[ShuffleMasterSnapshot]) -> None:
        """Rebuilds the known partitions: a full snapshot replaces its job's, an incremental adds.

        The list must start with a full snapshot. Every snapshot is decoded before anything
        changes, so a bad list (`Err(Error_CorruptSnapshot)`) leaves the state untouched.
        The restored jobs count as registered; their next snapshot is full.
        """
        if snapshots and snapshots[0].incremental:
            raise Err(Error_CorruptSnapshot("the first snapshot to restore is incremental; a restore starts at a full one"))
        decoded = []
        for index, snapshot in enumerate(snapshots):
            try:
                decoded.append((snapshot.incremental, *decode_snapshot(snapshot)))
            except ValueError as error:
                raise Err(Error_CorruptSnapshot(f"shuffle snapshot {index}: {error}"))
        restored = 0
        for incremental, job_id, descriptors in decoded:
            job = self.jobs.setdefault(job_id, JobState())
            if not incremental:
                job.partitions = {}
            for descriptor in descriptors:
                job.partitions[partition_key(descriptor.id)] = descriptor
            job.pending = []
            job.snapshotted = False
            restored += len(descriptors)
        host_log.log(LogLevel.INFO, f"restored {restored} descriptors from {len(snapshots)} snapshots")

    def notify_partition_recovery_started(self, job_id: str) -> None:
        """Nothing to prepare: partitions are found by looking at the files."""
        host_log.log(LogLevel.INFO, f"partition recovery started for job {job_id}")

    def _metrics(self, job_id: str, descriptor: ShuffleDescriptor) -> Optional[List[int]]:
        """Bytes of each subpartition from the partition's index, or `None` without an index.

        Raises `ValueError` when the index exists but the partition is damaged: the index does
        not parse or names another producer than the one registered there, or `data` is
        unreadable or has another length than the index records.
        """
        location = descriptor.location
        try:
            with open(f"{location}/{INDEX_FILE}", "rb") as index:
                raw = index.read()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise ValueError(f"cannot read {location}/{INDEX_FILE}: {error}")
        try:
            data_len, sizes, named = parse_index(raw, descriptor.num_subpartitions)
        except ValueError as error:
            raise ValueError(f"its index is damaged: {error}")
        # The index must name the attempt registered at this place: another producer's
        # partition copied here is damage.
        registered = (job_id,) + partition_key(descriptor.id)
        if named != registered:
            raise ValueError(f"its index names producer {named}, not {registered} registered there")
        try:
            actual = os.stat(f"{location}/{DATA_FILE}").st_size
        except OSError as error:
            raise ValueError(f"{location}/{DATA_FILE} is unreadable: {error}")
        if actual != data_len:
            raise ValueError(f"{location}/{DATA_FILE} has {actual} bytes; its index records {data_len}")
        return sizes

    def get_partitions_with_metrics(
        self, job_id: str, expected: List[ResultPartitionId], remaining_ms: int
    ) -> List[PartitionWithMetrics]:
        """Reports, at once, each expected partition that is known and complete on disk."""
        job = self.jobs.get(job_id)
        if job is None:
            return []
        reports = job_shuffle_context.reported_partitions(job_id)
        if reports is not None:
            return self._held_by_workers(job, expected, reports)
        found = []
        for partition in expected:
            descriptor = job.partitions.get(partition_key(partition))
            if descriptor is None:
                continue
            try:
                sizes = self._metrics(job_id, descriptor)
            except ValueError as error:
                host_log.log(
                    LogLevel.WARN,
                    f"partition {descriptor.location} has an index but is damaged: {error}",
                )
                continue
            if sizes is None:
                continue
            found.append(PartitionWithMetrics(descriptor, sizes))
        return found

    @staticmethod
    def _held_by_workers(
        job: JobState, expected: List[ResultPartitionId], reports: List[ReportedPartition]
    ) -> List[PartitionWithMetrics]:
        """With worker processes: each expected partition a worker reports at this plugin's place.

        A report counts if its relative location is the tail of the descriptor's location
        (whole path components) and it has one size per subpartition. No file is read.
        """
        held: Dict[PartitionKey, List[ReportedPartition]] = {}
        for report in reports:
            held.setdefault(partition_key(report.id), []).append(report)
        found = []
        for partition in expected:
            key = partition_key(partition)
            descriptor = job.partitions.get(key)
            if descriptor is None:
                continue
            place = descriptor.location.rstrip("/").split("/")
            for report in held.get(key, []):
                tail = [c for c in report.relative_location.split("/") if c]
                if (
                    tail
                    and place[-len(tail):] == tail
                    and len(report.bytes_per_subpartition) == descriptor.num_subpartitions
                ):
                    found.append(
                        PartitionWithMetrics(descriptor, list(report.bytes_per_subpartition))
                    )
                    break
        return found

    def unregister_job(self, job_id: str) -> None:
        """Forgets the job and its partitions (their files stay until released)."""
        self.jobs.pop(job_id, None)
