"""What the command modules share: the user-facing error, the database URL a command uses
and prints, the arguments that name a workload and a target, and `Command` itself."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from autotune.target import Target

if TYPE_CHECKING:
    from autotune.ops import Workload
    from autotune.settings import Settings


PROG = "autotune"


class CliError(Exception):
    """A user-facing failure: printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def usage_error(message: str) -> CliError:
    """A mistake in the command line (exit status 2)."""
    return CliError(message, 2)


def db_url(args: argparse.Namespace) -> str:
    """``--db``, else the settings' database URL (AUTOTUNE_DB_URL); a usage error (one line
    naming the URL and the fix) for one the database cannot use."""
    from autotune.db.url import DatabaseUrlError, checked_url
    from autotune.settings import Settings

    url: str = args.db or Settings().db_url
    try:
        checked_url(url)
    except DatabaseUrlError as exc:
        raise usage_error(str(exc)) from None
    return url


def shown(url: str) -> str:
    """A database URL as printed: its password masked."""
    from autotune.db.url import masked_url

    return masked_url(url)


def add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="URL", default=None,
                   help="database URL or SQLite file path (default: $AUTOTUNE_DB_URL or "
                        "sqlite:///autotune.db)")


def add_task(p: argparse.ArgumentParser) -> None:
    from autotune.ops.dtypes import DTYPES

    p.add_argument("op", help="operator name (see 'autotune ops')")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                   help="operator parameter, repeatable: -p M=1024; pairs as -p stride=2,2")
    p.add_argument("--epilogue", default="", metavar="STAGES",
                   help="fused epilogue stages, comma-separated, e.g. bias,relu "
                        "(stages: bias, scale_shift, residual, then one activation: relu, "
                        "relu6, hardswish, hardsigmoid, sigmoid, silu, gelu; residual adds a "
                        "second tensor of the output's shape; none for the pools, "
                        "global_avg_pool2d, channel_mul and channel_shuffle)")
    p.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="element type of every argument (default float32); float16 and "
                        "bfloat16 are for matmul, batch_matmul and conv2d on cuda targets "
                        "(bfloat16 from sm_80)")
    p.add_argument("--prepacked", action="store_true",
                   help="the form whose constant operand (conv2d's weight, matmul's B) is "
                        "packed once beforehand, as a compiled model runs it: its own "
                        "records; llvm targets only")
    p.add_argument("--layout", default="NCHW", metavar="LAYOUT",
                   help="data and output layout: NCHW (default), NCHW<x>c with channels "
                        "blocked by x, as in NCHW16c (conv2d, depthwise_conv2d, max_pool2d "
                        "and the channelwise ops; llvm targets), conv2d's IN>OUT, as in "
                        "NCHW>NCHW16c, or conv2d's NHWC (cuda -arch=sm_90a, half dtypes): "
                        "its own records")
    p.add_argument("--target", default="llvm", help="target spec (default: llvm, this CPU)")
    add_db(p)


def _parse_value(name: str, text: str) -> Any:
    parts = text.replace("x", ",").split(",")
    try:
        values = [int(part) for part in parts]
    except ValueError:
        raise usage_error(f"bad -p {name}={text}: the value must be an integer or a pair "
                          f"like 3,3") from None
    if len(values) == 1:
        return values[0]
    if len(values) == 2:
        return tuple(values)
    raise usage_error(f"bad -p {name}={text}: at most two integers (h,w)")


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``["M=64", "stride=2,2"]`` -> ``{"M": 64, "stride": (2, 2)}``."""
    params: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        name, text = name.strip(), text.strip()
        if not eq or not name or not text:
            raise usage_error(f"bad -p {item!r}: expected NAME=VALUE, as in -p M=1024")
        if name in params:
            raise usage_error(f"-p {name} is given twice")
        params[name] = _parse_value(name, text)
    return params


def task_of(args: argparse.Namespace) -> tuple["Workload", "Target"]:
    """The workload and target the arguments name (usage errors for bad ones, and for a
    dtype the target refuses)."""
    from pydantic import ValidationError

    from autotune.ops import workload

    stages = [s.strip() for s in args.epilogue.split(",") if s.strip()]
    try:
        wl = workload(args.op, epilogue=stages, dtype=args.dtype, prepacked=args.prepacked,
                      layout=args.layout, **parse_params(args.param))
        target = Target(args.target)  # reads the settings (AUTOTUNE_HOST_CPU)
        wl.check_target(target)
    except ValidationError:  # a bad AUTOTUNE_* setting: one line, from main's handler
        raise
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    return wl, target


def refuse_unmeasurable(target: "Target", settings: "Settings") -> None:
    """A usage error (one line, exit status 2) when this process cannot measure ``target``:
    the check `autotune.tune` and the service's submit make (`api.check_measurable`)."""
    from autotune.api import check_measurable
    from autotune.measure.result import MeasureUnavailable

    try:
        check_measurable(target, settings)
    except MeasureUnavailable as exc:
        raise usage_error(str(exc)) from None


def add_ray_address(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray-address", metavar="HOST:PORT", default=None,
                   help="measure on the workers of this Ray cluster (default: "
                        "$AUTOTUNE_RAY_ADDRESS, else this host); needs autotune[cluster]")


def settings_of(**given: Any) -> "Settings":
    """The settings, with the command line's values (those given) over the environment's."""
    from autotune.settings import Settings

    return Settings(**{k: v for k, v in given.items() if v is not None})


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


@dataclass(frozen=True)
class Command:
    """One subcommand: ``configure`` adds its arguments, ``run`` does it and returns the status."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
