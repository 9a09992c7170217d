# One rule per stage of inferlab.core.pipeline.STAGES, named after it, generated from its
# declaration: the loop only spares a copy of the same rule per stage. Every rule runs
# scripts/run_stage.py, which hands the rule's input, output, threads and params to
# inferlab.workflow.runner.
# input.code is the code that computes the stage's artifact (pipeline.code_files: its
# module's import closure short of the bookkeeping modules, the process settings, the glue
# script), so a code change reruns exactly the stages that compute with that code and
# those downstream of them, and a change to the register, provenance or artifact I/O
# reruns nothing; params.config is its effective config, so a config change reruns
# exactly the stages that read it.

for name, declared in STAGES.items():

    rule:
        name:
            name
        input:
            **stage_inputs(name),
        output:
            artifact=report(
                artifact(name), caption=f"../captions/{name}.rst", category=name.capitalize()
            ),
            sidecar=sidecar(name),
            **derived_outputs(name),
        params:
            key=KEY,
            config=RUN.effective(name),
            command=reproduce_command(name),
            computed_from=computed_from(name),
        log:
            layout.log_path(".", KEY, name).as_posix(),
        benchmark:
            layout.benchmark_path(".", KEY, name).as_posix()
        threads: THREADS
        resources:
            machine=MACHINE_SLOTS if declared.timed else 1,
        conda:
            "../envs/inferlab.yaml"
        script:
            "../scripts/run_stage.py"
