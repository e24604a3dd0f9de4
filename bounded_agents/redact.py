"""Credentials out of URLs before a URL is shown: printed, logged, or put in an error message.

A database or provider URL may carry a password (`postgresql+asyncpg://app:pw@db/agents`,
`http://user:pw@proxy/v1`). Whatever prints or logs such a URL shows `redacted_url(url)`.
"""

from __future__ import annotations

MASK = "***"


def redacted_url(url: str) -> str:
    """`url` with the password of its user info replaced by `***` (the user name stays, so
    the URL still says who connects). Works on any `scheme://user:password@host/...` form,
    SQLAlchemy's included, without parsing the rest: a URL too odd to parse is still masked.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    # The user info runs to the LAST `@`: a password holding `/`, `?`, `#` or `@` as typed (not
    # percent-escaped) would otherwise end the authority early and be shown (found by review).
    # A `user:` must lead; a plain `host:port/...@x` path is at worst masked, never leaked.
    user, colon, after = rest.partition(":")
    last = after.rfind("@")
    if not colon or last < 0 or any(c in user for c in "/?#@"):
        return url
    return f"{scheme}://{user}:{MASK}@{after[last + 1 :]}"
