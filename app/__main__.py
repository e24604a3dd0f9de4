"""`python -m app serve | migrate | distribute | chat | inspect`, for this repository: the same
command line as the installed `bounded-agents`, serving `app.main:app`."""

from bounded_agents.cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m app"))
