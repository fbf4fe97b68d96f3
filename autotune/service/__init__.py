"""The tuning service: REST API under /api/v1, job manager, live dashboard at /.

`create_app(settings)` builds the FastAPI app; `serve(settings)` runs it with uvicorn;
`run_local_demo(settings)` is what `make run` starts.
"""
from autotune.service.main import API_PREFIX, create_app
from autotune.service.serve import run_local_demo, serve

__all__ = ["API_PREFIX", "create_app", "run_local_demo", "serve"]
