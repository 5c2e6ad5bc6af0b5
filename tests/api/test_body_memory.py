"""Bounded memory on every trace body (app/receivers/body.py): a gzip bomb, 1 GB of zeros in about
1 MB, posted several at once to `POST /api/v1/ingest` and `POST /v1/traces` of a real server in
its own process, is refused with 413 while the server's peak RSS (`VmHWM`) stays small: the body
is counted while it arrives and while it inflates, and inflated output is never kept past the
limit."""
from __future__ import annotations

import functools
import gzip
import os
import shutil
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx

from app.auth import issue
from app.db.engine import make_engine
from app.db.migrate import upgrade
from tests.helpers import http

GB = 1 << 30
MB = 1 << 20


def gzip_bomb(size: int = GB) -> Iterator[bytes]:
    """A valid gzip member of `size` zero bytes (a multiple of 1 MiB), generated without holding
    them: one fully flushed deflate block of 1 MiB of zeros (its bytes depend only on its input,
    so it can be repeated), the empty final block, and the CRC-32 and length trailer."""
    zeros = bytes(MB)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    yield b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # magic, deflate, no flags, mtime 0, max compression, unknown OS
    crc = 0
    for _ in range(size // MB):
        crc = zlib.crc32(zeros, crc)
        yield block
    yield zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # the final (empty) block
    yield crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little")


def test_the_bomb_is_what_it_claims():
    small = b"".join(gzip_bomb(8 * MB))
    assert gzip.decompress(small) == bytes(8 * MB)  # header, blocks and trailer all valid
    big = bomb()
    assert len(big) < 1.1 * MB
    assert zlib.decompressobj(wbits=31).decompress(big, 4 * MB) == bytes(4 * MB)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.cache
def bomb() -> bytes:
    """The 1 GB bomb, built once per test process (about 1 MB)."""
    return b"".join(gzip_bomb())


@contextmanager
def server_process(tmp: Path, template: Path | None = None, **env: str) -> Iterator[tuple[str, str, int]]:
    """`uvicorn --factory app.main:create_app` in a subprocess on a SQLite file under `tmp` (a
    copy of the migrated `template`, or migrated here); yields (base URL, a write token, its pid)
    and stops it afterwards."""
    url = f"sqlite:///{tmp / 'rollscope.db'}"
    if template is not None:
        shutil.copyfile(template, tmp / "rollscope.db")
    engine = make_engine(url)
    if template is None:
        upgrade(engine)
    token, _ = issue(engine, "write", name="memory test")
    engine.dispose()
    port = _free_port()
    environ = {**os.environ, "ROLLSCOPE_DATABASE_URL": url, "ROLLSCOPE_WORKER__OTLP_SPOOL_DIR": str(tmp / "otlp"),
               **env}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port),
                             "--log-level", "warning"], env=environ)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if http.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
            assert proc.poll() is None, "the server did not start"
        yield base, token, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set size (`VmHWM` in /proc/<pid>/status), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_gzip_bombs_in_flight_are_refused_and_memory_stays_bounded(tmp_path, _sqlite_template):
    body = bomb()
    with server_process(tmp_path, _sqlite_template) as (base, token, pid):
        before = peak_rss_mb(pid)
        auth = {"Authorization": f"Bearer {token}", "Content-Encoding": "gzip"}
        posts = [("/api/v1/ingest", "application/x-ndjson")] * 4 + [("/v1/traces", "application/x-protobuf")] * 4

        def post(target):
            path, media = target
            return http.post(base + path, content=body, headers={**auth, "Content-Type": media}, timeout=60)

        with ThreadPoolExecutor(len(posts)) as pool:
            answers = list(pool.map(post, posts))
        peak = peak_rss_mb(pid)
    print(f"peak RSS {before:.0f} MB at start, {peak:.0f} MB after {len(posts)} bombs in flight")
    assert [a.status_code for a in answers] == [413] * len(posts)
    assert peak < 300


def realistic_body(tmp: Path, n: int) -> bytes:
    """`n` rollouts of the benchmark workload (bench/workload.py: 20 turns, ~8k tokens with ids,
    mask and logprobs, ~100 KB each) as one NDJSON body."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        import workload
    finally:
        sys.path.pop(0)
    return workload.write(tmp / "body.jsonl", n).read_bytes()


def test_an_ordinary_large_body_costs_about_its_size_not_its_parsed_records(tmp_path, _sqlite_template):
    """One ~30 MB NDJSON body of realistic rollouts, gzipped, under the 64 MiB limit: the records
    are read lazily and written a batch at a time, so the server's peak RSS grows by well under 3x
    the body (it grew ~9x when every record was parsed and prepared before the first write)."""
    raw = realistic_body(tmp_path, 300)
    body = gzip.compress(raw, 1)
    with server_process(tmp_path, _sqlite_template) as (base, token, pid):
        before = peak_rss_mb(pid)
        r = http.post(base + "/api/v1/ingest", content=body, timeout=120,
                       headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson",
                                "Content-Encoding": "gzip"})
        assert r.status_code == 200, r.text
        assert r.json()["accepted"] == 300 and len(r.json()["results"]) == 300
        grown = peak_rss_mb(pid) - before
    print(f"body {len(raw) / MB:.1f} MiB ({len(body) / MB:.1f} gzipped): peak RSS grew {grown:.0f} MiB")
    assert grown < 3 * len(raw) / MB, grown
