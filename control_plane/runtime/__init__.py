"""Every long-running process, and what starts and watches them: `sluice up` (up.py),
`sluice worker` (worker.py), `sluice shipper` (shipper.py), the gateway's nginx
(gateway.py, its config: nginx_conf.py, nginx_tls.py, backend_trust.py) and its
sidecar's registration (membership.py), private PostgreSQL, RabbitMQ and Redis
(postgres.py, rabbitmq.py, redis_server.py), demo certificates (certs.py), the
supervisor that restarts children (supervisor.py, procs.py) and migrations (migrate.py).
The controller's process lives with its loops in controller/.
"""
