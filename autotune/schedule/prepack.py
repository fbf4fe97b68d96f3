"""Constant weights packed once, for inference.

A template may pack an operand into register-tile panels inside the kernel (a conv's
weight, matmul's B). When that operand is a model's constant weight, repacking it on every
call re-reads and re-writes the whole weight: for ResNet-18's last convs (9.4 MB each) that
is most of the gap between a layer timed alone (1.1 ms) and in the model (1.7 ms).
`split_packing` lifts the packing stage out of the schedule: the kernel reads the packed
array as an argument, and a second kernel packs the weight once. A prepacked workload
(``Workload.prepacked``) names that form: it is tuned, recorded and built as the kernel
without its packing stage, timed on an operand `pack_operand` packed beforehand, untimed.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from autotune.ops import Workload, aligned_empty
from autotune.schedule.schedule import Schedule

# op -> (the constant operand's placeholder name, its packed tensor's name)
PACKED_OPERAND = {"conv2d": ("weight", "weight_pack"),
                  "group_conv2d": ("weight", "weight_pack"),
                  "matmul": ("B", "B_pack"), "depthwise_conv2d": ("weight", "weight_pack")}


def split_packing(sch: Schedule, op: str) -> Optional[Schedule]:
    """Make ``sch`` read its constant operand packed (the packed tensor takes the operand's
    place among the arguments) and return the schedule that packs it; None, and ``sch``
    unchanged, when the schedule packs no constant operand."""
    names = PACKED_OPERAND.get(op)
    if names is None:
        return None
    weight_name, packed_name = names
    stage = next((st for st in sch.stages if st.tensor.name == packed_name), None)
    pos = next((i for i, t in enumerate(sch.inputs) if t.name == weight_name), None)
    if stage is None or pos is None:
        return None
    weight, packed = sch.inputs[pos], stage.tensor
    sch.stages.remove(stage)
    sch.inputs[pos] = packed
    return Schedule(packed, [weight])


def pack_operand(workload: Workload, pack: Any, args: Sequence[np.ndarray]
                 ) -> list[np.ndarray]:
    """``args`` (the workload's arguments in order) with the constant operand replaced by
    its packed form, which ``pack`` (a prepacked kernel's ``pack``) writes, once, here."""
    name = PACKED_OPERAND[workload.op][0]
    pos = next(i for i, spec in enumerate(workload.arg_specs) if spec.name == name)
    packed = aligned_empty(pack.arg_buffers[-1].shape)
    pack(args[pos], packed)
    return [*args[:pos], packed, *args[pos + 1:]]
