"""A demo backend's `GET /metrics`: Prometheus text in the shape of a real model
server's, for the controller's scraping (`--metrics vllm|triton|dcgm`).

The figures are set, not measured: `--metrics-used F` (KV-cache usage for vllm, GPU
memory used for triton and dcgm, 0..1) and `--metrics-waiting N` (vllm's queue), and
changed live with ``POST /demo/metrics {"used": 0.3, "waiting": 2, "fail": false}``;
``"fail": true`` makes /metrics answer 500 until set back.
"""
from __future__ import annotations

import threading
from typing import Any

from control_plane.demo.protocols import BadRequest

FORMATS = ("vllm", "triton", "dcgm")
TOTAL_BYTES = 80 * 1024 ** 3
TOTAL_MIB = 80 * 1024


class DemoMetrics:
    def __init__(self, fmt: str, name: str, used: float = 0.0, waiting: int = 0):
        if fmt not in FORMATS:
            raise ValueError(f"metrics format must be one of {FORMATS}, not {fmt!r}")
        self.fmt, self.name = fmt, name
        self._lock = threading.Lock()
        self.used, self.waiting, self.fail = 0.0, 0, False
        self.update({"used": used, "waiting": waiting})

    def update(self, body: Any) -> dict[str, Any]:
        """Apply a control request; raises ValueError naming a bad field."""
        if not isinstance(body, dict):
            raise ValueError("body must be a JSON object")
        used, waiting, fail = body.get("used"), body.get("waiting"), body.get("fail")
        if used is not None and (isinstance(used, bool) or not isinstance(used, (int, float))
                                 or not 0 <= used <= 1):
            raise ValueError("used: must be a number in [0, 1]")
        if waiting is not None and (isinstance(waiting, bool) or not isinstance(waiting, int)
                                    or waiting < 0):
            raise ValueError("waiting: must be an integer >= 0")
        if fail is not None and not isinstance(fail, bool):
            raise ValueError("fail: must be true or false")
        with self._lock:
            if used is not None:
                self.used = float(used)
            if waiting is not None:
                self.waiting = waiting
            if fail is not None:
                self.fail = fail
            return self.state()

    def state(self) -> dict[str, Any]:
        return {"format": self.fmt, "used": self.used, "waiting": self.waiting,
                "fail": self.fail}

    def render(self) -> str | None:
        """The /metrics answer, or None when told to fail."""
        with self._lock:
            if self.fail:
                return None
            return getattr(self, "_" + self.fmt)(self.used, self.waiting)

    def _vllm(self, used: float, waiting: int) -> str:
        label = f'{{model_name="{self.name}"}}'
        return "".join(
            f"# HELP {n} {h}\n# TYPE {n} gauge\n{n}{label} {v}\n" for n, h, v in (
                ("vllm:num_requests_running", "Number of requests currently running on GPU.",
                 1.0),
                ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                 float(waiting)),
                ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.",
                 used)))

    def _triton(self, used: float, waiting: int) -> str:
        label = '{gpu_uuid="GPU-00000000-0000-0000-0000-000000000000"}'
        return (
            "# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes\n"
            "# TYPE nv_gpu_memory_total_bytes gauge\n"
            f"nv_gpu_memory_total_bytes{label} {TOTAL_BYTES:.6f}\n"
            "# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes\n"
            "# TYPE nv_gpu_memory_used_bytes gauge\n"
            f"nv_gpu_memory_used_bytes{label} {TOTAL_BYTES * used:.6f}\n")

    def _dcgm(self, used: float, waiting: int) -> str:
        label = ('{gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000000",'
                 'device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",'
                 f'Hostname="{self.name}"}}')
        used_mib = round(TOTAL_MIB * used)
        return (
            "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).\n"
            "# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
            f"DCGM_FI_DEV_FB_FREE{label} {TOTAL_MIB - used_mib}\n"
            "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"
            "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
            f"DCGM_FI_DEV_FB_USED{label} {used_mib}\n")


def handle(handler: Any, method: str, path: str) -> bool:
    """Serve GET /metrics and POST /demo/metrics for a demo server that has metrics;
    returns False (not ours) otherwise."""
    metrics = getattr(handler.server, "metrics", None)
    if metrics is None or (method, path) not in (("GET", "/metrics"),
                                                 ("POST", "/demo/metrics")):
        return False
    if method == "POST":
        try:
            handler._send_json(200, metrics.update(handler._json_body()))
        except (ValueError, BadRequest) as exc:
            handler._send_json(400, {"error": str(exc)})
        return True
    text = metrics.render()
    if text is None:
        handler._send_json(500, {"error": "metrics failure (set by POST /demo/metrics)"})
        return True
    body = text.encode("utf-8")
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
    return True
