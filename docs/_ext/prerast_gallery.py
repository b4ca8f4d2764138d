"""Sphinx extension: a gallery of the programs in examples/, run on the CPU when the site is built.

Each example of ``prerast_gallery_runs`` (conf.py: name -> command-line arguments of a short run) is imported
from examples/ and its ``main(argv)`` called with those arguments, writing its PNG; an optimisation returns its
losses, which are plotted with matplotlib. One page per example (its description, the command, the images, the
loss curve and the code) and an index with thumbnails are written into docs/gallery/ (generated, not committed)
before Sphinx reads the sources. An example that fails fails the build.
"""

import contextlib
import importlib
import inspect
import io
import os
import re
import sys
import time

from sphinx.util import logging

logger = logging.getLogger(__name__)
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")


def run_example(name, argv, out_dir):
    """Run examples/<name>.py's main(argv) with its PNG written to out_dir; returns (png, losses or None,
    seconds, what it printed)."""
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    module = importlib.import_module(name)
    png = os.path.join(out_dir, f"{name}.png")
    printed = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(printed):
        result = module.main(list(argv) + ["--device", "cpu", "--out", png])
    seconds = time.perf_counter() - start
    losses = [float(x) for x in result] if isinstance(result, list) else None
    return module, png, losses, seconds, printed.getvalue()


def plot_losses(losses, path, title):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3), dpi=100)
    ax.plot(range(1, len(losses) + 1), losses, color="#3b6fb6")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _description(module):
    doc = inspect.cleandoc(module.__doc__ or "")
    paragraphs = [p for p in doc.split("\n\n") if p.strip() and not p.startswith("    ")]
    text = [p.replace("\n", " ") for p in paragraphs if not p.lstrip().startswith("python ")]
    return text[0].rstrip("."), text[1:]


def _layout(printed):
    """What the example says its PNG shows: the parenthesis of its 'wrote PATH (target | fit)' line."""
    found = re.search(r"^wrote \S+ \((.+)\)\s*$", printed, re.M)
    return found.group(1) if found else None


def example_page(name, argv, png, loss_png, losses, seconds, module, printed=""):
    summary, rest = _description(module)
    command = " ".join(["python", f"examples/{name}.py"] + list(argv))
    lines = [f"# examples/{name}.py", "", f"**{summary}.**", ""] + [p + "\n" for p in rest]
    lines += [
        f"Built with `{command}` on the CPU of the documentation build ({seconds:.1f} s"
        + (f", {len(losses)} steps" if losses else "")
        + "); the program's defaults run longer and larger.",
        "",
    ]
    layout = _layout(printed)
    lines += [
        f"```{{figure}} {os.path.basename(png)}",
        f":alt: what {name}.py wrote",
        ":class: prerast-gallery-result",
        "",
        f"What `{name}.py` wrote" + (f": {layout}." if layout else "."),
        "```",
        "",
    ]
    if losses:
        lines += [
            f"The loss fell from {losses[0]:.4g} to {losses[-1]:.4g}:",
            "",
            f"```{{image}} {os.path.basename(loss_png)}",
            f":alt: loss curve of {name}.py",
            "```",
            "",
        ]
    lines += ["## The program", "", f"```{{literalinclude}} ../../examples/{name}.py", ":language: python", "```", ""]
    return "\n".join(lines)


def index_page(entries):
    lines = (
        [
            "# Gallery",
            "",
            "The programs of `examples/`, each run briefly on the CPU while this site was built: what they wrote, "
            "and how their loss fell. Each one also takes `--device cuda`, `--steps`, `--resolution` and `--out`; "
            "they share `examples/common.py` (cameras, meshes, the PNG writer).",
            "",
            "```{toctree}",
            ":hidden:",
            "",
        ]
        + [name for name, _ in entries]
        + ["```", ""]
    )
    for name, summary in entries:
        lines += [
            f"## [{name}.py]({name}.md)",
            "",
            summary + ".",
            "",
            ":::{container} prerast-gallery",
            f"[![{summary}]({name}.png)]({name}.md)",
            ":::",
            "",
        ]
    return "\n".join(lines)


def _write(path, text):
    """Write only what changed, so that Sphinx rereads only changed pages."""
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)


def build_gallery(app):
    runs = app.config.prerast_gallery_runs
    out_dir = os.path.join(app.srcdir, "gallery")
    os.makedirs(out_dir, exist_ok=True)
    entries = []
    for name, argv in runs.items():
        module, png, losses, seconds, printed = run_example(name, argv, out_dir)
        logger.info(f"gallery: examples/{name}.py ran in {seconds:.1f} s")
        loss_png = None
        if losses:
            loss_png = plot_losses(losses, os.path.join(out_dir, f"{name}_loss.png"), f"{name}.py")
        _write(
            os.path.join(out_dir, f"{name}.md"),
            example_page(name, argv, png, loss_png, losses, seconds, module, printed),
        )
        entries.append((name, _description(module)[0]))
    _write(os.path.join(out_dir, "index.md"), index_page(entries))


def setup(app):
    app.add_config_value("prerast_gallery_runs", {}, "env")
    app.connect("builder-inited", build_gallery)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
