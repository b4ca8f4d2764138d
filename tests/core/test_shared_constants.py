"""The enums and limits that C++ and Python share are the same on both sides: prerast/_constants.py holds the
Python copy, and these tests read the C++ definitions from the sources and fail on any difference; no other
module of the package spells those values itself."""

import ast
import math
import pathlib
import re

import pytest

from prerast import _constants

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ["csrc/core/common.h", "csrc/core/texture.h", "csrc/core/rasterize.h", "csrc/bindings/rasterize.cpp"]

# Python name -> C++ name.
FILTERS = {
    "nearest": "kFilterNearest",
    "linear": "kFilterLinear",
    "linear-mipmap-nearest": "kFilterMipNearest",
    "linear-mipmap-linear": "kFilterMipLinear",
}
BOUNDARIES = {"wrap": "kBoundaryWrap", "clamp": "kBoundaryClamp", "zero": "kBoundaryZero", "cube": "kBoundaryCube"}
LIMITS = {
    "MAX_TEXTURE_SIDE": "kMaxTextureSide",
    "MAX_MIP_LEVELS": "kMaxMipLevels",
    "MAX_RESOLUTION": "kMaxResolution",
    "TRIANGLE_ID_BITS": "kTriangleIdBits",
    "MAX_TRIANGLES": "kMaxEncodedTriangleId",
}


def read_sources():
    return {name: (ROOT / name).read_text() for name in SOURCES}


def cpp_enums(texts):
    """enum name -> {member: value} of every `enum Name : int { kA = 0, ... }` in the sources."""
    enums = {}
    for text in texts.values():
        for name, body in re.findall(r"enum\s+(\w+)\s*:\s*int\s*\{([^}]*)\}", text):
            enums[name] = {m: int(v, 0) for m, v in re.findall(r"(\w+)\s*=\s*(\w+)", body)}
    return enums


def cpp_constants(texts):
    """Name -> value of every integer `constexpr <type> kName = <expression>;` in the sources, the expression
    evaluated with casts dropped and other constants substituted."""
    exprs = {}
    for text in texts.values():
        for name, expr in re.findall(r"constexpr\s+[\w:]+\s+(k\w+)\s*=\s*([^;{]+);", text):
            exprs[name] = re.sub(r"\((?:u?int\d+_t|int|size_t)\)|(?<=\d)(?:ll|LL|u|U)\b", "", expr)
    values = {}

    def value(name):
        if name not in values:
            names = {n: value(n) for n in re.findall(r"\bk\w+", exprs[name]) if n in exprs}
            values[name] = eval(exprs[name].replace("int64_t(", "int("), {"int": int}, names)  # noqa: S307
        return values[name]

    for name in exprs:
        try:
            value(name)
        except (SyntaxError, NameError, TypeError):
            pass  # not an integer expression (a float, a function call): no Python counterpart
    return values


def mismatches(texts):
    """How _constants differs from the C++ sources given as {path: text}."""
    found = []
    enums, constants = cpp_enums(texts), cpp_constants(texts)
    for py_name, cpp_enum, names in (
        ("FILTER_MODES", "TexFilter", FILTERS),
        ("BOUNDARY_MODES", "TexBoundary", BOUNDARIES),
    ):
        cpp = enums.get(cpp_enum, {})
        python = {names.get(k, k): v for k, v in getattr(_constants, py_name).items()}
        if python != cpp:
            found.append(f"{py_name} is {python} (by C++ name); enum {cpp_enum} is {cpp}")
    for py_name, cpp_name in LIMITS.items():
        if getattr(_constants, py_name) != constants.get(cpp_name):
            found.append(f"{py_name} = {getattr(_constants, py_name)}; {cpp_name} = {constants.get(cpp_name)}")
    if constants.get("kMaxTriangles") != _constants.MAX_TRIANGLES + 1:
        found.append(
            f"MAX_TRIANGLES + 1 = {_constants.MAX_TRIANGLES + 1}; rasterize takes fewer than "
            f"kMaxTriangles = {constants.get('kMaxTriangles')} triangles"
        )
    return found


def test_python_and_cpp_agree():
    assert mismatches(read_sources()) == []


@pytest.mark.parametrize(
    "path, old, new, reported",
    [
        ("csrc/core/texture.h", "kFilterMipLinear = 3", "kFilterMipLinear = 4", "FILTER_MODES"),
        ("csrc/core/texture.h", "kBoundaryCube = 3 }", "kBoundaryCube = 3, kBoundaryMirror = 4 }", "BOUNDARY_MODES"),
        ("csrc/bindings/rasterize.cpp", "kMaxResolution = 32768", "kMaxResolution = 16384", "MAX_RESOLUTION"),
        ("csrc/core/common.h", "0x7f7fffff - kTriangleIdBits", "0x7f7ffffe - kTriangleIdBits", "MAX_TRIANGLES"),
        ("csrc/core/texture.h", "kMaxMipLevels = 17", "kMaxMipLevels = 18", "MAX_MIP_LEVELS"),
    ],
)
def test_a_changed_cpp_value_is_reported(path, old, new, reported):
    texts = read_sources()
    assert old in texts[path]
    texts[path] = texts[path].replace(old, new)
    found = mismatches(texts)
    assert found and all(f.startswith(reported) for f in found), found


def test_limits_fit_each_other():
    """A texture of the largest side has a level per halving down to one texel, and all of them fit a chain."""
    assert _constants.MAX_MIP_LEVELS == int(math.log2(_constants.MAX_TEXTURE_SIDE)) + 1


def test_no_other_module_spells_the_values():
    """The large limits appear as literals in _constants.py only (the small enum values are checked through
    their users: _texture and _ops import the dicts)."""
    values = {v for k, v in vars(_constants).items() if k.isupper() and isinstance(v, int) and v > 1000}
    values.add(0x7F7FFFFF)
    package = ROOT / "package" / "prerast"
    for path in sorted(package.glob("*.py")):
        if path.name == "_constants.py":
            continue
        literals = {
            node.value
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and type(node.value) is int
        }
        assert not literals & values, f"{path.name} spells {sorted(literals & values)}: use prerast._constants"
    from prerast import _checks, _texture

    assert _texture.FILTER_MODES is _constants.FILTER_MODES and _texture.BOUNDARY_MODES is _constants.BOUNDARY_MODES
    assert _checks.MAX_RESOLUTION is _constants.MAX_RESOLUTION


def limit_spellings():
    """Each large limit as a page or docstring would copy it: 32768 and 32,768."""
    from prerast import _checks

    values = {v for k, v in vars(_checks).items() if k.startswith("MAX_") and isinstance(v, int) and v > 1000}
    return {str(v) for v in values} | {f"{v:,}" for v in values}


def copied_limits(text):
    return sorted(v for v in limit_spellings() if re.search(rf"(?<![\d,]){re.escape(v)}(?![\d,])", text))


def test_pages_and_docstrings_read_the_limits_instead_of_copying_them():
    """The guide pages name a limit as a substitution (docs/conf.py: myst_substitutions) and the docstrings as
    {NAME} (prerast._checks.with_limits), both filled from these constants; no page or module spells a value."""
    sources = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "package" / "prerast").glob("*.py"))
    copies = {p.name: copied_limits(p.read_text()) for p in sources if p.name not in ("_constants.py",)}
    assert {name: found for name, found in copies.items() if found} == {}
    import prerast

    assert f"each from 1 to {_constants.MAX_RESOLUTION:,}" in prerast.rasterize.__doc__
    assert f"T up to {prerast._checks.MAX_ANTIALIAS_TRIANGLES:,}" in prerast.antialias_construct_topology_hash.__doc__
    # Can fail: a copied value is found in either spelling.
    assert copied_limits("Resolution up to 32768 per side") == ["32768"]
    assert copied_limits("T up to 715,827,882.") == ["715,827,882"]
