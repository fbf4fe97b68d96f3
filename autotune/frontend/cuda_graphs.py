"""CUDA graphs for compiled models ("reduce-overhead", in torch.compile's words): the first
call of a signature warms the model up on a side stream, then captures one call into a
`torch.cuda.CUDAGraph` on torch's capture stream (autotune's kernels launch on
``torch.cuda.current_stream()``, so the capture records them with torch's own operators);
later calls copy their inputs into the graph's static input buffers, replay it on the
current stream, and return copies of its static outputs. A batch-1 ResNet's layers take
10-40 us each on an H100: launched one by one from Python, the calls cost as much again.

Limits. A call is replayed only with autograd off (``torch.no_grad()`` or
``torch.inference_mode()``) and every input a CUDA tensor; a signature (input shapes,
dtypes and devices, autocast state, inference mode) has one graph, at most `MAX_GRAPHS` are
kept, and other calls run eagerly. A forward that synchronises with the host
(``.item()``, printing a tensor, a CPU tensor) cannot be captured: the first such call
warns (`CudaGraphWarning`) and runs eagerly, and so does its signature from then on. A
replay reruns what was captured: change weights in place (``.copy_``), never by replacing
them; moving or casting the model (``.to()``, ``.half()``) drops its graphs. Each graph
keeps its memory pool (one call's intermediate tensors). One graph has one set of static
buffers: replays of one model must not run concurrently from several threads.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import torch
from torch import nn
from torch.utils._pytree import tree_map

MAX_GRAPHS = 8  # signatures captured per model; beyond, calls run eagerly


class CudaGraphWarning(UserWarning):
    """A call could not be captured into a CUDA graph; its signature runs eagerly."""


class GraphDriver(Protocol):
    """Captures calls: `TorchGraphs` on a GPU, a stand-in in tests without one."""

    def capturable(self, xs: Sequence[Any]) -> bool:
        """Whether a call on ``xs`` may be captured (or replayed) now."""
        ...

    def capture(self, run: Callable[[], Any], device: torch.device
                ) -> tuple[Callable[[], None], Any]:
        """Warm ``run`` up, capture one call of it; (its replay, the captured call's
        output, which each replay rewrites in place)."""
        ...


class TorchGraphs:
    """`torch.cuda.CUDAGraph`s, captured as torch's documentation does: a warm-up call on a
    side stream (it loads autotune's modules and workspaces and makes cuDNN's plans, none of
    which a capture may do), then the capture on torch's capture stream."""

    def capture(self, run: Callable[[], Any], device: torch.device
                ) -> tuple[Callable[[], None], Any]:
        current = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            run()
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run()
        return graph.replay, out

    def capturable(self, xs: Sequence[Any]) -> bool:
        """CUDA tensors, and no capture under way (a call inside one runs eagerly in it)."""
        return all(isinstance(x, torch.Tensor) and x.is_cuda for x in xs) \
            and not torch.cuda.is_current_stream_capturing()


@dataclass
class _Graph:
    """One captured signature: its replay, static inputs and static output."""

    replay: Callable[[], None]
    inputs: tuple[torch.Tensor, ...]
    output: Any


class CudaGraphModel(nn.Module):
    """``model`` (a compiled model on a CUDA target) whose fitting calls replay CUDA graphs;
    ``model`` is the module itself (its kernel modules, `kernel_modules` finds them)."""

    def __init__(self, model: nn.Module, driver: GraphDriver | None = None) -> None:
        super().__init__()
        self.model = model
        self.driver: GraphDriver = driver or TorchGraphs()
        self._graphs: dict[tuple, _Graph | None] = {}  # None: capture failed, run eagerly

    def forward(self, *xs: Any) -> Any:
        key = self._signature(xs)
        if key is None:
            return self.model(*xs)
        if key not in self._graphs:
            if len(self._graphs) >= MAX_GRAPHS:
                return self.model(*xs)
            self._graphs[key] = self._capture(xs)
        graph = self._graphs[key]
        if graph is None:
            return self.model(*xs)
        for static, x in zip(graph.inputs, xs):
            static.copy_(x)
        graph.replay()
        return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, graph.output)

    def _signature(self, xs: Sequence[Any]) -> tuple | None:
        """The key of a call that can replay a graph, None for one that cannot."""
        if torch.is_grad_enabled() or not xs or not self.driver.capturable(xs):
            return None
        device = xs[0].device
        return (tuple((tuple(x.shape), x.dtype, x.device) for x in xs),
                torch.is_inference_mode_enabled(), _autocast_state(device))

    def _capture(self, xs: Sequence[torch.Tensor]) -> _Graph | None:
        static = tuple(x.clone() for x in xs)
        try:
            replay, out = self.driver.capture(lambda: self.model(*static), xs[0].device)
        except Exception as exc:  # a host sync, an op capture forbids: run eagerly
            warnings.warn(f"the compiled model's call could not be captured into a CUDA "
                          f"graph ({type(exc).__name__}: {exc}); calls of these shapes run "
                          f"eagerly", CudaGraphWarning, stacklevel=3)
            return None
        return _Graph(replay, static, out)

    def reset(self) -> None:
        """Drop the captured graphs (the next fitting call captures again)."""
        self._graphs.clear()

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # .to(), .cuda(), .half(): the graphs read the old tensors' memory
        self.reset()
        return super()._apply(fn, *args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        # a copy (deepcopy, pickling) captures its own graphs
        return {**self.__dict__, "_graphs": {}}


def _autocast_state(device: torch.device) -> tuple:
    kind = device.type
    enabled = torch.is_autocast_enabled(kind)
    return (enabled, torch.get_autocast_dtype(kind) if enabled else None)
