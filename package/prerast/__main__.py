"""prerast's command line: `python -m prerast <command>`."""
import argparse
import sys


def cmd_demo(args):
    import prerast
    from prerast import _demo, _png

    img, seconds = _demo.render(args.device, args.size)
    _png.write_png(args.out, img)
    print(f"prerast {prerast.__version__}: rendered {args.size}x{args.size} on {args.device} in {seconds * 1000:.1f} ms "
          f"-> {args.out}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m prerast", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="render a small scene to a PNG file")
    demo.add_argument("--out", default="prerast-demo.png")
    demo.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    demo.add_argument("--size", type=int, default=256)
    demo.set_defaults(func=cmd_demo)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
