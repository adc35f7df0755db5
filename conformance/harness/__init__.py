"""kura's conformance harness: real S3 clients through a real gateway to a real upstream.

Run it with `conformance/run` (which installs the tools and builds kura first); see
`conformance/README.md`.
"""
