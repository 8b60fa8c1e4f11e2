"""The reference recomputation of a signed summary, written plainly and independently.

Everything a run summary signs — the canonical form of ``events.jsonl``, every predicate
figure, the minute leaves and their RFC 6962 Merkle root — is recomputed here from the
file's bytes with the standard library only: no Polars, no NumPy, no Numba, no database
driver, none of the fast code that sealed the run. A bug in the sealer's fast paths
therefore shows up as a mismatch instead of being repeated by the verifier
(docs/provenance.md#the-reference-verifier).

- :mod:`~provenance.reference.jcs_text` — RFC 8785 text of flat JSON values;
- :mod:`~provenance.reference.event_lines` — the line format; reading a line by parsing it
  and writing it again;
- :mod:`~provenance.reference.line_grammar` — reading canonical lines by a regular grammar
  instead (fast; it only accepts, and leaves every other line to parsing);
- :mod:`~provenance.reference.event_rows` — the file a piece at a time, its order checked;
- :mod:`~provenance.reference.run_tally` — one pass over the events: figures and leaves;
- :mod:`~provenance.reference.rfc6962` — the Merkle tree head over the minute leaves.
"""
