"""``blis-fast serve``: an OpenAI-compatible server whose engine is the simulator
(blis_fast/serve; docs/serve.md).  It takes every ``blis-fast run`` setting that
describes the cluster; the workload's come from the clients."""

from __future__ import annotations

import asyncio
from typing import Annotated, Optional

import typer

from blis_fast.cli.app import Quiet, app, number_option
from blis_fast.cli.runflags import SINGLE_RUN_OUTPUTS, config_from_flags, with_run_flags
from blis_fast.config.sim import FLAG_PATHS
from blis_fast.config.validate import as_float, as_int, as_str
from blis_fast.errors import ConfigError

# the run settings a server has no use for: its requests come from its clients, and it runs until stopped
WORKLOAD_FLAGS = tuple(k for k, path in FLAG_PATHS.items() if path.startswith("workload.")
                       and k not in ("admission_latency", "routing_latency"))
NOT_SERVED = (*SINGLE_RUN_OUTPUTS, *WORKLOAD_FLAGS, "seed", "simulation_seed", "horizon", "check_invariants",
              "max_events", "warmup_s", "cooldown_s")
MAX_SHUTDOWN_S = 3600.0
SHUTDOWN_BACKSTOP_S = 5.0  # uvicorn's own shutdown timeout: the grace and this
INSTALL_HINT = "blis-fast serve needs the serve extra: pip install \"blis-fast[serve]\""


@app.command()
@with_run_flags(exclude=NOT_SERVED)
def serve(
    host: Annotated[str, typer.Option("--host", help="address to listen on (default 127.0.0.1: this machine only)",
                                      rich_help_panel="Serve")] = "127.0.0.1",
    port: Annotated[Optional[str], number_option("--port", help="TCP port, 1..65535 (default 8000)")] = None,
    time_scale: Annotated[Optional[str], number_option(
        "--time-scale", help="simulated seconds per wall second, (0, 1000] (default 1: real time; 4: four times "
                             "faster)", metavar="FLOAT")] = None,
    capacity: Annotated[Optional[str], number_option(
        "--capacity", help="requests in the engine at once, 1..65536 (more get HTTP 503; default 1024)")] = None,
    max_model_len: Annotated[Optional[str], number_option(
        "--max-model-len", help="most tokens (prompt + max_tokens) of one request (default 8192, at most one "
                                "instance's KV cache)")] = None,
    served_model_name: Annotated[Optional[str], typer.Option(
        "--served-model-name", help="the model name clients ask for (default the deployment's)",
        rich_help_panel="Serve")] = None,
    shutdown_timeout_s: Annotated[Optional[str], number_option(
        "--shutdown-timeout-s", help="on Ctrl-C, wall seconds the requests in flight may take to finish, "
                                     "(0, 3600] (default 10)", metavar="FLOAT")] = None,
    quiet: Quiet = False,
    run_flags: dict = None,
) -> None:
    """Serve /v1/completions, /v1/chat/completions, /v1/models, /health and /metrics from a
    live simulated cluster (every run setting describes it)."""
    from blis_fast.run.resolve import resolve  # deferred: numpy and the kernels
    from blis_fast.serve.engine import LiveEngine  # deferred: as above
    from blis_fast.serve.server import MAX_TIME_SCALE, LiveServer, create_app  # deferred: as above

    port_n = as_int(port, "--port", 1, 65535) if port is not None else 8000
    scale = as_float(time_scale, "--time-scale", 0, MAX_TIME_SCALE, lo_open=True) if time_scale is not None else 1.0
    rows = as_int(capacity, "--capacity", 1, 65536) if capacity is not None else 1024
    grace = as_float(shutdown_timeout_s, "--shutdown-timeout-s", 0, MAX_SHUTDOWN_S, lo_open=True) \
        if shutdown_timeout_s is not None else 10.0
    as_str(host, "--host", max_len=255)
    try:
        import uvicorn  # deferred: the serve extra
        import starlette  # noqa: F401  # deferred: the serve extra (checked before the engine is built)
    except ImportError:
        raise ConfigError("serve", INSTALL_HINT) from None
    cfg = config_from_flags(run_flags)
    setup = resolve(cfg)
    if served_model_name is not None and len(setup.served_models) != 1:
        raise ConfigError("--served-model-name", f"names the one served model; the config serves "
                                                 f"{len(setup.served_models)}: {', '.join(setup.served_models)}")
    kv_tokens = int(setup.latency.total_kv_blocks) * int(cfg.engine.block_size)
    length = as_int(max_model_len, "--max-model-len", 2, kv_tokens) if max_model_len is not None \
        else min(8192, kv_tokens)
    names = (as_str(served_model_name, "--served-model-name", max_len=256),) if served_model_name is not None \
        else setup.served_models
    engine = LiveEngine(setup, capacity=rows, max_model_len=length)
    server = LiveServer(engine, names, time_scale=scale)
    if not quiet:
        typer.echo(f"blis-fast: serving {', '.join(names)} on http://{host}:{port_n} (time scale {scale:g}, "
                        f"{int((engine.state.inst['active'] != 0).sum())} instance(s), max_model_len {length})", err=True)
    # (connections beyond the rows and some room for /metrics and /health scrapes get uvicorn's 503;
    # on shutdown the server ends its open answers itself after the grace, uvicorn's own timeout
    # -- which cancels each handler, with a traceback -- only a backstop)
    config = uvicorn.Config(create_app(server), host=host, port=port_n, log_level="warning",
                            timeout_graceful_shutdown=grace + SHUTDOWN_BACKSTOP_S, limit_concurrency=2 * rows + 64)
    graceful_server(uvicorn.Server, server, grace)(config).run()


def graceful_server(base: type, server, grace_s: float) -> type:
    """uvicorn's Server whose shutdown also closes ``server`` (``LiveServer.close``): the
    open answers run ``grace_s`` more seconds, then end with a 503."""

    class GracefulServer(base):
        async def shutdown(self, sockets=None):
            closing = asyncio.get_running_loop().create_task(server.close(grace_s))
            await super().shutdown(sockets)
            if self.force_exit:  # (a second Ctrl-C: no more grace; the handlers end, not cancelled)
                closing.cancel()
                closing = asyncio.get_running_loop().create_task(server.close(0.0))
            await asyncio.gather(closing, return_exceptions=True)
            handlers = list(getattr(self.server_state, "tasks", ()))
            if handlers:
                await asyncio.wait(handlers, timeout=SHUTDOWN_BACKSTOP_S)

    return GracefulServer
