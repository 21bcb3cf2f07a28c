"""Errors services raise; the API maps them to HTTP statuses (services know no HTTP)."""
from __future__ import annotations


class ServiceError(Exception):
    """Base class: the message is safe to show to an operator."""


class NotFound(ServiceError):
    pass


class Conflict(ServiceError):
    pass


class Invalid(ServiceError):
    """Input that is well-formed but refers to things that do not exist, per field."""

    def __init__(self, fields: dict[str, str], message: str = "invalid fields"):
        super().__init__(message)
        self.fields = fields
