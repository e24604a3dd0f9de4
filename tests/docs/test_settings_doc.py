"""docs/settings.md lists every setting `Settings` reads, and no setting it does not read.

The environment name of a field is worked out the way pydantic-settings does it: the field's
own alias (or validation alias) when it has one, else the model's `env_prefix` plus the field
name, compared without regard to case (`case_sensitive` is off).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import AliasChoices, AliasPath

from bounded_agents.settings import Settings

SETTINGS_DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
VARIABLE = re.compile(r"\bAGENT_[A-Z0-9_]*[A-Z0-9]\b")
"""A variable's name; `AGENT_HISTORY_*`, a family of them, is none (it ends in `_`)."""


def env_names() -> dict[str, set[str]]:
    """Each field of `Settings` with the environment names pydantic-settings reads it from."""
    prefix = str(Settings.model_config.get("env_prefix", ""))
    names: dict[str, set[str]] = {}
    for field_name, field in Settings.model_fields.items():
        aliases: set[str] = set()
        alias = field.validation_alias or field.alias
        if isinstance(alias, str):
            aliases.add(alias)
        elif isinstance(alias, AliasChoices):
            aliases.update(choice for choice in alias.choices if isinstance(choice, str))
        elif isinstance(alias, AliasPath):
            aliases.add(str(alias.path[0]))
        names[field_name] = {a.upper() for a in aliases} or {(prefix + field_name).upper()}
    return names


def documented() -> set[str]:
    return set(VARIABLE.findall(SETTINGS_DOC.read_text(encoding="utf-8")))


def test_every_settings_field_has_its_environment_variable_in_the_settings_page() -> None:
    page = documented()
    missing = sorted(field for field, names in env_names().items() if not names & page)
    assert not missing, f"docs/settings.md lacks the variable of: {missing}"


def test_the_settings_page_names_no_agent_variable_that_settings_does_not_read() -> None:
    known = set().union(*env_names().values())
    unknown = sorted(documented() - known)
    assert not unknown, f"docs/settings.md names variables Settings does not read: {unknown}"


def test_the_environment_names_are_the_prefix_and_the_field_name() -> None:
    """The page's rule (`AGENT_` + the field in capitals) is what the model is configured with:
    a changed prefix or an added alias fails here before the page goes stale."""
    assert Settings.model_config.get("env_prefix") == "AGENT_"
    assert env_names()["database_url"] == {"AGENT_DATABASE_URL"}
    assert all(names == {"AGENT_" + field.upper()} for field, names in env_names().items())
