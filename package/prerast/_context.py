"""Rasterization contexts: which device an op runs on, and whether a depth peeler holds the context.

The constructors take nvdiffrast's arguments (device, output_db, and the GL context's mode). With the environment
variable PRERAST_CUDA_CONTEXT_FALLBACK=cpu set, a RasterizeCudaContext (or RasterizeGLContext) made where no GPU
is available, or given device='cpu', rasterizes on the CPU instead of raising, and says so once (a UserWarning), so
that a program written for nvdiffrast runs on a machine without a GPU with only its import changed. It is off by default: a program that
asked for a GPU otherwise learns that there is none.
"""

import os
import threading
import warnings

import torch

FALLBACK_VARIABLE = "PRERAST_CUDA_CONTEXT_FALLBACK"
_fallback_warned = []
# Contexts are shared between threads (one per device is the usual program): what is checked and then changed, the
# fallback's one warning and a context's reservation by a DepthPeeler, is done under this lock, which a
# free-threaded Python needs in place of the GIL.
_lock = threading.Lock()


class _Context:
    device: torch.device

    def __init__(self, output_db):
        self._active_peeler = None
        self.output_db = _output_db(type(self).__name__, output_db)

    @property
    def active_depth_peeler(self):
        """The DepthPeeler whose 'with' block holds this context, or None."""
        return self._active_peeler

    def _reserve(self, peeler, what):
        """Reserve the context for `peeler` (its 'with' block), or raise if another holds it."""
        with _lock:
            self._check_free(what)
            self._active_peeler = peeler

    def _check_free(self, what):
        if self._active_peeler is not None:
            raise RuntimeError(
                f"{what}: this context is reserved by an active DepthPeeler; finish the peeler's "
                "'with' block first, or use another context"
            )


def _output_db(cls, value):
    # bool, or what bool() reads unambiguously as one: an int 0/1 or a NumPy bool (nvdiffrast takes bool(value)).
    if type(value).__name__ in ("bool", "bool_") or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"{cls}: output_db must be True or False, got {value!r} ({type(value).__name__})")


def _as_device(cls, device):
    """torch.device from what nvdiffrast's contexts take: a torch.device, a string ('cuda', 'cuda:1', 'cpu') or a
    CUDA device index. Anything else is a ValueError naming the argument."""
    if isinstance(device, torch.device):
        return device
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ValueError(f"{cls}: device index must be >= 0, got {device}")
        return torch.device("cuda", device)
    if isinstance(device, str):
        try:
            return torch.device(device)
        except (RuntimeError, ValueError) as e:
            raise ValueError(f"{cls}: device {device!r} is not a device name such as 'cuda', 'cuda:1' or 'cpu'") from e
    raise ValueError(
        f"{cls}: device must be None, a torch.device, a device name such as 'cuda:0', or a CUDA "
        f"device index; got {device!r} ({type(device).__name__})"
    )


def _fallback_to_cpu(cls, why="CUDA is not available"):
    """Whether a CUDA context made without a GPU, or given device='cpu', rasterizes on the CPU
    (PRERAST_CUDA_CONTEXT_FALLBACK=cpu)."""
    value = os.environ.get(FALLBACK_VARIABLE, "").strip().lower()
    if value in ("", "0", "off", "no"):
        return False
    if value != "cpu":
        raise ValueError(
            f"{cls}: {FALLBACK_VARIABLE}={value!r} is not understood; set it to 'cpu' (rasterize on "
            "the CPU where no GPU is available) or leave it unset"
        )
    with _lock:
        first = not _fallback_warned
        if first:
            _fallback_warned.append(True)
    if first:
        warnings.warn(
            f"{cls}: {why}; rasterizing on the CPU ({FALLBACK_VARIABLE}=cpu). Tensors must be on the CPU too.",
            UserWarning,
            stacklevel=3,
        )
    return True


class RasterizeCudaContext(_Context):
    """Rasterize on a CUDA device.

    Args:
        device (torch.device | str | int, optional): the CUDA device, e.g. ``'cuda:1'`` or 1. Default None: the
            current device.
        output_db (bool): False makes :func:`rasterize` skip the image-space derivatives rast_db and return an
            empty ``[N, H, W, 0]`` tensor in their place (at 4096² that halves what the forward writes); the
            gradients from rast are unchanged. Default True.

    Raises:
        RuntimeError: CUDA is not available (unless ``PRERAST_CUDA_CONTEXT_FALLBACK=cpu`` is set: then the
            context rasterizes on the CPU, ``device`` is cpu, and the first such context warns).
        ValueError: device is not a CUDA device (with ``PRERAST_CUDA_CONTEXT_FALLBACK=cpu``, ``device='cpu'``
            is taken: the context rasterizes on the CPU), not a device at all, or an index no GPU has.
        TypeError: output_db is not a bool.

    Differences from nvdiffrast:
        output_db is a prerast addition (as in nvdiffrast's GL context); the CPU fallback is opt-in.
    """

    def __init__(self, device=None, output_db=True):
        cls = type(self).__name__
        super().__init__(output_db)
        device = None if device is None else _as_device(cls, device)
        if device is not None and device.type != "cuda":
            # Programs written for nvdiffrast that pick their device at run time construct CUDA contexts with
            # device='cpu': with the fallback on, they rasterize on the CPU as a GPU-less machine would.
            if device.type == "cpu" and _fallback_to_cpu(cls, f"device={str(device)!r} was asked for"):
                self.device = device
                return
            raise ValueError(
                f"{cls}: device must be a CUDA device, got {device}; use RasterizeCpuContext() for the CPU, or set "
                f"{FALLBACK_VARIABLE}=cpu to make CUDA contexts given device='cpu' rasterize on the CPU"
            )
        if not torch.cuda.is_available():
            if _fallback_to_cpu(cls):
                self.device = torch.device("cpu")
                return
            raise RuntimeError(
                f"{cls}: CUDA is not available; use RasterizeCpuContext(), or set "
                f"{FALLBACK_VARIABLE}=cpu to make CUDA contexts rasterize on the CPU"
            )
        if device is None or device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        elif device.index >= torch.cuda.device_count():
            raise ValueError(
                f"{cls}: device {device} does not exist: {torch.cuda.device_count()} CUDA device(s) are visible"
            )
        self.device = device

    def __repr__(self):
        return f"{type(self).__name__}(device={self.device}{'' if self.output_db else ', output_db=False'})"


class RasterizeCpuContext(_Context):
    """Rasterize on the CPU, with the same results as the CUDA context.

    Args:
        device (str | torch.device, optional): None, ``'cpu'`` or ``torch.device('cpu')``, for programs that pass
            their device to the context as nvdiffrast's take it. Default None.
        output_db (bool): as for :class:`RasterizeCudaContext`. Default True.

    Raises:
        ValueError: device is not the CPU.
        TypeError: output_db is not a bool.

    Differences from nvdiffrast:
        A prerast addition: for machines without a GPU, and for tests.
    """

    def __init__(self, device=None, output_db=True):
        super().__init__(output_db)
        if device is not None:
            device = _as_device("RasterizeCpuContext", device)
            if device.type != "cpu":
                raise ValueError(
                    f"RasterizeCpuContext: device must be 'cpu' (or None), got {device}; use "
                    "RasterizeCudaContext for a GPU"
                )
        self.device = torch.device("cpu")

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
        RuntimeError: CUDA is not available (unless ``PRERAST_CUDA_CONTEXT_FALLBACK=cpu`` is set).

    Differences from nvdiffrast:
        No OpenGL: programs need no display or EGL. :meth:`set_context` and :meth:`release_context` do nothing.
    """

    def __init__(self, output_db=True, mode="automatic", device=None):
        warnings.warn(
            "RasterizeGLContext is deprecated: prerast has no OpenGL backend and rasterizes with CUDA; "
            "use RasterizeCudaContext",
            DeprecationWarning,
            stacklevel=2,
        )
        if mode not in ("automatic", "manual"):
            raise ValueError(f"RasterizeGLContext: mode must be 'automatic' or 'manual', got {mode!r}")
        super().__init__(device=device, output_db=output_db)
        self.mode = mode

    def set_context(self):
        """No-op: there is no OpenGL context to make current."""

    def release_context(self):
        """No-op: there is no OpenGL context to release."""
