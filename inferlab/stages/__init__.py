"""The pipeline's stages, one module each, declared in ``inferlab.pipeline.STAGES`` (the
list there is the one that counts; ``inferlab stage --help`` prints it):

* ``probe``       -> probe.json       environment, SDPA availability, measured ceilings
* ``correctness`` -> correctness.csv  error against float64; block pairs; split-KV; merge
* ``prefill``     -> prefill.csv      naive / tiled / tiled_fast / SDPA per backend: time, memory
* ``decode``      -> decode.csv       one query against a cache: split-KV vs fused SDPA
* ``traffic``     -> traffic.csv      the traffic model's ratio against the measured one
* ``model``       -> model.csv        the chapter's arithmetic, from its premises and the probe
* ``claims``      -> claims.json      each chapter claim's verdict on this machine
* ``manuscript``  -> manuscript.json  the chapter's four tables and named numbers (+ derived files)

Each module holds ``Params`` (built from the stage's effective config) and
``run(params, ctx)``; ``inferlab.stages.common`` holds what they share.
"""
