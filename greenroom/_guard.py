"""Classes only greenroom makes: the kernel's handles (``ActorRef``, ``ActorContext``,
``PendingReply``, ``Timer``) and a spawned ``Pipeline``. Each wraps state a user must
never build by hand, so calling the class raises ``TypeError`` (as trio guards its
channels); greenroom builds them with ``_create``."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


class NoPublicConstructor(type):
    """Metaclass: ``Cls(...)`` raises ``TypeError``; ``Cls._create(...)`` builds one."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor; "
            + getattr(cls, "_made_by", "greenroom hands them out")
        )

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]
