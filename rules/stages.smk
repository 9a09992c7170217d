# One rule per stage, named after it (probe, correctness, prefill, decode, traffic,
# claims), generated from the declarations in inferlab.pipeline.STAGES: the loop only
# spares six copies of the same rule. Every rule runs scripts/run_stage.py, which hands
# the rule's input, output, threads and params to inferlab.runner.
# input.code is the stage's code (its module's import closure), so a code change reruns
# exactly the stages that use that code and those downstream of them; params.config is
# its effective config, so a config change reruns exactly the stages that read it.

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
            config=effective_config(config, name, DEVICE),
            command=reproduce_command(name),
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
