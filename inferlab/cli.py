"""Command line: ``python -m inferlab <command>`` (also installed as ``inferlab``).

The CLI only parses arguments and hands them to the module that owns the work;
it holds no logic of its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _machine(args: argparse.Namespace) -> str:
    if args.machine:
        return args.machine
    from inferlab.environment import default_device, machine_id

    return machine_id(default_device())


def _cmd_probe(args: argparse.Namespace) -> int:
    import torch

    from inferlab.backends import availability, format_availability
    from inferlab.environment import default_device

    device = args.device or default_device()
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (1, args.heads, args.tokens, args.head_dim)
    q, k, v = (torch.randn(shape, generator=gen).to(device=device, dtype=dtype) for _ in range(3))
    print(format_availability(availability(q, k, v, causal=args.causal)))
    return 0


def _cmd_stage(args: argparse.Namespace) -> int:
    from inferlab.pipeline import cli_stage

    return cli_stage(args.stage, root=Path(args.root), machine=args.machine,
                     configfiles=args.configfile, overrides=args.set)


def _cmd_adopt(args: argparse.Namespace) -> int:
    from inferlab.pipeline import cli_adopt

    return cli_adopt(root=Path(args.root), machine=_machine(args))


def _cmd_verify(args: argparse.Namespace) -> int:
    from inferlab.register import cli_verify

    return cli_verify(root=Path(args.root), machine=args.machine)


def _cmd_history(args: argparse.Namespace) -> int:
    from inferlab.register import cli_history

    return cli_history(root=Path(args.root), machine=_machine(args), stage=args.stage)


def _cmd_claims(args: argparse.Namespace) -> int:
    from inferlab.claims import cli_claims

    return cli_claims(root=Path(args.root), as_json=args.json)


def _cmd_audit(args: argparse.Namespace) -> int:
    from inferlab.claims import cli_audit

    return cli_audit(args.claim_id, root=Path(args.root), machine=args.machine,
                     as_json=args.json)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="inferlab", description=__doc__.splitlines()[0])
    p.add_argument("--root", default=".", help="repository root holding results/ and evidence/")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("probe", help="which SDPA backends run here, why the others do not")
    s.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    s.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    s.add_argument("--tokens", type=int, default=1024)
    s.add_argument("--heads", type=int, default=12)
    s.add_argument("--head-dim", type=int, default=64)
    s.add_argument("--causal", action="store_true")
    s.set_defaults(func=_cmd_probe)

    s = sub.add_parser("stage", help="run one pipeline stage without Snakemake")
    s.add_argument("stage", help="probe, correctness, prefill, decode, traffic or claims")
    s.add_argument("--machine", default=None, help="machine id (default: detected)")
    s.add_argument("--configfile", action="append", default=[],
                   help="YAML config merged over config.yaml (repeatable)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value, e.g. --set prefill.lengths=[512,1024]")
    s.set_defaults(func=_cmd_stage)

    s = sub.add_parser("adopt", help="mark committed results for this machine as current")
    s.add_argument("--machine", default=None)
    s.set_defaults(func=_cmd_adopt)

    s = sub.add_parser("verify", help="re-hash the evidence register(s) and check the chain")
    s.add_argument("--machine", default=None, help="one machine (default: all)")
    s.set_defaults(func=_cmd_verify)

    s = sub.add_parser("history", help="list artifact versions in the register")
    s.add_argument("stage", nargs="?", default=None)
    s.add_argument("--machine", default=None)
    s.set_defaults(func=_cmd_history)

    s = sub.add_parser("claims", help="every claim with its verdict per machine")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_claims)

    s = sub.add_parser("audit", help="trace one claim to its artifacts, hashes and commands")
    s.add_argument("claim_id")
    s.add_argument("--machine", default=None, help="one machine (default: all)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_audit)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:  # bad input: a clear message, no traceback
        print(f"inferlab {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
