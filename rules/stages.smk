# One rule per stage, named after it (probe, correctness, prefill, decode, traffic,
# claims); the loop only spares six copies of the same rule. Every rule runs the same glue
# script, which calls inferlab.pipeline.run_from_snakemake -> inferlab.stages.<rule>.run.
# input.code: the library files the stage imports (inferlab.pipeline.STAGE_CODE), so a code
# change reruns exactly the stages that use that code, and those downstream of them.
# The other inputs are the artifacts the stage reads (inferlab.pipeline.STAGE_INPUTS).
# Every stage asks for ALL_CORES, which Snakemake scales down to --cores: a timing stage
# must not share the machine with another stage, even under --cores 2 (workflow.cores
# itself is undefined under --report and --lint).

for stage in STAGES:

    rule:
        name:
            stage
        input:
            code=stage_code_files(stage),
            **upstream_artifacts(stage, MACHINE),
        output:
            artifact=report(
                artifact_path(".", MACHINE, stage).as_posix(),
                caption=f"../captions/{stage}.rst",
                category=stage.capitalize(),
            ),
            sidecar=sidecar_path(artifact_path(".", MACHINE, stage)).as_posix(),
        params:
            machine=MACHINE,
            config=stage_config(config, stage),
            command=reproduce_command(stage, MACHINE, workflow.config_settings),
        log:
            log_path(".", MACHINE, stage).as_posix(),
        benchmark:
            benchmark_path(".", MACHINE, stage).as_posix()
        threads: ALL_CORES
        conda:
            "../envs/inferlab.yaml"
        script:
            "../scripts/run_stage.py"
