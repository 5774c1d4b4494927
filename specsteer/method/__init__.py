"""The method: sampling rules, streams, drafting, verification, steering, the method table, events, the reference statement, cross-tokenizer vocabularies, pass costs."""
