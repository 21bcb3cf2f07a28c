"""Reading free capacity from model servers' Prometheus text, on answers shaped like
the real ones (vLLM V0 and V1, Triton's GPU gauges, dcgm-exporter's default set)."""
from __future__ import annotations

import pytest

from control_plane.services import prom_text

VLLM_V0 = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9",num_gpu_blocks="27532"} 1.0
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 15023.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 42.0
vllm:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 42.0
vllm:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.1
"""

VLLM_V1_TWO_ENGINES = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-0.6B"} 10.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-0.6B"} 6.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-0.6B"} 0.7
"""

TRITON = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="resnet50",version="1"} 1203
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-c06bbf33-c250-ca45-579b-19134b518844"} 0.000000
nv_gpu_utilization{gpu_uuid="GPU-5e1a0b6c-1d0b-4c5e-9f7e-0a1b2c3d4e5f"} 0.310000
# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes
# TYPE nv_gpu_memory_total_bytes gauge
nv_gpu_memory_total_bytes{gpu_uuid="GPU-c06bbf33-c250-ca45-579b-19134b518844"} 42949672960.000000
nv_gpu_memory_total_bytes{gpu_uuid="GPU-5e1a0b6c-1d0b-4c5e-9f7e-0a1b2c3d4e5f"} 42949672960.000000
# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{gpu_uuid="GPU-c06bbf33-c250-ca45-579b-19134b518844"} 32212254720.000000
nv_gpu_memory_used_bytes{gpu_uuid="GPU-5e1a0b6c-1d0b-4c5e-9f7e-0a1b2c3d4e5f"} 10737418240.000000
# HELP nv_gpu_power_usage GPU power usage in watts
# TYPE nv_gpu_power_usage gauge
nv_gpu_power_usage{gpu_uuid="GPU-c06bbf33-c250-ca45-579b-19134b518844"} 51.091000
"""

_DCGM_LABELS = ('gpu="{i}",UUID="GPU-0000000{i}-aaaa-bbbb-cccc-ddddeeeeffff",'
                'pci_bus_id="00000000:0{i}:00.0",device="nvidia{i}",'
                'modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-node-1",'
                'DCGM_FI_DRIVER_VERSION="535.104.12"')
DCGM = "\n".join([
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
    "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    "DCGM_FI_DEV_GPU_UTIL{%s} 63" % _DCGM_LABELS.format(i=0),
    "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).",
    "# TYPE DCGM_FI_DEV_FB_FREE gauge",
    "DCGM_FI_DEV_FB_FREE{%s} 60000" % _DCGM_LABELS.format(i=0),
    "DCGM_FI_DEV_FB_FREE{%s} 20000" % _DCGM_LABELS.format(i=1),
    "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).",
    "# TYPE DCGM_FI_DEV_FB_USED gauge",
    "DCGM_FI_DEV_FB_USED{%s} 19000" % _DCGM_LABELS.format(i=0),
    "DCGM_FI_DEV_FB_USED{%s} 59000" % _DCGM_LABELS.format(i=1),
    "# HELP DCGM_FI_DEV_FB_RESERVED Framebuffer memory reserved (in MiB).",
    "# TYPE DCGM_FI_DEV_FB_RESERVED gauge",
    "DCGM_FI_DEV_FB_RESERVED{%s} 1000" % _DCGM_LABELS.format(i=0),
    "DCGM_FI_DEV_FB_RESERVED{%s} 1000" % _DCGM_LABELS.format(i=1),
    ""])


def test_vllm_v0_free_is_one_minus_kv_cache_usage():
    r = prom_text.parse(VLLM_V0, "vllm")
    assert r.free_fraction == pytest.approx(0.75)
    assert r.values == {"kv_cache_usage": 0.25, "requests_waiting": 0.0,
                        "requests_running": 7.0}


def test_vllm_v1_averages_engines_and_queued_requests_cut_the_figure():
    r = prom_text.parse(VLLM_V1_TWO_ENGINES, "vllm")
    # mean usage 0.6; 16 waiting = QUEUE_HALF halves what is left
    assert r.free_fraction == pytest.approx(0.4 / 2)
    assert r.values["requests_waiting"] == 16.0


def test_triton_pools_its_gpus():
    r = prom_text.parse(TRITON, "triton")
    assert r.free_fraction == pytest.approx(1 - 40 / 80)
    assert r.values["gpus"] == 2.0


def test_dcgm_counts_reserved_framebuffer_as_not_free():
    r = prom_text.parse(DCGM, "dcgm")
    assert r.free_fraction == pytest.approx(80000 / 160000)
    assert r.values["fb_reserved_mib"] == 2000.0


def test_dcgm_without_reserved_uses_free_over_free_plus_used():
    text = "\n".join(line for line in DCGM.splitlines() if "RESERVED" not in line) + "\n"
    assert prom_text.parse(text, "dcgm").free_fraction == pytest.approx(80000 / 158000)


@pytest.mark.parametrize("fmt, text, message", [
    ("vllm", TRITON, "vllm:kv_cache_usage_perc"),          # the wrong server
    ("triton", VLLM_V0, "nv_gpu_memory_total_bytes"),
    ("dcgm", "", "DCGM_FI_DEV_FB_FREE"),
    ("vllm", "<html>502 Bad Gateway</html>\n", "not Prometheus text"),
])
def test_answers_without_the_series_are_refused(fmt, text, message):
    with pytest.raises(ValueError, match=message):
        prom_text.parse(text, fmt)
