"""WordPiece vocabulary training and BERT-exact tokenisation (issue: WordPiece)."""
