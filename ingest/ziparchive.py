"""Zip members as bytes, whatever their compression: stored and deflate by the standard library,
and Zstandard (zip method 93), which Python's `zipfile` reads only from 3.14 on.

Current inspect_ai compresses every member of an `.eval` log with Zstandard, unconditionally
(`inspect_ai/_util/zipfile.py`, `zip_common.py`: `ZSTD = 93`; several frames per member, one per
200 MiB of input). Inspect reads them by monkey-patching `zipfile` (`zipfile_zstd`); a library
must not change the standard library for its callers, so a zstd member is decompressed here
from its raw bytes with `zstandard` (the maintained binding of the reference implementation)
across every frame, and its CRC-32 checked as `zipfile` would.

Errors: `UnsupportedCompression` names the method (number and name) when a member uses one no
reader here knows (bzip2 and lzma are the standard library's; 93 is ours).
"""
from __future__ import annotations

import struct
import zipfile
import zlib

import zstandard

ZSTD = 93
METHODS = {0: "stored", 8: "deflate", 9: "deflate64", 12: "bzip2", 14: "lzma", 93: "zstandard", 95: "xz",
           98: "ppmd", 99: "AES-encrypted"}
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zipfile.structFileHeader: 30 bytes
_LOCAL_MAGIC = b"PK\x03\x04"


class UnsupportedCompression(ValueError):
    """A zip member compressed by a method no reader here knows."""


def method_name(method: int) -> str:
    """`93 (zstandard)`; an unknown number as itself."""
    return f"{method} ({METHODS[method]})" if method in METHODS else str(method)


def read_member(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """The uncompressed bytes of one member. Raises UnsupportedCompression (naming the method),
    zipfile.BadZipFile (a damaged header, a CRC mismatch) or zstandard.ZstdError (a damaged
    frame)."""
    if info.compress_type != ZSTD:
        try:
            return z.read(info)
        except NotImplementedError:
            raise UnsupportedCompression(f"compression method {method_name(info.compress_type)} "
                                         "is not supported") from None
    if info.flag_bits & 0x1:
        raise UnsupportedCompression("an encrypted zstandard member cannot be read")
    raw = _raw_bytes(z, info)
    chunks, size = [], 0
    with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as reader:
        while size <= info.file_size and (chunk := reader.read(1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    data = b"".join(chunks)
    if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        raise zipfile.BadZipFile(f"zstandard member {info.filename!r}: size or CRC-32 does not match its header")
    return data


def _raw_bytes(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """The member's compressed bytes: after its local header (30 bytes, the name, the extra field)."""
    f = z.fp
    f.seek(info.header_offset)
    header = f.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_MAGIC:
        raise zipfile.BadZipFile(f"bad local header of member {info.filename!r}")
    fields = _LOCAL_HEADER.unpack(header)
    name_len, extra_len = fields[-2], fields[-1]
    f.seek(info.header_offset + _LOCAL_HEADER.size + name_len + extra_len)
    return f.read(info.compress_size)
