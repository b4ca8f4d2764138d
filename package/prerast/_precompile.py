"""prerast.precompile / prerast.load_precompiled: compile a render function once where a compiler is installed
(the devel image), ship one artifact file, and load it where none is (the runtime image).

Two routes, chosen by `training`:
- inference (default): torch.export, then AOTInductor (torch._inductor.aoti_compile_and_package) into a .pt2
  package holding compiled kernels. Loading it (torch._inductor.aoti_load_package) compiles nothing, on the CPU
  or a GPU. The prerast ops in the graph are called through the dispatcher by name: the runtime imports prerast
  (load_precompiled does) so that they are registered.
- training: torch.compile(fn, fullgraph=True).aot_compile(example inputs), saved with save_compiled_function; it
  loads (torch.compiler.load_compiled_function) as a callable whose backward is compiled too. Inductor's CPU
  kernels in it are C++ source: loading them needs a C++ compiler on the CPU.
Either artifact serves only the torch (and Triton) it was made with, and GPU kernels only the GPU model.
"""

import importlib
import logging
import os
import subprocess
import zipfile
import zlib

import torch

from prerast_meta import integrity as _integrity

from . import _loader
from .errors import ArtifactError


class _AsModule(torch.nn.Module):
    """A function as a module, for torch.export."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _all_dims_dynamic(example_inputs):
    auto = torch.export.Dim.AUTO
    return tuple({d: auto for d in range(t.dim())} if isinstance(t, torch.Tensor) else None for t in example_inputs)


def _require_torch_api(training):
    """Both routes are recent torch APIs: say which torch is needed instead of failing on a missing name."""
    needed = (
        ("torch.compile(...).aot_compile", "2.9") if training else ("torch._inductor.aoti_compile_and_package", "2.6")
    )
    present = (
        hasattr(torch.compiler, "load_compiled_function")
        if training
        else hasattr(torch._inductor, "aoti_compile_and_package")
    )
    if not present:
        raise RuntimeError(
            f"prerast.precompile(training={training}) uses {needed[0]}, which torch "
            f"{torch.__version__} lacks; it needs torch >= {needed[1]}"
        )


def _static_only_libstdcxx(compiler):
    """True when compiler can link libstdc++ only statically: `-print-file-name` finds libstdc++.a but answers
    libstdc++.so with the bare name. (A compiler that uses no libstdc++, such as clang with libc++, finds neither.)"""

    def find(name):
        try:
            out = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        found = out.stdout.strip()
        return found if out.returncode == 0 and os.path.isabs(found) and os.path.exists(found) else None

    return find("libstdc++.a") is not None and find("libstdc++.so") is None


def _require_shared_libstdcxx():
    """Inductor links what it compiles with the C++ compiler it finds. With only a static libstdc++, each compiled
    library carries and exports its own copy, which the dynamic linker mixes with the process's libstdc++.so
    symbol by symbol: such packages crash when loaded. Refuse before compiling instead."""
    from torch._inductor import cpp_builder, exc  # (a heavy import, only here)

    try:
        compiler = cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        return  # Inductor says so itself, in its own words, when it needs the compiler
    if _static_only_libstdcxx(compiler):
        raise RuntimeError(
            f"prerast.precompile: the C++ compiler {compiler!r} has only a static libstdc++ "
            f"(`{compiler} -print-file-name=libstdc++.so` does not find a shared one). What Inductor builds with it "
            f"carries its own copy of libstdc++, which crashes when loaded next to torch's. Point CXX at a compiler "
            f"that links libstdc++ dynamically, e.g. CXX=/usr/bin/g++ (a distribution's g++), and run again."
        )


def precompile(fn, example_inputs, path, training=False, dynamic=False):
    """Compile a render function once, where a compiler is installed, into one artifact file.

    :func:`load_precompiled` loads it in a runtime image (:doc:`/compile-and-precompile`).

    Args:
        fn (Callable | torch.nn.Module): what to compile; it may call every prerast op but DepthPeeler.
        example_inputs (tuple): the inputs to compile for (their shapes, dtypes, devices and, with training,
            requires_grad flags are what the artifact serves).
        path (str | os.PathLike): the file to write.
        training (bool): False: an AOTInductor package for inference (forward only; torch >= 2.6), which loads
            with no compiler at all. True: a torch.compile artifact with forward and backward (torch >= 2.9); fn
            must then be a function. Default False.
        dynamic (bool): let every dimension of every tensor input vary (as far as fn allows). Default False.

    Returns:
        str: path.

    Raises:
        RuntimeError: the running torch lacks the API the route needs, or the C++ compiler can link libstdc++
            only statically (the message names the fix, e.g. ``CXX=/usr/bin/g++``).
        TypeError: training=True with a torch.nn.Module.
    """
    _loader.require()
    _require_torch_api(training)
    _require_shared_libstdcxx()
    example_inputs = tuple(example_inputs)
    path = os.fspath(path)
    if training:
        if isinstance(fn, torch.nn.Module):
            raise TypeError("precompile(training=True): pass a function (e.g. one that calls your module)")
        # torch 2.11 attaches .aot_compile only under this switch (later releases turn it on by default).
        with torch._dynamo.config.patch(enable_aot_compile=True):
            compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic or None).aot_compile((example_inputs, {}))
        compiled.save_compiled_function(path)
        return path
    module = fn if isinstance(fn, torch.nn.Module) else _AsModule(fn)
    shapes = _all_dims_dynamic(example_inputs) if dynamic else None
    program = torch.export.export(module, example_inputs, dynamic_shapes=shapes)
    torch._inductor.aoti_compile_and_package(program, package_path=path)
    return path


def is_inference_artifact(path):
    """An AOTInductor package is a zip archive; a training artifact is not."""
    return zipfile.is_zipfile(path)


class _ProbelessIsaWarning(logging.Filter):
    """Drops torch's warning that the CPU's vector ISA differs from the package's when the ISA was not probed: the
    package's ISA compared with none, not a mismatch of the machine."""

    def filter(self, record):
        return not (isinstance(record.args, tuple) and record.args[:2] == ("AOTI_CPU_ISA", "INVALID_VEC_ISA"))


def _load_inference_artifact(path):
    """torch._inductor.aoti_load_package, calling no compiler.

    Loading compiles nothing, but torch then compares the machine with the one the package was built on (only to
    warn on a mismatch), and for the CPU's vector ISA Inductor probes by compiling and running test programs. With
    Inductor's option cpp.vec_isa_ok=False it takes the answer "no vector ISA" instead of probing, on every torch
    the stable wheel serves (2.10 to 2.14). Inductor keeps the list of vector ISAs it found for the process: when
    loading made it (nothing had asked before), it is forgotten afterwards, so that CPU kernels compiled later in
    the process are vectorized as usual.
    """
    # torch 2.10's loader reads torch._inductor.codecache as an attribute without importing it (later releases
    # import it themselves): import it, or 2.10 fails with an AttributeError.
    import torch._inductor.codecache  # noqa: F401  (a heavy import, only here)
    from torch._inductor import cpu_vec_isa

    isa_list = getattr(cpu_vec_isa, "valid_vec_isa_list", None)
    made_here = hasattr(isa_list, "cache_info") and isa_list.cache_info().currsize == 0

    warnings_of_loader = logging.getLogger("torch.export.pt2_archive._package")
    probeless = _ProbelessIsaWarning()
    warnings_of_loader.addFilter(probeless)
    try:
        with torch._inductor.config.patch({"cpp.vec_isa_ok": False}):
            return torch._inductor.aoti_load_package(path)
    finally:
        warnings_of_loader.removeFilter(probeless)
        if made_here:
            isa_list.cache_clear()  # the empty list was this load's answer, not the machine's


ZIP_MAGIC = b"PK\x03\x04"


def check_artifact(path):
    """'inference' or 'training' for an artifact file that is whole, else ArtifactError naming it. An inference
    package (a zip archive) is checked member by member (CRC) and its libraries' ELF headers against this
    machine before torch extracts and loads any of them: a copy cut short or a package for another machine is an
    error, not a crash."""
    redo = "make it again with prerast.precompile (or copy it again if the copy was cut short)"
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise ArtifactError(f"load_precompiled: cannot read {path}: {e.strerror}") from e
    if size == 0:
        raise ArtifactError(f"load_precompiled: {path} is empty: expected an artifact of prerast.precompile; {redo}")
    if head != ZIP_MAGIC:
        return "training"
    try:
        with zipfile.ZipFile(path) as z:
            broken = z.testzip()
            names = z.namelist()
            if broken is None and not any(n.endswith("archive_format") for n in names):
                raise ArtifactError(
                    f"load_precompiled: {path} is a zip archive but no AOTInductor package (it has "
                    f"no archive_format entry; found {', '.join(names[:5]) or 'no files'}): "
                    "expected an artifact of prerast.precompile"
                )
            for name in names if broken is None else []:
                if name.endswith(".so"):
                    with z.open(name) as member:
                        why = _integrity.foreign(member.read(64))
                    if why is not None:
                        raise ArtifactError(
                            f"load_precompiled: {path} holds {name}, which is {why}: the package "
                            "was compiled for another machine; precompile it on one like this"
                        )
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
        raise ArtifactError(
            f"load_precompiled: {path} is a damaged or truncated zip archive ({size} bytes: {e}); {redo}"
        ) from e
    if broken is not None:
        raise ArtifactError(
            f"load_precompiled: {path} is damaged: its member {broken} does not match its checksum; {redo}"
        )
    return "inference"


def load_precompiled(path, fn=None):
    """Load the callable that an artifact of :func:`precompile` holds.

    Args:
        path (str | os.PathLike): the artifact.
        fn (Callable, optional): for a training artifact, the function it was made from (its module's globals are
            what the compiled code refers to); not needed for an inference artifact. Default None.

    Returns:
        Callable: the compiled function; an inference artifact loads without calling a compiler.

    Raises:
        TypeError: a training artifact without fn.
        ArtifactError: a file that is missing, empty, damaged, truncated, no artifact of precompile, or made for
            another machine (its message names the file).
    """
    _loader.require()  # the prerast ops must be registered before the graph that calls them is loaded
    path = os.fspath(path)
    if check_artifact(path) == "inference":
        return _load_inference_artifact(path)
    if fn is None:
        raise TypeError("load_precompiled: a training artifact needs fn, the function it was precompiled from")
    try:
        with open(path, "rb") as f:
            return torch.compiler.load_compiled_function(f, f_globals=fn.__globals__)
    except Exception as e:  # torch's deserializer meets a truncated or foreign file with whatever it trips on
        raise ArtifactError(
            f"load_precompiled: {path} is not a training artifact of prerast.precompile that this "
            f"torch {torch.__version__} can load (damaged, truncated, or made by another torch?): "
            f"{type(e).__name__}: {e}"
        ) from e


def import_target(spec):
    """'package.module:name' -> that object; a class is instantiated without arguments (a module)."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"expected MODULE:NAME, got {spec!r}")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj() if isinstance(obj, type) else obj
