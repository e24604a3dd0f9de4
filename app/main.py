"""The runnable app: `uvicorn app.main:app`."""

from fastapi import FastAPI

app = FastAPI(title="bounded-agents")


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
