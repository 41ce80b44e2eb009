"""tetris - use a tetris model view from Python (standard library and numpy).

    from tetris import open_view, bind_torch
    view = open_view()            # $TETRIS_MODEL_VIEW, validated
    arrays = view.arrays()        # read-only numpy arrays over the store
    bind_torch(module, view)      # PyTorch parameters on those pages, no copy

Modules: view (open_view, View, ViewError), safetensors (read_safetensors:
a private load, the baseline), oip (Open Inference Protocol tensors as
numpy arrays), torch_bind (bind_torch; imports torch).
"""

from .safetensors import SafetensorsError, read_safetensors
from .view import Tensor, View, ViewError, open_view

__version__ = "0.1.0"


def bind_torch(module, source, strict=True):
    """torch_bind.bind_torch, imported on first use (it needs PyTorch)."""
    from .torch_bind import bind_torch as bind

    return bind(module, source, strict=strict)


__all__ = ["open_view", "View", "ViewError", "Tensor", "read_safetensors",
           "SafetensorsError", "bind_torch"]
