"""The inference engines a CPU user would pick instead (the `engines` extra): ONNX Runtime and
OpenVINO, each given the same ONNX export of the model and the same thread count as torch,
in float32; and ONNX Runtime's own per-node profile, its nodes named by the module of the
model they compute (their main op's: a conv's, a linear layer's, a pool's).
"""
from __future__ import annotations

import io
import json
import os
import statistics
import tempfile
import warnings
from collections import defaultdict
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

ENGINES = ("ort", "openvino")
LABELS = {"ort": "ONNX Runtime", "openvino": "OpenVINO"}
# ONNX ops that compute a layer's main result; others (activations, adds, BatchNorm) are
# walked through back to the main op whose result they finish
MAIN_OPS = ("Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool")


def onnx_model(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> bytes:
    """``model`` exported to ONNX at ``inputs``' shapes: by the TorchScript exporter, whose
    node names carry the module path (``/layer1/layer1.0/conv1/Conv``), else by dynamo."""
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation
        try:
            torch.onnx.export(model, inputs, buf, dynamo=False, opset_version=17,
                              input_names=[f"x{i}" for i in range(len(inputs))])
        except Exception:  # an op only the dynamo exporter knows
            buf = io.BytesIO()
            torch.onnx.export(model, inputs, buf, dynamo=True,
                              input_names=[f"x{i}" for i in range(len(inputs))])
    return buf.getvalue()


def available(name: str) -> str:
    """'' when engine ``name`` is installed, else why not."""
    module = {"ort": "onnxruntime", "openvino": "openvino"}[name]
    try:
        __import__(module)
    except ImportError:
        return "not installed (pip install 'autotune[engines]')"
    return ""


# an engine's compiled model, called on the example inputs (returns the output), and the
# engine's name and version
Engine = tuple[Callable[[], Any], str]
# An engine's own per-node seconds: per module path, and the other nodes by op and name
EngineProfile = tuple[dict[str, float], dict[str, float]]
# Seconds to let an engine's threads go idle before timing another: ONNX Runtime's worker
# threads spin for about 50 ms after a run (on a 2-core Zen 4 they used 51 ms of CPU in the
# 100 ms after one), taking a core from whatever runs next.
SETTLE_S = 0.1


def ort_session(onnx: bytes, threads: int, profile: bool = False) -> Any:
    """An ONNX Runtime CPU session of ``onnx`` with every graph optimisation (its NCHWc
    layouts and fusions) on ``threads`` threads; with ``profile``, its nodes' times
    recorded."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    if profile:
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    return ort.InferenceSession(onnx, opts, providers=["CPUExecutionProvider"])


def ort_engine(onnx: bytes, inputs: tuple[torch.Tensor, ...], threads: int) -> Engine:
    import onnxruntime as ort

    session = ort_session(onnx, threads)
    feed = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
    return (lambda: session.run(None, feed)[0]), f"onnxruntime {ort.__version__}"


def openvino_compiled(onnx: bytes, threads: int, profile: bool = False) -> Any:
    """``onnx`` on OpenVINO's CPU plugin on ``threads`` threads, for latency (one stream), in
    float32 (it would take bf16 on hosts that have it); with ``profile``, its nodes' times
    recorded (PERF_COUNT)."""
    import openvino as ov

    core = ov.Core()
    return core.compile_model(core.read_model(onnx, b""), "CPU", {
        "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
        "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "PERF_COUNT": profile})


def openvino_engine(onnx: bytes, inputs: tuple[torch.Tensor, ...], threads: int) -> Engine:
    import openvino as ov

    request = openvino_compiled(onnx, threads).create_infer_request()
    feed = {i: x.numpy() for i, x in enumerate(inputs)}

    def run() -> Any:
        request.infer(feed)
        return request.get_output_tensor(0).data
    return run, f"openvino {ov.__version__}"


def make_engine(name: str, onnx: bytes, inputs: tuple[torch.Tensor, ...], threads: int
                ) -> Engine:
    return (ort_engine if name == "ort" else openvino_engine)(onnx, inputs, threads)


class OrtProfiler:
    """ONNX Runtime's own per-node kernel times over the calls `run` makes, which may come
    in bursts between other timings (each then in the same window as what it is compared
    with); `result` ends the profile."""

    def __init__(self, onnx: bytes, inputs: tuple[torch.Tensor, ...], threads: int):
        self._onnx = onnx
        self._session = ort_session(onnx, threads, profile=True)
        self._feed = {i.name: x.numpy() for i, x in zip(self._session.get_inputs(), inputs)}

    def run(self, calls: int = 1) -> None:
        for _ in range(calls):
            self._session.run(None, self._feed)

    def result(self) -> EngineProfile:
        """`by_module` of the nodes' kernel times over the runs."""
        with open(self._session.end_profiling()) as f:
            events = json.load(f)
        runs: dict[tuple[str, str], list[float]] = defaultdict(list)
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                runs[(e["name"][:-len("_kernel_time")], e["args"].get("op_name", "?"))].append(
                    e["dur"] * 1e-6)
        return by_module(self._onnx, runs)


class OpenVinoProfiler:
    """OpenVINO's own per-node times (its PERF_COUNT counters: each executed node's real
    time) over the calls `run` makes, as `OrtProfiler`."""

    def __init__(self, onnx: bytes, inputs: tuple[torch.Tensor, ...], threads: int):
        self._onnx = onnx
        self._request = openvino_compiled(onnx, threads, profile=True).create_infer_request()
        self._feed = {i: x.numpy() for i, x in enumerate(inputs)}
        self._runs: dict[tuple[str, str], list[float]] = defaultdict(list)

    def run(self, calls: int = 1) -> None:
        for _ in range(calls):
            self._request.infer(self._feed)
            for p in self._request.profiling_info:
                if p.status == p.Status.EXECUTED:
                    self._runs[(p.node_name, p.node_type)].append(p.real_time.total_seconds())

    def result(self) -> EngineProfile:
        """`by_module` of the nodes' times over the runs."""
        return by_module(self._onnx, self._runs)


# the engines whose own profile the breakdown shows, and its columns' label for each
PROFILERS = {"ort": OrtProfiler, "openvino": OpenVinoProfiler}
PROFILE_LABELS = {"ort": "ORT", "openvino": "OV"}


def by_module(onnx: bytes, node_runs: dict[tuple[str, str], list[float]]) -> EngineProfile:
    """Engine nodes' median seconds over their runs, keyed by (node name, op): those whose
    main op is a module's summed per module path, the others (reorders, reductions,
    elementwise ops left alone) per node, named by op and node."""
    module_of = _module_paths(onnx)
    modules: dict[str, float] = defaultdict(float)
    others: dict[str, float] = defaultdict(float)
    for (node, op), runs in node_runs.items():
        secs = statistics.median(runs)
        place = module_of(node)
        if place is None:
            others[f"{op} {node}"] += secs
        else:
            modules[place] += secs
    return dict(modules), dict(others)


def _module_paths(onnx: bytes) -> Callable[[str], str | None]:
    """Maps an engine's node name to the module path of the main op it computes. ORT
    names a fused node after the output it writes (``/relu/Relu_output_0_nchwc``), OpenVINO
    after its main op or the output it writes; the exported graph's node of that name, or
    that writes that output, walked back through the ops that finish a main op's result,
    is the main op, named by its module scope."""
    import onnx as onnx_lib

    graph = onnx_lib.load_model_from_string(onnx).graph
    producer = {out: node for node in graph.node for out in node.output}
    names = {node.name: node for node in graph.node}

    def main_op(node: Any) -> Any:
        for _ in range(16):
            if node.op_type in MAIN_OPS:
                return node
            ins = [producer[x] for x in node.input if x in producer]
            mains = [p for p in ins if p.op_type in MAIN_OPS]
            if len(ins) == 0:
                return None
            node = (mains or ins)[-1]  # an add of a shortcut and a conv: the conv's
        return None

    def module_of(engine_name: str) -> str | None:
        # ORT's NCHWc node of a conv; OpenVINO's conv node, its bias split off
        base = engine_name.removesuffix("_nchwc").removesuffix("/WithoutBiases")
        node = producer.get(base) or names.get(base)
        found = main_op(node) if node is not None else None
        return None if found is None else scope_path(found.name)
    return module_of


def scope_path(node_name: str) -> str | None:
    """The module path in a TorchScript-exported node name: ``/layer1/layer1.0/conv1/Conv``
    is ``layer1.0.conv1`` (a child of a Sequential is scoped as ``parent.index``)."""
    parts = [p for p in node_name.split("/") if p][:-1]
    path: list[str] = []
    for part in parts:
        if path and part.startswith(path[-1] + "."):
            path[-1] = part
        else:
            path.append(part)
    return ".".join(path) or None


def max_rel_err(got: Any, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (the absolute error where ``want`` is all zeros)."""
    ref = want.detach().cpu().numpy()
    err = float(np.abs(np.asarray(got) - ref).max())
    scale = float(np.abs(ref).max())
    return err / scale if scale > 0 else err
