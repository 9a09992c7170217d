"""The pipeline's stages, one module each, declared in ``inferlab.core.pipeline.STAGES``: a
frozen ``Params`` built from the stage's effective config and ``run(params, ctx)``;
``common`` holds what they share. May import every layer below it.
"""
