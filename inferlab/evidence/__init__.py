"""The evidence register and provenance: artifacts typed from their schemas, the register
of measured versions with their kept files, the one provenance writer, the check made
before an artifact is read, and the versions read back for the series. Records what a
stage computed, never what it computes. May import the layers below it.
"""
