"""Command line: ``python -m inferlab <command>`` (also installed as ``inferlab``).

It only parses arguments and hands them to the module that owns the work, finding a
results key as the Snakefile does (``--machine``, else the config's, else detected).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from inferlab.workflow.cpu_guard import refuse_capability_beyond_cpu


def _config(args: argparse.Namespace):
    from inferlab.workflow.config import load_config, resolve

    root = Path(args.root)
    raw = load_config(args.configfile, getattr(args, "set", ()), base=root / "config.yaml")
    return resolve(raw, machine=args.machine)


def _one_key_or_all(args: argparse.Namespace) -> str | None:
    """The key named by --machine or --configfile, or None for every key."""
    return _config(args).key if args.machine is not None or args.configfile else None


def _positive(text: str) -> int:
    """An int >= 1 (--heads -1 would be a torch traceback, --tokens 0 a table of backends
    "running" on nothing)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _cmd_probe(args: argparse.Namespace) -> int:
    import torch

    from inferlab.measurement.backends import availability, format_availability
    from inferlab.measurement.environment import default_device

    device = args.device or default_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch.cuda.is_available() is False here (a CPU build "
                         "of torch, or no GPU); use --device cpu")
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (1, args.heads, args.tokens, args.head_dim)
    q, k, v = (torch.randn(shape, generator=gen).to(device=device, dtype=dtype) for _ in range(3))
    print(format_availability(availability(q, k, v, causal=args.causal)))
    return 0


def _cmd_stage(args: argparse.Namespace) -> int:
    from inferlab.workflow.runner import cli_stage

    return cli_stage(args.stage, root=Path(args.root), machine=args.machine,
                     configfiles=args.configfile, overrides=args.set, limit_s=args.limit_s)


def _cmd_tune(args: argparse.Namespace) -> int:
    from inferlab.measurement.tuning import cli_tune
    from inferlab.stages import decode, prefill

    config = _config(args)
    return cli_tune(Path(args.root), config.key, config.device,
                    prefill.Params.from_config(config.effective("prefill")),
                    decode.Params.from_config(config.effective("decode")), config.seed,
                    args.limit_s)


def _cmd_generate(args: argparse.Namespace) -> int:
    from inferlab.workflow.generate import cli_generate

    return cli_generate(Path(args.root), args.check)


def _cmd_adopt(args: argparse.Namespace) -> int:
    from inferlab.workflow.adopt import cli_adopt

    return cli_adopt(root=Path(args.root), machine=args.machine, configfiles=args.configfile,
                     cores=args.cores)


def _cmd_verify(args: argparse.Namespace) -> int:
    from inferlab.evidence.verify import cli_verify

    return cli_verify(root=Path(args.root), key=_one_key_or_all(args), fix=args.repair)


def _cmd_history(args: argparse.Namespace) -> int:
    from inferlab.evidence.verify import cli_history

    return cli_history(root=Path(args.root), key=_config(args).key, stage=args.stage)


def _cmd_claims(args: argparse.Namespace) -> int:
    if args.review:
        from inferlab.presentation.claims_review import cli_review

        return cli_review(Path(args.root), check=args.check)
    if args.coverage:
        from inferlab.presentation.coverage import cli_coverage

        return cli_coverage(Path(args.root), check=args.check)
    from inferlab.presentation.audit import cli_claims

    return cli_claims(root=Path(args.root), key=_one_key_or_all(args), as_json=args.json)


def _cmd_audit(args: argparse.Namespace) -> int:
    from inferlab.presentation.audit import cli_audit

    return cli_audit(args.claim_id, root=Path(args.root), key=_one_key_or_all(args),
                     as_json=args.json)


def _cmd_manuscript_check(args: argparse.Namespace) -> int:
    from inferlab.presentation.manuscript_check import cli_check

    return cli_check(args.file, root=Path(args.root), not_claims=args.not_claims,
                     as_json=args.json, strict=args.strict,
                     key=_config(args).key if args.machine is not None else None)


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


# `inferlab stage --help`'s examples; tests/test_config.py resolves each one's config
STAGE_EXAMPLES = (
    "python -m inferlab stage probe",
    "python -m inferlab stage prefill --set prefill.cpu.budget_s=60",
    "python -m inferlab stage decode --set decode.cpu.cache_lens=[1024,4096] --limit-s 120",
    "python -m inferlab stage correctness --configfile profiles/smoke.yaml",
)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"--limit-s {text!r} must be a number of seconds > 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    from inferlab.core.pipeline import STAGES  # a leaf: the declaration, no torch

    common = _common()
    p = argparse.ArgumentParser(prog="inferlab", description=__doc__.splitlines()[0],
                                parents=[common])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("probe", parents=[common],
                       help="which SDPA backends run here, why the others do not")
    s.add_argument("--device", default=None, choices=["cpu", "cuda"],
                   help="cpu or cuda (default: cuda if available)")
    s.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    s.add_argument("--tokens", type=_positive, default=1024)
    s.add_argument("--heads", type=_positive, default=12)
    s.add_argument("--head-dim", type=_positive, default=64)
    s.add_argument("--causal", action="store_true")
    s.set_defaults(func=_cmd_probe)

    s = sub.add_parser("stage", parents=[common], help="run one pipeline stage without Snakemake",
                       epilog="examples:\n" + "\n".join(f"  {e}" for e in STAGE_EXAMPLES),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("stage", choices=list(STAGES), metavar="stage",
                   help=f"one of: {', '.join(STAGES)}")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value (see the examples below)")
    s.add_argument("--limit-s", type=_positive_seconds, default=None, metavar="SECONDS",
                   help="a timing stage stops timing after SECONDS and writes what it "
                        "measured (the rest: status stopped); SIGTERM does the same")
    s.set_defaults(func=_cmd_stage)

    s = sub.add_parser("tune", parents=[common],
                       help="time our Triton kernels' launch configurations on this machine's "
                            "GPU; the prefill and decode stages run the fastest "
                            "(results/{key}/tuning.json)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value, as for stage")
    s.add_argument("--limit-s", type=_positive_seconds, default=None, metavar="SECONDS",
                   help="start no point after SECONDS; the points tuned so far are written")
    s.set_defaults(func=_cmd_tune)

    s = sub.add_parser("generate", parents=[common],
                       help="write the files that restate the stage declaration (schema "
                            "enums, the Slurm profile, docs/contracts.md's tables)")
    s.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 naming each file that is not current")
    s.set_defaults(func=_cmd_generate)

    s = sub.add_parser("adopt", parents=[common],
                       help="mark committed results for this machine as current")
    s.add_argument("--cores", type=_positive, default=1,
                   help="the --cores of the snakemake run that follows (default 1): it caps "
                        "each stage's threads, and a version made with other threads reruns")
    s.set_defaults(func=_cmd_adopt)

    s = sub.add_parser("verify", parents=[common],
                       help="re-hash the kept versions, check that results/ is the register's "
                            "latest and that the committed register is a prefix of it")
    s.add_argument("--repair", action="store_true",
                   help="first remove a torn final register line and temp files (an "
                        "interrupted write), saying what it removes; complete lines are "
                        "never touched")
    s.set_defaults(func=_cmd_verify)

    s = sub.add_parser("history", parents=[common],
                       help="list the kept versions of the measured stages")
    s.add_argument("stage", nargs="?", default=None, choices=list(STAGES), metavar="stage",
                   help="only this stage's versions, one of: "
                        f"{', '.join(n for n, d in STAGES.items() if d.measured)}")
    s.set_defaults(func=_cmd_history)

    s = sub.add_parser("claims", parents=[common],
                       help="every claim with its verdict and value, one block per machine "
                            "(--machine: that one only)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--review", action="store_true",
                   help="write docs/claims-review.md: each claim's quantity, scope, region "
                        "and why, from claims.yaml")
    s.add_argument("--coverage", action="store_true",
                   help="write docs/claims-coverage.md from docs/chapter/sentences.yaml")
    s.add_argument("--check", action="store_true",
                   help="with --review or --coverage: write nothing; exit 1 if not current")
    s.set_defaults(func=_cmd_claims)

    s = sub.add_parser("audit", parents=[common],
                       help="one claim's verdict, value and interval as claims.json has them, "
                            "and the series rows, runs and register versions they rest on")
    s.add_argument("claim_id")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_audit)

    s = sub.add_parser("manuscript", parents=[common], help="the chapter's text against the claims")
    msub = s.add_subparsers(dest="action", required=True)
    m = msub.add_parser("check", parents=[common],
                        help="every number a chapter prints, by value: the figure of the claim "
                             "its sentence names (docs/chapter/sentences.yaml), a setting of "
                             "it, or a number declared as no measurement; exit 1 otherwise")
    m.add_argument("file", help="the chapter, Markdown or plain text (UTF-8)")
    m.add_argument("--not-claims", default=None,
                   help="the kinds of numbers that are no measurement (default: "
                        "docs/chapter/not_claims.yaml)")
    m.add_argument("--strict", action="store_true",
                   help="also fail a figure whose claim is 'not reproduced' on --machine "
                        "(default: on any machine with results)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=_cmd_manuscript_check)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name, default in (("root", "."), ("machine", None), ("configfile", [])):
        if not hasattr(args, name):
            setattr(args, name, default)
    try:
        refuse_capability_beyond_cpu()
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
