"""`python -m bounded_agents serve | migrate | chat | inspect`: the `bounded-agents` command."""

from bounded_agents.cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m bounded_agents"))
