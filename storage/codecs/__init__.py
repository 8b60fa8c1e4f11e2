"""storage/codecs: Byte formats between Python and PostgreSQL: COPY text of attempts and tool
spans, the binary COPY parser, times as text. No database access.
"""
