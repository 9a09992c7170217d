"""Everything a person reads, rendered at the edge from the artifacts' numbers, enums and
references: the report page and its per-stage views, figures, the manuscript's tables and
numbers, the audit's text, the text check. May import the layers below it.
"""
