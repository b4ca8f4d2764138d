"""Enums and limits that the compiled ops define, as the Python side uses them: one place in Python, each entry
naming its C++ definition. tests/core/test_shared_constants.py reads those C++ sources and fails when a value here
differs. This module imports nothing, so that any module of the package can use it."""

# The texture ops' int filter_mode and boundary_mode (csrc/core/texture.h: enum TexFilter, enum TexBoundary).
FILTER_MODES = {"nearest": 0, "linear": 1, "linear-mipmap-nearest": 2, "linear-mipmap-linear": 3}
BOUNDARY_MODES = {"wrap": 0, "clamp": 1, "zero": 2, "cube": 3}

# Texels per side of a texture (csrc/core/texture.h: kMaxTextureSide), and the levels a chain can have, level 0
# included (kMaxMipLevels): level 0 plus one halving per bit of the side.
MAX_TEXTURE_SIDE = 65536
MAX_MIP_LEVELS = 17

# Pixels per side of a rasterized image (csrc/bindings/rasterize.cpp: kMaxResolution).
MAX_RESOLUTION = 32768

# Triangle IDs up to 2^24 are stored in rast's float32 channel as the number itself, larger ones n as the float
# whose bit pattern is TRIANGLE_ID_BITS + n (csrc/core/common.h: kTriangleIdBits); the largest finite float sets
# the largest ID that round-trips (kMaxEncodedTriangleId), and rasterize takes fewer triangles than that plus one
# (csrc/core/rasterize.h: kMaxTriangles).
TRIANGLE_ID_BITS = 0x4A800000
MAX_TRIANGLES = 0x7F7FFFFF - TRIANGLE_ID_BITS

# What a compiled op of the stable binding appends to the message of an out-of-memory failure, which the stable ABI
# can only raise as RuntimeError (csrc/bindings/facade_stable.h: kOutOfMemoryMarker); _ops.raises_typed turns it
# into torch.OutOfMemoryError.
OUT_OF_MEMORY_MARKER = "[prerast: out of memory]"
