"""The presentation layer: what a person reads, rendered from typed results.

What a person reads: console output, the report document and its writers (HTML, Markdown,
terminal), trace, rank, gate and try tables, the live phase line. Renders typed results, reads no
files."""
