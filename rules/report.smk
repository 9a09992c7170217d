# report/index.html: every machine side by side. Other machines' claims.json are plain
# inputs (no rule makes them here); this machine's is made by the claims rule.


rule report:
    input:
        code=stage_code_files("report"),
        claims=expand("results/{machine}/claims.json", machine=report_machines(MACHINE)),
    output:
        html=report(
            "report/index.html", caption="../captions/report.rst", category="Report"
        ),
    log:
        log_path(".", MACHINE, "report").as_posix(),
    conda:
        "../envs/inferlab.yaml"
    script:
        "../scripts/report.py"
