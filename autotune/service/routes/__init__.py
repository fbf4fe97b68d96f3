"""HTTP routes: the REST API under /api/v1 and the dashboard pages."""
