"""A minimal PNG writer (8-bit RGB/RGBA), so that rendering to a file needs nothing beyond the standard library."""

import struct
import zlib


def write_png(path, pixels):
    """pixels: a [H, W, 3 or 4] uint8 numpy array, row 0 at the top of the picture."""
    h, w, c = pixels.shape
    if c not in (3, 4):
        raise ValueError(f"write_png: expected 3 or 4 channels, got {c}")
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(h))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, 6 if c == 4 else 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(
            b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
        )
