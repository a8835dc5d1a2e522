"""The GPU path without a GPU (imported as ``device_harness``): run resdom's code with the model and its inputs on
torch's ``meta`` device, where a tensor has a shape and no values, so that every tensor made on the CPU and then
combined with the model's or the batch's (a mask, an index, a constant made without ``device=``) is an error as it
is on a GPU, and every branch written for a device other than the CPU runs.

``OnMeta`` (a dispatch mode) adds what bare meta tensors lack: (1) the device check of every operator (meta's own
kernels let a CPU matrix into ``matmul`` and ``index_select``, a GPU does not; a 0-dim CPU tensor is a scalar, and
an index of ``t[index]`` / ``t[index] = v`` may stay on the CPU, as on a GPU); (2) values where the code needs
them: ``.item()``, ``bool()``, ``int()`` and ``.tolist()`` of a meta tensor give ``truth`` (True / 1 / 1.0 by
default), ``.cpu()`` of one gives zeros of its shape, ``nonzero`` (and boolean indexing) every position, ``unique``
one element. The numbers that come out mean nothing; what is checked is that the code runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

META = torch.device("meta")
aten = torch.ops.aten

# operators that may take tensors of two devices on a GPU too: copies between devices, and advanced indexing, whose
# index tensors may stay on the CPU
_CROSS_DEVICE = {
    aten._to_copy.default, aten.copy_.default, aten.copy.default, aten.to.device, aten.to.dtype_layout,
    aten.index.Tensor, aten.index_put_.default, aten.index_put.default, aten._index_put_impl_.default,
    aten.lift_fresh.default, aten.lift_fresh_copy.default, aten.set_.source_Tensor,
    aten._has_compatible_shallow_copy_type.default,
}
_TO = {aten._to_copy.default, aten.to.dtype_layout, aten.to.device}
_SCALAR = {aten._local_scalar_dense.default, aten.item.default, aten.is_nonzero.default}  # is_nonzero: inference mode
_UNIQUE = {aten._unique2.default, aten.unique_dim.default, aten._unique.default}


class DeviceMix(AssertionError):
    """A CPU tensor of more than 0 dimensions met a tensor on the model's device in one operator."""


class OnMeta(TorchDispatchMode):
    """Every operator with a meta tensor among its inputs: refused (``DeviceMix``) where a CPU tensor of more than 0
    dimensions is among them too (except ``_CROSS_DEVICE``); made-up values where the code reads some (module
    docstring)."""

    def __init__(self, truth: bool = True, float64: bool = True) -> None:
        super().__init__()
        self.truth, self.float64 = truth, float64

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        given = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        if not any(t.device.type == "meta" for t in given):
            return func(*args, **kwargs)
        if func not in _CROSS_DEVICE:
            cpu = [tuple(t.shape) for t in given if t.device.type == "cpu" and t.dim() > 0]
            if cpu:
                raise DeviceMix(f"{func}: CPU tensor(s) of shape {cpu} combined with tensors on the model's device")
        if not self.float64:
            wide = [tuple(t.shape) for t in given if t.device.type == "meta" and t.dtype == torch.float64]
            if wide:
                raise DeviceMix(f"{func}: float64 tensor(s) of shape {wide} on the model's device (MPS has none)")
        t = args[0]
        if func in _SCALAR:
            if t.dtype == torch.bool or func is aten.is_nonzero.default:
                return self.truth
            return float(self.truth) if t.is_floating_point() else int(self.truth)
        if func in _TO and any(isinstance(a, torch.device) and a.type == "cpu" for a in (*args, *kwargs.values())):
            dtype = next((a for a in (*args[1:], *kwargs.values()) if isinstance(a, torch.dtype)), t.dtype)
            return torch.zeros(t.shape, dtype=dtype)
        if func is aten.copy_.default and t.device.type == "cpu":
            return t.zero_()
        if func is aten.nonzero.default:
            return torch.zeros((t.numel(), t.dim()), dtype=torch.int64, device=META)
        if func in _UNIQUE:
            out = torch.zeros(min(t.numel(), 1), dtype=t.dtype, device=META)
            inverse = torch.zeros(t.shape, dtype=torch.int64, device=META)
            counts = torch.ones(len(out), dtype=torch.int64, device=META)
            return (out, inverse) if func is aten._unique.default else (out, inverse, counts)
        return func(*args, **kwargs)


class _Autocast:
    """``torch.autocast`` for the meta device, which torch's has not: ``torch.is_autocast_enabled("meta")`` and
    ``torch.get_autocast_dtype("meta")`` say what the innermost region says (nothing is cast: the branches written
    for an autocast region run)."""

    stack: list[tuple[bool, torch.dtype]] = []

    def __init__(self, real: Any, device_type: str, dtype: torch.dtype | None = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        self.meta = device_type == "meta"
        self.region = (enabled, dtype or torch.bfloat16) if self.meta else real(device_type, dtype=dtype,
                                                                                 enabled=enabled)

    def __enter__(self) -> None:
        if self.meta:
            self.stack.append(self.region)
        else:
            self.region.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self.meta:
            self.stack.pop()
        else:
            self.region.__exit__(*exc)


@contextmanager
def on_meta(truth: bool = True, float64: bool = True) -> Iterator[None]:
    """Run the block under ``OnMeta`` (boolean indexing of a meta tensor: every position, as ``nonzero``), with an
    autocast for the meta device (``_Autocast``)."""
    from unittest import mock

    from torch.fx.experimental import _config

    real, enabled, dtype = torch.autocast, torch.is_autocast_enabled, torch.get_autocast_dtype
    stack = _Autocast.stack

    def is_enabled(device_type: str | None = None) -> bool:
        if device_type == "meta":
            return bool(stack) and stack[-1][0]
        return enabled() if device_type is None else enabled(device_type)

    def get_dtype(device_type: str) -> torch.dtype:
        return stack[-1][1] if device_type == "meta" and stack else dtype(device_type)

    with _config.patch(meta_nonzero_assume_all_nonzero=True), \
            mock.patch.object(torch, "autocast", lambda *a, **k: _Autocast(real, *a, **k)), \
            mock.patch.object(torch, "is_autocast_enabled", is_enabled), \
            mock.patch.object(torch, "get_autocast_dtype", get_dtype), OnMeta(truth, float64):
        yield
