"""The tuning service: REST API under /api/v1, job manager, live dashboard at /.

`main.create_app(settings)` builds the FastAPI app; `serve.serve(settings)` runs it with
uvicorn; `serve.run_local_demo(settings)` is what `make run` starts. Nothing is imported
here, so that a module of the service imports another without running the whole package.
"""
