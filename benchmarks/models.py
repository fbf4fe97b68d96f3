"""End-to-end latency of CNNs (batch 1, fp32, eval): torch eager, torch.compile (inductor),
ONNX Runtime and OpenVINO (on CPUs, where the `engines` extra is installed), and autotune
after whole-model budgets of trials.

    python benchmarks/models.py --trials 0,1000,3000 --batch 1,8 --models resnet18,mobilenetv2
    python benchmarks/models.py --trials 0 --models torchvision:resnet50,torchvision:regnet_y_400mf
    python benchmarks/models.py --trials 0,64 --batch 1 --models resnet18   # a short smoke run
    python benchmarks/models.py --target "cuda -arch=sm_90" --trials 128 --models resnet18

Models: the project's resnet18 and mobilenetv2, and any torchvision classification model as
torchvision:NAME (random weights; `make engines` installs torchvision, ONNX Runtime and
OpenVINO). Every engine runs on torch's thread count. Each line times the engines and the
compiled model in interleaved rounds and gives each ratio from one round's window (the
median over rounds; between turns, the last engine's threads are left 0.1 s to go idle);
the breakdown does the same per layer against torch, adds each layer's time inside the
model's run (`ModelPlan.profile`) with ONNX Runtime's and OpenVINO's own profiles of the
layer beside it (all profiled in the same rounds), and the planned call beside its
kernels' sum. On a CUDA target the model, its inputs and autotune's kernels run on the
GPU, and torch's columns are fp32 (TF32 off). Budgets are totals: a later one continues
the run in --db; 0 is the defaults.
The models are also CLI model specs: `autotune tune-model benchmarks.models:resnet18`.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.engines import (  # noqa: E402 (after the path that makes it importable)
    ENGINES,
    LABELS,
    PROFILE_LABELS,
    PROFILERS,
    SETTLE_S,
    EngineProfile,
    available,
    make_engine,
    max_rel_err,
    onnx_model,
)

# an engine's profile: its label in the breakdown, and what makes a fresh profiler of it
Profilers = dict[str, Callable[[], Any]]

# --- the models -------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1,
            act: bool = True) -> list[nn.Module]:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                         bias=False), nn.BatchNorm2d(cout)]
    return layers + ([nn.ReLU6(inplace=True)] if act else [])


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = conv_bn(cin, mid, 1, 1) if expand != 1 else []
        layers += conv_bn(mid, mid, 3, stride, groups=mid) + conv_bn(mid, cout, 1, 1, act=False)
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [*conv_bn(3, 32, 3, 2)]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += conv_bn(cin, 1280, 1, 1)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean((2, 3)))


def _init(model: nn.Module) -> nn.Module:
    """Random weights and BatchNorm statistics (no download), in eval mode; a layer that
    starts at zero (torchvision's ViT head) gets random weights, or the model's output
    would be zeros whatever ran before it."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            elif isinstance(m, nn.Linear) and not m.weight.any():
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.02)
    return model.eval()


def resnet18(batch: int = 1) -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return _init(ResNet18()), (torch.randn(batch, 3, 224, 224),)


def mobilenetv2(batch: int = 1) -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return _init(MobileNetV2()), (torch.randn(batch, 3, 224, 224),)


MODELS: dict[str, Callable[..., tuple[nn.Module, tuple[torch.Tensor]]]] = {
    "resnet18": resnet18, "mobilenetv2": mobilenetv2}
TORCHVISION = "torchvision:"


def load_model(name: str, batch: int) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """One of `MODELS`, or torchvision's classification model ``torchvision:NAME`` with
    random weights and BatchNorm statistics, on a 224x224 image."""
    if not name.startswith(TORCHVISION):
        return MODELS[name](batch)
    models = torchvision_models()
    make = getattr(models, name[len(TORCHVISION):], None)
    if make is None or name[len(TORCHVISION):] not in models.list_models(models):
        sys.exit(f"benchmarks/models.py: torchvision has no classification model "
                 f"{name[len(TORCHVISION):]!r}; see torchvision.models.list_models()")
    torch.manual_seed(0)
    return _init(make(weights=None)), (torch.randn(batch, 3, 224, 224),)


def torchvision_models() -> Any:
    """``torchvision.models``. A torchvision wheel built against CUDA torch cannot load its
    compiled ops beside a CPU-only torch, and its import then stops at the fake kernels it
    registers for two of them (nms, qnms): their schemas are declared first so that the
    pure-Python models import (detection ops stay unusable)."""
    try:
        import torchvision
    except ImportError:
        sys.exit("benchmarks/models.py: torchvision models need torchvision (make engines)")
    except RuntimeError:  # "operator torchvision::nms does not exist"
        lib = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _KEEP.append(lib)
        import torchvision
    return torchvision.models


_KEEP: list[Any] = []  # the declared schemas live as long as their library object


# --- timing -----------------------------------------------------------------------------

def latency(call: Callable[[], Any], repeat: int) -> float:
    """Median seconds per call after warm-up (a GPU's work included: each call is synced)."""
    from autotune.cli.models import median_time

    def synced() -> None:
        call()
        torch.cuda.synchronize()

    with torch.no_grad():
        return median_time(synced if torch.cuda.is_initialized() else call, repeat, warmup=5)


def interleaved(calls: dict[str, Callable[[], Any]], rounds: int, repeat: int,
                settle_s: float = 0.0) -> dict[str, list[float]]:
    """Each call's median latency in each of ``rounds`` rounds, the calls taking turns in
    every round: a ratio taken within one round compares times of one window (these
    machines drift 5-15% within minutes). ``settle_s`` after each turn lets the threads of
    the last go idle (an engine's spin after its runs)."""
    out: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            out[name].append(latency(call, repeat))
            time.sleep(settle_s)
    return out


def ratio(times: dict[str, list[float]], num: str, den: str) -> float:
    """The median over rounds of ``num``'s time over ``den``'s, each pair from one round."""
    return statistics.median(a / b for a, b in zip(times[num], times[den]))


def torch_compiled(model: nn.Module, inputs: tuple[torch.Tensor, ...]
                   ) -> tuple[Callable[[], Any] | None, str]:
    """torch.compile (inductor) of ``model``, warmed up, or None and why it failed."""
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(*inputs)
        return (lambda: compiled(*inputs)), ""
    except Exception as exc:  # no C++ compiler, an unsupported platform, ...
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        return None, f"failed: {type(exc).__name__}: {first}"


def breakdown(compiled: nn.Module, model_inputs: tuple[torch.Tensor, ...], repeat: int,
              rounds: int, model_s: float, profilers: Profilers) -> None:
    """Per kernel group: autotune's time against torch running the same folded layer, the
    two interleaved, its time inside the model (the plan's run timed kernel by kernel: the
    caches as the layers before leave them) and each engine's own profile of the layer (its
    nodes whose main op is the layer's module; a fused activation or add counts with it),
    all profiles taken in the same rounds, so that a machine's slow minutes weigh on all;
    then the planned model call beside its kernels' sum, and the engines' nodes that no
    autotune kernel computes."""
    from autotune.frontend.layouts import LayoutTransform
    from autotune.frontend.plan import ModelPlan
    from autotune.frontend.runtime import kernel_modules

    seen: dict[Any, list[Any]] = {}
    captured: dict[int, tuple[torch.Tensor, ...]] = {}
    hooks = [m.register_forward_pre_hook(lambda mod, args: captured.setdefault(id(mod), args))
             for m in kernel_modules(compiled)]
    with torch.no_grad():  # the graph's own code calls each kernel's module (a plan does not)
        getattr(compiled.forward, "unplanned", compiled)(*model_inputs)
    for h in hooks:
        h.remove()
    running = {label: make() for label, make in profilers.items()}
    if isinstance(compiled.forward, ModelPlan):
        in_model, torch_steps, planned_s = _in_model(compiled, model_inputs, rounds, repeat,
                                                     list(running.values()))
    else:
        in_model, torch_steps, planned_s = {}, float("nan"), model_s
        for profiler in running.values():
            profiler.run(rounds * repeat)
    for m in kernel_modules(compiled):
        seen.setdefault(m.workload, []).append(m)
    profiles: dict[str, EngineProfile] = {label: p.result() for label, p in running.items()}
    rows = []
    for wl, mods in seen.items():
        args = captured[id(mods[0])]
        # torch runs the layer in NCHW: a blocked layer's inputs are unblocked once, untimed
        blocks = getattr(mods[0], "in_blocks", [1] * len(args))
        plain = tuple(LayoutTransform(b, 1)(x) for x, b in zip(args, blocks))
        calls = {"ours": lambda: mods[0](*args), "torch": lambda: mods[0].forward_torch(*plain)}
        kernel_only = bare_kernel(mods[0], args)
        if kernel_only is not None:
            calls["kernel"] = kernel_only
        times = interleaved(calls, rounds, repeat)
        ours = statistics.median(times["ours"])
        call_us = (ours - statistics.median(times["kernel"])) * 1e6 if "kernel" in times \
            else float("nan")
        inside = [in_model[id(m)] for m in mods if id(m) in in_model]
        model_ms = sum(inside) / len(inside) if len(inside) == len(mods) else float("nan")
        engine_s = {}
        for label, (modules, _) in profiles.items():
            theirs = [modules.pop(m.place) for m in mods if m.place in modules]
            engine_s[label] = sum(theirs) / len(theirs) if len(theirs) == len(mods) \
                else float("nan")
        rows.append((len(mods) * ours, len(mods), ours, ratio(times, "torch", "ours"),
                     statistics.median(times["torch"]), call_us, model_ms, engine_s, str(wl),
                     mods[0].place))
    heads = "".join(f" {label + ' ms':>8} {'vs ' + label:>6}" for label in profiles)
    print(f"    {'x':>3} {'autotune ms':>11} {'torch ms':>9} {'speedup':>7} {'call us':>7} "
          f"{'in model':>8}{heads}  layer")
    for _, n, ours, speedup, theirs, call_us, model_s_, engine_s, name, place in sorted(
            rows, key=lambda r: r[0], reverse=True):
        cols = "".join(f" {engine_s[label] * 1e3:8.4f} {engine_s[label] / model_s_:5.2f}x"
                       for label in profiles)
        print(f"    {n:3d} {ours * 1e3:11.4f} {theirs * 1e3:9.4f} {speedup:6.2f}x "
              f"{call_us:7.1f} {model_s_ * 1e3:8.4f}{cols}  {place}: {name}")
    in_kernels = sum(r[0] for r in rows)
    inside_total = sum(r[1] * r[6] for r in rows)
    print(f"    sum over layers: autotune {in_kernels * 1e3:.3f} ms alone, "
          f"{inside_total * 1e3:.3f} ms in the model (timed one by one, each call back in "
          f"Python: a few us more than in the native run), torch "
          f"{sum(r[1] * r[4] for r in rows) * 1e3:.3f} ms; the planned model call "
          f"{planned_s * 1e3:.3f} ms, timed between the profiled ones (its torch steps "
          f"{torch_steps * 1e3:.3f} ms)")
    for label, (modules, others) in profiles.items():
        matched = sum(r[1] * r[7][label] for r in rows if r[7][label] == r[7][label])
        rest = {f"{k} (a module without an autotune kernel)": v for k, v in modules.items()}
        rest.update(others)
        print(f"    {label}'s profile: {matched * 1e3:.3f} ms in these layers, "
              f"{sum(rest.values()) * 1e3:.3f} ms in {len(rest)} other nodes"
              + (", the largest:" if rest else ""))
        for what, secs in sorted(rest.items(), key=lambda kv: -kv[1])[:8]:
            print(f"      {secs * 1e3:8.4f} ms  {what}")


def _in_model(compiled: nn.Module, inputs: tuple[torch.Tensor, ...], rounds: int, repeat: int,
              profilers: list[Any]) -> tuple[dict[int, float], float, float]:
    """Each kernel module's median time inside the model's planned run (by ``id``), over
    ``rounds`` of ``repeat`` profiled calls, the median total of the plan's torch steps, and
    the model's median time, a planned call before each profiled one (so that all three
    come from one window). Each round starts with as many runs of each engine's profiler:
    all profiles come from the same windows, each run after one of its own kind."""
    plan = compiled.forward
    modules = dict(compiled.named_modules())
    per: dict[int, list[float]] = {}
    steps: list[float] = []
    whole: list[float] = []
    with torch.no_grad():
        for _ in range(rounds):
            for profiler in profilers:
                profiler.run(repeat)
                time.sleep(SETTLE_S)
            plan(*inputs)
            for _ in range(repeat):
                t0 = time.perf_counter()
                plan(*inputs)
                whole.append(time.perf_counter() - t0)
                rest = 0.0
                for node, secs in plan.profile(*inputs):
                    module = modules.get(str(node.target)) if node.op == "call_module" \
                        else None
                    if module is not None and hasattr(module, "workload"):
                        per.setdefault(id(module), []).append(secs)
                    else:
                        rest += secs
                steps.append(rest)
    return ({k: statistics.median(v) for k, v in per.items()}, statistics.median(steps),
            statistics.median(whole))


def autotune_dynamo(model: nn.Module, inputs: tuple[torch.Tensor, ...], target: Any,
                    args: argparse.Namespace) -> tuple[float, Callable[[], Any]]:
    """``torch.compile(model, backend="autotune")`` on the benchmark's target and records,
    compiled (its seconds, inductor's compile of the ops without kernels included) and
    ready to call. A partition inductor fails on runs eagerly: its warning is shown."""
    from autotune.frontend.inductor import InductorWarning

    compiled = torch.compile(model, backend="autotune", options={
        "target": target, "db": args.db, "layout": args.layout})
    t0 = time.monotonic()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        warnings.simplefilter("default", InductorWarning)  # else the timing would mislead
        compiled(*inputs)
    return time.monotonic() - t0, lambda: compiled(*inputs)


def bare_kernel(module: Any, args: tuple[torch.Tensor, ...]) -> Callable[[], None] | None:
    """The module's CPU kernel alone on these arguments (bound once, no per-call work), to
    tell the kernel's time from the module's call overhead; None on other targets."""
    call = getattr(module, "_call", None)
    if call is None or any(not x.is_contiguous() for x in args):
        return None
    out = torch.empty(module.out_shape, dtype=torch.float32)
    ptrs = [x.data_ptr() for x in args] + [out.data_ptr()]

    def run(_keep: tuple = (out, args)) -> None:  # _keep: the memory the pointers name
        call(*ptrs)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,mobilenetv2,torchvision:resnet50,"
                                            "torchvision:mobilenet_v3_small",
                        help="comma-separated: resnet18, mobilenetv2, torchvision:NAME")
    parser.add_argument("--batch", default="1,8", help="batch sizes, comma-separated")
    parser.add_argument("--trials", default="0,1000,3000",
                        help="total budgets, comma-separated, each continuing the last "
                             "(0: the templates' default schedules)")
    parser.add_argument("--db", default="sqlite:///benchmarks/data/models.db")
    parser.add_argument("--target", default="llvm",
                        help='target spec: llvm (this CPU) or e.g. "cuda -arch=sm_90"')
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds of eager, torch.compile, the engines and "
                             "autotune")
    parser.add_argument("--layout", default=None, choices=("nchw", "auto"),
                        help="layouts on llvm: nchw, or auto (channel-blocked from the "
                             "first conv to the global pool; see compile_model); default: "
                             "compile_model's (auto)")
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help=f"engines beside torch on llvm targets, comma-separated "
                             f"({', '.join(ENGINES)}; empty for none)")
    parser.add_argument("--no-dynamo", dest="dynamo", action="store_false",
                        help="leave out torch.compile(model, backend='autotune') (llvm)")
    parser.add_argument("--no-breakdown", action="store_true")
    args = parser.parse_args()

    import autotune
    from autotune.frontend.layouts import check_layout_mode

    target = autotune.Target(args.target)
    args.layout = check_layout_mode(args.layout, target)
    device = torch.device("cuda" if target.kind == "cuda" else "cpu")
    engines = [e for e in args.engines.split(",") if e] if target.kind == "llvm" else []
    for name in engines:
        if name not in ENGINES:
            sys.exit(f"benchmarks/models.py: --engines: unknown engine {name!r}; expected "
                     f"{', '.join(ENGINES)}")
        why = available(name)
        if why:
            print(f"{LABELS[name]}: {why}; left out")
    args.engines = [e for e in engines if not available(e)]
    if target.kind == "cuda":
        if not torch.cuda.is_available():
            sys.exit(f"benchmarks/models.py: target {target.key} needs a CUDA GPU; torch "
                     f"finds none")
        torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 baseline
        torch.backends.cudnn.allow_tf32 = False
        where = f"{torch.cuda.get_device_name()}, fp32 (TF32 off)"
    else:
        where = f"{torch.get_num_threads()} threads for every engine"
    print(f"target {target.key}; layout {args.layout}; torch {torch.__version__}, {where}; "
          f"each line's ratios are "
          f"medians over {args.rounds} interleaved rounds of {args.repeat} calls")
    budgets = [int(b) for b in args.trials.split(",") if b.strip()]
    for name in args.models.split(","):
        for batch in [int(b) for b in args.batch.split(",") if b.strip()]:
            run_model(name, batch, budgets, target, device, args)


def run_model(name: str, batch: int, budgets: list[int], target: Any, device: torch.device,
              args: argparse.Namespace) -> None:
    """One model at one batch size: its tasks, then a line per budget (eager, torch.compile,
    the engines and autotune timed in the same rounds) and the layers' breakdown."""
    import autotune

    model, inputs = load_model(name, batch)
    model, inputs = model.to(device), tuple(x.to(device) for x in inputs)
    # the tasks compile_model runs on this target (prepacked forms, the pool on llvm)
    tasks = autotune.extract(model, inputs, target=target,
                             layout=args.layout if target.kind == "llvm" else "nchw")
    print(f"\n{name}, batch {batch}: {len(tasks.tasks)} tasks, "
          f"{sum(t.weight for t in tasks.tasks)} kernels, {len(tasks.unsupported)} unsupported, "
          f"{tasks.flops() / 1e9:.2f} GFLOP in kernels")
    inductor, why = torch_compiled(model, inputs)
    if inductor is None:
        print(f"  torch.compile {why}")
    threads = torch.get_num_threads()
    engines: dict[str, Callable[[], Any]] = {}
    profilers: Profilers = {}
    if args.engines:
        onnx = onnx_model(model, inputs)
        with torch.no_grad():
            want = model(*inputs)
        for engine in args.engines:
            run, version = make_engine(engine, onnx, inputs, threads)
            engines[engine] = run
            print(f"  {version}: max rel diff {max_rel_err(run(), want):.1e}")
        if not args.no_breakdown:
            profilers = {PROFILE_LABELS[e]: functools.partial(PROFILERS[e], onnx, inputs, threads)
                         for e in args.engines if e in PROFILERS}
    heads = "".join(f" {LABELS[e] + ' ms':>{max(8, len(LABELS[e]) + 3)}}" for e in engines)
    print(f"  {'':14} {'eager ms':>9} {'compile ms':>10}{heads} {'autotune ms':>11} "
          f"{'vs eager':>8} {'vs compile':>10}" + (f" {'vs best engine':>14}" if engines else ""))
    for budget in budgets:
        t0 = time.monotonic()
        result = None
        if budget > 0:
            result = autotune.tune_model(model, inputs, trials=budget, target=target, db=args.db,
                                         layout=args.layout)
        minutes = (time.monotonic() - t0) / 60
        t0 = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # layers without records run their defaults
            compiled = autotune.compile_model(model, inputs, target=target, db=args.db,
                                              layout=args.layout)
        compile_s = time.monotonic() - t0
        calls = {"eager": lambda: model(*inputs), "ours": lambda: compiled(*inputs)}
        if inductor is not None:
            calls["compile"] = inductor
        calls.update(engines)
        unplanned = getattr(compiled.forward, "unplanned", None)
        if unplanned is not None:  # the graph's code: each kernel's module called from torch
            calls["graph"] = lambda: unplanned(*inputs)
        dynamo_s = None
        if target.kind == "llvm" and args.dynamo:  # the same kernels through torch.compile
            dynamo_s, calls["dynamo"] = autotune_dynamo(model, inputs, target, args)
        times = interleaved(calls, args.rounds, args.repeat, SETTLE_S if engines else 0.0)
        with torch.no_grad():
            want = model(*inputs)
            err = ((compiled(*inputs) - want).abs().max() / want.abs().max()).item()
        med = {k: statistics.median(v) for k, v in times.items()}
        vs_compile = f"{ratio(times, 'compile', 'ours'):9.2f}x" if inductor else f"{'-':>10}"
        cells = "".join(f" {med[e] * 1e3:{max(8, len(LABELS[e]) + 3)}.3f}" for e in engines)
        label = "defaults" if budget == 0 else f"@{budget}"
        vs_best = ""
        if engines:  # each round's faster engine against autotune in that round
            best = [min(times[e][i] for e in engines) for i in range(args.rounds)]
            vs_best = f" {statistics.median(b / o for b, o in zip(best, times['ours'])):13.2f}x"
        print(f"  autotune {label:<5} {med['eager'] * 1e3:9.3f} "
              f"{med.get('compile', float('nan')) * 1e3:10.3f}{cells} {med['ours'] * 1e3:11.3f} "
              f"{ratio(times, 'eager', 'ours'):7.2f}x {vs_compile}{vs_best}")
        if result is not None:
            est = result.estimated_latency_s
            print(f"    {result.trials} trials in {minutes:.1f} min this call, "
                  f"{result.trials_done} in all; kernels' estimate "
                  f"{'-' if est is None else f'{est * 1e3:.3f}'} ms; max rel diff {err:.1e}; "
                  f"compile_model {compile_s:.1f} s")
        else:
            print(f"    max rel diff {err:.1e}; compile_model {compile_s:.1f} s")
        plan = compiled.forward
        if unplanned is not None:
            print(f"    plan: {plan.kernels} kernels in {plan.runs} native runs between torch "
                  f"steps, arena {plan.arena_bytes / 2**20:.1f} MiB; without it (the graph's "
                  f"code calling each kernel's module) {med['graph'] * 1e3:.3f} ms, "
                  f"{ratio(times, 'graph', 'ours'):.2f}x slower")
        if dynamo_s is not None:
            print(f"    torch.compile(model, backend='autotune'): {med['dynamo'] * 1e3:.3f} ms "
                  f"({ratio(times, 'dynamo', 'ours'):.2f}x compile_model's), compiled in "
                  f"{dynamo_s:.1f} s")
        if not args.no_breakdown:
            breakdown(compiled, inputs, max(5, args.repeat // 3), args.rounds, med["ours"],
                      profilers)


if __name__ == "__main__":
    main()
