"""Build ``nasa-http-jul95.csv.gz`` (per-minute request rates of a real web server) from per-second counts.

The source: the NASA-HTTP traces of the Internet Traffic Archive, every HTTP request to the NASA Kennedy
Space Center WWW server in Florida, July and August 1995 (``ftp://ita.ee.lbl.gov/traces/NASA_access_log_Jul95.gz``,
described at ``https://ita.ee.lbl.gov/html/contrib/NASA-HTTP.html``; collected by Jim Dumoulin, KSC; the
archive's terms: the traces may be freely redistributed). We did not read the raw logs here; we read their
per-second request counts as published by github.com/reconfigurable-ml-pipeline/web-service-datasets,
``dataset/nasa/workload.tbz2`` (commit 7404ad6; ``workload.txt``: one count per second, space separated, from the
July log's first second, 1995-07-01 00:00:01 EDT, then the August log's seconds appended).

Only the July log's clean stretch is kept: 27 whole days, 1995-07-01 00:00 to 1995-07-28 00:00 EDT (UTC-4). The
July log ends on 28/Jul/1995:13:32:25 and the published counts append August's without the gap, so later positions
are not July's; the August log also stops from 01/Aug 14:52:01 to 03/Aug 04:36:13 (the hurricane outage the archive
describes; the counts hold 135,852 zero seconds there, which dates the August part to the second). A zero count is
put first for 00:00:00 (the log starts at 00:00:01), so second ``i`` is ``i`` s after midnight; lines out of order
in the log can shift a position by a few seconds (the two months' counts hold 13 more seconds than their span).

Rows: ``timestamp`` (epoch seconds of the minute's start, UTC: 1995-07-01 00:00 EDT is 804571200) and ``qps``
(the minute's requests / 60, 6 significant digits: ``round(qps * 60)`` is the count). Written gzip with mtime 0 so
the bytes are reproducible::

    python bench/forecast/traces/make_nasa_jul95.py workload.txt bench/forecast/traces/nasa-http-jul95.csv.gz
"""
from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np

#: 1995-07-01 00:00:00 EDT (UTC-4) in epoch seconds
T0 = 804571200
DAYS = 27


def minute_counts(per_second: np.ndarray) -> np.ndarray:
    """The first ``DAYS`` days' requests per minute, from counts per second starting at 00:00:01."""
    s = np.concatenate([[0], per_second[:DAYS * 86400 - 1]])
    return s.reshape(-1, 60).sum(axis=1)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: make_nasa_jul95.py WORKLOAD_TXT OUT_CSV_GZ", file=sys.stderr)
        return 2
    per_second = np.array(Path(argv[0]).read_text().split(), dtype=np.int64)
    counts = minute_counts(per_second)
    lines = ["timestamp,qps"] + [f"{T0 + 60 * i},{c / 60:.6g}" for i, c in enumerate(counts)]
    with open(argv[1], "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(("\n".join(lines) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
