"""The method: sampling rules, streams, the method table, events, the reference statement, cross-tokenizer vocabularies, pass costs."""
