"""The FastAPI edge: routes, request/response schemas, SSE, and the one error mapping."""
