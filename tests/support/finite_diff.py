"""Finite-difference gradient checks for float32 ops.

The loss is L = sum(w * f(inputs)) with fixed random weights w, accumulated in float64. Each checked element of
an input is moved by -eps and +eps: where the two one-sided differences disagree, a kink of the piecewise-smooth
op (a texel centre, a mip level boundary, a cube face edge) lies within eps and the element is skipped; for the
rest, the autograd gradient must match the central difference. A minimum fraction of elements must be checked,
so a test cannot pass by skipping everything.
"""

import numpy as np
import torch


def check_gradients(fn, inputs, wrt, eps, rtol=2e-2, atol=2e-3, min_checked=0.6, max_elements=400, seed=0):
    """fn(**inputs) -> tensor; wrt: names of inputs to check; eps: float or {name: float}."""
    gen = torch.Generator().manual_seed(seed)
    base = {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    out = fn(**base)
    weights = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.device)

    def loss(args):
        with torch.no_grad():
            return float((fn(**args).double() * weights).sum())

    args = {k: (v.clone().requires_grad_(k in wrt) if isinstance(v, torch.Tensor) else v) for k, v in base.items()}
    (fn(**args).double() * weights).sum().backward()
    for name in wrt:
        grad = args[name].grad
        assert grad is not None, f"no gradient reached {name}"
        grad = grad.detach().cpu().double().flatten()
        h = eps[name] if isinstance(eps, dict) else eps
        x = base[name]
        count = x.numel()
        picks = range(count) if count <= max_elements else torch.randperm(count, generator=gen)[:max_elements].tolist()
        l0 = loss(base)
        checked, bad = 0, []
        for i in picks:
            moved = dict(base)
            vals = []
            for step in (-h, h):
                xi = x.clone()
                xi.view(-1)[i] += step
                moved[name] = xi
                vals.append(loss(moved))
            lo, hi = vals
            fwd, bwd = (hi - l0) / h, (l0 - lo) / h
            if abs(fwd - bwd) > 0.05 * (abs(fwd) + abs(bwd)) + 1e-3:
                continue  # a kink within eps
            central = (hi - lo) / (2 * h)
            checked += 1
            if abs(grad[i] - central) > atol + rtol * abs(central):
                bad.append((i, float(grad[i]), central))
        assert checked >= min_checked * len(picks), f"{name}: only {checked} of {len(picks)} elements were smooth"
        assert not bad, f"{name}: gradient differs from finite differences at (index, autograd, numeric) {bad[:6]}"
        assert np.isfinite(grad.numpy()).all()
