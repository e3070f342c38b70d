#!/usr/bin/env python3
"""Writes tests/e2e/tests/data/parquet-crc/crc.parquet, the fixture of job_sql's
page-checksum test (issue 26, item 6): a Parquet file whose writer stored a
CRC-32 in every page header, as parquet-mr and pyarrow can and parquet-rs
does not.

10 000 rows, columns k (string) and v (int64) with v = (i * 7919) % 100003
for row i and k = "k" + str(i % 10); uncompressed, pages of 4 KiB, so a
damaged byte in a page changes values rather than failing decompression.
The test computes the same sums on its own.

Made once with pyarrow 26.0.1 (the one scripts/bench-tpch.sh installs):
    build/bench-venv/bin/python scripts/parquet-crc-fixture.py
"""
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq

ROWS = 10_000
out = pathlib.Path(__file__).resolve().parent.parent / "tests/e2e/tests/data/parquet-crc/crc.parquet"
out.parent.mkdir(parents=True, exist_ok=True)
table = pa.table(
    {
        "k": pa.array([f"k{i % 10}" for i in range(ROWS)], pa.string()),
        "v": pa.array([(i * 7919) % 100003 for i in range(ROWS)], pa.int64()),
    }
)
pq.write_table(
    table,
    out,
    compression="NONE",
    use_dictionary=False,
    data_page_size=4096,
    write_page_checksum=True,
    row_group_size=ROWS,
)
meta = pq.ParquetFile(out).metadata
print(f"wrote {out}: {meta.num_rows} rows, {meta.num_row_groups} row group(s), {out.stat().st_size} bytes")
