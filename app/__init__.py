"""This repository's runnable service: the `bounded_agents` module wired into a FastAPI app.

It is what `make run` serves and what a user's own `app/` package would look like; it is not
part of the installed library (the wheel holds `bounded_agents` only).
"""
