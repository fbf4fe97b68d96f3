"""`autotune ops` and `autotune tuners`: what can be tuned, and how."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from autotune.cli.common import (
    Command,
    print_table,
)

if TYPE_CHECKING:
    pass


def _run_ops(args: argparse.Namespace) -> int:
    from autotune.ops import EPILOGUE_STAGES, OPS, op_dtypes

    rows = []
    for name, spec in OPS.items():
        params = " ".join(p.name if p.required else f"{p.name}={p.default}" for p in spec.params)
        rows.append([name, params, ",".join(op_dtypes(name)), ",".join(spec.targets), spec.doc])
    print_table(["op", "parameters (=default)", "dtypes", "targets", "computes"], rows)
    bare = [name for name, spec in OPS.items() if not spec.epilogue]
    print(f"epilogue stages: {', '.join(EPILOGUE_STAGES)}"
          + (f" (none for {', '.join(bare)})" if bare else ""))
    print("float16 and bfloat16 run on cuda targets only (bfloat16 from sm_80); products are "
          "accumulated in float32")
    return 0


def _configure_tuners(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the table the service's "
                                                       "/api/v1/tuners returns")


def _run_tuners(args: argparse.Namespace) -> int:
    from autotune.search.registry import describe_tuners

    tuners = describe_tuners()  # the service's /tuners reads the same tables
    if args.json:
        print(json.dumps(tuners, indent=2))
        return 0
    for tuner in tuners:
        mark = " (default)" if tuner["default"] else ""
        print(f"{tuner['name']}{mark}: {tuner['description']}")
        rows = [["  " + o["name"], json.dumps(o["default"]), _allowed(o), o["description"]]
                for o in tuner["options"]]
        if rows:
            print_table(["  option", "default", "allowed", "description"], rows)
        print()
    print("set an option with: autotune tune ... --tuner NAME --tuner-option OPTION=VALUE")
    return 0


def _allowed(option: dict[str, Any]) -> str:
    """The values an option accepts: its choices, its bounds, or its type."""
    if "choices" in option:
        return "|".join(str(c) for c in option["choices"])
    if "minimum" in option or "maximum" in option:
        return f"{option.get('minimum', '')}..{option.get('maximum', '')}"
    return type(option["default"]).__name__


COMMANDS: tuple[Command, ...] = (
    Command("ops", "list the operators and their parameters", lambda p: None, _run_ops),
    Command("tuners", "list the tuners and their options (defaults, bounds)", _configure_tuners,
            _run_tuners),
)
