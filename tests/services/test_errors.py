"""The services' error tree: every domain error is defined in services/errors.py, with a code."""

from __future__ import annotations

import importlib
import pkgutil

import services
from services import errors
from services.errors import ServiceError

# The proxy's routing errors subclass the tree and carry its codes where the proxy uses them.
PROXY_ROUTING = "services.cluster.proxy_routing"


def every_services_module() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(services.__path__, "services.")]
    for name in names:
        importlib.import_module(name)
    return names


def subclasses(root: type[ServiceError]) -> set[type[ServiceError]]:
    found: set[type[ServiceError]] = set()
    todo = [root]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def test_every_service_error_lives_in_the_tree() -> None:
    every_services_module()
    outside = {
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in subclasses(ServiceError)
        if cls.__module__ not in (errors.__name__, PROXY_ROUTING)
    }
    assert outside == set()


def test_every_error_of_the_tree_is_in_its_docstring_and_has_its_own_code() -> None:
    tree = [
        cls
        for cls in subclasses(ServiceError) | {ServiceError}
        if cls.__module__ == errors.__name__
    ]
    assert errors.__doc__ is not None
    for cls in tree:
        assert cls.__name__ in errors.__doc__, cls
    codes = [cls.code for cls in tree]
    assert len(codes) == len(set(codes)), "two errors of the tree share a code"
