"""Rasterization contexts: which device an op runs on, and whether a depth peeler holds the context."""
import warnings

import torch


class _Context:
    device: torch.device

    def __init__(self):
        self._active_peeler = None

    @property
    def active_depth_peeler(self):
        """The DepthPeeler whose 'with' block holds this context, or None."""
        return self._active_peeler

    def _check_free(self, what):
        if self._active_peeler is not None:
            raise RuntimeError(f"{what}: this context is reserved by an active DepthPeeler; finish the peeler's "
                               "'with' block first, or use another context")


class RasterizeCudaContext(_Context):
    """Rasterize on a CUDA device.

    Args:
        device (torch.device | str | int, optional): the CUDA device, e.g. ``'cuda:1'`` or 1. Default None: the
            current device.
        output_db (bool): False makes :func:`rasterize` skip the image-space derivatives rast_db and return an
            empty ``[N, H, W, 0]`` tensor in their place (at 4096² that halves what the forward writes).
            Default True.

    Raises:
        RuntimeError: device is None and CUDA is not available.
        ValueError: device is not a CUDA device.

    Differences from nvdiffrast:
        output_db is a prerast addition (as in nvdiffrast's GL context).
    """

    def __init__(self, device=None, output_db=True):
        super().__init__()
        if device is None:
            if not torch.cuda.is_available():
                raise RuntimeError("RasterizeCudaContext: CUDA is not available; use RasterizeCpuContext()")
            device = torch.device("cuda", torch.cuda.current_device())
        else:
            device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
            if device.type != "cuda":
                raise ValueError(f"RasterizeCudaContext: device must be a CUDA device, got {device}")
            if device.index is None:
                device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.output_db = bool(output_db)

    def __repr__(self):
        return f"RasterizeCudaContext(device={self.device}{'' if self.output_db else ', output_db=False'})"


class RasterizeCpuContext(_Context):
    """Rasterize on the CPU, with the same results as the CUDA context.

    Args:
        output_db (bool): as for :class:`RasterizeCudaContext`. Default True.

    Differences from nvdiffrast:
        A prerast addition: for machines without a GPU, and for tests.
    """

    def __init__(self, output_db=True):
        super().__init__()
        self.device = torch.device("cpu")
        self.output_db = bool(output_db)

    def __repr__(self):
        return f"RasterizeCpuContext({'' if self.output_db else 'output_db=False'})"


class RasterizeGLContext(RasterizeCudaContext):
    """Accepted for compatibility: prerast has no OpenGL backend, so this is a :class:`RasterizeCudaContext`.

    Making one warns with a DeprecationWarning.

    Args:
        output_db (bool): as for :class:`RasterizeCudaContext`. Default True.
        mode (str): ``'automatic'`` or ``'manual'``; accepted and kept as ``self.mode``, with no effect.
            Default ``'automatic'``.
        device (torch.device | str | int, optional): the CUDA device. Default None: the current device.

    Raises:
        ValueError: mode is neither ``'automatic'`` nor ``'manual'``, or device is not a CUDA device.
        RuntimeError: device is None and CUDA is not available.

    Differences from nvdiffrast:
        No OpenGL: programs need no display or EGL. :meth:`set_context` and :meth:`release_context` do nothing.
    """

    def __init__(self, output_db=True, mode="automatic", device=None):
        warnings.warn("RasterizeGLContext is deprecated: prerast has no OpenGL backend and rasterizes with CUDA; "
                      "use RasterizeCudaContext", DeprecationWarning, stacklevel=2)
        if mode not in ("automatic", "manual"):
            raise ValueError(f"RasterizeGLContext: mode must be 'automatic' or 'manual', got {mode!r}")
        super().__init__(device=device, output_db=output_db)
        self.mode = mode

    def set_context(self):
        """No-op: there is no OpenGL context to make current."""

    def release_context(self):
        """No-op: there is no OpenGL context to release."""
