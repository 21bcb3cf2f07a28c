"""The controller: its process (process.py: Controller, main), one loop per concern
(snapshot pushes in process.py, weights_loop, usage_loop, health_loop), the
telemetry gauges and the scaling webhook (telemetry_gauges, scaling_webhook), the
leader election between controllers (leader.py), and the one GatewayClient every
part of the control plane talks to gateways with (gateway_client.py).

Kept free of imports so that `control_plane.controller.gateway_client` can be used
by the runtime and the admin app without loading the controller.
"""
