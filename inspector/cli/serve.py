"""`pytree-inspector [serve] CKPT...`: open checkpoints in the app, served on 127.0.0.1.

    pytree-inspector model.safetensors old.npz --root ~/checkpoints --port 5006 --no-show
    pytree-inspector serve hf://org/model/model.safetensors ./local.safetensors --allow-remote
    pytree-inspector ckpt --coordinator 10.0.0.1:1234 --num-processes 4 --process-id 0

With `--coordinator`, the processes join one `jax.distributed` cluster: process 0 serves the
page, the others follow, running the page's work on trees sharded over every host's devices.
Exit codes: 0 after the server stopped (Ctrl+C), 2 for bad arguments or unreadable files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inspector.cli.output import PROG, fail

DESCRIPTION = (
    "Open pytree checkpoints (safetensors, npz/npy, orbax, flax msgpack, HDF5, PyTorch) in the "
    "inspector app, served on this machine only. Only the files' headers are read at start; "
    "the first two files are set up for comparing (a, b).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The app's options, on the `serve` subcommand and on the bare `pytree-inspector`."""
    parser.add_argument("paths", nargs="*", help="checkpoint files or directories, or URLs "
                        "(http(s)://, s3://, gs://, hf://; needs pytree-inspector[remote])")
    parser.add_argument("--root", type=Path, default=Path.cwd(),
                        help="folder the app's file picker may open (default: the working "
                        "directory); paths outside it are refused")
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument("--address", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only); any "
                        "other address needs --allow-websocket-origin")
    parser.add_argument("--allow-websocket-origin", dest="origins", action="append",
                        default=None, metavar="HOST[:PORT]",
                        help="a host whose pages may use the app (repeat for several); "
                        "required with a wider --address, so that other sites cannot")
    parser.add_argument("--no-show", dest="show", action="store_false",
                        help="do not open a browser")
    parser.add_argument("--examples", action=argparse.BooleanOptionalAction, default=None,
                        help="also load the built-in example trees (default: only when no "
                        "checkpoint is given)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="let the page open checkpoint URLs (an 'Open URL' field); off by "
                        "default, since the server fetches them for whoever opens the page. "
                        "Also: PYTREE_INSPECTOR_ALLOW_REMOTE=1")
    parser.add_argument("--remote-prefix", action="append", default=[], metavar="PREFIX",
                        help="with --allow-remote, open only URLs starting with PREFIX "
                        "(repeatable), e.g. s3://models/")
    hosts = parser.add_argument_group(
        "several hosts", "run one process per host with the same files and arguments; process "
        "0 serves the page, the others run the same operations on their devices")
    hosts.add_argument("--coordinator", metavar="HOST:PORT",
                       help="process 0's address for jax.distributed (the same on every host)")
    hosts.add_argument("--num-processes", type=int, default=1, help="how many processes")
    hosts.add_argument("--process-id", type=int, default=0, help="this process (0 serves)")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="open checkpoints in the app (the default when no subcommand is given)",
        description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(run=run)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options of `pytree-inspector CKPT...` (no subcommand: serve)."""
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    add_arguments(parser)
    return parser.parse_args(argv)


LOCAL_ADDRESSES = ("127.0.0.1", "localhost", "::1")


def check_exposure(address: str, origins: list[str] | None) -> str | None:
    """Returns the warning to print when `address` opens the app beyond this machine.

    Raises:
        ValueError: the address is wider than this machine and no origin was named.

    >>> check_exposure("127.0.0.1", None) is None
    True
    >>> print(check_exposure("0.0.0.0", ["inspector.lab:5006"]))  # doctest: +ELLIPSIS
    warning: serving on 0.0.0.0: anyone who can reach this machine can open the app, ...
    """
    if address in LOCAL_ADDRESSES:
        return None
    if not origins:
        raise ValueError(
            f"--address {address} serves the app beyond this machine; name the host(s) whose "
            f"pages may use it with --allow-websocket-origin HOST[:PORT] (e.g. "
            f"--allow-websocket-origin {'my-host' if address in ('0.0.0.0', '::') else address}"
            f":PORT)."
        )
    return (f"warning: serving on {address}: anyone who can reach this machine can open the "
            f"app, read the checkpoints under --root and upload files to it (allowed origins: "
            f"{', '.join(origins)}).")


def load_all(paths: list[str]) -> dict:
    """Loads each checkpoint or URL (structure only: leaves are lazy), named by its file name.

    Raises:
        LoadError: a path is missing or not a checkpoint the inspector reads (named in it).
    """
    return load_with_info(paths)[0]


def load_with_info(paths: list[str]) -> tuple[dict, dict]:
    """`load_all(paths)`, and `{name: inspector.FileInfo}` of the local files among them: what
    the app shows above their trees (a GGUF's or safetensors' metadata, a sharded index's
    problems). URLs get none: their headers are not fetched a second time. A model folder
    opens its model file, as every subcommand does (`loading.checkpoint_path`), named after
    the folder.

    Raises:
        LoadError: as `load_all`.
    """
    import inspector
    from inspector.cli.loading import checkpoint_path
    from inspector.io.locate import is_url
    from inspector.io.remote.failures import redact

    trees, infos = {}, {}
    for path in paths:
        url = is_url(path)
        if url:  # given on the command line by the user: always allowed
            name = redact(path).split("?")[0].rstrip("/").rsplit("/", 1)[-1] or redact(path)
        else:
            path = Path(path)
            name = path.resolve().name or str(path)
        while name in trees:
            name += "'"
        opened = path if url else checkpoint_path(str(path))
        trees[name] = inspector.load(opened)
        if not url:
            infos[name] = inspector.file_info(opened)
    return trees, infos


def run(args: argparse.Namespace) -> int:
    """Serves the app until Ctrl+C; returns the exit status."""
    root = args.root.expanduser().resolve()
    if not root.is_dir():
        return fail(f"--root {args.root}: not a folder. Pass the folder the file picker may "
                     "open.")
    try:
        warning = check_exposure(args.address, args.origins)
    except ValueError as error:
        return fail(str(error))
    if warning:
        print(f"{PROG}: {warning}", file=sys.stderr, flush=True)
    if args.coordinator is None and args.num_processes != 1:
        return fail("--num-processes needs --coordinator HOST:PORT (process 0's address).")
    if not 0 <= args.process_id < max(args.num_processes, 1):
        return fail(f"--process-id {args.process_id}: give 0 to {args.num_processes - 1}.")
    if args.coordinator is not None:
        from inspector.cli.hosts import initialize

        initialize(args.coordinator, args.num_processes, args.process_id)  # before any JAX work
    import inspector

    try:
        trees, infos = load_with_info(args.paths)
    except inspector.InspectorError as error:
        return fail(str(error))
    examples = args.examples if args.examples is not None else not trees
    if args.coordinator is not None and args.process_id != 0:
        return _follow(args, trees, infos, root, examples)
    from inspector.ui.app import serve

    leader = None
    if args.coordinator is not None:
        from inspector.cli.hosts import Leader

        leader = Leader()

    def started(url: str) -> None:
        what = f"{len(trees)} checkpoint(s)" if trees else "the example trees"
        print(f"{PROG}: serving {what} at {url} (files under {root}; Ctrl+C stops)",
              flush=True)

    from inspector.ui.session.checkpoint_files import remote_prefixes_from_env

    remote = list(args.remote_prefix) if args.allow_remote else remote_prefixes_from_env()
    if args.remote_prefix and not args.allow_remote:
        return fail("--remote-prefix needs --allow-remote.")
    try:
        serve(trees, root=root, address=args.address, port=args.port, show=args.show,
              examples=examples, started=started, hosts=leader,
              origins=args.origins, remote_prefixes=remote, infos=infos)
    except OSError as error:  # the port is taken, the address is not this machine's, ...
        return fail(f"cannot serve on {args.address}:{args.port}: {error}")
    except KeyboardInterrupt:
        pass
    finally:
        if leader is not None:
            leader.stop()  # the followers exit too
    return 0


def _follow(args, trees: dict, infos: dict, root, examples: bool) -> int:
    """A follower: builds each page session's state as process 0 does and runs its commands."""
    from inspector.cli.hosts import follow
    from inspector.ui.app import new_state
    from inspector.ui.session.host_commands import run_command
    from inspector.ui.session.loaded import prepare

    prepared = [prepare(name, tree, "command line", infos.get(name))
                for name, tree in trees.items()]

    def session():
        state = new_state(defaults=examples, background=False, trees=prepared, root=root)
        state.auto_run = False  # only process 0's commands run anything here
        return state

    me = f"{PROG} [process {args.process_id}/{args.num_processes}]"
    print(f"{me}: following process 0 ({args.coordinator})", flush=True)
    try:
        follow(session, run_command, log=lambda line: print(f"{me}: {line}", flush=True))
    except KeyboardInterrupt:
        pass
    return 0

