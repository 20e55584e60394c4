"""The language models before the Transformer: n-gram, fixed-window neural LM, RNN."""
