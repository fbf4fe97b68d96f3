"""The loop IR: expressions, statements, analysis. Its core is compiled with mypyc when
built (see ``autotune.native``); a stale build is refused here, before any of it loads."""
from autotune.native import check as _check_native

_check_native()
