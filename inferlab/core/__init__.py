"""The foundation every layer stands on, and none of it computes a number: the stage
declaration (``pipeline``), every path (``layout``), bytes to trust (``files``), schema
validation (``validation``) and stage logs (``logs``). Imports nothing of ``inferlab`` above it.
"""
