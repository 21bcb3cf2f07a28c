"""The `sluice` command: one entry point for every process of the control plane."""
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
    from control_plane import controller
    from control_plane.settings import load_settings

    return controller.main(load_settings())


def _migrate(args: argparse.Namespace) -> int:
    from control_plane import migrate
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


def _up(args: argparse.Namespace) -> int:
    from control_plane import up

    return up.main(workers=args.workers)


def _demo_backend(args: argparse.Namespace) -> int:
    from control_plane.demo import backends

    return backends.main(args.rest)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("SLUICE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
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

    p = sub.add_parser("controller", help="push snapshots to every gateway")
    p.set_defaults(func=_controller)

    p = sub.add_parser("migrate", help="apply Alembic migrations to DATABASE_URL")
    p.add_argument("direction", choices=["upgrade", "downgrade"])
    p.add_argument("revision", nargs="?")
    p.set_defaults(func=_migrate)

    p = sub.add_parser("demo-backend", help="a demo model server (see --help)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_demo_backend)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
