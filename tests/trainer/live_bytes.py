"""A CPU memory probe: the bytes of tensor storage that ops create and that are still
alive, and their peak, seen through a TorchDispatchMode (the CPU allocator keeps no
statistics of its own). A storage counts from the op that made it until the last tensor
over it is gone; the storages of tensors that existed before are not counted."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveBytes(TorchDispatchMode):
    def __init__(self, *existing: torch.Tensor) -> None:
        super().__init__()
        self.existing = {t.untyped_storage().data_ptr() for t in existing}
        self.storages: dict[int, tuple[int, dict[int, weakref.ref]]] = {}
        self.now = 0
        self.peak = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._track(leaf)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self.existing:
            return
        if key not in self.storages:
            self.storages[key] = (storage.nbytes(), {})
            self.now += storage.nbytes()
            self.peak = max(self.peak, self.now)
        refs = self.storages[key][1]
        ident = id(tensor)
        if ident not in refs:
            refs[ident] = weakref.ref(tensor, lambda _, k=key, i=ident: self._drop(k, i))

    def _drop(self, key: int, ident: int) -> None:
        entry = self.storages.get(key)
        if entry is None:
            return
        entry[1].pop(ident, None)
        if not entry[1]:
            del self.storages[key]
            self.now -= entry[0]
