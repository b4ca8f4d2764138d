"""Random and hand-made test scenes (NumPy), shared by the op tests."""

import numpy as np
import torch


def random_scene(rng, num_images=2, num_tris=20, perspective=True, spread=1.2):
    """Random triangles in clip space: [N, 3T, 4] positions (each triangle its own vertices) and [T, 3] tris."""
    V = 3 * num_tris
    xy = rng.uniform(-spread, spread, size=(num_images, V, 2))
    centers = np.repeat(rng.uniform(-0.8, 0.8, size=(num_images, num_tris, 2)), 3, axis=1)
    xy = centers + 0.5 * (xy - centers)
    w = rng.uniform(0.5, 3.0, size=(num_images, V, 1)) if perspective else np.ones((num_images, V, 1))
    z = rng.uniform(-0.9, 0.9, size=(num_images, V, 1))
    pos = np.concatenate([xy * w, z * w, w], -1)
    tri = np.arange(V, dtype=np.int32).reshape(num_tris, 3)
    return pos.astype(np.float32), tri


def to_torch(pos, tri, device):
    return torch.from_numpy(np.ascontiguousarray(pos)).to(device), torch.from_numpy(tri).to(device)
