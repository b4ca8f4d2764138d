"""csrc/ keeps to what MSVC (Windows), Apple clang (macOS, arm64) and gcc/clang (Linux x86-64 and aarch64) all
accept and treat alike: each rule below names a construct one of them refuses or reads differently, and the guards
(preprocessor conditions) under which it is allowed. Every C/C++/CUDA source under csrc/ is scanned; each rule is
shown to catch a planted example and to let its guarded form pass.

The scanner reads the preprocessor conditions around each line (#if/#ifdef/#ifndef/#elif/#else, an #else or a
later #elif counting as the negation of the branches before it), with comments, string and character literals
blanked out. It is a lint, not a compiler: tests/core/test_core_platforms.py builds the core with g++, clang, mingw-w64
and aarch64 g++; only an MSVC and a macOS runner can build the rest (the bindings against torch, the CUDA host code
through cl).

    python tests/core/test_portable_source.py [FILE...]     # the findings of csrc/ (or of FILEs), one per line
"""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CSRC = os.path.join(ROOT, "csrc")
EXTENSIONS = (".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh")

GNU = ("__GNUC__", "__clang__", "PRERAST_GNU_BUILTINS", "PRERAST_HAVE_AVX2_PATH")  # the last two: defined under GNU
X86 = (
    "__x86_64__",
    "__i386__",
    "_M_X64",
    "_M_IX86",
    "__SSE__",
    "__SSE2__",
    "__AVX2__",
    "PRERAST_HAVE_AVX2_PATH",
    "PRERAST_SSE_TRANSPOSE",
)
POSIX = ("__linux__", "__unix__", "__APPLE__")
CUDA = ("__CUDACC__", "__CUDA_ARCH__")


def under(conds, macros):
    """Some enclosing branch is taken only where one of macros is defined (a positive condition names it)."""
    return any(not negated and any(re.search(rf"\b{m}\b", c) for m in macros) for c, negated in conds)


def outside(conds, macro):
    """Some enclosing branch is taken only where macro is not defined (a negated condition names it)."""
    return any(negated and re.search(rf"\b{macro}\b", c) for c, negated in conds)


# name: (pattern over code with comments and literals blanked, allowed(conds, path), what to write instead).
RULES = {
    "gnu-attribute": (
        r"\b__attribute__\b",
        lambda c, p: under(c, GNU),
        "GCC/clang only: guard with __GNUC__ / __clang__ (host_builtins.h has portable forms)",
    ),
    "gnu-builtin": (
        r"\b__builtin_\w+",
        lambda c, p: under(c, GNU),
        "GCC/clang only: guard with __GNUC__ / __clang__, with a plain C++ fallback (host_builtins.h)",
    ),
    "aligned-alloc": (
        r"\baligned_alloc\s*\(",
        lambda c, p: outside(c, "_WIN32") and outside(c, "__APPLE__"),
        "absent from Windows' C runtimes and from macOS before 10.15: prerast::aligned_malloc (host_pages.h)",
    ),
    "posix-memalign": (
        r"\bposix_memalign\s*\(",
        lambda c, p: under(c, POSIX),
        "POSIX only: prerast::aligned_malloc (host_pages.h)",
    ),
    "linux-pages": (
        r"\bmadvise\s*\(|\bMADV_\w+|#\s*include\s*<sys/mman\.h>",
        lambda c, p: under(c, ("__linux__",)),
        "Linux only: guard with __linux__ (host_pages.h)",
    ),
    "posix-header": (
        r"#\s*include\s*<(unistd|dlfcn|pthread|alloca|sys/\w+)\.h>",
        lambda c, p: under(c, POSIX),
        "POSIX only: guard with __linux__ / __APPLE__, or use the C++ library",
    ),
    "long": (
        r"(?<!\blong )(?<!\blong  )\blong\b(?!\s+(long|double)\b)",
        lambda c, p: False,
        "32 bits on Windows (LLP64): int64_t / size_t, or long long",
    ),
    "printf-long": (
        r"%[-+ #0]*\d*l[diuxX]",
        lambda c, p: False,
        "%ld is 32 bits on Windows: %lld with a (long long) cast",
    ),
    "openmp": (r"#\s*pragma\s+omp\b", lambda c, p: under(c, ("_OPENMP",)), "guard with _OPENMP"),
    "gnu-restrict": (r"\b__restrict__\b", lambda c, p: False, "MSVC spells it __restrict (gcc, clang, nvcc too)"),
    "alloca": (r"\b_?alloca\s*\(", lambda c, p: False, "not portable: a std::vector or a fixed-size array"),
    "designated-init": (
        r"[{,]\s*\.[A-Za-z_]\w*\s*=",
        lambda c, p: False,
        "C++20 (the build is C++17 with older torch): assign the members",
    ),
    "ssize_t": (r"\bssize_t\b", lambda c, p: False, "POSIX only: int64_t or ptrdiff_t"),
    "math-constant": (
        r"\bM_(PI|PI_2|PI_4|1_PI|2_PI|E|LN2|LN10|LOG2E|LOG10E|SQRT2|SQRT1_2|2_SQRTPI)\b",
        lambda c, p: False,
        "MSVC needs _USE_MATH_DEFINES: a constexpr constant",
    ),
    "int128": (r"\b(__int128|__uint128_t|__int128_t)\b", lambda c, p: False, "absent from MSVC: two 64-bit halves"),
    "x86-intrinsics": (
        r"#\s*include\s*<\w*intrin\.h>|\b_mm\d*_\w+\s*\(|\b__m(128|256|512)[di]?\b",
        lambda c, p: under(c, X86),
        "x86 only: guard with __x86_64__ / _M_X64 (and __AVX2__ or a runtime check), with a scalar path for arm64",
    ),
    "cuda-keyword-in-host-code": (
        r"\b__(host|device|global|forceinline)__\b|\b__syncthreads\b",
        lambda c, p: p.endswith((".cu", ".cuh")) or under(c, CUDA),
        "only nvcc knows it: guard with __CUDACC__ (common.h's PR_HD)",
    ),
    "glibc-assert": (
        r"\b__assert_fail\b",
        lambda c, p: outside(c, "_WIN32") or under(c, ("__GNUC__",)),
        "glibc's: MSVC's is _wassert (validate_cuda.cu's PR_DEVICE_ASSERT_FAIL)",
    ),
    "alternative-token": (
        r"(?<![\w.])(and|or|not|xor|bitand|bitor|compl)(?![\w(])(?=\s*[\w(!~])",
        lambda c, p: False,
        "MSVC refuses them without /permissive- (not passed): &&, ||, !",
    ),
    "gnu-extension": (
        r"\b(typeof|__typeof__|__thread)\b|\?\s*:",
        lambda c, p: under(c, GNU),
        "GNU only: decltype, thread_local, a ? a : b",
    ),
    "gnu-function-name": (r"\b__PRETTY_FUNCTION__\b", lambda c, p: under(c, GNU), "GNU only: __func__"),
    "non-ascii": (
        r"[^\x00-\x7f]",
        lambda c, p: False,
        "MSVC reads a source in the machine's code page (no /utf-8 is passed), where a multibyte "
        "character can even swallow a comment's newline (CP932): ASCII only, \\u escapes in strings",
    ),
    "declspec": (r"\b__declspec\b", lambda c, p: under(c, ("_MSC_VER", "_WIN32")), "MSVC only: guard with _MSC_VER"),
}

STRING_RULES = {"printf-long"}  # matched with string literals left in (comments still blanked)
RAW_RULES = {"non-ascii"}  # matched on the line as written, comments included

# A variable-length array: a local array whose size is a lower-case name (constants here are kName or UPPER).
VLA = re.compile(
    r"^\s*(?:const\s+)?(?:float|double|int|unsigned|int32_t|int64_t|uint32_t|uint8_t|char|bool)\s+"
    r"\w+\s*\[\s*[a-z_][a-z0-9_]*\s*\]\s*(?:;|=)"
)


def blank(text, strings=True):
    """text with comments (and, if strings, the insides of string and character literals) replaced by spaces,
    newlines kept; #include lines are kept whole."""
    out, i, n = [], 0, len(text)
    while i < n:
        line_start = text.rfind("\n", 0, i) + 1
        if i == line_start and re.match(r"[ \t]*#[ \t]*include\b", text[i:]):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(text[i:j])
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
        elif text[i] in "\"'" and not (text[i] == "'" and i > 0 and text[i - 1].isalnum()):  # not 1'000
            q, j = text[i], i + 1
            while j < n and text[j] not in (q, "\n"):
                j += 2 if text[j] == "\\" else 1
            j = min(j, n)
            inside = text[i + 1 : j]
            out.append(q + (" " * len(inside) if strings else inside))
            if j < n and text[j] == q:
                out.append(q)
                j += 1
        else:
            j = i + 1
            out.append(text[i])
        i = j
    return "".join(out)


def scan_text(text, path="<text>"):
    """[(line number, rule, line)] for every construct of RULES (and VLAs) outside its allowed guards."""
    lines = blank(text).split("\n")
    with_strings = blank(text, strings=False).split("\n")  # for the rules that read format strings
    raw = text.split("\n")
    assert len(lines) == len(raw) == len(with_strings)
    findings, groups = [], []  # groups: per open #if, [conditions of earlier branches, this branch's (cond, neg)]
    i = 0
    while i < len(lines):
        first = i
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):  # a continued directive is one line
            i += 1
            line = line[:-1] + " " + lines[i]
        i += 1
        m = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", line)
        if m:
            kind, arg = m.group(1), m.group(2).strip()
            if kind in ("if", "ifdef", "ifndef"):
                cond = f"defined({arg})" if kind != "if" else arg
                groups.append([[], (cond, kind == "ifndef")])
                continue
            if not groups:
                findings.append((first + 1, "unbalanced-conditional", raw[first]))
                continue
            earlier, current = groups[-1]
            earlier.append(current[0] if not current[1] else f"!({current[0]})")
            if kind == "endif":
                groups.pop()
            else:
                groups[-1][1] = (arg, False) if kind == "elif" else ("", False)
            continue
        conds = []
        for earlier, current in groups:
            conds.append(current)
            conds += [(c, True) for c in earlier]
        for name, (pattern, allowed, _) in RULES.items():
            text_of = raw[first] if name in RAW_RULES else with_strings[first] if name in STRING_RULES else line
            if re.search(pattern, text_of) and not allowed(conds, path):
                findings.append((first + 1, name, raw[first].strip()))
        if VLA.search(line) and not path.endswith((".cu", ".cuh")):
            findings.append((first + 1, "vla", raw[first].strip()))
    return findings


def scan(path):
    with open(path, encoding="utf-8", errors="replace") as f:  # a byte that is not UTF-8 is non-ASCII too
        return scan_text(f.read(), path)


def sources():
    found = []
    for d, _, files in os.walk(CSRC):
        found += [os.path.join(d, f) for f in sorted(files) if f.endswith(EXTENSIONS)]
    return sorted(found)


needs_source = pytest.mark.skipif(not os.path.isdir(CSRC), reason="needs the source tree")


@needs_source
def test_csrc_is_portable():
    files = sources()
    assert len(files) >= 30 and any(f.endswith(".cu") for f in files), files  # the walk found the tree
    found = [
        f"{os.path.relpath(p, ROOT)}:{n}: {rule}: {line}  ({RULES[rule][2] if rule in RULES else ''})"
        for p in files
        for n, rule, line in scan(p)
    ]
    assert not found, "\n".join(found)


# rule: (a planted bad snippet, its allowed form, or None where no guard makes it right).
PLANTED = {
    "gnu-attribute": (
        "static int f() __attribute__((noinline));\n",
        "#if defined(__GNUC__)\nstatic int f() __attribute__((noinline));\n#endif\n",
    ),
    "gnu-builtin": (
        "#if defined(_MSC_VER)\n#else\nint g(unsigned x) { return __builtin_popcount(x); }\n#endif\n",
        "#if defined(__GNUC__) || defined(__clang__)\nint g(unsigned x) { return __builtin_clz(x); }\n"
        "#else\nint g(unsigned x) { return 0; }\n#endif\n",
    ),
    "aligned-alloc": (
        "void* p = std::aligned_alloc(64, 4096);\n",
        "#if defined(_WIN32)\nvoid* p = _aligned_malloc(4096, 64);\n#elif defined(__APPLE__)\n"
        "void* p = 0;\n#else\nvoid* p = std::aligned_alloc(64, 4096);\n#endif\n",
    ),
    "posix-memalign": (
        "int r = posix_memalign(&p, 64, n);\n",
        "#ifdef __APPLE__\nint r = posix_memalign(&p, 64, n);\n#endif\n",
    ),
    "linux-pages": (
        "#include <sys/mman.h>\nvoid h(void* p) { madvise(p, 4096, MADV_HUGEPAGE); }\n",
        "#if defined(__linux__) && defined(MADV_HUGEPAGE)\n"
        "void h(void* p) { madvise(p, 4096, MADV_HUGEPAGE); }\n#endif\n",
    ),
    "posix-header": ("#include <unistd.h>\n", "#if defined(__linux__)\n#include <unistd.h>\n#endif\n"),
    "long": ("long bytes = n * sizeof(float);\n", None),
    "printf-long": ('printf("%ld pixels", (long long)n);\n', None),
    "openmp": (
        "#pragma omp parallel for\nfor (int i = 0; i < n; ++i) x[i] = 0;\n",
        "#ifdef _OPENMP\n#pragma omp parallel for\n#endif\nfor (int i = 0; i < n; ++i) x[i] = 0;\n",
    ),
    "gnu-restrict": ("void k(float* __restrict__ out);\n", None),
    "alloca": ("float* tmp = (float*)alloca(n * 4);\n", None),
    "designated-init": ("Args a{.width = 4, .height = 2};\n", None),
    "ssize_t": ("ssize_t count = -1;\n", None),
    "math-constant": ("const float half_turn = M_PI;\n", None),
    "int128": ("unsigned __int128 wide = 0;\n", None),
    "x86-intrinsics": (
        "#include <immintrin.h>\n__m256 v = _mm256_setzero_ps();\n",
        "#if defined(__x86_64__) || defined(_M_X64)\n#include <immintrin.h>\n__m256 v = _mm256_setzero_ps();\n#endif\n",
    ),
    "cuda-keyword-in-host-code": (
        "__host__ __device__ inline float sq(float x) { return x * x; }\n",
        "#if defined(__CUDACC__)\n#define HD __host__ __device__\n#else\n#define HD\n#endif\n",
    ),
    "glibc-assert": (
        '__assert_fail("bad", __FILE__, __LINE__, __func__);\n',
        '#if defined(_WIN32)\n#define FAIL _wassert(L"bad", L"f", 1)\n#else\n'
        '#define FAIL __assert_fail("bad", __FILE__, __LINE__, __func__)\n#endif\n',
    ),
    "alternative-token": ("if (a and not b) return;\n", None),
    "gnu-extension": ("int z = x ?: y;\nstatic __thread int t;\n", None),
    "gnu-function-name": ("puts(__PRETTY_FUNCTION__);\n", "#ifdef __GNUC__\nputs(__PRETTY_FUNCTION__);\n#endif\n"),
    "non-ascii": ("// the pixel\u2019s centre\n", None),
    "declspec": ("__declspec(dllexport) void e();\n", "#ifdef _MSC_VER\n__declspec(dllexport) void e();\n#endif\n"),
    "vla": ("void f(int n) {\n  float scratch[n];\n}\n", "void f() {\n  float scratch[kTile];\n}\n"),
}


def test_every_rule_has_a_planted_example():
    assert set(PLANTED) == set(RULES) | {"vla"}


@pytest.mark.parametrize("rule", sorted(PLANTED))
def test_rule_catches_its_planted_example(rule, tmp_path):
    bad, good = PLANTED[rule]
    path = tmp_path / "planted.cpp"
    path.write_text(bad, encoding="utf-8")
    assert rule in {r for _, r, _ in scan(str(path))}, (rule, bad)
    if good is not None:
        path.write_text(good, encoding="utf-8")
        assert scan(str(path)) == [], (rule, good)


def test_comments_strings_and_negated_branches():
    # Mentioned in a comment or a message: not code.
    assert scan_text('// long ago, __attribute__, %ld and M_PI\nconst char* s = "long %lld and not __int128";\n') == []
    assert [r for _, r, _ in scan_text('printf("%lld of %lu", a, b);\n')] == ["printf-long"]
    assert (
        scan_text(
            "/* std::aligned_alloc(64, n) */ int64_t ok = 1;\nlong long wide = 0; unsigned long long u;\n"
            "long double q = 0;\n"
        )
        == []
    )
    # The #else of a GNU guard is not GNU; an #ifndef of it neither; the #endif closes the guard.
    assert [r for _, r, _ in scan_text("#if defined(__GNUC__)\n#else\nint a __attribute__((unused));\n#endif\n")] == [
        "gnu-attribute"
    ]
    assert [r for _, r, _ in scan_text("#ifndef __GNUC__\nint a = __builtin_ctz(1u);\n#endif\n")] == ["gnu-builtin"]
    assert [r for _, r, _ in scan_text("#ifdef __GNUC__\n#endif\nint a = __builtin_ctz(1u);\n")] == ["gnu-builtin"]
    # A continued #if line is one condition; an #elif branch is its own.
    assert (
        scan_text(
            "#if defined(_MSC_VER) || \\\n    defined(__GNUC__)\n#elif defined(__linux__)\n"
            "#include <unistd.h>\n#endif\n"
        )
        == []
    )
    assert [r for _, r, _ in scan_text("#endif\n")] == ["unbalanced-conditional"]


def test_command_line_reports_findings(tmp_path):
    """python tests/core/test_portable_source.py [FILE...]: one line per finding, exit status 1 if any."""
    script = os.path.abspath(__file__)
    clean = subprocess.run(
        [sys.executable, script, "csrc/core/host_pages.h"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert (clean.returncode, clean.stdout) == (0, ""), clean.stderr
    bad = tmp_path / "bad.h"
    bad.write_text("#pragma once\nlong n = 0;\n")
    r = subprocess.run([sys.executable, script, str(bad)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stdout == f"{bad}:2: long: long n = 0;\n", r.stdout + r.stderr


if __name__ == "__main__":
    paths = sys.argv[1:] or sources()
    total = 0
    for p in paths:
        for n, rule, line in scan(p):
            print(f"{p}:{n}: {rule}: {line}")
            total += 1
    sys.exit(1 if total else 0)
