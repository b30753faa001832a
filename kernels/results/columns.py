"""Reading a record table column-wise: chosen 8-byte words of every row copied out into
one contiguous array per word, in one pass over the rows.

A record table (the request table is ~300 bytes a request) read one field at a time costs
a cache line per row per field; the judge of a run reads about fifteen fields, so one
row-major pass that copies them all is several times cheaper -- and, compiled, it runs
without the GIL, beside other evaluations' event loops."""

from ..jit import kernel


@kernel
def gather_words(rows, words, out):
    """out[c, r] = rows[r, words[c]] for every row r and chosen word c: ``rows`` is the
    table viewed as uint64 [n, words per row]."""
    k = words.shape[0]
    for r in range(rows.shape[0]):
        row = rows[r]
        for c in range(k):
            out[c, r] = row[words[c]]
