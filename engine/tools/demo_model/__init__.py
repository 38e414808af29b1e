# The Strata demo model: data generator, tokenizer, vectorised QSA indexer, MTP head, training and evaluation.
