"""`python -m app serve | migrate | chat | inspect`: a thin command line over the module."""

from app.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
