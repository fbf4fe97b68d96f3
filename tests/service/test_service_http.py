"""`CodePagesInFlight`: requests for pages of generated code wait their turn beyond the limit,
sending included; every other request passes at once."""
from __future__ import annotations

import asyncio
from typing import Any

from autotune.service.http import CodePagesInFlight


def test_code_pages_in_flight_are_bounded_and_other_requests_pass() -> None:
    active, peak, others = 0, 0, []

    async def slow_app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal active, peak
        if not scope["path"].endswith("/top"):
            others.append(scope["path"])
            return
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.02)  # stands in for building and sending a large page
        await send({"type": "http.response.body"})
        active -= 1

    async def main() -> None:
        limited = CodePagesInFlight(slow_app, limit=3)

        async def send(message: Any) -> None:
            pass

        async def call(path: str) -> None:
            await limited({"type": "http", "path": path}, None, send)

        tops = [asyncio.create_task(call("/api/v1/jobs/1/top")) for _ in range(20)]
        await asyncio.sleep(0.005)
        await asyncio.wait_for(call("/api/v1/health"), 0.01)  # not queued behind them
        await asyncio.gather(*tops)

    asyncio.run(main())
    assert peak == 3 and others == ["/api/v1/health"]
