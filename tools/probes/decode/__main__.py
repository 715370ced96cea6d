"""``python -m tools.probes.decode SUBCOMMAND [options]``; ``SUBCOMMAND --child VALUES...`` is one measurement of
a subcommand in a process of its own, as the subcommand starts it (``common.in_fresh_process``)."""

from __future__ import annotations

import argparse
import importlib
import sys

from tools.probes.decode import SUBCOMMANDS, common


def module(subcommand: str):
    return importlib.import_module(f"tools.probes.decode.{SUBCOMMANDS[subcommand]}")


def main(argv: list[str]) -> None:
    if len(argv) > 1 and argv[0] in SUBCOMMANDS and argv[1] == common.CHILD:
        module(argv[0]).child(argv[2:])
        return
    parser = argparse.ArgumentParser(prog="python -m tools.probes.decode",
                                     description="Measurements of the decoding step and the kernels behind it.")
    subcommands = parser.add_subparsers(dest="subcommand", required=True)
    for name in SUBCOMMANDS:
        measured = module(name)
        summary = " ".join(measured.__doc__.split("\n\n")[0].split()).split(": ", 1)[1]
        measured.arguments(subcommands.add_parser(name, help=summary, description=measured.__doc__,
                                                  formatter_class=argparse.RawDescriptionHelpFormatter))
    args = parser.parse_args(argv)
    module(args.subcommand).run(args)


if __name__ == "__main__":
    main(sys.argv[1:])
