"""Name → class registries, so that a config can choose an uncertainty estimator,
calibrator or evaluator by name, and a new one is one decorated class."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from oodmol.errors import UserError

T = TypeVar("T")


class UnknownName(UserError, KeyError):
    """A name no class was registered under; the message lists those that were."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class Registry(dict[str, type[T]], Generic[T]):
    """A dict of classes by name, filled by the `register` decorator; looking up a name
    that is not there raises `UnknownName` listing the known ones."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def add(cls: type[T]) -> type[T]:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self[name] = cls
            return cls

        return add

    def __missing__(self, name: str) -> type[T]:
        raise self._unknown(name)

    def select(self, names: Iterable[str] | None) -> list[str]:
        """The chosen names, checked, in the order given; every registered name for None."""
        if names is None:
            return list(self)
        chosen = list(names)
        unknown = [name for name in chosen if name not in self]
        if unknown:
            raise self._unknown(unknown[0])
        return chosen

    def _unknown(self, name: str) -> UnknownName:
        return UnknownName(f"unknown {self.kind} {name!r}; known: {', '.join(self)}")
