"""`luce-chat serve`: load the model as the app does (same flags, same config file), then serve it
over the OpenAI-compatible API (luce_tui.server) with uvicorn until Ctrl+C."""

from __future__ import annotations

import sys

from luce_tui import cli, config


def main(argv: list[str]) -> int:
    parser = cli.build_parser(serve=True)
    args = parser.parse_args(argv)
    from luce_tui import userconfig

    try:
        userconfig.merge(args, userconfig.load(args.config))
    except userconfig.ConfigError as e:
        return cli._fail(str(e))
    try:
        sampling = config.sampling_from_args(args)
    except ValueError as e:
        parser.error(str(e))
    if config.threads_error(args.threads):
        parser.error(config.threads_error(args.threads))
    if not args.keepalive > 0:
        parser.error("--keepalive must be > 0 seconds")
    if not args.stream_interval >= 0:
        parser.error("--stream-interval must be 0 or more milliseconds")
    if args.state_budget_gib < 0:
        parser.error("--state-budget-gib must be 0 or more")
    state_dir = None
    if not args.no_state_cache and args.state_budget_gib > 0:
        from luce_tui import locations

        state_dir = args.state_dir or str(locations.data_dir(args.data_dir) / "server-states")
    from luce_engine import EngineError
    from luce_engine.chat_template import ChatTemplateError
    from luce_engine.tokenizer import TokenizerError

    try:
        runtime = cli.load(config.engine_settings(args), verbose=args.verbose)
    except (EngineError, TokenizerError, ChatTemplateError) as e:
        return cli._fail(str(e))
    except KeyboardInterrupt:
        return cli.EXIT_INTERRUPTED
    import socket

    import uvicorn

    from luce_tui.server.app import ServerOptions, create_app

    app = create_app(runtime, sampling, ServerOptions(
        api_key=args.api_key, max_queue=args.max_queue, keepalive_s=args.keepalive, model_id=args.model_name,
        system=args.system, max_tokens=args.max_tokens, state_dir=state_dir, state_budget_gib=args.state_budget_gib,
        stream_interval_ms=args.stream_interval))
    try:   # bind first, so the address we print is the one that listens (--port 0: a free port)
        sock = socket.create_server((args.host, args.port))
    except OSError as e:
        return cli._fail(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}")
    host, port = sock.getsockname()[:2]
    saved = f"state files in {state_dir}" if state_dir else "no state files"
    print(f"luce-chat: serving {app.state.model_id} on http://{host}:{port}/v1 "
          f"({'API key required' if args.api_key else 'no API key'}; {saved}; Ctrl+C stops)", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning" if not args.verbose else "info",
                                           access_log=args.verbose, timeout_graceful_shutdown=2))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    return 0
