"""`sluice up`'s gateway joins the fleet by registering (runtime/membership.py); a
var/ from before that lists it by URL, and that row must give way."""
from __future__ import annotations

from control_plane.runtime import up


class FakeAdmin:
    def __init__(self, items: list[dict]):
        self.items = items

    def list(self, kind: str) -> list[dict]:
        assert kind == "gateways"
        return list(self.items)

    def delete(self, kind: str, ident: int) -> None:
        assert kind == "gateways"
        self.items = [g for g in self.items if g["id"] != ident]


def test_a_listed_row_at_its_url_gives_way_to_the_member():
    url = "http://127.0.0.1:8001"
    admin = FakeAdmin([
        {"id": 1, "name": "127.0.0.1:8001", "internal_url": url, "registered": False},
        {"id": 2, "name": "host", "internal_url": url, "registered": True},
        {"id": 3, "name": "other", "internal_url": "http://10.0.0.2:8001",
         "registered": False}])
    up._forget_listed(admin, url)
    assert [g["id"] for g in admin.items] == [2, 3]
