"""antialias and antialias_construct_topology_hash: the public API over the prerast::antialias_* ops, and
those ops' fakes and autograd."""

import torch

from . import _checks, _loader, _ops

_OP = "antialias"


class TopologyHash:
    """Which triangles share each edge of a triangle list, as :func:`antialias_construct_topology_hash` builds it
    on tri's device; reusable for every :func:`antialias` call with the same tri (instanced or range mode).

    Half-edge h = 3 * t + i is the edge of triangle t opposite its vertex i. The table lists all half-edges
    grouped by undirected edge {a, b} of vertex indices: group_of[h] is h's group, and
    half_edges[group_start[g]:group_start[g + 1]] are the half-edges of group g. group_start always has 3 T + 1
    entries (those past the last group equal 3 T), so that every shape follows from T alone and the table can be
    built inside torch.compile without data-dependent shapes.

    Args:
        num_triangles (int): T, the number of triangles of tri.
        half_edges (torch.Tensor): int32 ``[3 T]``, the half-edges sorted by undirected edge.
        group_of (torch.Tensor): int32 ``[3 T]``, the group of each half-edge.
        group_start (torch.Tensor): int32 ``[3 T + 1]``, where each group begins in half_edges.

    Differences from nvdiffrast:
        prerast's own object, with documented tables; nvdiffrast's is opaque and the two cannot be mixed.
    """

    __slots__ = ("num_triangles", "device", "half_edges", "group_of", "group_start")

    def __init__(self, num_triangles, half_edges, group_of, group_start):
        self.num_triangles = num_triangles
        self.device = half_edges.device
        self.half_edges = half_edges
        self.group_of = group_of
        self.group_start = group_start

    def __repr__(self):
        edges = int((self.group_start[:-1] < 3 * self.num_triangles).sum())
        return f"TopologyHash(num_triangles={self.num_triangles}, edges={edges}, device={self.device})"


@_checks.with_limits
def antialias_construct_topology_hash(tri):
    """Build the edge → adjacent triangles table that :func:`antialias` uses to tell silhouette edges from edges
    inside a surface. Build it once per triangle list to reuse it.

    Args:
        tri (torch.Tensor): int32 ``[T, 3]`` non-negative vertex indices, T up to {MAX_ANTIALIAS_TRIANGLES}.

    Returns:
        TopologyHash: the table, on tri's device.

    Raises:
        TypeError: tri is not an int32 tensor.
        ValueError: tri is not ``[T, 3]`` or has too many triangles.
        IndexError: a CPU tri holds a negative index (other devices: :func:`antialias` checks).
    """
    op = "antialias_construct_topology_hash"
    _loader.require()
    _checks.tensor(op, "tri", tri)
    if tri.dtype != torch.int32:
        raise TypeError(f"{op}: tri must be Int (int32), got {tri.dtype}")
    if tri.dim() != 2 or tri.shape[1] != 3:
        raise ValueError(f"{op}: tri must have shape [T, 3], got {list(tri.shape)}")
    if tri.shape[0] > _checks.MAX_ANTIALIAS_TRIANGLES:
        raise ValueError(
            f"{op}: {tri.shape[0]} triangles is more than the {_checks.MAX_ANTIALIAS_TRIANGLES} prerast supports"
        )
    # Reading the indices back would stall a GPU (and break a compiled graph): only CPU indices are checked here.
    # antialias itself checks them on every device.
    if tri.device.type == "cpu" and not torch.compiler.is_compiling() and tri.numel() and int(tri.min()) < 0:
        raise IndexError(f"{op}: tri holds a negative vertex index ({int(tri.min())})")
    num_triangles = tri.shape[0]
    t = tri.long()
    ends = torch.stack([t[:, [1, 2, 0]], t[:, [2, 0, 1]]], -1)  # half-edge i of a triangle: vertices i+1, i+2
    key = (ends.amin(-1) << 32 | ends.amax(-1)).reshape(-1)  # undirected edge as one int64
    sorted_key, order = torch.sort(key, stable=True)
    first = torch.ones_like(sorted_key, dtype=torch.bool)  # where a group of equal keys begins
    first[1:] = sorted_key[1:] != sorted_key[:-1]
    group = torch.cumsum(first, 0) - 1  # group of each sorted half-edge
    position = torch.arange(key.numel(), device=tri.device)
    group_start = torch.full((key.numel() + 1,), key.numel(), dtype=torch.int64, device=tri.device)
    group_start = group_start.scatter_reduce(0, group, position, reduce="amin")
    group_of = torch.empty_like(order).scatter_(0, order, group)
    return TopologyHash(num_triangles, order.int(), group_of.int(), group_start.int())


@_ops.raises_typed
def antialias(color, rast, pos, tri, topology_hash=None, pos_gradient_boost=1.0):
    """Antialias silhouette edges analytically, with gradients to the vertex positions.

    For each pair of horizontally or vertically neighbouring pixels that show different surfaces, the nearer
    pixel's triangle decides: the segment between the two pixel centres leaves it through one of its edges. When
    that edge is a silhouette (no triangle on the same two vertex indices continues the surface on screen), the
    pixel whose footprint the edge cuts is blended toward its neighbour by the exact coverage along the segment.

    Args:
        color (torch.Tensor): float32 ``[N, H, W, C]`` shaded image. Differentiable.
        rast (torch.Tensor): float32 ``[N, H, W, 4]`` from :func:`rasterize` with the same pos and tri.
        pos (torch.Tensor): float32 ``[N, V, 4]`` (instanced) or ``[V, 4]`` (range mode) clip-space vertices, as
            rasterized. Differentiable.
        tri (torch.Tensor): int32 ``[T, 3]``, as rasterized.
        topology_hash (TopologyHash, optional): from ``antialias_construct_topology_hash(tri)`` on the same
            device. Default None: built inside the call.
        pos_gradient_boost (float): factor applied to the gradient to pos (a number, or a 0-d tensor or array).
            Default 1.0.

    Returns:
        torch.Tensor: float32, shaped like color: the antialiased image.

    Raises:
        TypeError: an argument is not a tensor or has the wrong dtype, topology_hash does not come from
            :func:`antialias_construct_topology_hash`, or pos_gradient_boost is not a number.
        ValueError: a wrong shape, tensors on different devices, a topology_hash built for another tri or device,
            or a non-finite pos_gradient_boost.
        IndexError: tri holding a vertex index outside ``[0, V)`` (on CUDA: a device-side assert).

    Gradients:
        To color and, through where the edges cross the pixel segments, to pos (times pos_gradient_boost).

    Differences from nvdiffrast:
        The same directions (a horizontal pixel pair considers edges closer to vertical, a vertical pair the
        others), but prerast's own blend and silhouette test: images and position gradients agree in kind, not to
        the last bit.
    """
    _loader.require()
    for name, value, dtype in (
        ("color", color, torch.float32),
        ("rast", rast, torch.float32),
        ("pos", pos, torch.float32),
        ("tri", tri, torch.int32),
    ):
        _checks.tensor(_OP, name, value, dtype)
    device = _checks.same_device(_OP, color=color, rast=rast, pos=pos, tri=tri)
    pos_gradient_boost = _checks.real_number(_OP, "pos_gradient_boost", pos_gradient_boost)
    if topology_hash is None:
        topology_hash = antialias_construct_topology_hash(tri.contiguous())
    elif not isinstance(topology_hash, TopologyHash):
        raise TypeError(
            f"{_OP}: topology_hash must come from antialias_construct_topology_hash(tri), got "
            f"{type(topology_hash).__name__}"
        )
    if topology_hash.device != device:
        raise ValueError(
            f"{_OP}: topology_hash was built on {topology_hash.device} but the inputs are on {device}; "
            "build it from tri on the same device"
        )
    if tri.dim() == 2 and topology_hash.num_triangles != tri.shape[0]:
        raise ValueError(
            f"{_OP}: topology_hash was built for {topology_hash.num_triangles} triangles but tri has "
            f"{tri.shape[0]}; build it with antialias_construct_topology_hash(tri) for this tri"
        )
    return torch.ops.prerast.antialias_fwd(
        color.contiguous(),
        rast.contiguous(),
        pos.contiguous(),
        tri.contiguous(),
        topology_hash.half_edges,
        topology_hash.group_of,
        topology_hash.group_start,
        float(pos_gradient_boost),
    )[0]


# --- the ops' fakes and autograd ------------------------------------------------------------------------------
# Each takes the op's arguments by schema name (_ops.py says how); _ops.define registers them with torch once the
# plugin's schemas exist.


def _antialias_fwd_fake(color, rast, pos, tri, half_edges, group_of, group_start, pos_gradient_boost):
    return torch.empty_like(color), color.new_empty((*rast.shape[:3], 2))


def _antialias_bwd_fake(
    color, rast, pos, tri, half_edges, group_of, group_start, crossing, grad_out, pos_gradient_boost, with_pos
):
    return torch.empty_like(color), torch.empty_like(pos) if with_pos else pos.new_empty((0,))


def _antialias_setup(ctx, a, output):
    ctx.save_for_backward(a.color, a.rast, a.pos, a.tri, a.half_edges, a.group_of, a.group_start, output[1])
    ctx.boost = a.pos_gradient_boost


def _antialias_backward(ctx, grad_out, grad_crossing):
    with_pos = ctx.needs_input_grad[2]
    grad_color, grad_pos = torch.ops.prerast.antialias_bwd(
        *ctx.saved_tensors, grad_out.contiguous(), ctx.boost, with_pos
    )
    return {"color": grad_color, "pos": grad_pos if with_pos else None}


_ops.define(
    {
        "antialias_fwd": (_antialias_fwd_fake, _antialias_setup, _antialias_backward),
        "antialias_bwd": (_antialias_bwd_fake, _ops.save_nothing, None),
    }
)
