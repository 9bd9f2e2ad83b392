"""errors: one tree under StorageError, each class with a stable code of its own."""

from __future__ import annotations

import inspect

import storage.errors as errors
from storage.commit_log import ReplicaAppendError
from storage.index_file import IndexFileSizeError

ERROR_CLASSES: list[type[errors.StorageError]] = [
    value
    for value in vars(errors).values()
    if inspect.isclass(value) and issubclass(value, errors.StorageError)
] + [ReplicaAppendError, IndexFileSizeError]


def test_every_storage_error_is_in_the_tree_with_a_code_of_its_own() -> None:
    exceptions = [
        v for v in vars(errors).values() if inspect.isclass(v) and issubclass(v, Exception)
    ]
    assert len(exceptions) == len(ERROR_CLASSES) - 2  # no error outside the tree
    codes = [cls.code for cls in ERROR_CLASSES if "code" in vars(cls)]
    assert len(codes) == len(set(codes))
    assert all(code.isupper() for code in codes)


def test_rejections_are_message_rejected_errors() -> None:
    for cls in (
        errors.InvalidTopicError,
        errors.MessageTooLargeError,
        errors.PropertiesTooLargeError,
        errors.QueueIdOutOfRangeError,
    ):
        assert issubclass(cls, errors.MessageRejectedError)
    assert errors.MessageRejectedError.code == "MESSAGE_ILLEGAL"


def test_the_docstring_draws_every_class_of_this_module() -> None:
    tree = errors.__doc__ or ""
    for cls in ERROR_CLASSES:
        if cls.__module__ == errors.__name__:
            assert cls.__name__ in tree
