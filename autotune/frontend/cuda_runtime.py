"""`compile_model` on a CUDA target: each matched group runs its CUDA kernel on torch's CUDA
tensors, in place (device pointers; no host copies), on torch's current stream.

The model's kernels are compiled by one nvcc call. Folded weights are module buffers in the
workload's dtype, put on the device once (they follow ``.to()``); the CUDA templates read
weights in their given layout (staged through shared memory), so there is nothing to
prepack, but for an NHWC conv's (``layout="auto"`` on Hopper,
`autotune.frontend.channels_last`): KRSC, its activations torch's channels_last tensors.
The kernels are launched through the CUDA driver (`autotune.codegen.cuda.launcher`), not
pycuda. A half group extracted under autocast
casts its float32 activations to its dtype, as autocast does, when autocast is on for
CUDA with that dtype at the call; otherwise such a call runs on torch.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from autotune.codegen.cuda.compiler import compile_cuda_batch
from autotune.codegen.cuda.launcher import DeviceKernel, device_kernel
from autotune.codegen.cuda.runtime import CudaKernel, load_cuda_kernel
from autotune.driver import lower
from autotune.frontend.groups import KernelGroup, ModuleMaker
from autotune.frontend.precision import as_torch, autocast_dtype, torch_dtype
from autotune.frontend.tasks import Match
from autotune.ops import Workload
from autotune.ops.layout import NHWC
from autotune.space import Config
from autotune.target import Target


class CudaKernelModule(KernelGroup):
    """A group run by an autotune CUDA kernel on the CUDA tensors it is given; CPU tensors,
    other shapes or dtypes, and calls that need gradients run on torch."""

    def __init__(self, match: Match, kernel: CudaKernel, in_shapes: Sequence[tuple[int, ...]],
                 out_shape: tuple[int, ...], conv_args: dict[str, Any],
                 device: torch.device, launchers: dict[int, DeviceKernel]) -> None:
        super().__init__(match, in_shapes, out_shape, conv_args)
        self.kernel = kernel
        self.dtype = torch_dtype(match.workload.dtype)
        self.cast = match.cast
        self.n_params = len(match.params)
        # an NHWC conv: its weight KRSC, its activations channels_last tensors
        self.channels_last = match.workload.layout == NHWC
        for i, p in enumerate(match.params):
            param = as_torch(p, match.workload.dtype)
            if i == 0 and self.channels_last:
                param = param.permute(0, 2, 3, 1).contiguous()
            self.register_buffer(f"param{i}", param.to(device))
        self._launchers = launchers  # by device ordinal, shared by the kernel's modules

    def kernel_params(self) -> list[torch.Tensor]:
        """The folded weight (then the per-channel vectors) as the kernel reads them."""
        return [getattr(self, f"param{i}") for i in range(self.n_params)]

    def torch_params(self) -> list[torch.Tensor]:
        params = self.kernel_params()
        if self.channels_last:  # KRSC back to KCRS (a view) for torch's conv
            params[0] = params[0].permute(0, 3, 1, 2)
        return params

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        params = self.kernel_params()
        if not self._fits(xs, params):
            return self.forward_torch(*xs)
        device = xs[0].device
        # x itself when it is contiguous in the kernel's dtype and layout (else a copy)
        form = torch.channels_last if self.channels_last else torch.contiguous_format
        xs = tuple(x.to(self.dtype).contiguous(memory_format=form) for x in xs)
        out = torch.empty(self.out_shape, dtype=self.dtype, device=device, memory_format=form)
        # the kernel takes the main input, the weights, the other inputs (B, a residual), out
        pointers = [xs[0].data_ptr(), *(p.data_ptr() for p in params),
                    *(x.data_ptr() for x in xs[1:]), out.data_ptr()]
        self.launcher(device.index or 0).launch(
            pointers, torch.cuda.current_stream(device).cuda_stream)
        return out

    def launcher(self, ordinal: int) -> DeviceKernel:
        """The kernel on device ``ordinal`` (its cubin is loaded there at the first launch)."""
        found = self._launchers.get(ordinal)
        if found is None:
            found = self._launchers[ordinal] = device_kernel(self.kernel, ordinal)
        return found

    def _fits(self, xs: Sequence[torch.Tensor], params: Sequence[torch.Tensor]) -> bool:
        if torch.is_grad_enabled() and any(x.requires_grad for x in xs):
            return False
        device = xs[0].device
        if device.type != "cuda":
            return False
        # autocast casts a float32 activation of a half op; the kernel does the same
        castable = self.cast and autocast_dtype("cuda") == self.dtype
        return all(
            (x.dtype == self.dtype or (castable and x.dtype == torch.float32))
            and x.device == device and tuple(x.shape) == s
            for x, s in zip(xs, self.in_shapes)) and all(p.device == device for p in params)


def compile_cuda_kernels(configs: Mapping[Workload, Config], target: Target
                         ) -> dict[Workload, CudaKernel]:
    """Each workload's kernel with its config, compiled by one nvcc call (the first failure
    is raised, naming its workload)."""
    items = list(configs.items())
    funcs = [lower(wl, target, cfg) for wl, cfg in items]
    built = compile_cuda_batch(funcs, target)
    kernels = {}
    for (wl, cfg), func, b in zip(items, funcs, built):
        if isinstance(b, Exception):
            raise RuntimeError(f"compile_model: the CUDA kernel of {wl} (config {cfg.index}) "
                               f"failed: {b}") from b
        kernels[wl] = load_cuda_kernel(func, target, b.source, b.cubin)
    return kernels


def cuda_module_maker(matches: Sequence[Match], configs: Mapping[Workload, Config],
                      target: Target, device: torch.device) -> ModuleMaker:
    """The modules of ``matches``, their kernels compiled now, their weights on ``device``."""
    kernels = compile_cuda_kernels({m.workload: configs[m.workload] for m in matches}, target)
    launchers: dict[Workload, dict[int, DeviceKernel]] = {wl: {} for wl in kernels}

    def make(m: Match, in_shapes: Sequence[tuple[int, ...]], out_shape: tuple[int, ...],
             conv_args: dict[str, Any]) -> CudaKernelModule:
        return CudaKernelModule(m, kernels[m.workload], in_shapes, out_shape, conv_args, device,
                                launchers[m.workload])

    return make
