"""The controller: its process (process.py: Controller, main), one loop per concern
(snapshot pushes in process.py, weights_loop, usage_loop, health_loop), the
telemetry gauges and the scaling webhook (telemetry_gauges, scaling_webhook), and the
leader election between controllers (leader.py). Every call to a gateway goes
through the one GatewayClient (control_plane/clients/gateway.py).
"""
