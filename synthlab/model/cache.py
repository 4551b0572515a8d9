"""A byte-bounded LRU cache for length-keyed tensors (masks, biases, index maps)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

import torch


class TensorCache:
    """Length-keyed tensors reused across forward passes (masks, ALiBi biases, index maps),
    least recently used first out once they hold more than ``max_bytes``."""

    def __init__(self, max_bytes: int = 256 * 2**20):
        self.max_bytes = max_bytes
        self._data: OrderedDict = OrderedDict()
        self._bytes = 0

    @staticmethod
    def _size(value: Any) -> int:
        if isinstance(value, torch.Tensor):
            return value.numel() * value.element_size()
        if isinstance(value, (tuple, list)):
            return sum(TensorCache._size(v) for v in value)
        return 0

    def get(self, key: Any, fn: Callable[[], Any]) -> Any:
        if key in self._data:
            self._data.move_to_end(key)
            return self._data[key]
        value = fn()
        self._data[key] = value
        self._bytes += self._size(value)
        while self._bytes > self.max_bytes and len(self._data) > 1:
            _, old = self._data.popitem(last=False)
            self._bytes -= self._size(old)
        return value

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()
        self._bytes = 0
