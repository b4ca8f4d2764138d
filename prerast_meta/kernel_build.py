"""How setup.py compiles a kernel library: csrc/core into a torch-free shared library with the C interface of
core/kernel_table.h, one for the CPU kernels and one per CUDA major.

No torch is imported and none of its flags or libraries are used: the library is the same whichever torch (if any)
the build environment has, so nvcc runs once per (target, CUDA major), never per torch release. The .cu files go
to nvcc, the .cpp files to a plain setuptools compiler of this platform (gcc, clang, MSVC), all in parallel, and
setuptools links them (with the CUDA runtime, for a CUDA library). Standard library and setuptools only.
"""

import concurrent.futures
import os
import shutil
import subprocess

from setuptools import Extension
from setuptools.command.build_ext import build_ext

# A kernel library's module-style name in the package (prerast/_kernels_cpu.abi3.so, prerast/_kernels_cu12.pyd).
CPU_NAME = "prerast._kernels_cpu"


def cuda_name(major):
    return f"prerast._kernels_cu{major}"


class KernelExtension(Extension):
    """A kernel library. cuda_home is None for the CPU one; nvcc_flags and cxx_flags are those of
    prerast_meta/compiler_flags.py for this platform (plus the gencode flags of the archs)."""

    def __init__(self, name, sources, cxx_flags, nvcc_flags=(), cuda_home=None, link_flags=()):
        super().__init__(name, sources, py_limited_api=True)
        self.cxx_flags, self.nvcc_flags, self.cuda_home = list(cxx_flags), list(nvcc_flags), cuda_home
        self.extra_link_args = list(link_flags)


def is_msvc(compiler):
    return compiler.compiler_type == "msvc"


def std_flag(compiler):
    return "/std:c++17" if is_msvc(compiler) else "-std=c++17"


def without_rpath(command):
    """A linker command line without its run paths (-Wl,-rpath,DIR, -Wl,-rpath=DIR, -Wl,-R,DIR, -Wl,-RDIR, -RDIR).
    Python's LDSHARED names the interpreter's own lib folder so (pyenv's, a framework's), and setuptools before
    72 links with it: a library would carry a RUNPATH of the build machine, which auditwheel leaves in place. The
    libraries find what they link (libcudart, torch's, the C++ runtime) by soname, in the process already."""
    out = []
    for arg in command:
        if arg.startswith("-R") and len(arg) > 2:
            continue
        if not arg.startswith("-Wl,"):
            out.append(arg)
            continue
        parts, kept, skip = arg[4:].split(","), [], False
        for part in parts:
            if skip:
                skip = False
            elif part in ("-rpath", "--rpath", "-R"):
                skip = True
            elif not part.startswith(("-rpath=", "--rpath=", "-R")):
                kept.append(part)
        if kept:
            out.append("-Wl," + ",".join(kept))
    return out


def drop_run_paths(compiler):
    """compiler (a setuptools compiler object) linking without the run paths of Python's LDSHARED."""
    for linker in ("linker_so", "linker_so_cxx"):  # linker_so_cxx: setuptools >= 72
        if getattr(compiler, linker, None):
            setattr(compiler, linker, without_rpath(getattr(compiler, linker)))


def plain_compiler(cmd):
    """A compiler of this platform as setuptools configures it, without what torch's BuildExtension wraps around
    its own (torch's flags and C++ ABI define must not reach a torch-free library)."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler

    compiler = new_compiler(compiler=cmd.compiler.compiler_type if cmd.compiler else None, force=cmd.force)
    customize_compiler(compiler)
    drop_run_paths(compiler)
    ccache = shutil.which("ccache")
    if ccache and not is_msvc(compiler) and "ccache" not in compiler.compiler_so[0]:
        compiler.compiler_so = [ccache] + compiler.compiler_so  # objects another folder's build made are reused
    for name, value in cmd.define or ():
        compiler.define_macro(name, value)
    return compiler


def object_name(source, build_temp, suffix):
    """build_temp/csrc/core/x.o for csrc/core/x.cu (setup.py runs in the source root)."""
    return os.path.join(build_temp, os.path.splitext(os.path.relpath(source))[0] + suffix)


def nvcc_command(ext, source, obj, msvc):
    nvcc = os.path.join(ext.cuda_home, "bin", "nvcc")
    launcher = [shutil.which("ccache")] if shutil.which("ccache") and not msvc else []
    host = [] if msvc else ["-Xcompiler", "-fPIC"]
    # --objdir-as-tempdir: nvcc names its intermediate files after the object rather than its process id
    # (tmpxft_<pid>_...), a name the library keeps (symbols, module ids): two builds would otherwise differ. What
    # still follows the folder: the anonymous namespaces' mangled names hash the source's absolute path
    # (docs/building-wheels.md), so builds in one folder (CI's, wheel-local's) are the same bytes.
    same = ["--objdir-as-tempdir"]
    return launcher + [nvcc, "-c", source, "-o", obj, "-std=c++17", *host, *same, *ext.nvcc_flags]


def dependencies(depfile):
    """The files a make-style depfile (gcc -MMD, nvcc -MD) says an object was built from."""
    with open(depfile) as f:
        text = f.read().replace("\\\n", " ")
    return [p for p in text.partition(":")[2].split() if p != "\\"]


def up_to_date(obj, command):
    """Was obj built by this very command from sources none of which changed since? (The dev loop rebuilds with
    --force: only what changed recompiles, as ninja does for the bindings.)"""
    try:
        with open(obj + ".cmd") as f:
            if f.read() != command:
                return False
        built = os.path.getmtime(obj)
        return all(os.path.getmtime(dep) <= built for dep in dependencies(obj + ".d"))
    except OSError:
        return False


def compile_objects(cmd, ext, compiler):
    """Objects of every source of ext, compiled in parallel where not up to date; returns their paths in source
    order."""
    msvc = is_msvc(compiler)
    obj_suffix = ".obj" if msvc else ".o"
    jobs = []
    for source in ext.sources:
        obj = object_name(source, cmd.build_temp, obj_suffix)
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        jobs.append((source, obj))

    def one(job):
        source, obj = job
        depfile = [] if msvc else ["-MD" if source.endswith(".cu") else "-MMD", "-MF", obj + ".d"]
        if source.endswith(".cu"):
            command = nvcc_command(ext, source, obj, msvc) + depfile
        else:
            postargs = [std_flag(compiler), *ext.cxx_flags, *depfile]
            command = compiler.compiler_so + [source, *postargs]
        record = " ".join(command)
        if not msvc and up_to_date(obj, record):
            return obj
        if source.endswith(".cu"):
            print(record, flush=True)
            done = subprocess.run(command)
            if done.returncode != 0:
                raise RuntimeError(f"nvcc failed on {source} (exit code {done.returncode})")
        else:
            compiler.compile([source], output_dir=cmd.build_temp, extra_postargs=postargs, depends=ext.depends)
            built = compiler.object_filenames([source], output_dir=cmd.build_temp)[0]
            if os.path.abspath(built) != os.path.abspath(obj):
                os.replace(built, obj)
        with open(obj + ".cmd", "w") as f:
            f.write(record)
        return obj

    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, jobs))


def cuda_lib_dir(cuda_home):
    for sub in ("lib64", "lib", os.path.join("lib", "x64"), os.path.join("targets", "x86_64-linux", "lib")):
        if os.path.isdir(os.path.join(cuda_home, sub)):
            return os.path.join(cuda_home, sub)
    return os.path.join(cuda_home, "lib64")


def build_kernel_library(cmd, ext):
    """Compile and link ext (a KernelExtension) for the build_ext command `cmd`, whatever compiler class cmd is."""
    compiler = plain_compiler(cmd)
    objects = compile_objects(cmd, ext, compiler)
    libraries, library_dirs = [], []
    if ext.cuda_home:
        # The CUDA runtime by its soname (libcudart.so.12): the one the CUDA torch of the same major has loaded
        # already (the repair leaves it out of the wheel).
        libraries, library_dirs = ["cudart"], [cuda_lib_dir(ext.cuda_home)]
    out = cmd.get_ext_fullpath(ext.name)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    compiler.link_shared_object(
        objects,
        out,
        libraries=libraries,
        library_dirs=library_dirs,
        extra_postargs=ext.extra_link_args,
        target_lang="c++",
    )


class KernelBuildExt(build_ext):
    """build_ext for a build of kernel libraries alone (no torch in the build environment needed)."""

    def build_extension(self, ext):
        build_kernel_library(self, ext)
