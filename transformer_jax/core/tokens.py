"""The special token ids every tokenizer of the package reserves, and the one place they are defined.

Ids 0..3 are padding, beginning and end of sequence, unknown; the synthetic tasks' separator is
the first id after them.
"""

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
N_SPECIAL = 4
SEP_ID = N_SPECIAL
