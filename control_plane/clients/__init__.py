"""One client per remote API, below the services that use them: a gateway's internal
listener (gateway.py), RabbitMQ (amqp.py), the admin REST API (admin.py), model
backends over HTTPS (backend_tls.py), an OTLP collector (tracing.py)."""
