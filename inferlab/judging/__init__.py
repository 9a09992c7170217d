"""Judging the chapter's claims: ``claims.yaml`` loaded into typed checks, which rows a check
judges, the interval rule and the check interpreter. May import the layers below it.
"""
