"""`python -m localcluster.tcp_relay --listen IP:PORT --to IP:PORT`: a plain TCP relay.

The API server listens on 127.0.0.1 only, which a pod cannot reach (its loopback is its own). The
real node's pods reach it the in-cluster way, through the `kubernetes` Service (10.96.0.1:443):
its EndpointSlice points at the node IP, where this relay listens and hands each connection to
the API server on loopback. TLS passes through untouched (the serving cert names 10.96.0.1).
"""

from __future__ import annotations

import argparse
import asyncio


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def serve(listen: tuple[str, int], to: tuple[str, int]) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*to)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

    server = await asyncio.start_server(handle, *listen)
    async with server:
        await server.serve_forever()


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", type=_addr, required=True)
    ap.add_argument("--to", type=_addr, required=True)
    args = ap.parse_args()
    asyncio.run(serve(args.listen, args.to))


if __name__ == "__main__":
    main()
