# Shared by all the rules. This run's machine, grid and results key, resolved once; the
# input functions that turn a stage's declaration (inferlab.core.pipeline.STAGES) into paths.
from inferlab.core import layout
from inferlab.workflow.config import load_config, resolve, resolve_threads
from pathlib import Path

from snakemake.exceptions import WorkflowError

from inferlab.core.pipeline import CLAIMS_FILE, STAGES, code_files, content_sha256

# The config validated against schemas/config.schema.json and resolved exactly as the
# command line does (one check: Snakemake's own validate would take a seed of 1.0 for an
# integer); a bad value is named without a traceback.
try:
    RUN = resolve(config)
except ValueError as exc:
    raise WorkflowError(str(exc)) from None
MACHINE = RUN.machine
# Results of this run go to results/{KEY}/ only (KEY = MACHINE, or MACHINE@GRID off the
# book grid): rules name this one folder, never a wildcard, so a run can never write into
# another machine's or another grid's folder.
KEY = RUN.key
# The series and the manuscript read this key's register, so it is their input, which must
# exist when Snakemake plans (an empty register is one with no entries yet); an input that
# appeared between two runs would rerun them. A dry run leaves the checkout as it is.
if not workflow.dryrun and not layout.register_path(".", KEY).is_file():
    layout.register_path(".", KEY).parent.mkdir(parents=True, exist_ok=True)
    layout.register_path(".", KEY).touch()


# torch threads of a stage: config "threads", or (auto) every CPU here, which Snakemake
# lowers to --cores (so --cores 1 means one thread); a cluster profile sets its own.
THREADS = resolve_threads(config)
# Slots of the "machine" resource (profiles/default): a timing stage takes them all.
MACHINE_SLOTS = 2


def artifact(stage, key=KEY):
    return layout.artifact_path(".", key, stage).as_posix()


def sidecar(stage, key=KEY):
    return layout.sidecar_path(artifact(stage, key)).as_posix()


def derived_outputs(stage):
    """The files a stage derives from its artifact (results/{key}/{stage}/), by name."""
    return {f.replace(".", "_"): layout.derived_path(".", KEY, stage, f).as_posix()
            for f in STAGES[stage].derived}


def stage_inputs(stage):
    """The artifacts stage ``stage`` reads, by stage name, and the files of its code; for a
    stage that reads the register's history, the registers there are (this key's and those
    of machines of its kind: the series' prior), as ``ancient``: what it reads from them
    changes with its other inputs, and every stage appends to its key's register."""
    # claims.yaml is compared by what the stage computes from it (params.computed_from), not
    # by its time: an edited note reruns only the report, which shows it
    code = [f for f in code_files(stage) if f != CLAIMS_FILE]
    files = {"code": code, **{up: artifact(up) for up in STAGES[stage].reads}}
    if STAGES[stage].reads_register:
        keys = {KEY, *(k for k in layout.keys(".") if "@" not in k)}
        registers = [layout.register_path(".", k) for k in sorted(keys)]
        files["registers"] = [ancient(p.as_posix()) for p in registers if p.is_file()]
    return files


def computed_from(stage):
    """The sha256 of what ``stage`` computes from in claims.yaml (pipeline.content_sha256):
    a param, so a change of a check reruns it and an edited sentence does not."""
    if CLAIMS_FILE not in code_files(stage):
        return None
    return content_sha256(Path(CLAIMS_FILE))


def reproduce_command(stage):
    """The Snakemake command that reruns ``stage`` alone with this run's config."""
    import shlex

    parts = ["snakemake", stage, "--cores", "1", "--forcerun", stage]
    for path in workflow.config_settings.configfiles or ():
        parts += ["--configfile", os.path.relpath(path)]
    # only what differs from config.yaml: restating a default (--config seed=0) changes no
    # command, so it reruns nothing (params are a rerun trigger)
    base = load_config()
    overrides = {k: v for k, v in (workflow.config_settings.config or {}).items()
                 if base.get(k, object()) != v}
    overrides["machine"] = MACHINE
    parts += ["--config", *(f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                            for k, v in sorted(overrides.items()))]
    return shlex.join(parts)


def report_keys():
    """The results keys the report shows: this run's, and every other key that has a
    claims.json (a folder with only some stages is not ready)."""
    ready = {k for k in layout.keys(".") if os.path.isfile(artifact("claims", k))}
    return sorted(ready | {KEY})


def report_inputs(wildcards=None):
    """Every file the report reads, for every key it shows: artifacts, sidecars and the
    register. This run's own register is written by its stage rules, the last of them
    claims, which the report follows; another key's register is a plain input."""
    files = {"code": code_files("report")}
    for key in report_keys():
        files[key] = [artifact(s, key) for s in STAGES] + [sidecar(s, key) for s in STAGES]
        if key != KEY:
            # nothing here makes the files of another key: a stage it never ran (an older checkout
            # had fewer stages) is shown as "not run", not a missing input, which would
            # make Snakemake skip the report silently while report/index.html exists
            files[key] = [f for f in files[key] if os.path.isfile(f)]
            files[key].append(layout.register_path(".", key).as_posix())
    return files
