"""The `sluice` command: one entry point for every process of the control plane.

The top floor: nothing imports it. Each command imports its process's modules when it
runs, not at start, so that a command loads only what it needs: `sluice api` execs
gunicorn (which loads the app again) and `sluice agent` runs on GPU hosts; importing
them all up front costs every `sluice` start about a second of CPU.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys


def _api(args: argparse.Namespace) -> int:
    from control_plane.settings import load_settings

    settings = load_settings()
    bind = f"{args.host or settings.api_host}:{args.port or settings.api_port}"
    # gunicorn serves create_app(); exec so signals reach it directly.
    argv = [sys.executable, "-m", "gunicorn", "--bind", bind, "--workers", str(args.workers),
            "--access-logfile", "-", "--graceful-timeout", "5",
            "control_plane.app:create_app()"]
    os.execv(sys.executable, argv)
    return 0  # not reached


def _controller(args: argparse.Namespace) -> int:
    from control_plane.controller import process
    from control_plane.settings import load_settings

    return process.main(load_settings())


def _worker(args: argparse.Namespace) -> int:
    from control_plane.runtime import worker
    from control_plane.settings import load_settings

    return worker.main(load_settings())


def _shipper(args: argparse.Namespace) -> int:
    from control_plane.runtime import shipper
    from control_plane.settings import load_settings

    return shipper.main(load_settings())


def _migrate(args: argparse.Namespace) -> int:
    from control_plane.runtime import migrate
    from control_plane.settings import load_settings

    url = load_settings().database_url
    if not url:
        print("sluice migrate: DATABASE_URL is not set", file=sys.stderr)
        return 2
    if args.direction == "upgrade":
        migrate.upgrade(url, args.revision or "head")
    else:
        migrate.downgrade(url, args.revision or "base")
    return 0


def _gateway(args: argparse.Namespace) -> int:
    """nginx in the foreground from the generated config, until SIGINT/SIGTERM (exit 0)
    or until nginx dies (exit 1)."""
    import signal
    import threading
    from pathlib import Path

    from control_plane.runtime import membership
    from control_plane.runtime.gateway import GatewayProcess
    from control_plane.runtime.gateway_config import GatewayConfig
    from control_plane.settings import load_settings

    settings = load_settings()
    if not settings.gateway_token:
        print("sluice gateway: SLUICE_GATEWAY_TOKEN is not set", file=sys.stderr)
        return 2
    if bool(settings.internal_tls_cert) != bool(settings.internal_tls_key):
        print("sluice gateway: internal TLS needs both SLUICE_INTERNAL_TLS_CERT and "
              "SLUICE_INTERNAL_TLS_KEY", file=sys.stderr)
        return 2
    gw = GatewayProcess(GatewayConfig(
        prefix=Path(args.prefix), token=settings.gateway_token, workers=args.workers,
        port=settings.gateway_port, internal_port=settings.internal_port,
        listen_host=settings.gateway_host, internal_host=settings.internal_host,
        log_excerpts=settings.log_excerpts, redis_url=settings.redis_url,
        cors_origins=settings.cors_origins,
        redis_failure=settings.redis_failure, plain=settings.gateway_plain,
        internal_tls_cert=settings.internal_tls_cert,
        internal_tls_key=settings.internal_tls_key, internal_ca=settings.internal_ca,
        jobs_url=settings.jobs_service_url(),
        **({"tls_port": settings.gateway_tls_port, "tls_cert": Path(settings.tls_cert),
            "tls_key": Path(settings.tls_key)} if settings.tls_cert else {})))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    def reload(*_):
        # A renewed certificate that nginx refuses (a key that does not match, a
        # truncated file) must not take the gateway down: keep serving the old one.
        try:
            gw.reload()
        except (RuntimeError, ValueError, TimeoutError) as exc:
            print(f"sluice gateway: reload refused, still serving the previous "
                  f"configuration: {exc}", file=sys.stderr, flush=True)

    signal.signal(signal.SIGHUP, reload)
    gw.start()
    ports = ([f"{settings.gateway_port} (HTTP)"] if settings.gateway_plain else []) + \
        ([f"{settings.gateway_tls_port} (HTTPS)"] if settings.tls_cert else [])
    print(f"sluice gateway: nginx (master pid {gw.proc.pid}) serves on port"
          f"{'s' if len(ports) > 1 else ''} {', '.join(ports)}", file=sys.stderr, flush=True)
    # with SLUICE_CONTROL_PLANE_URL: register and heartbeat (runtime/membership.py)
    member = membership.from_settings(settings, lambda: gw.usage()["boot"])
    if member is not None:
        member.start()
    try:
        if gw.wait(stop) is None:
            return 0
        # exit non-zero so that systemd or Kubernetes starts the gateway again
        print(f"sluice gateway: {gw.describe()}", file=sys.stderr)
        return 1
    finally:
        if member is not None:
            member.stop(leaving=True)
        gw.stop()   # also the workers a killed master left holding the ports


def _create_admin(args: argparse.Namespace) -> int:
    """Add a user of the admin UI (or, with --reset-password, give one a new password).

    The password comes from SLUICE_ADMIN_PASSWORD, or one line on stdin with
    --password-stdin, or is asked for twice on a terminal; never from the command line,
    where other users could read it in the process list.
    """
    import getpass

    from control_plane.db import make_engine, make_sessionmaker
    from control_plane.services import admin_users, audit
    from control_plane.services.errors import Conflict, Invalid
    from control_plane.settings import load_settings

    url = load_settings().database_url
    if not url:
        print("sluice create-admin: DATABASE_URL is not set", file=sys.stderr)
        return 2
    password: str | None = None
    if args.service_account:
        pass   # no password: it acts only through personal API tokens
    elif args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif os.environ.get("SLUICE_ADMIN_PASSWORD"):
        password = os.environ["SLUICE_ADMIN_PASSWORD"]
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.username}: ")
        if getpass.getpass("again: ") != password:
            print("sluice create-admin: the passwords differ", file=sys.stderr)
            return 2
    else:
        print("sluice create-admin: give the password on stdin with --password-stdin "
              "or in SLUICE_ADMIN_PASSWORD", file=sys.stderr)
        return 2
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine)() as session, \
                audit.acting_as(f"cli:{os.environ.get('USER') or 'unknown'}"):
            if args.reset_password:
                user = admin_users.set_password(session, args.username, password or "")
                print(f"sluice create-admin: new password set for {user.username}")
            else:
                user = admin_users.create_user(session, args.username, password, args.role)
                kind = "service account " if password is None else ""
                print(f"sluice create-admin: created {user.role} {kind}{user.username}")
        return 0
    except Invalid as exc:
        for field, problem in exc.fields.items():
            print(f"sluice create-admin: {field} {problem}", file=sys.stderr)
        return 2
    except Conflict as exc:
        print(f"sluice create-admin: {exc} (use --reset-password to change its password)",
              file=sys.stderr)
        return 1
    finally:
        engine.dispose()


def _verify_logs(args: argparse.Namespace) -> int:
    """Walk the hash chains (exit 1 naming the first bad row), or export their anchors."""
    import json

    from control_plane.db import make_engine
    from control_plane.services import log_chain
    from control_plane.settings import load_settings

    url = load_settings().database_url
    if not url:
        print("sluice verify-logs: DATABASE_URL is not set", file=sys.stderr)
        return 2
    kept = []
    if args.anchors:
        with open(args.anchors, encoding="utf-8") as f:
            doc = json.load(f)
        kept = doc["items"] if isinstance(doc, dict) else doc
    engine = make_engine(url)
    try:
        if args.export_anchors:
            items, after = [], 0
            with engine.connect() as conn:
                while page := log_chain.anchors(conn, args.chain, after, 1000):
                    items += page
                    after = page[-1]["id"]
            print(json.dumps({"items": items}, indent=1))
            return 0
        try:
            results = log_chain.verify(engine, args.chain, kept)
        except KeyError:
            print(f"sluice verify-logs: no chain {args.chain!r}", file=sys.stderr)
            return 2
    finally:
        engine.dispose()
    for r in results:
        if args.json:
            print(json.dumps(r))
        elif r["ok"]:
            print(f"{r['chain']}: ok, {r['rows']} rows, head seq {r['head_seq']}, "
                  f"{r['anchors']} anchors")
        else:
            p = r["problem"]
            print(f"{r['chain']}: {p['kind'].upper()} row id {p['row_id']} "
                  f"(seq {p['seq']}): {p['detail']}")
    return 0 if all(r["ok"] for r in results) else 1


def _agent(args: argparse.Namespace) -> int:
    """Report GPU telemetry until SIGINT/SIGTERM; exit 3 when NVML is unusable."""
    import signal
    from pathlib import Path

    from control_plane.agent.agent import Agent, ConfigError, load_config
    from control_plane.agent.sources import NoDriver, NvmlSource, SimulatedSource, SourceError

    token = os.environ.get("SLUICE_AGENT_TOKEN")
    if not token:
        print("sluice agent: SLUICE_AGENT_TOKEN is not set", file=sys.stderr)
        return 2
    try:
        config = load_config(Path(args.config) if args.config else None)
        if args.source == "simulated":
            if not args.simulated_gpus:
                print("sluice agent: --source simulated needs --simulated-gpus FILE",
                      file=sys.stderr)
                return 2
            source = SimulatedSource(Path(args.simulated_gpus))
        else:
            source = NvmlSource()
    except NoDriver as exc:
        print(f"sluice agent: no usable NVIDIA GPU on this host: {exc}. "
              "(For a demo without GPUs use --source simulated.)", file=sys.stderr)
        return 3
    except (ConfigError, SourceError) as exc:
        print(f"sluice agent: {exc}", file=sys.stderr)
        return 2
    agent = Agent(source, args.control_plane, token, config, interval=args.interval)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: agent.stopping.set())
    agent.run()
    return 0


def _up(args: argparse.Namespace) -> int:
    from control_plane.runtime import up

    return up.main(workers=args.workers)


def _demo_backend(args: argparse.Namespace) -> int:
    from control_plane.demo.cli import main as demo_main

    return demo_main(args.rest)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("SLUICE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(prog="sluice", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("up", help="run everything with demo backends (make run)")
    p.add_argument("--workers", type=int, default=2, help="nginx worker processes")
    p.set_defaults(func=_up)

    p = sub.add_parser("api", help="admin REST API under gunicorn")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--workers", type=int, default=2)
    p.set_defaults(func=_api)

    p = sub.add_parser("gateway", help="one gateway: nginx from the generated config")
    p.add_argument("--prefix", default="var/gateway", help="nginx prefix folder")
    p.add_argument("--workers", type=int, default=2)
    p.set_defaults(func=_gateway)

    p = sub.add_parser("controller", help="push snapshots to every gateway")
    p.set_defaults(func=_controller)

    p = sub.add_parser("worker", help="run async jobs and batches from RabbitMQ "
                                      "(SLUICE_AMQP_URL), deliver their webhooks")
    p.set_defaults(func=_worker)

    p = sub.add_parser("shipper", help="ship gateway access logs (SLUICE_ACCESS_LOGS) "
                                       "to Postgres")
    p.set_defaults(func=_shipper)

    p = sub.add_parser("agent", help="report GPU telemetry (NVML) to the control plane")
    p.add_argument("--source", choices=["nvml", "simulated"], default="nvml",
                   help="nvml: real GPUs through pynvml; simulated: GPUs from a file (demo)")
    p.add_argument("--simulated-gpus", help="JSON file of simulated GPUs (--source simulated)")
    p.add_argument("--control-plane", default=os.environ.get("SLUICE_CONTROL_PLANE",
                                                             "http://127.0.0.1:8080"),
                   help="admin API base URL (default $SLUICE_CONTROL_PLANE or :8080)")
    p.add_argument("--config", help="JSON: host name and GPU index -> backend names")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between reports")
    p.set_defaults(func=_agent)

    p = sub.add_parser("migrate", help="apply Alembic migrations to DATABASE_URL")
    p.add_argument("direction", choices=["upgrade", "downgrade"])
    p.add_argument("revision", nargs="?")
    p.set_defaults(func=_migrate)

    p = sub.add_parser("create-admin", help="add a user of the admin web UI")
    p.add_argument("username")
    p.add_argument("--role", choices=["admin", "viewer"], default="admin",
                   help="admin: read and write; viewer: read only (default admin)")
    p.add_argument("--password-stdin", action="store_true",
                   help="read the password from the first line of stdin")
    p.add_argument("--reset-password", action="store_true",
                   help="set a new password for an existing user instead")
    p.add_argument("--service-account", action="store_true",
                   help="no password: the account acts only through the API tokens "
                        "created for it (POST /api/v1/tokens with \"user\" and the "
                        "bootstrap token)")
    p.set_defaults(func=_create_admin)

    p = sub.add_parser("verify-logs", help="walk the hash-chained audit and inference "
                                           "logs; name the first row altered, removed "
                                           "or inserted (exit 1)")
    p.add_argument("--chain", help="one chain: audit or inference:<source> (default all)")
    p.add_argument("--anchors", help="JSON of anchors kept elsewhere (--export-anchors' "
                                     "output), checked too")
    p.add_argument("--export-anchors", action="store_true",
                   help="print every anchor as JSON instead, to keep elsewhere")
    p.add_argument("--json", action="store_true", help="one JSON object per chain")
    p.set_defaults(func=_verify_logs)

    p = sub.add_parser("demo-backend", help="a demo model server (see --help)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_demo_backend)

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["demo-backend"]:
        # its own options (--protocol, --port, ...) are not the sluice parser's
        from control_plane.demo.cli import main as demo_main

        return demo_main(argv[1:]) or 0
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
