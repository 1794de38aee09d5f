"""WordPiece vocabulary training and BERT-exact tokenisation."""
