"""prerast's command line: `python -m prerast <command>`.

demo         render a small scene to a PNG file
doctor       what is installed and running, whether they fit, and the command that fixes what does not
build-wheel  build and repair a wheel for exactly this environment's torch, CUDA and Python
precompile   compile a render function once, into one artifact a runtime without a compiler loads
"""

import argparse
import os
import sys


def cmd_demo(args):
    import prerast
    from prerast import _demo, _loader, _png

    _loader.load(build=True)  # the import tolerated a failure for the command line; now the demo needs the plugin
    img, seconds = _demo.render(args.device, args.size)
    _png.write_png(args.out, img)
    print(
        f"prerast {prerast.__version__}: rendered {args.size}x{args.size} on {args.device} in {seconds * 1000:.1f} ms "
        f"-> {args.out}"
    )
    return 0


def cmd_doctor(args):
    from prerast import _doctor

    return _doctor.main(as_json=args.json)


def cmd_build_wheel(args):
    from prerast import _build_wheel

    return _build_wheel.main(args.out, args.arch, repair=not args.no_repair, keep_temp=args.keep_temp)


def cmd_precompile(args):
    import sys

    import torch

    from prerast import _precompile

    sys.path.insert(0, os.getcwd())  # MODULE:NAME as `python -m` would find it
    fn = _precompile.import_target(args.target)
    inputs = torch.load(args.inputs, weights_only=True)
    _precompile.precompile(fn, tuple(inputs), args.out, training=args.training, dynamic=args.dynamic)
    route = "training (torch.compile artifact)" if args.training else "inference (AOTInductor package)"
    print(f"{args.out}: {route}, {os.path.getsize(args.out)} bytes")
    return 0


def parser():
    p = argparse.ArgumentParser(
        prog="python -m prerast", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="render a small scene to a PNG file")
    demo.add_argument("--out", default="prerast-demo.png")
    demo.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    demo.add_argument("--size", type=int, default=256)
    demo.set_defaults(func=cmd_demo)

    doctor = sub.add_parser(
        "doctor",
        help="diagnose the installation; exit code 0 when prerast can run",
        description="Checks every library it finds against its stamped size and SHA-256, and "
        "tries the load in a child process first. Exit codes: 0 prerast can run "
        "here; 1 no plugin that fits could be loaded (or every one is damaged or "
        "crashes on load); 2 the plugin loaded but has no code for a visible GPU.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=cmd_doctor)

    build = sub.add_parser(
        "build-wheel",
        help="build and repair a wheel for this environment's torch/CUDA/Python",
        description="Needs a C++ compiler and, for a CUDA torch, the CUDA toolkit; no GPU. "
        "Prints the wheel's path on stdout. Exit codes: 3 something needed is "
        "missing, 4 the build failed, 5 the repair failed.",
    )
    build.add_argument(
        "--arch",
        help='GPU archs, e.g. "8.0;9.0+PTX" or 8.0,9.0 (default: PRERAST_CUDA_ARCH_LIST, '
        "TORCH_CUDA_ARCH_LIST, else every arch torch supports from 7.5 up, + PTX)",
    )
    build.add_argument("--out", default="dist", help="folder for the wheel (default: dist)")
    build.add_argument(
        "--no-repair",
        action="store_true",
        help="skip the repair (auditwheel, delvewheel or "
        "delocate: this OS's); the wheel then fits this machine's system only",
    )
    build.add_argument("--keep-temp", action="store_true", help="keep the temporary build tree")
    build.set_defaults(func=cmd_build_wheel)

    pre = sub.add_parser(
        "precompile",
        help="compile a render function into one artifact for a compiler-free runtime",
        description="Needs a C++ compiler (and, for CUDA inputs, Triton). The runtime loads the "
        "artifact with prerast.load_precompiled(path).",
    )
    pre.add_argument("target", help="MODULE:NAME of a function or torch.nn.Module (a class is instantiated)")
    pre.add_argument("--inputs", required=True, help="a torch.save'd tuple (or list) of example inputs")
    pre.add_argument("--out", required=True, help="the artifact file to write")
    pre.add_argument(
        "--training",
        action="store_true",
        help="forward and backward (torch.compile artifact; on the CPU its load needs a C++ compiler)",
    )
    pre.add_argument("--dynamic", action="store_true", help="let every dimension of the tensor inputs vary")
    pre.set_defaults(func=cmd_precompile)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    if getattr(args, "out", None) and args.func is cmd_build_wheel:
        args.out = os.path.abspath(args.out)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
