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
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return url
    user, colon, _password = userinfo.partition(":")
    if not colon:
        return url
    return f"{scheme}://{user}:{MASK}@{host}{slash}{path}"
