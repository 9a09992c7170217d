# report/index.html: every results key side by side. Other keys' files are plain inputs
# (no rule makes them here); this key's are made by the stage rules. Every file the
# report reads is an input, so a change to any of them reruns it.


rule report:
    input:
        unpack(report_inputs),
    output:
        html=report(
            layout.report_path(".").as_posix(),
            caption="../captions/report.rst",
            category="Report",
        ),
    params:
        results_keys=report_keys(),
    log:
        layout.log_path(".", KEY, "report").as_posix(),
    conda:
        "../envs/inferlab.yaml"
    script:
        "../scripts/report.py"
