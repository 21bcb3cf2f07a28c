"""Adding up the gateways' Prometheus text per model and backend."""
from __future__ import annotations

from control_plane.services.fleet_metrics import parse, summarize

GW1 = """# HELP sluice_requests_total Requests answered by the public listener.
# TYPE sluice_requests_total counter
sluice_requests_total{model="chat",backend="chat-a",status="200",plan="none"} 90
sluice_requests_total{model="chat",backend="chat-a",status="502",plan="none"} 4
sluice_requests_total{model="chat",backend="",status="429",plan="gold"} 6
sluice_requests_total{model="",backend="",status="403",plan="none"} 50
sluice_request_duration_seconds_bucket{model="chat",backend="chat-a",le="0.005"} 10
sluice_request_duration_seconds_bucket{model="chat",backend="chat-a",le="0.1"} 90
sluice_request_duration_seconds_bucket{model="chat",backend="chat-a",le="+Inf"} 94
sluice_request_duration_seconds_count{model="chat",backend="chat-a"} 94
sluice_snapshot_version 7
"""
GW2 = """sluice_requests_total{model="chat",backend="chat-b",status="200",plan="none"} 10
sluice_request_duration_seconds_bucket{model="chat",backend="chat-b",le="0.1"} 10
sluice_request_duration_seconds_bucket{model="chat",backend="chat-b",le="+Inf"} 10
"""


def test_parse_reads_names_labels_and_values_with_escapes():
    samples = list(parse('a_total{x="q\\"uote",y="b\\\\s"} 3\n# comment\nb 1.5e3\nbad line'))
    assert samples == [("a_total", {"x": 'q"uote', "y": "b\\s"}, 3.0), ("b", {}, 1500.0)]


def test_summarize_adds_gateways_per_model_and_backend():
    result = summarize([GW1, GW2])
    chat = result["models"]["chat"]
    assert (chat["requests"], chat["errors"]) == (110, 4)  # 429 is not a server error
    assert chat["buckets"] == [[0.005, 10], [0.1, 100], [None, 104]]
    assert "" not in result["models"]  # refused before a model was known
    assert result["backends"] == {"chat-a": {"requests": 94, "errors": 4},
                                  "chat-b": {"requests": 10, "errors": 0}}


def test_live_weight_and_circuit_show_the_worst_any_gateway_sees():
    gw1 = ('sluice_backend_weight{model="chat",backend="chat-a"} 600\n'
           'sluice_backend_circuit_state{model="chat",backend="chat-a"} 0\n')
    gw2 = ('sluice_backend_weight{model="chat",backend="chat-a"} 250\n'
           'sluice_backend_circuit_state{model="chat",backend="chat-a"} 1\n')
    a = summarize([gw1, gw2])["backends"]["chat-a"]
    assert (a["weight"], a["circuit"]) == (250, "open")
    assert a["requests"] == 0  # gauges are not traffic
    assert summarize([gw1])["models"] == {}  # nor do they make a model appear


def test_open_realtime_sessions_are_summed_over_gateways():
    gw1 = 'sluice_realtime_sessions{model="voice"} 3\n'
    gw2 = 'sluice_realtime_sessions{model="voice"} 2\nsluice_realtime_sessions{model="chat"} 0\n'
    models = summarize([gw1, gw2])["models"]
    assert models["voice"]["sessions"] == 5 and models["voice"]["requests"] == 0
    assert models["chat"]["sessions"] == 0
