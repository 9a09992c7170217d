"""Command line: ``python -m inferlab <command>`` (also installed as ``inferlab``).

The CLI only parses arguments and hands them to the module that owns the work. Every
command that works on one results key finds it as the Snakefile does: ``--machine``,
else ``machine:`` in the config (config.yaml, then each ``--configfile``, then each
``--set``), else the id detected from the hardware; a config that changes the grid
gives ``machine@grid``. ``--root`` may stand before or after the command.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _config(args: argparse.Namespace):
    from inferlab.workflow.config import load_config, resolve

    root = Path(args.root)
    raw = load_config(args.configfile, getattr(args, "set", ()), base=root / "config.yaml")
    return resolve(raw, machine=args.machine)


def _key(args: argparse.Namespace) -> str:
    """The results key of this command: machine, or machine@grid."""
    return _config(args).key


def _one_key_or_all(args: argparse.Namespace) -> str | None:
    """The key named by --machine or --configfile, or None for every key."""
    return _key(args) if args.machine is not None or args.configfile else None


def _cmd_probe(args: argparse.Namespace) -> int:
    import torch

    from inferlab.measurement.backends import availability, format_availability
    from inferlab.measurement.environment import default_device

    device = args.device or default_device()
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (1, args.heads, args.tokens, args.head_dim)
    q, k, v = (torch.randn(shape, generator=gen).to(device=device, dtype=dtype) for _ in range(3))
    print(format_availability(availability(q, k, v, causal=args.causal)))
    return 0


def _cmd_stage(args: argparse.Namespace) -> int:
    from inferlab.workflow.runner import cli_stage

    return cli_stage(args.stage, root=Path(args.root), machine=args.machine,
                     configfiles=args.configfile, overrides=args.set)


def _cmd_adopt(args: argparse.Namespace) -> int:
    from inferlab.workflow.adopt import cli_adopt

    return cli_adopt(root=Path(args.root), machine=args.machine, configfiles=args.configfile)


def _cmd_verify(args: argparse.Namespace) -> int:
    from inferlab.evidence.verify import cli_verify

    return cli_verify(root=Path(args.root), key=_one_key_or_all(args), fix=args.repair)


def _cmd_history(args: argparse.Namespace) -> int:
    from inferlab.core.pipeline import STAGES, stage
    from inferlab.evidence.verify import cli_history

    if args.stage is not None:
        stage(args.stage)
    if args.compare or args.record:
        from inferlab.evidence.compare import compare_latest, format_differences
        from inferlab.presentation.report_tables import record_table, track_record

        flag = "--compare" if args.compare else "--record"
        if args.stage is None:
            raise ValueError(f"{flag} needs a timing stage, e.g. history prefill {flag}")
        if args.compare:
            previous, latest, diffs = compare_latest(Path(args.root), _key(args), args.stage)
            print(format_differences(previous, latest, diffs, args.stage))
            latest_pair = [r for r in track_record(Path(args.root), _key(args), args.stage)
                           if r["new"] == latest["version"]]
            print(_record_text(record_table(latest_pair)))
            return 0
        if not STAGES[args.stage].timed:
            raise ValueError(f"stage {args.stage!r} times nothing; --record needs a timing "
                             f"stage ({', '.join(s for s in STAGES if STAGES[s].timed)})")
        record = track_record(Path(args.root), _key(args), args.stage)
        if not record:
            print(f"{args.stage}: no two versions of {_key(args)!r} were made with the same "
                  "code, config and hardware")
            return 1
        print(f"{args.stage}: every version against the previous one made with the same code, "
              "config and hardware (paired ratios, ratio != 1)")
        print(_record_text(record_table(record)))
        return 0
    return cli_history(root=Path(args.root), key=_key(args), stage=args.stage)


def _record_text(table: dict) -> str:
    """A ``report_tables.record_table`` as aligned text."""
    from inferlab.presentation.formats import text_table

    return text_table([table["columns"]] + [row["cells"] for row in table["rows"]])


def _cmd_claims(args: argparse.Namespace) -> int:
    from inferlab.presentation.audit import cli_claims

    return cli_claims(root=Path(args.root), as_json=args.json)


def _cmd_audit(args: argparse.Namespace) -> int:
    from inferlab.presentation.audit import cli_audit

    return cli_audit(args.claim_id, root=Path(args.root), key=_one_key_or_all(args),
                     as_json=args.json)


def _cmd_manuscript_check(args: argparse.Namespace) -> int:
    from inferlab.presentation.manuscript_check import cli_check

    return cli_check(args.file, root=Path(args.root), not_claims=args.not_claims,
                     as_json=args.json)


def _common() -> argparse.ArgumentParser:
    """Options every command takes, before or after its name."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--root", default=argparse.SUPPRESS,
                   help="repository root holding results/ and evidence/ (default: .)")
    p.add_argument("--machine", default=argparse.SUPPRESS,
                   help="machine id (default: config's machine:, else detected)")
    p.add_argument("--configfile", action="append", default=argparse.SUPPRESS,
                   help="YAML config merged over config.yaml (repeatable), as in Snakemake")
    return p


def build_parser() -> argparse.ArgumentParser:
    from inferlab.core.pipeline import STAGES  # a leaf: the declaration, no torch

    common = _common()
    p = argparse.ArgumentParser(prog="inferlab", description=__doc__.splitlines()[0],
                                parents=[common])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("probe", parents=[common],
                       help="which SDPA backends run here, why the others do not")
    s.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    s.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    s.add_argument("--tokens", type=int, default=1024)
    s.add_argument("--heads", type=int, default=12)
    s.add_argument("--head-dim", type=int, default=64)
    s.add_argument("--causal", action="store_true")
    s.set_defaults(func=_cmd_probe)

    s = sub.add_parser("stage", parents=[common], help="run one pipeline stage without Snakemake")
    s.add_argument("stage", help=f"one of: {', '.join(STAGES)}")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value, e.g. --set prefill.cpu.lengths=[512,1024]")
    s.set_defaults(func=_cmd_stage)

    s = sub.add_parser("adopt", parents=[common],
                       help="mark committed results for this machine as current")
    s.set_defaults(func=_cmd_adopt)

    s = sub.add_parser("verify", parents=[common],
                       help="re-hash the evidence register(s), check the chain and its "
                            "anchor in git")
    s.add_argument("--repair", action="store_true",
                   help="first remove a torn final register line (an interrupted append), "
                        "saying what it removes; complete entries are never touched")
    s.set_defaults(func=_cmd_verify)

    s = sub.add_parser("history", parents=[common], help="list artifact versions in the register")
    s.add_argument("stage", nargs="?", default=None,
                   help=f"only this stage's versions, one of: {', '.join(STAGES)}")
    s.add_argument("--compare", action="store_true",
                   help="the latest version against the previous one made with the same "
                        "code, config and hardware: the relative difference per point")
    s.add_argument("--record", action="store_true",
                   help="every version against the previous one made alike: how often "
                        "each run's paired ratios fell inside the other's 95 %% interval")
    s.set_defaults(func=_cmd_history)

    s = sub.add_parser("claims", parents=[common], help="every claim with its verdict per machine")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_claims)

    s = sub.add_parser("audit", parents=[common],
                       help="trace one claim to its artifacts, hashes and commands")
    s.add_argument("claim_id")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_audit)

    s = sub.add_parser("manuscript", parents=[common], help="the chapter's text against the claims")
    msub = s.add_subparsers(dest="action", required=True)
    m = msub.add_parser("check", parents=[common],
                        help="every number a chapter prints: the claim that covers it and its "
                             "verdict per machine, or why it is no claim (exit 1 if neither)")
    m.add_argument("file", help="the chapter, Markdown or plain text")
    m.add_argument("--not-claims", default=None,
                   help="the list of non-claim kinds (default: docs/chapter/not_claims.yaml)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=_cmd_manuscript_check)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name, default in (("root", "."), ("machine", None), ("configfile", [])):
        if not hasattr(args, name):
            setattr(args, name, default)
    try:
        return args.func(args)
    except ValueError as exc:  # bad input: a clear message, no traceback
        print(f"inferlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. a full disk: a stage's write was undone (inferlab.core.files)
        undone = "; nothing was registered and results/ is as it was" \
            if args.command == "stage" else ""
        print(f"inferlab {args.command}: error: {exc}{undone}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
