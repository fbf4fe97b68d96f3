"""The error both CUDA launch paths raise when there is no device to run on."""
from __future__ import annotations


class NoCudaDevice(RuntimeError):
    """pycuda is missing, or the CUDA driver finds no device."""
