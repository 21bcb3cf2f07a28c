"""A thin client of the admin REST API, for `sluice up`, tests and benchmarks."""
from __future__ import annotations

import requests


class AdminError(RuntimeError):
    def __init__(self, response: requests.Response):
        self.response = response
        super().__init__(f"{response.request.method} {response.url} -> "
                         f"{response.status_code}: {response.text[:500]}")


class AdminClient:
    """CRUD on `/api/v1/<kind>` with the admin bearer token; raises on any error."""

    def __init__(self, admin_url: str, token: str, timeout: float = 10.0):
        self.base = admin_url.rstrip("/")
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout

    def _call(self, method: str, path: str, **kw) -> requests.Response:
        resp = self.session.request(method, self.base + path, timeout=self.timeout, **kw)
        if resp.status_code >= 400:
            raise AdminError(resp)
        return resp

    def create(self, kind: str, **fields) -> dict:
        return self._call("POST", f"/{kind}", json=fields).json()

    def list(self, kind: str) -> list[dict]:
        body = self._call("GET", f"/{kind}").json()
        return body["items"] if isinstance(body, dict) else body

    def get(self, kind: str, ident: int) -> dict:
        return self._call("GET", f"/{kind}/{ident}").json()

    def update(self, kind: str, ident: int, **fields) -> dict:
        return self._call("PATCH", f"/{kind}/{ident}", json=fields).json()

    def delete(self, kind: str, ident: int) -> None:
        self._call("DELETE", f"/{kind}/{ident}")

    def find(self, kind: str, name: str) -> dict | None:
        return next((item for item in self.list(kind) if item.get("name") == name), None)

    def upsert(self, kind: str, name: str, **fields) -> dict:
        """Create `name`, or update it to `fields` when it exists."""
        found = self.find(kind, name)
        if found is None:
            return self.create(kind, name=name, **fields)
        return self.update(kind, found["id"], **fields)

    def config_version(self) -> int:
        return self._call("GET", "/config").json()["version"]
