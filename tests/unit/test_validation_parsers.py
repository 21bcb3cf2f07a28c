"""The admin API's small validator."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from control_plane.api import validation as v
from control_plane.api.validation import Field, ValidationError, validate

SCHEMA = {"name": Field(v.name, required=True), "weight": Field(v.integer(0, 10)),
          "note": Field(v.text(5), nullable=True)}


def test_collects_every_problem_at_once():
    with pytest.raises(ValidationError) as err:
        validate({"weight": 11, "extra": 1, "id": 2}, SCHEMA, read_only=("id",))
    assert err.value.fields == {"name": "is required",
                                "weight": "must be an integer between 0 and 10",
                                "extra": "is not a known field", "id": "is read-only"}


def test_partial_requires_nothing_and_keeps_absent_fields_absent():
    assert validate({"note": None}, SCHEMA, partial=True) == {"note": None}
    assert validate({}, SCHEMA, partial=True) == {}


def test_body_must_be_an_object():
    with pytest.raises(ValidationError) as err:
        validate([1], SCHEMA)
    assert err.value.fields == {}


@pytest.mark.parametrize("url,clean", [
    ("http://localhost:9101", "http://localhost:9101"),
    ("http://Example.COM/v1/", "http://example.com/v1"),
    ("http://10.0.0.1:80/a/b", "http://10.0.0.1:80/a/b"),
])
def test_urls(url, clean):
    assert v.http_url(allow_path=True)(url) == clean


def test_url_without_path_when_paths_are_not_allowed():
    with pytest.raises(ValueError):
        v.http_url(allow_path=False)("http://h:1/x")


@pytest.mark.parametrize("value,expected", [
    (0, datetime(1970, 1, 1, tzinfo=timezone.utc)),
    ("2030-01-01T00:00:00Z", datetime(2030, 1, 1, tzinfo=timezone.utc)),
    ("2030-01-01T02:00:00+02:00", datetime(2030, 1, 1, tzinfo=timezone.utc)),
    ("2030-01-01T00:00:00", datetime(2030, 1, 1, tzinfo=timezone.utc)),
])
def test_timestamps(value, expected):
    assert v.timestamp(value) == expected


@pytest.mark.parametrize("value", [True, "tomorrow", [], 10**20])
def test_bad_timestamps(value):
    with pytest.raises(ValueError):
        v.timestamp(value)


def test_name_list_drops_duplicates():
    assert v.name_list(["a", "b", "a"]) == ["a", "b"]
    with pytest.raises(ValueError):
        v.name_list(["ok", ""])
