"""Running the pipeline: the config resolved per stage, one stage end to end (``runner``),
``inferlab adopt`` and the command line. The top layer: may import every other.
"""
