"""Settings that refuse every write, in the processes the tests start with
``TESTAPP_FROZEN_SETTINGS`` set (tests/running/test_children.py).

Once Django has filled its defaults into ``DATABASES`` (it writes them into
the settings' dicts as its connection handler first reads them), every
setting is frozen: setting or deleting one, or writing into a dict it holds
(``settings.DATABASES["default"]["NAME"] = ...``), raises
``SettingsWritten``. The connection handler keeps using the very same dicts,
as Django's does, so a write through ``connection.settings_dict`` is caught
too.
"""

from __future__ import annotations

from typing import Any, cast

from django.conf import Settings, settings
from django.db import connections


class SettingsWritten(RuntimeError):
    """Something wrote into ``django.conf.settings``."""


class FrozenDict(dict[str, Any]):
    """A dict held by a setting: any write raises, naming where it went."""

    def __init__(self, where: str, items: dict[str, Any]):
        super().__init__({key: _frozen(f"{where}[{key!r}]", value) for key, value in items.items()})
        self._where = where

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise SettingsWritten(f"settings.{self._where} was written: {args!r}")

    # Every writing method, whatever its signature: each only raises.
    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    setdefault = update = pop = popitem = clear = _refuse  # type: ignore[assignment]


class FrozenSettings(Settings):
    def __setattr__(self, name: str, value: Any) -> None:
        raise SettingsWritten(f"settings.{name} was set to {value!r}")

    def __delattr__(self, name: str) -> None:
        raise SettingsWritten(f"settings.{name} was deleted")


def _frozen(where: str, value: Any) -> Any:
    return FrozenDict(where, value) if isinstance(value, dict) else value


def install() -> None:
    # Django fills its defaults into the settings' own dicts as its handler
    # first reads them; they are frozen after.
    assert connections.settings is settings.DATABASES
    for connection in connections.all(initialized_only=True):
        connection.close()
        del connections[connection.alias]
    wrapped = cast(Settings, settings._wrapped)  # type: ignore[misc]  # LazySettings's own.
    for name in dir(wrapped):
        if name.isupper():
            setattr(wrapped, name, _frozen(name, getattr(wrapped, name)))
    wrapped.__class__ = FrozenSettings
    settings._wrapped = wrapped  # Forgets the values read so far.
    # Django's handler reads the settings' own dicts: so does this one.
    connections.settings = settings.DATABASES
