"""python -m mcp_server [--http [--host H] [--port P]] [--read-only]"""

from __future__ import annotations

import argparse

from mcp_server.server import build_server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fsdp-eks-mcp", description=__doc__)
    parser.add_argument("--http", action="store_true", help="Serve streamable HTTP, not stdio.")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address.")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port.")
    parser.add_argument(
        "--read-only", action="store_true", help="Serve only the tools that change nothing."
    )
    args = parser.parse_args(argv)
    server = build_server(read_only=args.read_only)
    if args.http:
        server.run("streamable-http", host=args.host, port=args.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
