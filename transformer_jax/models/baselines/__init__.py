"""The language models before the Transformer: n-gram, fixed-window neural LM, RNN.

``config`` (``BaselineConfig``: one settings class per kind, ``NgramConfig``, ``WindowLMConfig``,
``RNNLMConfig``; the factory ``baseline_model_config`` is in ``models.presets``),
``ngram`` (``NGramLM``, numpy counts,
Kneser-Ney / add-k), ``window`` (``WindowLM``, Bengio et al. 2003), ``rnn`` (``RNNLM``, LSTM/GRU).
The kinds ``ngram``, ``window_lm`` and ``rnn_lm`` register in ``MODELS`` when
``transformer_jax.models`` is imported (this package stays import-light: ``models.config``
imports its config module).
"""
