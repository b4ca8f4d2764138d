"""Each example program, run briefly as its command line would: it writes its PNG, and its loss falls by the
stated factor (the mean of the last three steps against the first, which use random views)."""

import importlib
import os
import struct
import sys

import pytest
import torch

# The example programs import their shared module as `common`, from their own folder.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
pytestmark = pytest.mark.examples

# example: (steps, resolution, factor by which the loss falls at least)
SHORT_RUNS = {
    "cube": (40, 48, 5),
    "pose": (40, 48, 5),
    "textured_sphere": (20, 48, 10),
    "envmap": (20, 48, 10),
}


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_triangle(device, tmp_path):
    triangle = importlib.import_module("triangle")
    image = triangle.main(["--device", device, "--resolution", "32", "--out", str(tmp_path / "t.png")])
    assert png_size(tmp_path / "t.png") == (32, 32)
    corner_colours = torch.eye(3)
    # Pixels near each corner show mostly that corner's colour; the centroid shows the mean of the three.
    near = image[0, [4, 4, 25], [5, 26, 16]].cpu()
    assert (near.argmax(-1) == torch.arange(3)).all() and (near.max(-1).values > 0.7).all()
    torch.testing.assert_close(image[0, 10:12, 15:17].mean((0, 1)).cpu(), corner_colours.mean(0), atol=0.08, rtol=0)
    assert (image[0, -1] == 0).all()  # the top row is background


@pytest.mark.parametrize("name", sorted(SHORT_RUNS))
def test_loss_falls(device, tmp_path, name, capsys):
    steps, resolution, factor = SHORT_RUNS[name]
    example = importlib.import_module(name)
    out = tmp_path / f"{name}.png"
    losses = example.main(
        ["--device", device, "--steps", str(steps), "--resolution", str(resolution), "--out", str(out)]
    )
    assert len(losses) == steps
    assert "loss" in capsys.readouterr().out  # the progress lines
    assert sum(losses[-3:]) / 3 < losses[0] / factor, f"{name}: loss {losses[0]:.6f} -> {losses[-3:]}"
    w, h = png_size(out)
    assert h == (2 * resolution if name == "pose" else resolution) and w >= 2 * resolution
