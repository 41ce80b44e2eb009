"""torch_bind.py - make a PyTorch module compute on a model view's mapped
tensors without copying them. Separate from view.py so that the view needs
only numpy.

load_state_dict copies (PyTorch 1.13, Debian's: every parameter keeps its
own storage and receives the bytes), which would give each process a
private copy of the weights. Instead, every parameter and persistent buffer
is replaced by a tensor over the view's numpy array (torch.from_numpy
shares its memory): a Parameter with requires_grad=False set on the module
that owns it. Build the module with device="meta" and nothing is allocated
for the weights at all.

The arrays are read-only mappings of the store: PyTorch warns that it does
not support non-writable tensors (the warning is silenced here, once, for
these tensors); writing to one faults. Run the module for inference only
(torch.no_grad(), eval()).

    view = open_view()
    model = build(device="meta")
    bind_torch(model, view)      # raises BindError naming every mismatch
    model.eval()
"""

import warnings

import numpy as np
import torch
from torch import nn

from .view import View

TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "float64": torch.float64,
    "bfloat16": torch.bfloat16, "int8": torch.int8, "uint8": torch.uint8,
    "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
}


class BindError(Exception):
    """The module and the weights do not match; the message lists how."""


def _arrays(source):
    """{name: (canonical dtype, numpy array)} from a View or such a dict."""
    if isinstance(source, View):
        arrays = source.arrays()
        return {t.name: (t.dtype, arrays[t.name]) for t in source.tensors if t.name in arrays}
    return dict(source)


def _problems(targets, arrays, strict):
    out = []
    for name, cur in targets.items():
        if name not in arrays:
            if strict:
                out.append(f'"{name}": in the module, not in the weights')
            continue
        dtype, arr = arrays[name]
        want = TORCH_DTYPES.get(dtype)
        if want is None:
            out.append(f'"{name}": dtype {dtype} has no PyTorch 1.13 equivalent')
            continue
        if tuple(cur.shape) != tuple(arr.shape):
            out.append(f'"{name}": shape {list(arr.shape)} in the weights, '
                       f"{list(cur.shape)} in the module")
        if cur.dtype != want:
            out.append(f'"{name}": dtype {dtype} in the weights, {cur.dtype} in the module')
    if strict:
        out += [f'"{n}": in the weights, not in the module' for n in arrays if n not in targets]
    return out


def bind_torch(module, source, strict=True):
    """Binds every parameter and persistent buffer of module to the array of
    the same name in source (a View, or {name: (dtype, array)} as
    safetensors.read_safetensors returns) without a copy. strict: the names
    must match exactly (as load_state_dict's strict). Raises BindError
    listing every difference before changing anything. Returns the number
    of bytes bound."""
    arrays = _arrays(source)
    targets = module.state_dict(keep_vars=True)
    problems = _problems(targets, arrays, strict)
    if problems:
        raise BindError(f"{len(problems)} difference(s) between {type(module).__name__} and the "
                        "weights:\n  " + "\n  ".join(problems))
    bound = 0
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for name in targets:
            if name not in arrays:
                continue
            dtype, arr = arrays[name]
            t = torch.from_numpy(arr)
            if dtype == "bfloat16":  # raw bits in int16: the same bytes
                t = t.view(torch.bfloat16)
            owner_name, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_name)
            if attr in owner._parameters:
                setattr(owner, attr, nn.Parameter(t, requires_grad=False))
            else:
                owner._buffers[attr] = t
            _check_shared(name, t, arr, source)
            bound += arr.nbytes
    return bound


def _check_shared(name, t, arr, source):
    """The invariant of this module: the tensor's memory is the array's
    (for a view: inside its mapping). A copy would be a bug here."""
    if arr.size == 0:
        return
    if t.data_ptr() != arr.ctypes.data:
        raise BindError(f'"{name}": PyTorch copied the array (data at {t.data_ptr():#x}, '
                        f"array at {arr.ctypes.data:#x})")
    if isinstance(source, View) and not source.is_mapped(t.data_ptr(), arr.nbytes):
        if not _private_copy_allowed(source, name):
            raise BindError(f'"{name}": data at {t.data_ptr():#x} is not inside the view\'s mappings')


def _private_copy_allowed(view, name):
    # View.arrays copies an unaligned tensor of the original model file
    # (never a store tensor, whose files start at offset 0).
    t = view.by_name[name]
    return not t.shared and t.offset % np.dtype(t.array.dtype).itemsize != 0
