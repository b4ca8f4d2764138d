"""texture: every filter mode on 1024^2 and 4096^2 textures with 3 and 4 channels, at 1024^2 output
(quick: 1024^2 textures, 256^2 output). The mipmapped modes build the chain inside each call, as a training
step that changes the texture would; backward includes folding the level gradients back into the texture."""

import torch

import prerast

FILTERS = ("nearest", "linear", "linear-mipmap-nearest", "linear-mipmap-linear")


def _inputs(device, tex_size, channels, out_size):
    gen = torch.Generator().manual_seed(0)
    tex = torch.rand(1, tex_size, tex_size, channels, generator=gen).to(device).requires_grad_()
    # A gently warped grid whose pixels cover 1 to 8 texels (left to right), so the mip modes blend levels.
    texels = torch.linspace(1.0, 8.0, out_size).view(1, -1)
    ys, xs = torch.meshgrid(torch.arange(out_size) + 0.5, torch.arange(out_size) + 0.5, indexing="ij")
    step = texels / tex_size
    uv = torch.stack([xs * step + 0.05 * torch.sin(6 * ys / out_size), ys * step], -1)[None]
    uv_da = torch.zeros(1, out_size, out_size, 4)
    uv_da[..., 0] = step
    uv_da[..., 3] = step
    return tex, uv.to(device).requires_grad_(), uv_da.to(device).requires_grad_()


def cases(device, quick):
    out_size = 256 if quick else 1024
    for tex_size in (1024,) if quick else (1024, 4096):
        for channels in (3, 4):
            tex, uv, uv_da = _inputs(device, tex_size, channels, out_size)
            for mode in FILTERS:
                da = uv_da if mode.startswith("linear-mipmap") else None
                yield {
                    "name": f"texture {mode} {tex_size}^2 c{channels} -> {out_size}^2",
                    "forward": (lambda m=mode, d=da, t=tex, u=uv: prerast.texture(t, u, d, filter_mode=m)),
                    "inputs": [t for t in (tex, uv, da) if t is not None],
                }
