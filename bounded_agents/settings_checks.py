"""The settings that hold a structure, read and checked: AGENT_API_KEYS's `key=actor` pairs, a
provider's API root, the database URL.

Apart from `Settings` because each is a parser with its own rules and refusals (none quotes
the value: it may hold a secret), and the class only calls them (its validators, `actor_keys`):
the settings read as the list of settings, these as the rules of three of them.
"""

from __future__ import annotations

from typing import Final

import httpx

API_KEYS_FORM: Final = "'key1=alice,key2=bob'"
"""How AGENT_API_KEYS is written, quoted in every error about it."""


def parse_api_keys(text: str) -> dict[str, str]:
    """`key1=alice,key2=bob` as {key: actor}; spaces around a `,` or `=` are ignored. A
    malformed or repeated pair is a `ValueError` that says which pair (by position) and the
    expected form, and never quotes it: the text is all secrets. Strict on purpose: `;` or
    whitespace inside a pair (`key1=alice;key2=bob`) was read as actor `alice;key2=bob`, so one
    key named a strange actor and the next key none; `=` in an actor likewise. A key given
    twice is refused, not resolved: the last one winning would hand one actor's key to
    another without a word."""
    out: dict[str, str] = {}
    for n, pair in enumerate(text.split(","), start=1):
        pair = pair.strip()
        if not pair:
            continue
        key, sep, actor = (part.strip() for part in pair.partition("="))
        if ";" in pair or any(c.isspace() for c in key + actor):
            raise ValueError(
                f"pair {n} holds ';' or whitespace; separate pairs with ',' only, like "
                f"{API_KEYS_FORM}"
            )
        if not sep or not key or not actor or "=" in actor:
            raise ValueError(f"pair {n} is not key=actor; write it like {API_KEYS_FORM}")
        if key in out:
            raise ValueError(
                f"pair {n} repeats an earlier pair's key; each key names one actor, like "
                f"{API_KEYS_FORM}"
            )
        out[key] = actor
    return out


_ASYNC_DRIVERS = {"postgresql": "asyncpg", "sqlite": "aiosqlite"}
"""The one driver the store is written for, per database (it uses asyncpg's own options)."""
_URL_SHAPES = "postgresql+asyncpg://user@host/db or sqlite+aiosqlite:///path.db"


def base_url_problem(value: str) -> str | None:
    """Why `value` is no provider API root: not an http(s) URL with a host and a port in
    1-65535 (the client would refuse it at the first call); None when it is one. The message
    never quotes the value: a password in it may hold `/` or `#`, which no URL parser reads as
    a password, and the parser's own error text quotes what it took for the port."""
    expected = "not an http(s) URL with a host and a port in 1-65535, like https://host:443/v1"
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL:
        return f"{expected} (it does not parse: check its port and any user:password@)"
    if url.scheme not in ("http", "https") or not url.host:
        return expected
    if url.port is not None and not 1 <= url.port <= 65535:
        return f"{expected} (its port is {url.port})"
    return None


def database_url_problem(url: str) -> str | None:
    """Why `url` cannot be AGENT_DATABASE_URL, naming what to write instead; None if it can.
    Only the scheme is quoted: the rest may hold a password."""
    scheme, sep, _rest = url.partition("://")
    if not sep:
        return f"not a database URL; write {_URL_SHAPES}"
    backend, _plus, driver = scheme.partition("+")
    backend = "postgresql" if backend == "postgres" else backend
    wanted = _ASYNC_DRIVERS.get(backend)
    if wanted is None:
        return f"{scheme}:// is not supported; write {_URL_SHAPES}"
    if driver != wanted:
        return (
            f"{scheme}:// lacks the app's driver: write {backend}+{wanted}:// in its place "
            "(the rest of the URL stays as it is)"
        )
    return None


__all__ = ["API_KEYS_FORM", "base_url_problem", "database_url_problem", "parse_api_keys"]
